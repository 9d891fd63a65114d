// Decode matvec on int8 activations, with __dp4a: Q4_K, Q5_K, Q6_K (a Q4_K_M model) and IQ4_XS
// weights on Q8_K activations, the 32-element formats (Q8_0, Q5_0, Q4_0, IQ4_NL, MXFP4: K3's
// experts and the rest of an MXFP4_MOE file) on Q8_0 activations, and Q4_1 / Q5_1 (ggml's Q4_K_M
// writes Q5_1 for rows not a multiple of 256) on Q8_1, as the CPU pairs them.
//
// Why a second form. matvec.cu keeps the activations fp32 and turns every weight into a float:
// per weight a nibble extract, an int-to-float conversion (a quarter-rate instruction on sm_90)
// and an FMA, plus the block's scales decoded from bytes per 8 weights; its PTX has about 17
// instructions a Q4_K or MXFP4 weight, which caps it near a quarter of the H200's 4.8 TB/s (by
// count, not measured). Here the activation row is quantized once per call as the CPU does it
// (quantize_act: the bytes of quant's quantize_row_q8_K / the values of its x86
// quantize_row_q8_0), and the weights are dotted with dp4a: for Q4_K each lane takes 16 bytes of
// a block's nibbles (32 weights) with one 16-byte load, 8 dp4a against the int8 activations, the
// sub-block scales applied to the exact integer sums, the min terms from the activation's block
// sums: about 2.2 PTX instructions a weight (Q6_K 4.9, Q8_0 4.7, MXFP4 7.4).
//
// Arithmetic: the integer sums are the CPU's (Q8_K activations, exact products); the float steps
// (d_y (d_w (sc_a s_a + sc_b s_b) - dmin_w (m_a b_a + m_b b_b)) per lane and super-block, then a
// warp sum) differ from the CPU's order, so results agree to fp32 rounding (test_matvec_q8),
// closer to the CPU than matvec.cu's fp32 activations.
//
// Layout of the quantized activations, per row (q8_act_row_bytes): qs int8[cols] (16-byte
// aligned), then for Q8_K d float[cols / 256] and bsum int32[cols / 16], for Q8_0 d float[cols / 32]
// (the fp16 scale the CPU stores, widened), for Q8_1 that and s float[cols / 32] (d sum(q), rounded
// to fp16 as the CPU stores it, widened); for the nibble formats each block's 32 qs are stored
// interleaved (element j at byte 2j, element 16 + j at 2j + 1), Q8_0's in order. Q4_K / Q5_K weight
// rows must be 16-byte aligned (blocks of 144 / 176 bytes, so a 16-aligned row start is enough),
// IQ4_XS rows 8-byte aligned (136-byte blocks), Q6_K, Q8_0 and Q5_0 rows 2-byte aligned; Q4_0,
// Q4_1, Q5_1, IQ4_NL and MXFP4 are read by bytes (matvec_q8_supported checks it).
//
// The 32-element formats: four lanes a block, a lane 8 weights (Q8_0: bytes 8c .. 8c + 7 of the
// quants, 2-byte loads; Q4_0, IQ4_NL, MXFP4: quant bytes 4c .. 4c + 3, their 8 levels looked up
// with byte permutes whose selectors are the nibbles themselves; Q5_0: the same bytes with their
// fifth bits, levels formed arithmetically; the nibble formats against activations stored in the
// nibbles' order), 2 dp4a against the activation words, d_w d_y times the piece's integer sum.
//
// Decode is one token; 2 to 31 tokens (an expert's share of a prefill chunk, a few sequences) take
// the same code with 4 tokens a block, from 32 on a matmul takes a GEMM (gemm.cu's fp16 one, or
// mmq.cu's on int8 tensor cores with KINFER_CUDA_GEMM=int8).
#include "backend/cuda/group_task.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/q8_formats.cuh"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kQ8Warps = 4;
constexpr int kQ8RowsPerWarp = 2;   // each lane's activation loads serve two weight rows
constexpr int kQ8RowsPerBlock = kQ8Warps * kQ8RowsPerWarp;

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

// What every int8 kernel's warp starts from: its rows [r0, r0 + nr) of the weights, and the
// activation and output rows of its tokens. Two modes:
//  - by slot (sel non-null; one token a block): block (row block, slot), slot s runs expert
//    sel[s] (W + e slice_bytes) on activation row s / x_div into y + s rows;
//  - by token (sel null): block (row block, token group), tokens NT y .. NT y + nt - 1 of n_tok,
//    activation rows xq_stride apart, output rows ldy apart; the weight rows are read once for
//    the group's tokens.
// False when the warp has nothing to do: past the last row, or a bad expert id (its rows are then
// NaN rather than a read past the tensor).
struct Q8Tile {
    const uint8_t* W;
    const uint8_t* x;   // the first token's activation row
    size_t x_stride;
    float* y;           // the first token's output row
    int64_t ldy;
    int64_t r0;
    int nr;   // warp-uniform
    int nt;   // tokens, warp-uniform
};
// Block (bx, by): row block bx, and slot or token group by.
template <int NT>
__device__ __forceinline__ bool q8_tile(const uint8_t* W, size_t slice_bytes, int64_t n_slices, int64_t rows,
                                        const int32_t* sel, const uint8_t* xq, size_t xq_stride, int64_t x_div, float* y,
                                        int64_t n_tok, int64_t ldy, int64_t bx, int64_t by, Q8Tile& s) {
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    s.r0 = (bx * kQ8Warps + warp) * kQ8RowsPerWarp;
    s.x_stride = xq_stride;
    s.ldy = ldy;
    if (sel) {
        const int64_t slot = by;
        s.y = y + slot * rows;
        s.x = xq + size_t(slot / x_div) * xq_stride;
        s.nt = 1;
    } else {
        const int64_t t0 = by * NT;
        s.y = y + t0 * ldy;
        s.x = xq + size_t(t0) * xq_stride;
        s.nt = n_tok - t0 < NT ? int(n_tok - t0) : NT;
    }
    if (s.r0 >= rows) return false;              // the whole warp leaves together
    s.nr = rows - s.r0 < kQ8RowsPerWarp ? int(rows - s.r0) : kQ8RowsPerWarp;
    if (sel) {
        const int32_t e = sel[by];
        if (e < 0 || e >= n_slices) {
            if (lane < s.nr) s.y[s.r0 + lane] = NAN;
            return false;
        }
        W += size_t(e) * slice_bytes;
    }
    s.W = W;
    return true;
}
// The warp's sums into its rows, token by token (every lane takes part in the shuffles, also
// past nr).
template <int NT>
__device__ __forceinline__ void q8_store(const float (&acc)[NT][kQ8RowsPerWarp], const Q8Tile& s) {
#pragma unroll
    for (int j = 0; j < NT; ++j) {
        if (j >= s.nt) break;
#pragma unroll
        for (int r = 0; r < kQ8RowsPerWarp; ++r) {
            const float v = warp_sum(acc[j][r]);
            if (threadIdx.x % 32 == 0 && r < s.nr) s.y[j * s.ldy + s.r0 + r] = v;
        }
    }
}

// Block (row block, slot or token group), q8_tile's rows and tokens. Lane F::kLanes s + k takes
// super-blocks s, s + 32 / kLanes, ... and in each its piece k: the piece's activations for each
// token, its weights for each of the warp's rows, decoded once and dotted with every token's.
// A token's sums are the same bits whatever NT and the group it falls in.
template <class F, int NT>
__device__ __forceinline__ void matvec_sb_q8_block(const uint8_t* __restrict__ W, size_t row_bytes, size_t slice_bytes,
                                                   int64_t n_slices, int64_t rows, int64_t cols,
                                                   const int32_t* __restrict__ sel, const uint8_t* __restrict__ xq,
                                                   size_t xq_stride, int64_t x_div, float* __restrict__ y, int64_t n_tok,
                                                   int64_t ldy, int64_t bx, int64_t by) {
    Q8Tile tl;
    if (!q8_tile<NT>(W, slice_bytes, n_slices, rows, sel, xq, xq_stride, x_div, y, n_tok, ldy, bx, by, tl)) return;
    const int lane = int(threadIdx.x % 32), k = lane % F::kLanes;
    const int64_t nb = cols / kQK;
    float acc[NT][kQ8RowsPerWarp] = {};
    for (int64_t sb = lane / F::kLanes; sb < nb; sb += 32 / F::kLanes) {
        typename F::Acts act[NT] = {};
#pragma unroll
        for (int j = 0; j < NT; ++j)
            if (j < tl.nt) act[j] = F::acts(q8_row(tl.x + size_t(j) * tl.x_stride, cols), sb, k);
#pragma unroll
        for (int r = 0; r < kQ8RowsPerWarp; ++r) {
            if (r >= tl.nr) break;
            const typename F::Weights w = F::weights(tl.W + size_t(tl.r0 + r) * row_bytes + size_t(sb) * F::kBytes, k);
#pragma unroll
            for (int j = 0; j < NT; ++j)
                if (j < tl.nt) acc[j][r] = __fadd_rn(acc[j][r], F::dot(w, act[j]));
        }
    }
    q8_store<NT>(acc, tl);
}
template <class F, int NT>
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_sb_q8_kernel(const uint8_t* __restrict__ W, size_t row_bytes, size_t slice_bytes, int64_t n_slices,
                        int64_t rows, int64_t cols, const int32_t* __restrict__ sel, const uint8_t* __restrict__ xq,
                        size_t xq_stride, int64_t x_div, float* __restrict__ y, int64_t n_tok, int64_t ldy) {
    matvec_sb_q8_block<F, NT>(W, row_bytes, slice_bytes, n_slices, rows, cols, sel, xq, xq_stride, x_div, y, n_tok, ldy,
                              blockIdx.x, blockIdx.y);
}

// The CPU's x86 quantize_row_q8_0, one lane an element, a warp a block of 32: d = amax / 127
// stored as fp16 (kept here as the float it widens to), q = nearest_int(x * (127 / amax)).
// interleave: element j of a block stored at byte 2j (j < 16) or 2(j - 16) + 1, the order in
// which a nibble format's quant bytes hold their elements (byte k: k low, k + 16 high), so that a
// lookup of a weight word's 8 nibbles lines up with 8 consecutive activation bytes.
// with_sum (Q8_1): also s = d * sum(q) after the scales, d the unrounded amax / 127 and s rounded
// to fp16 (widened here), as quant's quantize_row_q8_1.
__global__ void __launch_bounds__(256)
    quantize_q8_0_kernel(const float* __restrict__ x, int64_t ldx, int64_t cols, uint8_t* __restrict__ out,
                         size_t out_stride, bool interleave, bool with_sum) {
    const int64_t b = int64_t(blockIdx.x) * 8 + threadIdx.x / 32, row = blockIdx.y;
    if (b >= cols / 32) return;                  // whole warps
    const int lane = int(threadIdx.x % 32);
    const float v = x[row * ldx + 32 * b + lane];
    const float amax = warp_max(fabsf(v));
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    uint8_t* base = out + size_t(row) * out_stride;
    const int at = interleave ? (lane < 16 ? 2 * lane : 2 * (lane - 16) + 1) : lane;
    const int q = nearest_int_of_product(v, id);
    reinterpret_cast<int8_t*>(base)[32 * b + at] = int8_t(q);
    const float d = amax / 127.f;
    if (lane == 0) q8_0_row_d(base, cols)[b] = bq::fp16_to_fp32(bq::fp32_to_fp16(d));
    if (!with_sum) return;
    int sum = q;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFullMask, sum, o);
    if (lane == 0) q8_1_row_s(base, cols)[b] = bq::fp16_to_fp32(bq::fp32_to_fp16(__fmul_rn(d, float(sum))));
}

// Block (row block, slot or token group), q8_tile's rows and tokens: lane 4 i + c takes blocks i,
// i + 8, ... and in each piece c, whose levels are looked up once for every token. levels_lo /
// _hi: the format's 16 levels (nibble formats).
template <class P, int NT>
__device__ __forceinline__ void matvec_b32_q8_block(const uint8_t* __restrict__ W, size_t row_bytes, size_t slice_bytes,
                                                    int64_t n_slices, int64_t rows, int64_t cols,
                                                    const int32_t* __restrict__ sel, const uint8_t* __restrict__ xq,
                                                    size_t xq_stride, int64_t x_div, float* __restrict__ y,
                                                    int64_t n_tok, int64_t ldy, uint64_t levels_lo, uint64_t levels_hi,
                                                    int64_t bx, int64_t by) {
    Q8Tile tl;
    if (!q8_tile<NT>(W, slice_bytes, n_slices, rows, sel, xq, xq_stride, x_div, y, n_tok, ldy, bx, by, tl)) return;
    const int lane = int(threadIdx.x % 32);
    const uint32_t t[4] = {uint32_t(levels_lo), uint32_t(levels_lo >> 32), uint32_t(levels_hi), uint32_t(levels_hi >> 32)};
    const int i0 = lane / 4, c = lane % 4;
    const int64_t nb = cols / 32;
    float acc[NT][kQ8RowsPerWarp] = {};
    for (int64_t b = i0; b < nb; b += 8) {
        float dy[NT] = {}, sy[NT] = {};
        uint32_t ya[NT][2] = {};
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            if (j >= tl.nt) break;
            const uint8_t* xj = tl.x + size_t(j) * tl.x_stride;
            dy[j] = q8_0_row_d(xj, cols)[b];
            if constexpr (P::kMin) sy[j] = q8_1_row_s(xj, cols)[b];
            ya[j][0] = load_aligned<uint32_t>(xj + 32 * b + 8 * c);
            ya[j][1] = load_aligned<uint32_t>(xj + 32 * b + 8 * c + 4);
        }
#pragma unroll
        for (int r = 0; r < kQ8RowsPerWarp; ++r) {
            if (r >= tl.nr) break;
            const uint8_t* blk = tl.W + size_t(tl.r0 + r) * row_bytes + size_t(b) * P::kBytes;
            uint32_t lo, hi;
            P::levels(blk, c, t, lo, hi);
            const float dw = P::scale(blk);
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                if (j >= tl.nt) break;
                const int sum = __dp4a(int(hi), int(ya[j][1]), __dp4a(int(lo), int(ya[j][0]), 0));
                acc[j][r] = __fadd_rn(acc[j][r], __fmul_rn(__fmul_rn(dw, dy[j]), float(sum)));
                if constexpr (P::kMin)
                    if (c == 0) acc[j][r] = __fadd_rn(acc[j][r], __fmul_rn(P::min(blk), sy[j]));
            }
        }
    }
    q8_store<NT>(acc, tl);
}
template <class P, int NT>
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_b32_q8_kernel(const uint8_t* __restrict__ W, size_t row_bytes, size_t slice_bytes, int64_t n_slices,
                         int64_t rows, int64_t cols, const int32_t* __restrict__ sel, const uint8_t* __restrict__ xq,
                         size_t xq_stride, int64_t x_div, float* __restrict__ y, int64_t n_tok, int64_t ldy,
                         uint64_t levels_lo, uint64_t levels_hi) {
    matvec_b32_q8_block<P, NT>(W, row_bytes, slice_bytes, n_slices, rows, cols, sel, xq, xq_stride, x_div, y, n_tok, ldy,
                               levels_lo, levels_hi, blockIdx.x, blockIdx.y);
}

// Every task of a MatvecQ8Group in one launch (as matvec.cu's group kernel): block u belongs to
// task group_task(g, u) (group_task.cuh), and is that task's row block (u - first[i]) % row_blocks,
// token group / row_blocks; the same block code as a task alone, so the same bits. Rows a block:
// kQ8RowsPerBlock.
__device__ __forceinline__ const MatvecQ8Task& q8_group_task(const MatvecQ8Group& g, int64_t& bx, int64_t& by) {
    const int64_t u = blockIdx.x;
    const int lo = group_task(g, u);
    const MatvecQ8Task& t = g.task[lo];
    const int64_t row_blocks = (t.rows + kQ8RowsPerBlock - 1) / kQ8RowsPerBlock, local = u - g.first[lo];
    bx = local % row_blocks, by = local / row_blocks;
    return t;
}
template <class F, int NT>
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_sb_q8_group_kernel(MatvecQ8Group g, size_t row_bytes, int64_t cols, size_t xq_stride) {
    int64_t bx, by;
    const MatvecQ8Task& t = q8_group_task(g, bx, by);
    matvec_sb_q8_block<F, NT>(static_cast<const uint8_t*>(t.W), row_bytes, 0, 1, t.rows, cols, nullptr,
                              static_cast<const uint8_t*>(t.xq), xq_stride, 1, t.y, t.n, t.ldy, bx, by);
}
template <class P, int NT>
__global__ void __launch_bounds__(kQ8Warps * 32)
    matvec_b32_q8_group_kernel(MatvecQ8Group g, size_t row_bytes, int64_t cols, size_t xq_stride, uint64_t levels_lo,
                               uint64_t levels_hi) {
    int64_t bx, by;
    const MatvecQ8Task& t = q8_group_task(g, bx, by);
    matvec_b32_q8_block<P, NT>(static_cast<const uint8_t*>(t.W), row_bytes, 0, 1, t.rows, cols, nullptr,
                               static_cast<const uint8_t*>(t.xq), xq_stride, 1, t.y, t.n, t.ldy, levels_lo, levels_hi, bx, by);
}

// Tokens a block takes in the by-token mode (n_tok >= 2): each weight row is read once for them.
constexpr int kQ8Tokens = 4;

// The grid: (row blocks, slots) by slot, (row blocks, token groups) by token.
dim3 q8_grid(int64_t rows, const int32_t* sel, int64_t slots, int64_t n_tok, int nt) {
    return dim3(unsigned((rows + kQ8RowsPerBlock - 1) / kQ8RowsPerBlock), unsigned(sel ? slots : (n_tok + nt - 1) / nt));
}

// levels: the format's 16 levels (nullptr for Q8_0, which has none), passed in the launch's
// parameters as two words of 8 bytes.
template <class P, int NT>
void launch_b32(const uint8_t* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows, int64_t cols,
                const int32_t* sel, int64_t slots, const uint8_t* xq, int64_t x_div, float* y, int64_t n_tok, int64_t ldy,
                void* stream, const int8_t* levels) {
    auto* kernel = &matvec_b32_q8_kernel<P, NT>;
    KINFER_LAUNCH(kernel, q8_grid(rows, sel, slots, n_tok, NT), dim3(kQ8Warps * 32), 0, as_stream(stream), W, row_bytes,
                  slice_bytes, n_slices, rows, cols, sel, xq, q8_act_row_bytes(P::kMin ? quant::Type::Q4_1 : quant::Type::Q8_0, cols), x_div, y, n_tok,
                  ldy, levels_word(levels, 0), levels_word(levels, 1));
}

template <class F, int NT>
void launch_sb(const uint8_t* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows, int64_t cols,
               const int32_t* sel, int64_t slots, const uint8_t* xq, int64_t x_div, float* y, int64_t n_tok, int64_t ldy,
               void* stream) {
    auto* kernel = &matvec_sb_q8_kernel<F, NT>;
    KINFER_LAUNCH(kernel, q8_grid(rows, sel, slots, n_tok, NT), dim3(kQ8Warps * 32), 0, as_stream(stream), W, row_bytes,
                  slice_bytes, n_slices, rows, cols, sel, xq, q8_act_row_bytes(quant::Type::Q4_K, cols), x_div, y, n_tok,
                  ldy);
}

// sel non-null: one token a slot (NT 1); otherwise n_tok tokens, kQ8Tokens a block from two on.
template <int NT>
void launch_q8_nt(quant::Type type, const uint8_t* w, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows,
                  int64_t cols, const int32_t* sel, int64_t slots, const uint8_t* q, int64_t x_div, float* y, int64_t n_tok,
                  int64_t ldy, void* stream) {
    with_q8_format(type, "matvec_q8", [&](auto format, const int8_t* levels) {
        using P = decltype(format);
        if constexpr (P::kSuperBlock)
            launch_sb<P, NT>(w, row_bytes, slice_bytes, n_slices, rows, cols, sel, slots, q, x_div, y, n_tok, ldy, stream);
        else
            launch_b32<P, NT>(w, row_bytes, slice_bytes, n_slices, rows, cols, sel, slots, q, x_div, y, n_tok, ldy, stream,
                              levels);
    });
}

void launch_q8(quant::Type type, const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows,
               int64_t cols, const int32_t* sel, int64_t slots, const void* xq, int64_t x_div, float* y, int64_t n_tok,
               int64_t ldy, void* stream) {
    if (rows <= 0 || slots <= 0 || n_tok <= 0) return;
    if (slots > 65535 || x_div < 1 || (n_tok + kQ8Tokens - 1) / kQ8Tokens > 65535)
        throw std::invalid_argument("cuda matvec_q8: " + std::to_string(slots) + " slots (at most 65535), " +
                                    std::to_string(n_tok) + " tokens, x_div " + std::to_string(x_div));
    const auto* w = static_cast<const uint8_t*>(W);
    const auto* q = static_cast<const uint8_t*>(xq);
    if (sel || n_tok == 1) return launch_q8_nt<1>(type, w, row_bytes, slice_bytes, n_slices, rows, cols, sel, slots, q, x_div, y, n_tok, ldy, stream);
    launch_q8_nt<kQ8Tokens>(type, w, row_bytes, slice_bytes, n_slices, rows, cols, sel, slots, q, x_div, y, n_tok, ldy, stream);
}

// A group: the same weight type, row size and width for every task.
template <class F, int NT>
void launch_sb_group(const MatvecQ8Group& g, int64_t blocks, size_t row_bytes, int64_t cols, void* stream) {
    auto* kernel = &matvec_sb_q8_group_kernel<F, NT>;
    KINFER_LAUNCH(kernel, dim3(unsigned(blocks)), dim3(kQ8Warps * 32), 0, as_stream(stream), g, row_bytes, cols,
                  q8_act_row_bytes(quant::Type::Q4_K, cols));
}
template <class P, int NT>
void launch_b32_group(const MatvecQ8Group& g, int64_t blocks, size_t row_bytes, int64_t cols, void* stream,
                      const int8_t* levels) {
    auto* kernel = &matvec_b32_q8_group_kernel<P, NT>;
    KINFER_LAUNCH(kernel, dim3(unsigned(blocks)), dim3(kQ8Warps * 32), 0, as_stream(stream), g, row_bytes, cols,
                  q8_act_row_bytes(P::kMin ? quant::Type::Q4_1 : quant::Type::Q8_0, cols), levels_word(levels, 0),
                  levels_word(levels, 1));
}
template <int NT>
void launch_q8_group_nt(quant::Type type, const MatvecQ8Group& g, int64_t blocks, size_t row_bytes, int64_t cols,
                        void* stream) {
    with_q8_format(type, "matvec_q8_group", [&](auto format, const int8_t* levels) {
        using P = decltype(format);
        if constexpr (P::kSuperBlock) launch_sb_group<P, NT>(g, blocks, row_bytes, cols, stream);
        else launch_b32_group<P, NT>(g, blocks, row_bytes, cols, stream, levels);
    });
}

}  // namespace

void matvec_q8_group(quant::Type type, size_t row_bytes, int64_t cols, const MatvecQ8Group& group, void* stream) {
    if (group.n_tasks < 0 || group.n_tasks > kMatvecGroupMax)
        throw std::invalid_argument("cuda matvec_q8_group: " + std::to_string(group.n_tasks) + " tasks, at most " +
                                    std::to_string(kMatvecGroupMax));
    // One token in every task that has rows (decode) takes the one-token blocks, as matvec_q8
    // does; otherwise 4.
    bool single = true;
    for (int i = 0; i < group.n_tasks; ++i)
        if (group.task[i].rows > 0 && group.task[i].n > 0) single = single && group.task[i].n == 1;
    const int64_t per_block = single ? 1 : kQ8Tokens;
    MatvecQ8Group g;
    const int64_t blocks = compact_group(group, g, [&](const MatvecQ8Task& t) {
        return (t.rows + kQ8RowsPerBlock - 1) / kQ8RowsPerBlock * ((t.n + per_block - 1) / per_block);
    });
    if (g.n_tasks == 0) return;
    if (blocks > 2147483647) throw std::invalid_argument("cuda matvec_q8_group: more than 2^31 - 1 blocks");
    if (single) launch_q8_group_nt<1>(type, g, blocks, row_bytes, cols, stream);
    else launch_q8_group_nt<kQ8Tokens>(type, g, blocks, row_bytes, cols, stream);
}

size_t q8_act_row_bytes(quant::Type type, int64_t cols) {
    const size_t extra = q8_k_acts(type)    ? size_t(4 * (cols / kQK) + 64 * (cols / kQK))
                         : q8_1_acts(type) ? size_t(8 * (cols / 32))
                                           : size_t(4 * (cols / 32));
    return (size_t(cols) + extra + 15) / 16 * 16;
}

int q8_act_format(quant::Type type) {
    // What quantize_act's kernels differ by, one bit each: Q8_0's values interleaved (every
    // 32-element type but Q8_0), with Q8_1's sums, or Q8_K.
    if (q8_k_acts(type)) return 4;
    return (type != quant::Type::Q8_0 ? 1 : 0) | (q8_1_acts(type) ? 2 : 0);
}

void quantize_act(quant::Type type, const float* x, int64_t ldx, int64_t rows, int64_t cols, void* out, void* stream) {
    if (rows <= 0 || cols <= 0) return;
    check_q8_width(type, cols, "quantize_act");
    const int64_t ld = ldx ? ldx : cols;
    const size_t rb = q8_act_row_bytes(type, cols);
    // Rows on grid.y, at most 65535 a launch (a MoE prefill's gathered input has n x K rows:
    // 65536 at 8192 tokens and top-8).
    constexpr int64_t kMaxRows = 65535;
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxRows) {
        const unsigned nr = unsigned(rows - r0 < kMaxRows ? rows - r0 : kMaxRows);
        const float* xs = x + r0 * ld;
        uint8_t* o = static_cast<uint8_t*>(out) + size_t(r0) * rb;
        if (q8_k_acts(type)) {
            auto* kernel = &quantize_q8_K_kernel;
            KINFER_LAUNCH(kernel, dim3(unsigned(cols / kQK), nr), dim3(32), 0, as_stream(stream), xs, ld, cols, o, rb);
        } else {
            auto* kernel = &quantize_q8_0_kernel;
            KINFER_LAUNCH(kernel, dim3(unsigned((cols / 32 + 7) / 8), nr), dim3(256), 0, as_stream(stream), xs, ld, cols, o,
                          rb, type != quant::Type::Q8_0, q8_1_acts(type));
        }
    }
}

bool matvec_q8_supported(quant::Type type, const void* W, size_t row_bytes, int64_t cols) {
    const auto at = reinterpret_cast<uintptr_t>(W);
    switch (type) {
        case quant::Type::Q4_K: case quant::Type::Q5_K: return cols % kQK == 0 && at % 16 == 0 && row_bytes % 16 == 0;
        case quant::Type::Q6_K: return cols % kQK == 0 && at % 2 == 0 && row_bytes % 2 == 0;
        case quant::Type::IQ4_XS: return cols % kQK == 0 && at % 8 == 0 && row_bytes % 8 == 0;
        case quant::Type::Q8_0: return cols % 32 == 0 && at % 2 == 0 && row_bytes % 2 == 0;
        case quant::Type::Q5_0: return cols % 32 == 0 && at % 2 == 0 && row_bytes % 2 == 0;
        case quant::Type::Q4_1: case quant::Type::Q5_1: return cols % 32 == 0;
        case quant::Type::Q4_0: case quant::Type::IQ4_NL: case quant::Type::MXFP4: return cols % 32 == 0;
        default: return false;
    }
}

void matvec_q8(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const void* xq, int64_t n,
               float* y, int64_t ldy, void* stream) {
    launch_q8(type, W, row_bytes, 0, 1, rows, cols, nullptr, 1, xq, 1, y, n, ldy ? ldy : rows, stream);
}

void matvec_q8_id(quant::Type type, const void* W, size_t row_bytes, size_t slice_bytes, int64_t n_slices, int64_t rows,
                  int64_t cols, const int32_t* sel, int64_t slots, const void* xq, int64_t x_div, float* y, void* stream) {
    if (!sel) throw std::invalid_argument("cuda matvec_q8_id: no expert ids");
    launch_q8(type, W, row_bytes, slice_bytes, n_slices, rows, cols, sel, slots, xq, x_div, y, 1, rows, stream);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
