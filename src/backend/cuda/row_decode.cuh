// Whole weight rows decoded to an element type (fp32 / fp16 / bf16), one thread per
// block_decode.cuh piece (or per element of an unblocked row): the CPU's values bit for bit, then
// rounded as quant/fp16.h rounds. The rows come in order (RowsInOrder: gemm.cu's dequant_rows,
// the prefill GEMM's weight tiles) or by id (RowsById: embed.cu's gather of token rows, the ids
// in the launch's parameters).
#pragma once
#include "backend/cuda/block_decode.cuh"
#include "backend/cuda/kernels.h"

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kDeqThreads = 256;

template <Elem E>
__device__ __forceinline__ void store_elem(void* out, int64_t i, float v) {
    if constexpr (E == Elem::F32) static_cast<float*>(out)[i] = v;
    else if constexpr (E == Elem::F16) static_cast<uint16_t*>(out)[i] = bq::fp32_to_fp16(v);
    else static_cast<uint16_t*>(out)[i] = bq::fp32_to_bf16(v);
}

// decode()'s put: element j of the block goes to out[base + j].
template <Elem E>
struct PutAt {
    void* out;
    int64_t base;
    __device__ void operator()(int j, float v) const { store_elem<E>(out, base + j, v); }
};

// Output row r reads weight row r, or row id[r] (at most kRowsByIdMax a launch: 1 KiB of the
// 4 KiB a launch's parameters may take).
struct RowsInOrder {
    __device__ int64_t operator()(int64_t r) const { return r; }
};
inline constexpr int kRowsByIdMax = 256;
struct RowsById {
    int32_t id[kRowsByIdMax];
    __device__ int64_t operator()(int64_t r) const { return id[r]; }
};

// One thread per (row, piece), flattened, so a short row does not leave most of a block idle.
template <class D, Elem E, class RowOf>
__global__ void __launch_bounds__(kDeqThreads)
    dequant_blocked_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int64_t row_pieces,
                           void* __restrict__ y, int64_t ldy, RowOf row_of) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= rows * row_pieces) return;
    const int64_t r = p / row_pieces, q = p % row_pieces, b = q / D::kChunks;
    PutAt<E> put{y, r * ldy + b * D::kElems};
    D::decode(W + size_t(row_of(r)) * row_bytes + size_t(b) * D::kBytes, int(q % D::kChunks), put);
}

// F32 / F16 / BF16 rows: one element per thread.
template <class D, Elem E, class RowOf>
__global__ void __launch_bounds__(kDeqThreads)
    dequant_plain_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int64_t cols,
                         void* __restrict__ y, int64_t ldy, RowOf row_of) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= rows * cols) return;
    const int64_t r = p / cols, i = p % cols;
    store_elem<E>(y, r * ldy + i, D::elem(W + size_t(row_of(r)) * row_bytes, i));
}

inline dim3 deq_grid(int64_t threads) { return dim3(unsigned((threads + kDeqThreads - 1) / kDeqThreads)); }

// rows output rows of cols elements (ldy apart) from the weight rows row_of names.
template <class D, Elem E, class RowOf>
void deq_launch(const uint8_t* W, size_t row_bytes, int64_t rows, int64_t cols, uint8_t* y, int64_t ldy, RowOf row_of,
                void* stream) {
    void* out = y;
    if constexpr (D::kUnblocked) {
        auto* kernel = &dequant_plain_kernel<D, E, RowOf>;
        KINFER_LAUNCH(kernel, deq_grid(rows * cols), dim3(kDeqThreads), 0, as_stream(stream), W, row_bytes, rows, cols,
                      out, ldy, row_of);
    } else {
        const int64_t row_pieces = cols / D::kElems * D::kChunks;
        auto* kernel = &dequant_blocked_kernel<D, E, RowOf>;
        KINFER_LAUNCH(kernel, deq_grid(rows * row_pieces), dim3(kDeqThreads), 0, as_stream(stream), W, row_bytes, rows,
                      row_pieces, out, ldy, row_of);
    }
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS
