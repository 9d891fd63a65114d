// Decode matvec: y = W x for every weight type of the golden, bench and K3 / Kimi Linear files.
// One warp per weight row: lane i decodes pieces i, i + 32, ... of the row (block_dot.cuh), so each
// step of the warp reads one contiguous stretch of the row and every weight byte is read once;
// the fp32 activations (a few KiB, shared by all rows) come from L1 / L2. Decode is bound by the
// weight bytes, so this is the shape that can run at HBM bandwidth: 4 warps (4 rows) per block
// keep enough blocks resident to cover the latency of the loads.
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMatvecWarps = 4;

template <class F>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int64_t cols,
                  const float* __restrict__ x, int64_t ldx, float* __restrict__ y, int64_t ldy) {
    const int lane = int(threadIdx.x % 32);
    const int64_t r = int64_t(blockIdx.x) * kMatvecWarps + threadIdx.x / 32;
    if (r >= rows) return;                       // the whole warp leaves together
    const int64_t t = blockIdx.y;
    const uint8_t* row = W + size_t(r) * row_bytes;
    const float* xt = x + t * ldx;
    const int64_t n_blocks = cols / F::kElems;
    const int64_t n_pieces = n_blocks * F::kChunks;
    float acc = 0;
#pragma unroll 4
    for (int64_t p = lane; p < n_pieces; p += 32) {
        const int64_t b = p / F::kChunks;
        acc += F::dot(row + b * F::kBytes, int(p % F::kChunks), xt + b * F::kElems);
    }
    if constexpr (F::kUnblocked) {               // a tail of fewer than 8 elements
        const int64_t i = n_blocks * F::kElems + lane;
        if (i < cols) acc += F::elem(row, i) * xt[i];
    }
    acc = warp_sum(acc);
    if (lane == 0) y[t * ldy + r] = acc;
}

template <class F>
void launch(const void* W, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t ldx, int64_t n,
            float* y, int64_t ldy, void* stream) {
    if (!F::kUnblocked && cols % F::kElems != 0)
        throw std::invalid_argument("cuda matvec: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(F::kElems));
    auto* kernel = &matvec_kernel<F>;
    const unsigned grid_x = unsigned((rows + kMatvecWarps - 1) / kMatvecWarps);
    // gridDim.y is at most 65535: long prefills go in slices (they belong to a GEMM anyway).
    for (int64_t t0 = 0; t0 < n; t0 += 65535) {
        const unsigned nt = unsigned(n - t0 < 65535 ? n - t0 : 65535);
        KINFER_LAUNCH(kernel, dim3(grid_x, nt), dim3(kMatvecWarps * 32), 0, as_stream(stream),
                      static_cast<const uint8_t*>(W), row_bytes, rows, cols, x + t0 * ldx, ldx, y + t0 * ldy, ldy);
    }
}

}  // namespace

bool matvec_supported(quant::Type t) {
    using quant::Type;
    switch (t) {
        case Type::F32: case Type::F16: case Type::BF16: case Type::Q8_0: case Type::Q4_0: case Type::Q5_0:
        case Type::IQ4_NL: case Type::MXFP4: case Type::Q4_K: case Type::Q5_K: case Type::Q6_K: case Type::IQ4_XS:
            return true;
        default:
            return false;
    }
}

void matvec(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
            int64_t ldx, int64_t n, float* y, int64_t ldy, void* stream) {
    if (rows <= 0 || n <= 0) return;
    if (ldx == 0) ldx = cols;
    if (ldy == 0) ldy = rows;
    using quant::Type;
    switch (type) {
        case Type::F32: return launch<DotF32>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::F16: return launch<DotF16>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::BF16: return launch<DotBF16>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::Q8_0: return launch<DotQ8_0>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::Q4_0: return launch<DotQ4_0>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::Q5_0: return launch<DotQ5_0>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::IQ4_NL: return launch<DotIQ4_NL>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::MXFP4: return launch<DotMXFP4>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::Q4_K: return launch<DotQ4_K>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::Q5_K: return launch<DotQ5_K>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::Q6_K: return launch<DotQ6_K>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        case Type::IQ4_XS: return launch<DotIQ4_XS>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream);
        default: break;
    }
    const char* name = quant::type_facts(type).name;
    throw std::invalid_argument(std::string("cuda matvec: no kernel for weight type ") + (name ? name : "?"));
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
