// Decode matvec on int8 activations for Q4_K weights (the bulk of a Q4_K_M model), with __dp4a.
//
// Why a second form. matvec.cu keeps the activations fp32 and turns every weight into a float:
// per weight a nibble extract, an int-to-float conversion (a quarter-rate instruction on sm_90)
// and an FMA, plus the block's scales decoded from bytes per 8 weights; its PTX for Q4_K has
// about 19 instructions a weight, which caps it near a fifth of the H200's 4.8 TB/s (by count,
// not measured). Here the activation row is quantized once per call to Q8_K as the CPU does it
// (quantize_q8_K: the same bytes as quant's quantize_row_q8_K), and each lane takes 16 bytes of
// a block's nibbles (32 weights) with one 16-byte load: 8 dp4a against the int8 activations, the
// sub-block scales applied to the exact integer sums, the min terms from the activation's block
// sums. About 1 instruction per weight.
//
// Arithmetic: the integer sums are the CPU's (Q8_K activations, exact products); the float steps
// (d_y (d_w (sc_a s_a + sc_b s_b) - dmin_w (m_a b_a + m_b b_b)) per lane and super-block, then a
// warp sum) differ from the CPU's order, so results agree to fp32 rounding (test_matvec_q8),
// closer to the CPU than matvec.cu's fp32 activations.
//
// Layout of the quantized activations, per row (q8_row_bytes): qs int8[cols] (16-byte aligned),
// d float[cols / 256], bsum int32[cols / 16]. Weight rows must be 16-byte aligned (Q4_K blocks are
// 144 bytes, so a 16-aligned row start is enough: matvec_q8_supported checks it).
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kQ8Warps = 4;
constexpr int kQ8RowsPerWarp = 2;   // each lane's activation loads serve two weight rows
constexpr int kQ8RowsPerBlock = kQ8Warps * kQ8RowsPerWarp;
constexpr int64_t kQK = bq::QK_K;

// One row of quantized activations.
struct Q8Row {
    const int8_t* qs;
    const float* d;
    const int32_t* bsum;
};
__device__ __forceinline__ Q8Row q8_row(const uint8_t* base, int64_t cols) {
    return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + cols),
            reinterpret_cast<const int32_t*>(base + cols + 4 * (cols / kQK))};
}

// quant's nearest_int: round half to even through the 1.5 * 2^23 bias, after a rounded multiply
// (no FMA: the CPU rounds the product first).
__device__ __forceinline__ int nearest_int_of_product(float a, float b) {
    const float biased = __fadd_rn(__fmul_rn(a, b), 12582912.0f);
    return (__float_as_int(biased) & 0x007fffff) - 0x00400000;
}

// One warp per super-block of one row: the CPU's quantize_row_q8_K. The scale comes from the
// element of largest magnitude (the first one on ties), iscale = -127 / it; a block of zeros
// stays zeros with d = 0.
__global__ void __launch_bounds__(32)
    quantize_q8_K_kernel(const float* __restrict__ x, int64_t ldx, int64_t cols, uint8_t* __restrict__ out,
                         size_t out_stride) {
    const int64_t sb = blockIdx.x, row = blockIdx.y, nb = cols / kQK;
    const int lane = int(threadIdx.x);
    const float* xs = x + row * ldx + sb * kQK + 8 * lane;
    uint8_t* base = out + size_t(row) * out_stride;
    auto* qs = reinterpret_cast<int8_t*>(base) + sb * kQK + 8 * lane;
    auto* d = reinterpret_cast<float*>(base + cols) + sb;
    auto* bsum = reinterpret_cast<int32_t*>(base + cols + 4 * nb) + sb * 16;
    float v[8], amax = 0, max = 0;
    int at = int(kQK);
    for (int i = 0; i < 8; ++i) {
        v[i] = xs[i];
        if (fabsf(v[i]) > amax) amax = fabsf(v[i]), max = v[i], at = 8 * lane + i;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float oa = __shfl_xor_sync(kFullMask, amax, o), om = __shfl_xor_sync(kFullMask, max, o);
        const int oat = __shfl_xor_sync(kFullMask, at, o);
        if (oa > amax || (oa == amax && oat < at)) amax = oa, max = om, at = oat;
    }
    int part = 0;
    const float iscale = amax != 0.0f ? -127.f / max : 0.0f;
    for (int i = 0; i < 8; ++i) {
        int q = amax != 0.0f ? nearest_int_of_product(iscale, v[i]) : 0;
        q = q < 127 ? q : 127;
        qs[i] = int8_t(q);
        part += q;
    }
    const int pair = part + __shfl_xor_sync(kFullMask, part, 1);   // 16 elements: lanes 2k, 2k + 1
    if (lane % 2 == 0) bsum[lane / 2] = pair;
    if (lane == 0) *d = amax != 0.0f ? 1 / iscale : 0.0f;
}

// The 6-bit scales and mins of sub-blocks 2 g and 2 g + 1 (quant's scale_min_k4 for both) from
// the 12 scale bytes held as three words, two bytes at a time and without a branch: the lanes of
// a warp take different g, and a branch on it would run both sides.
//   g < 2:  scales bytes 2g, 2g+1 of w0, mins the same bytes of w1, each & 63;
//   g >= 2: scale = low nibble of w2's byte | top two bits of w0's byte << 4, min = high nibble of
//           w2's byte | top two bits of w1's byte << 4 (bytes 2(g-2), 2(g-2)+1).
__device__ __forceinline__ void scale_min_pair(uint32_t w0, uint32_t w1, uint32_t w2, int g, int& sc_a, int& m_a,
                                               int& sc_b, int& m_b) {
    const int h = 16 * (g & 1);
    const uint32_t a0 = w0 >> h, a1 = w1 >> h, a2 = w2 >> h;
    const uint32_t sc = g < 2 ? a0 & 0x3f3fu : (a2 & 0x0f0fu) | ((a0 & 0xc0c0u) >> 2);
    const uint32_t m = g < 2 ? a1 & 0x3f3fu : ((a2 >> 4) & 0x0f0fu) | ((a1 & 0xc0c0u) >> 2);
    sc_a = int(sc & 0xff), sc_b = int((sc >> 8) & 0xff);
    m_a = int(m & 0xff), m_b = int((m >> 8) & 0xff);
}

__device__ __forceinline__ int dp4a4(uint4 w, uint4 y, int acc) {
    acc = __dp4a(int(w.x), int(y.x), acc);
    acc = __dp4a(int(w.y), int(y.y), acc);
    acc = __dp4a(int(w.z), int(y.z), acc);
    return __dp4a(int(w.w), int(y.w), acc);
}
__device__ __forceinline__ uint4 nibbles(uint4 q, int shift) {
    return {(q.x >> shift) & 0x0f0f0f0fu, (q.y >> shift) & 0x0f0f0f0fu, (q.z >> shift) & 0x0f0f0f0fu,
            (q.w >> shift) & 0x0f0f0f0fu};
}

// Block (row block, slot). A warp owns kQ8RowsPerWarp rows; lane 8 s + k takes super-blocks
// s, s + 4, ... and in each the 16 nibble bytes k (64-weight group k / 2, half k % 2): weights
// 64 g + l0 .. + 16 (low nibbles, sub-block 2 g) and 64 g + 32 + l0 .. + 16 (high, 2 g + 1). The
// 8 lanes of a super-block read its 128 nibble bytes side by side.
// sel nullptr: one slot, W and x as given. Otherwise slot s runs expert sel[s] (W + e slice_bytes)
// on activation row s / x_div into y + s rows; a bad id gives NaN rows.
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_q4_K_q8_kernel(const uint8_t* __restrict__ W, size_t row_bytes, size_t slice_bytes, int64_t n_slices,
                          int64_t rows, int64_t cols, const int32_t* __restrict__ sel, const uint8_t* __restrict__ xq,
                          size_t xq_stride, int64_t x_div, float* __restrict__ y) {
    const int64_t slot = blockIdx.y;
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    const int64_t r0 = (int64_t(blockIdx.x) * kQ8Warps + warp) * kQ8RowsPerWarp;
    float* ys = y + slot * rows;
    if (r0 >= rows) return;                      // the whole warp leaves together
    const int nr = rows - r0 < kQ8RowsPerWarp ? int(rows - r0) : kQ8RowsPerWarp;   // warp-uniform
    if (sel) {
        const int32_t e = sel[slot];
        if (e < 0 || e >= n_slices) {            // a bad id: NaN rows, not a read past the tensor
            if (lane < nr) ys[r0 + lane] = NAN;
            return;
        }
        W += size_t(e) * slice_bytes;
    }
    const Q8Row a = q8_row(xq + size_t(sel ? slot / x_div : 0) * xq_stride, cols);
    const int s = lane / 8, k = lane % 8, g = k / 2, l0 = 16 * (k % 2);
    const int64_t nb = cols / kQK;
    float acc[kQ8RowsPerWarp] = {};
    for (int64_t sb = s; sb < nb; sb += 4) {
        const auto* yq = reinterpret_cast<const uint8_t*>(a.qs + sb * kQK + 64 * g + l0);
        const uint4 ylo = load_u128_aligned(yq), yhi = load_u128_aligned(yq + 32);
        const float dy = a.d[sb];
        const int blo = a.bsum[sb * 16 + (64 * g + l0) / 16], bhi = a.bsum[sb * 16 + (64 * g + 32 + l0) / 16];
#pragma unroll
        for (int r = 0; r < kQ8RowsPerWarp; ++r) {
            if (r >= nr) break;
            const uint8_t* b = W + size_t(r0 + r) * row_bytes + size_t(sb) * sizeof(bq::block_q4_K);
            const uint4 q = load_u128_aligned(b + 16 + 32 * g + l0);
            const uint32_t dd = load_u32_aligned(b);
            const uint32_t w0 = load_u32_aligned(b + 4), w1 = load_u32_aligned(b + 8), w2 = load_u32_aligned(b + 12);
            int sc_a, m_a, sc_b, m_b;
            scale_min_pair(w0, w1, w2, g, sc_a, m_a, sc_b, m_b);
            const int s_a = dp4a4(nibbles(q, 0), ylo, 0), s_b = dp4a4(nibbles(q, 4), yhi, 0);
            const float dw = bq::fp16_to_fp32(bq::fp16_t(dd & 0xffff)), dmin = bq::fp16_to_fp32(bq::fp16_t(dd >> 16));
            acc[r] += dy * (dw * float(sc_a * s_a + sc_b * s_b) - dmin * float(m_a * blo + m_b * bhi));
        }
    }
#pragma unroll
    for (int r = 0; r < kQ8RowsPerWarp; ++r) {
        const float v = warp_sum(acc[r]);       // every lane takes part, also past nr
        if (lane == 0 && r < nr) ys[r0 + r] = v;
    }
}

void launch_q8(const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows, int64_t cols,
            const int32_t* sel, int64_t slots, const void* xq, int64_t x_div, float* y, void* stream) {
    if (rows <= 0 || slots <= 0) return;
    if (cols % kQK != 0 || slots > 65535 || x_div < 1)
        throw std::invalid_argument("cuda matvec_q8: " + std::to_string(cols) + " columns (whole super-blocks of 256), " +
                                    std::to_string(slots) + " slots (at most 65535), x_div " + std::to_string(x_div));
    auto* kernel = &matvec_q4_K_q8_kernel;
    KINFER_LAUNCH(kernel, dim3(unsigned((rows + kQ8RowsPerBlock - 1) / kQ8RowsPerBlock), unsigned(slots)),
                  dim3(kQ8Warps * 32), 0, as_stream(stream), static_cast<const uint8_t*>(W), row_bytes, slice_bytes,
                  n_slices, rows, cols, sel, static_cast<const uint8_t*>(xq), q8_row_bytes(cols), x_div, y);
}

}  // namespace

size_t q8_row_bytes(int64_t cols) {
    const int64_t nb = cols / kQK;
    return size_t(cols + 4 * nb + 64 * nb + 15) / 16 * 16;
}

void quantize_q8_K(const float* x, int64_t ldx, int64_t rows, int64_t cols, void* out, void* stream) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % kQK != 0 || rows > 65535)
        throw std::invalid_argument("cuda quantize_q8_K: " + std::to_string(cols) + " columns (whole super-blocks of 256), " +
                                    std::to_string(rows) + " rows (at most 65535)");
    auto* kernel = &quantize_q8_K_kernel;
    KINFER_LAUNCH(kernel, dim3(unsigned(cols / kQK), unsigned(rows)), dim3(32), 0, as_stream(stream), x, ldx ? ldx : cols,
                  cols, static_cast<uint8_t*>(out), q8_row_bytes(cols));
}

bool matvec_q8_supported(quant::Type type, const void* W, size_t row_bytes, int64_t cols) {
    return type == quant::Type::Q4_K && cols % kQK == 0 && reinterpret_cast<uintptr_t>(W) % 16 == 0 && row_bytes % 16 == 0;
}

void matvec_q8(const void* W, size_t row_bytes, int64_t rows, int64_t cols, const void* xq, float* y, void* stream) {
    launch_q8(W, row_bytes, 0, 1, rows, cols, nullptr, 1, xq, 1, y, stream);
}

void matvec_q8_id(const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows, int64_t cols,
                  const int32_t* sel, int64_t slots, const void* xq, int64_t x_div, float* y, void* stream) {
    if (!sel) throw std::invalid_argument("cuda matvec_q8_id: no expert ids");
    launch_q8(W, row_bytes, slice_bytes, n_slices, rows, cols, sel, slots, xq, x_div, y, stream);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
