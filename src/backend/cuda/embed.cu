// The embedding gather (Backend::embed): x[t] = row ids[t] of the table, dequantized to fp32 with
// the CPU's values bit for bit: row_decode.cuh's kernels (the prefill GEMM's tile decoding) with
// the rows by id. The ids travel in the kernels' parameters, up to kRowsByIdMax a launch, so
// decode embeds one token without an upload or a host wait.
#include "backend/cuda/kernels.h"
#include "backend/cuda/row_decode.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

template <class D>
void gather(const uint8_t* E, size_t row_bytes, int64_t cols, const int32_t* ids, int64_t n, float* x, void* stream) {
    if (!D::kUnblocked && cols % D::kElems != 0)
        throw std::invalid_argument("cuda embed: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(D::kElems));
    for (int64_t t0 = 0; t0 < n; t0 += kRowsByIdMax) {
        const int64_t nt = n - t0 < kRowsByIdMax ? n - t0 : kRowsByIdMax;
        RowsById rows{};
        for (int64_t t = 0; t < nt; ++t) rows.id[t] = ids[t0 + t];
        deq_launch<D, Elem::F32>(E, row_bytes, nt, cols, reinterpret_cast<uint8_t*>(x + t0 * cols), cols, rows, stream);
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
