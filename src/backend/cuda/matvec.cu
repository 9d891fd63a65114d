// Decode matvec: y = W x for every weight type of the golden, bench and K3 / Kimi Linear files.
// One warp per kRowsPerWarp weight rows: lane i decodes pieces i, i + 32, ... of each row
// (block_dot.cuh), so each step of the warp reads one contiguous stretch of a row and every weight
// byte is read once. The fp32 activations (a few KiB, shared by all rows) come from L1; a lane
// loads a piece's activations once for its kRowsPerWarp rows, which keeps the L1 traffic of x to
// about twice the weight bytes of a 4-bit format instead of eight times. Decode is bound by the
// weight bytes, so this is the shape that can run near HBM bandwidth: 4 warps per block (16 rows)
// keep enough loads in flight. Not measured on a GPU yet (tests/gpu/run.sh prints the table).
#include "backend/cuda/block_decode.cuh"
#include "backend/cuda/group_task.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMatvecWarps = 4;
constexpr int kRowsPerWarp = 4;
constexpr int kRowsPerBlock = kMatvecWarps * kRowsPerWarp;

// One block's work: weight rows [rb * kRowsPerBlock, +kRowsPerBlock) for tokens [tb * kT, +kT)
// (nt <= kT of them really there). kT tokens per block (1 for decode, 4 for a few tokens at once:
// an expert's share of a prefill chunk, a speculative batch): the weight rows come from HBM once
// per kT tokens, the repeats hit L1. The single and the grouped kernels below both run this, so a
// task gives the same bits either way.
template <class F, int kT>
__device__ __forceinline__ void matvec_block(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows,
                                             int64_t cols, const float* __restrict__ x, int64_t ldx, int64_t n,
                                             float* __restrict__ y, int64_t ldy, int64_t rb, int64_t tb) {
    const int lane = int(threadIdx.x % 32);
    const int64_t r0 = rb * kRowsPerBlock + int64_t(threadIdx.x / 32) * kRowsPerWarp;
    if (r0 >= rows) return;                      // the whole warp leaves together
    const int nr = rows - r0 < kRowsPerWarp ? int(rows - r0) : kRowsPerWarp;   // warp-uniform
    const int64_t t0 = tb * kT;
    const int nt = n - t0 < kT ? int(n - t0) : kT;
    const uint8_t* row = W + size_t(r0) * row_bytes;
    const int64_t n_blocks = cols / F::kElems;
    const int64_t n_pieces = n_blocks * F::kChunks;
    float acc[kRowsPerWarp][kT] = {};
    for (int64_t p = lane; p < n_pieces; p += 32) {
        const int64_t b = p / F::kChunks;
        const int c = int(p % F::kChunks);
#pragma unroll
        for (int tt = 0; tt < kT; ++tt) {
            if (tt >= nt) break;
            const float* xb = x + (t0 + tt) * ldx + b * F::kElems;
#pragma unroll
            for (int k = 0; k < kRowsPerWarp; ++k)
                if (k < nr) acc[k][tt] += F::dot(row + size_t(k) * row_bytes + b * F::kBytes, c, xb);
        }
    }
    if constexpr (F::kUnblocked) {               // a tail of fewer than 8 elements
        const int64_t i = n_blocks * F::kElems + lane;
        // Fixed trip counts with guards, so acc stays in registers (no dynamic indexing).
#pragma unroll
        for (int tt = 0; tt < kT; ++tt)
#pragma unroll
            for (int k = 0; k < kRowsPerWarp; ++k)
                if (i < cols && tt < nt && k < nr)
                    acc[k][tt] += F::elem(row + size_t(k) * row_bytes, i) * x[(t0 + tt) * ldx + i];
    }
#pragma unroll
    for (int tt = 0; tt < kT; ++tt)
#pragma unroll
        for (int k = 0; k < kRowsPerWarp; ++k) {
            const float v = warp_sum(acc[k][tt]);   // every lane takes part, also past nr / nt
            if (lane == 0 && k < nr && tt < nt) y[(t0 + tt) * ldy + r0 + k] = v;
        }
}

template <class F, int kT>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int64_t cols,
                  const float* __restrict__ x, int64_t ldx, int64_t n, float* __restrict__ y, int64_t ldy) {
    matvec_block<F, kT>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, blockIdx.x, blockIdx.y);
}

// Every task of a MatvecGroup in one launch: block u belongs to task group_task(g, u)
// (group_task.cuh), and is that task's row block (u - first[i]) % row_blocks, token block / row_blocks.
template <class F, int kT>
__global__ void __launch_bounds__(kMatvecWarps * 32) matvec_group_kernel(MatvecGroup g, size_t row_bytes, int64_t cols) {
    const int64_t u = blockIdx.x;
    const int lo = group_task(g, u);
    const MatvecTask& t = g.task[lo];
    const int64_t row_blocks = (t.rows + kRowsPerBlock - 1) / kRowsPerBlock, local = u - g.first[lo];
    matvec_block<F, kT>(static_cast<const uint8_t*>(t.W), row_bytes, t.rows, cols, t.x, t.ldx, t.n, t.y, t.ldy,
                        local % row_blocks, local / row_blocks);
}

// One slot of matvec_id: block (row block, slot); the slot's expert id comes from sel on the
// device, and the block runs matvec's one-token code on that expert's rows.
template <class F>
__global__ void __launch_bounds__(kMatvecWarps * 32)
    matvec_id_kernel(const uint8_t* __restrict__ W, size_t row_bytes, size_t slice_bytes, int64_t n_slices,
                     int64_t rows, int64_t cols, const int32_t* __restrict__ sel, const float* __restrict__ x,
                     int64_t x_div, float* __restrict__ y) {
    const int64_t s = blockIdx.y;
    const int32_t e = sel[s];
    float* ys = y + s * rows;
    if (e < 0 || e >= n_slices) {               // a bad id: a NaN row, not a read past the tensor
        for (int64_t r = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x; r < rows && r < int64_t(blockIdx.x + 1) * kRowsPerBlock;
             r += blockDim.x)
            ys[r] = NAN;
        return;
    }
    matvec_block<F, 1>(W + size_t(e) * slice_bytes, row_bytes, rows, cols, x + (s / x_div) * cols, cols, 1, ys, rows,
                       blockIdx.x, 0);
}

template <class F>
void launch(const void* W, size_t row_bytes, int64_t rows, int64_t cols, const float* x, int64_t ldx, int64_t n,
            float* y, int64_t ldy, void* stream) {
    if (!F::kUnblocked && cols % F::kElems != 0)
        throw std::invalid_argument("cuda matvec: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(F::kElems));
    constexpr int kT = 4;
    auto* kernel = n == 1 ? &matvec_kernel<F, 1> : &matvec_kernel<F, kT>;
    const int64_t per_block = n == 1 ? 1 : kT;
    const unsigned grid_x = unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock);
    // gridDim.y is at most 65535: long prefills go in slices (they belong to a GEMM anyway).
    const int64_t slice = 65535 * per_block;
    for (int64_t t0 = 0; t0 < n; t0 += slice) {
        const int64_t nt = n - t0 < slice ? n - t0 : slice;
        KINFER_LAUNCH(kernel, dim3(grid_x, unsigned((nt + per_block - 1) / per_block)), dim3(kMatvecWarps * 32), 0,
                      as_stream(stream), static_cast<const uint8_t*>(W), row_bytes, rows, cols, x + t0 * ldx, ldx, nt,
                      y + t0 * ldy, ldy);
    }
}

template <class F>
void launch_group(MatvecGroup g, size_t row_bytes, int64_t cols, void* stream) {
    if (!F::kUnblocked && cols % F::kElems != 0)
        throw std::invalid_argument("cuda matvec_group: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(F::kElems));
    // Decode (every task one token) takes the one-token form, as matvec does; otherwise 4.
    bool single = true;
    for (int i = 0; i < g.n_tasks; ++i) single = single && g.task[i].n == 1;
    const int64_t per_block = single ? 1 : 4;
    int64_t blocks = 0;
    for (int i = 0; i < g.n_tasks; ++i) {
        MatvecTask& t = g.task[i];
        if (t.ldx == 0) t.ldx = cols;
        if (t.ldy == 0) t.ldy = t.rows;
        g.first[i] = blocks;
        blocks += (t.rows + kRowsPerBlock - 1) / kRowsPerBlock * ((t.n + per_block - 1) / per_block);
    }
    if (blocks > 2147483647) throw std::invalid_argument("cuda matvec_group: more than 2^31 - 1 blocks");
    auto* kernel = single ? &matvec_group_kernel<F, 1> : &matvec_group_kernel<F, 4>;
    KINFER_LAUNCH(kernel, dim3(unsigned(blocks)), dim3(kMatvecWarps * 32), 0, as_stream(stream), g, row_bytes, cols);
}

}  // namespace

bool matvec_supported(quant::Type t) {
    using quant::Type;
    switch (t) {
        case Type::F32: case Type::F16: case Type::BF16: case Type::Q8_0: case Type::Q4_0: case Type::Q5_0:
        case Type::Q4_1: case Type::Q5_1: case Type::IQ4_NL: case Type::MXFP4: case Type::Q4_K: case Type::Q5_K: case Type::Q6_K: case Type::IQ4_XS:
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
    with_dec(type, "matvec", [&](auto dot) { launch<decltype(dot)>(W, row_bytes, rows, cols, x, ldx, n, y, ldy, stream); });
}

void matvec_id(quant::Type type, const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows,
               int64_t cols, const int32_t* sel, int64_t slots, const float* x, int64_t x_div, float* y, void* stream) {
    if (rows <= 0 || slots <= 0) return;
    if (x_div < 1 || slots > 65535)
        throw std::invalid_argument("cuda matvec_id: " + std::to_string(slots) + " slots (at most 65535), x_div " +
                                    std::to_string(x_div) + " (at least 1)");
    with_dec(type, "matvec_id", [&](auto dot) {
        using F = decltype(dot);
        if (!F::kUnblocked && cols % F::kElems != 0)
            throw std::invalid_argument("cuda matvec_id: " + std::to_string(cols) + " columns are not whole blocks of " +
                                        std::to_string(F::kElems));
        auto* kernel = &matvec_id_kernel<F>;
        KINFER_LAUNCH(kernel, dim3(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock), unsigned(slots)),
                      dim3(kMatvecWarps * 32), 0, as_stream(stream), static_cast<const uint8_t*>(W), row_bytes,
                      slice_bytes, n_slices, rows, cols, sel, x, x_div, y);
    });
}

void matvec_group(quant::Type type, size_t row_bytes, int64_t cols, const MatvecGroup& group, void* stream) {
    MatvecGroup g = group;
    if (g.n_tasks < 0 || g.n_tasks > kMatvecGroupMax)
        throw std::invalid_argument("cuda matvec_group: " + std::to_string(g.n_tasks) + " tasks, at most " +
                                    std::to_string(kMatvecGroupMax));
    // Tasks without rows or tokens take no block (the kernel's search needs every task to own one).
    int kept = 0;
    for (int i = 0; i < g.n_tasks; ++i)
        if (g.task[i].rows > 0 && g.task[i].n > 0) g.task[kept++] = g.task[i];
    g.n_tasks = kept;
    if (kept == 0) return;
    with_dec(type, "matvec_group", [&](auto dot) { launch_group<decltype(dot)>(g, row_bytes, cols, stream); });
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
