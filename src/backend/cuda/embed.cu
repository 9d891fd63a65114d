// The embedding gather (Backend::embed): x[t] = row ids[t] of the table, dequantized to fp32 with
// the CPU's values bit for bit (block_decode.cuh, the decoders of the prefill GEMM's tiles). One
// thread per (token, piece of a block), so a row is decoded by neighbouring threads and read
// once, coalesced. The ids travel in the kernel's parameters, up to kEmbedIds a launch: decode
// embeds one token without an upload or a host wait.
#include "backend/cuda/block_decode.cuh"
#include "backend/cuda/kernels.h"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kEmbedThreads = 256;
constexpr int kEmbedIds = 256;   // 1 KiB of the 4 KiB a launch's parameters may take

struct EmbedIds {
    int32_t id[kEmbedIds];
};

// decode()'s put: element j of the block goes to y[j].
struct PutF32 {
    float* y;
    __device__ void operator()(int j, float v) const { y[j] = v; }
};

template <class D>
__global__ void __launch_bounds__(kEmbedThreads)
    embed_blocked_kernel(const uint8_t* __restrict__ E, size_t row_bytes, int64_t row_pieces, EmbedIds ids, int n,
                         int64_t cols, float* __restrict__ x) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= int64_t(n) * row_pieces) return;
    const int64_t t = p / row_pieces, q = p % row_pieces, b = q / D::kChunks;
    PutF32 put{x + t * cols + b * D::kElems};
    D::decode(E + size_t(ids.id[t]) * row_bytes + size_t(b) * D::kBytes, int(q % D::kChunks), put);
}

template <class D>
__global__ void __launch_bounds__(kEmbedThreads)
    embed_plain_kernel(const uint8_t* __restrict__ E, size_t row_bytes, EmbedIds ids, int n, int64_t cols,
                       float* __restrict__ x) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= int64_t(n) * cols) return;
    const int64_t t = p / cols, i = p % cols;
    x[t * cols + i] = D::elem(E + size_t(ids.id[t]) * row_bytes, i);
}

template <class D>
void gather(const uint8_t* E, size_t row_bytes, int64_t cols, const int32_t* ids, int64_t n, float* x, void* stream) {
    if (!D::kUnblocked && cols % D::kElems != 0)
        throw std::invalid_argument("cuda embed: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(D::kElems));
    const int64_t row_pieces = D::kUnblocked ? cols : cols / D::kElems * D::kChunks;
    for (int64_t t0 = 0; t0 < n; t0 += kEmbedIds) {
        const int nt = int(n - t0 < kEmbedIds ? n - t0 : kEmbedIds);
        EmbedIds chunk{};
        for (int t = 0; t < nt; ++t) chunk.id[t] = ids[t0 + t];
        const dim3 grid(unsigned((int64_t(nt) * row_pieces + kEmbedThreads - 1) / kEmbedThreads));
        float* xt = x + t0 * cols;
        if constexpr (D::kUnblocked) {
            auto* kernel = &embed_plain_kernel<D>;
            KINFER_LAUNCH(kernel, grid, dim3(kEmbedThreads), 0, as_stream(stream), E, row_bytes, chunk, nt, cols, xt);
        } else {
            auto* kernel = &embed_blocked_kernel<D>;
            KINFER_LAUNCH(kernel, grid, dim3(kEmbedThreads), 0, as_stream(stream), E, row_bytes, row_pieces, chunk, nt,
                          cols, xt);
        }
    }
}

}  // namespace

void embed_rows(quant::Type type, const void* E, size_t row_bytes, int64_t n_rows, int64_t cols, const int32_t* ids,
                int64_t n, float* x, void* stream) {
    if (n <= 0 || cols <= 0) return;
    for (int64_t t = 0; t < n; ++t)
        if (ids[t] < 0 || ids[t] >= n_rows)
            throw std::invalid_argument("cuda embed: token id " + std::to_string(ids[t]) + " out of range [0, " +
                                        std::to_string(n_rows) + ")");
    const auto* e = static_cast<const uint8_t*>(E);
    with_dec(type, "embed", [&](auto dec) { gather<decltype(dec)>(e, row_bytes, cols, ids, n, x, stream); });
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
