// mla_mha_mma.cuh's flash kernel on fp16 tensor cores (mma_f16.cuh, m16n8k16): the same warps,
// tiles, online softmax and state, with every operand of both products split into two fp16 parts
// (kSplit: three products, fp32-class, as the chunked KDA's f16x3) or rounded once to fp16. Why:
// an m16n8k16 product covers twice an m16n8k8's k at the same cost where fp16 runs at twice
// TF32's rate (an H200's datasheet: 989 against 495 TFLOPS dense), so the split form does
// 3xTF32's work in about half the tensor-core time and the single form single TF32's likewise; the
// tiles are half the bytes. Taken for KINFER_CUDA_MLA=f16x2 (split) and f16 (single), over every
// cache type (the expansion of the keys is mla_mha.cu's business). Included by mla_mha.cu.
//
// fp16 holds 2^-14 .. 65504, where the fp32 values may lie anywhere, so every row is scaled by a
// power of two before it is rounded (f16_scale_exponent: its largest |value| into [2^14, 2^15)),
// and the products are scaled back, all exactly:
//  - query row i by 2^eq_i, key row j by 2^ek_j: a score comes out 2^(eq_i + ek_j) too large and is
//    multiplied by 2^-eq_i and 2^-ek_j (two factors: each within fp32's normal range);
//  - value row j by 2^ev_j. A key's row factor cannot be taken out of a sum over keys, so it goes
//    into the probability instead: p_ij enters as p_ij 2^(U - ev_j), U = 14 + the tile's smallest
//    ev, so the largest operand is at most 2^14 and each product is p v 2^U. The accumulators are
//    kept in units of 2^U; when the next tile's U differs they are rescaled by 2^(U_old - U_new)
//    with the softmax's rescale (exact), and divided by 2^U as they are stored.
// A value or key much smaller than its row's (or the tile's) largest keeps fewer bits; its share
// of the result is as much smaller, so the error stays at fp16's split resolution of the largest
// term (about 2^-22 split, 2^-11 single). A value row of zeros has no scale: it is left out of the
// tile's smallest ev (+inf in v_exp; its probability operand is 0, as a key past the tile's). Where
// a tile's units would take the accumulators past 2^100 (values falling by more than about 2^86
// from one tile to the next) they grow less, and the probability operands are smaller than 2^14.
//
// Shared memory: floats first (the query rows' 2^-eq, the key rows' 2^-ek and the value rows' ev),
// then fp16 bits, hi (and lo): the block's queries 16 W x ldk and the key tile 32 x ldk (ldk: dk
// rounded up to 16, + 8), the value tile transposed (dv rounded up to 16 rows of 32 keys + 8: the
// B fragment takes two keys of one column as one word). Every fragment comes by ldmatrix
// (mma_f16.cuh), whose 8-row phases read 16 bytes a row: rows an odd multiple of 16 bytes apart
// (ldk, 40) fall in 8 different 16-byte bank groups. K3 (dk 192, dv 128) with 4 warps: 95.5 KiB
// split, 48 KiB single.
#pragma once
#include "backend/cuda/mla_mha_mma.cuh"
#include "backend/cuda/mma_f16.cuh"
#include "backend/cuda/reduce.cuh"

#include <cmath>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kFlashF16LdV = kFlashMmaKeys + 8;   // fp16 elements a transposed value row
constexpr int kFlashF16PExp = 14;                 // the largest probability operand: 2^14

__host__ __device__ inline int64_t flash_f16_ldk(int64_t dk) { return (dk + 15) / 16 * 16 + 8; }
// The value tile's rows (value columns, transposed): dv rounded up to 16, zeros past dv, as the P V
// product loads two 8-column tiles at a time (f16_frag_b_rows_x2).
__host__ __device__ inline int64_t flash_f16_dvp(int64_t dv) { return (dv + 15) / 16 * 16; }
inline size_t flash_f16_smem_bytes(int64_t dk, int64_t dv, int warps, bool split) {
    const int64_t bq = warps * kFlashMmaRows, dvp = flash_f16_dvp(dv);
    const size_t floats = size_t(bq + 2 * kFlashMmaKeys);
    const size_t halves = size_t((split ? 2 : 1) * ((bq + kFlashMmaKeys) * flash_f16_ldk(dk) + dvp * kFlashF16LdV));
    return floats * sizeof(float) + halves * sizeof(uint16_t);
}

// A staged row's scale: the exponent e of 2^e, and whether the row is all zeros (or empty), which
// has no scale of its own (e is 0 then).
struct RowScale {
    int e;
    bool zero;
};

// One row of n values (value(i), i < n), scaled by a power of two into fp16's range and written as
// fp16 (hi, and lo under kSplit) at hi[i stride] / lo[i stride], zeros from n up to np. The whole
// warp calls it; every lane gets the scale. The first kCached values a lane reads (rows up to 256:
// every model's dk and dv) stay in registers between the pass that finds the largest and the one
// that writes, so that each is read once; longer rows read the rest twice.
template <bool kSplit, class Value>
__device__ RowScale f16_stage_row(const Value& value, int64_t n, int64_t np, uint16_t* hi, uint16_t* lo, int64_t stride) {
    constexpr int kCached = 8;
    const int lane = int(threadIdx.x % 32);
    float x[kCached], mx = 0.0f;
#pragma unroll
    for (int m = 0; m < kCached; ++m) {
        const int64_t i = lane + 32 * m;
        x[m] = i < n ? value(i) : 0.0f;
        mx = fmaxf(mx, fabsf(x[m]));
    }
    for (int64_t i = lane + 32 * kCached; i < n; i += 32) mx = fmaxf(mx, fabsf(value(i)));
    mx = warp_max(mx);
    const int e = f16_scale_exponent(mx);
    const float up = ldexpf(1.0f, e);
    auto put = [&](int64_t i, float v) {   // (v is 0 past n: its parts are zeros)
        uint16_t h = 0, l = 0;
        f16_operand<kSplit>(v, up, h, l);
        hi[i * stride] = h;
        if constexpr (kSplit) lo[i * stride] = l;
    };
#pragma unroll
    for (int m = 0; m < kCached; ++m)
        if (const int64_t i = lane + 32 * m; i < np) put(i, x[m]);
    for (int64_t i = lane + 32 * kCached; i < np; i += 32) put(i, i < n ? value(i) : 0.0f);
    return {e, !(mx > 0.0f)};
}

// Keys [b0, b0 + bn) of one block, as mha_flash_mma_kernel takes them.
template <bool kSplit, int kVTiles>
__global__ void __launch_bounds__(kFlashMmaMaxWarps * 32)
    mha_flash_f16_kernel(const float* __restrict__ q, const float* __restrict__ kn, const float* __restrict__ lat,
                         const float* __restrict__ vv, FlashState st, int64_t n, int64_t pos0, int64_t H, int64_t r,
                         int64_t R, int64_t dn, int64_t dr, int64_t dv, float scale, int64_t b0, int64_t bn, int first) {
    static_assert(kVTiles % 2 == 0, "the P V product takes the value tiles in pairs");
    const int64_t dk = dn + dr, ldk = flash_f16_ldk(dk), dkp = ldk - 8, dvp = flash_f16_dvp(dv);
    const int nw = int(blockDim.x / 32), bq = nw * kFlashMmaRows;
    KINFER_DYNAMIC_SHARED(float, smem);
    float* q_exp = smem;                           // [bq] eq of each query row
    float* k_exp = q_exp + bq;                     // [32] ek of each key row of the tile
    float* v_exp = k_exp + kFlashMmaKeys;          // [32] ev of each value row of the tile; +inf for a row of zeros
    constexpr int kParts = kSplit ? 2 : 1;
    uint16_t* qh = reinterpret_cast<uint16_t*>(v_exp + kFlashMmaKeys);   // [bq][ldk] (then lo)
    uint16_t* kh = qh + kParts * bq * ldk;         // [32][ldk] the key tile (then lo)
    uint16_t* vh = kh + kParts * kFlashMmaKeys * ldk;   // [dvp][kFlashF16LdV] the value tile transposed (then lo)
    uint16_t* const ql = qh + bq * ldk;            // (the lo parts: read and written under kSplit only)
    uint16_t* const kl = kh + kFlashMmaKeys * ldk;
    uint16_t* const vl = vh + dvp * kFlashF16LdV;
    const int64_t t0 = int64_t(blockIdx.x) * bq, h = blockIdx.y;
    const int nq = int(n - t0 < bq ? n - t0 : bq);
    const int64_t qpos0 = pos0 + t0;
    const int64_t k_end = b0 + bn < qpos0 + nq ? b0 + bn : qpos0 + nq;
    if (k_end <= b0) return;                       // every query of the block comes before the key block
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, g = lane / 4, t4 = lane % 4;
    const int w0 = warp * kFlashMmaRows;
    const int64_t w_end = flash_warp_key_end(w0, nq, qpos0, k_end, b0);

    // This warp's query rows, scaled; only this warp reads them.
    for (int i = w0; i < w0 + kFlashMmaRows; ++i) {
        const RowScale sc = f16_stage_row<kSplit>(
            [&](int64_t d) { return flash_query(q, st, t0 + i, h, H, dn, dk, d, scale); }, i < nq ? dk : 0, dkp,
            qh + i * ldk, ql + i * ldk, 1);
        if (lane == 0) q_exp[i] = float(sc.e);
    }
    __syncwarp();
    const int qe[2] = {int(q_exp[w0 + g]), int(q_exp[w0 + g + 8])};

    const FlashRows rows{w0 + g, nq, t0, h, H, dv};
    float m[2], l[2], acc[kVTiles][4];
    rows.load(st, m, l, acc, first);
    int units = 0;                                 // the accumulators hold the sums times 2^units

    for (int64_t k0 = b0; k0 < k_end; k0 += kFlashMmaKeys) {
        const int nk = int(k_end - k0 < kFlashMmaKeys ? k_end - k0 : kFlashMmaKeys);
        __syncthreads();                           // the previous tile's readers are done
        // A warp a key: its key row (k_nope, then k_pe from the latent row) and its value row.
        for (int j = warp; j < kFlashMmaKeys; j += nw) {
            const int64_t kb = k0 - b0 + j;
            const RowScale ks = f16_stage_row<kSplit>(
                [&](int64_t d) { return d < dn ? kn[(kb * H + h) * dn + d] : lat[kb * R + r + (d - dn)]; }, j < nk ? dk : 0,
                dkp, kh + j * ldk, kl + j * ldk, 1);
            const RowScale vs = f16_stage_row<kSplit>([&](int64_t a) { return vv[(kb * H + h) * dv + a]; },
                                                      j < nk ? dv : 0, dvp, vh + j, vl + j, kFlashF16LdV);
            if (lane == 0) k_exp[j] = float(ks.e), v_exp[j] = vs.zero ? INFINITY : float(vs.e);
        }
        __syncthreads();
        if (k0 >= w_end) continue;                 // (warp-uniform) no query of this warp sees these keys

        // ---- scores: A = this warp's queries, B[k][n] = the key rows ----
        // Every key tile, those past nk too (a partial tile's, once a block; their rows are zeros):
        // flash_tile_softmax sets every key from nk on to -inf whatever its score holds (a NaN from
        // a non-finite q included), so the results are those of skipping them, which cost the
        // 16-tile kernels 24 to 40 bytes of spills (ptxas).
        float s[kFlashMmaKeys / 8][4] = {};
        for (int kk = 0; kk < int(dkp / 16); ++kk) {
            uint32_t a_hi[4], a_lo[4] = {};
            f16_frag_a(a_hi, qh + w0 * ldk + 16 * kk, ldk);
            if constexpr (kSplit) f16_frag_a(a_lo, ql + w0 * ldk + 16 * kk, ldk);
#pragma unroll
            for (int jp = 0; jp < kFlashMmaKeys / 16; ++jp) {   // key tiles 2 jp, 2 jp + 1: one B load (ldmatrix)
                uint32_t bh[4], bl[4] = {};
                f16_frag_b_rows_x2(bh, kh + 16 * jp * ldk + 16 * kk, ldk);
                if constexpr (kSplit) f16_frag_b_rows_x2(bl, kl + 16 * jp * ldk + 16 * kk, ldk);
                mma_f16_pair<kSplit, true>(s[2 * jp], s[2 * jp + 1], true, a_hi, a_lo, bh, bl);
            }
        }
        // Unscaled: element (half, e) of tile j is row g + 8 half, key 8 j + 2 t4 + e (one ldexpf:
        // 2^-(eq + ek) may lie outside fp32's range where the score does not).
#pragma unroll
        for (int j = 0; j < kFlashMmaKeys / 8; ++j)
#pragma unroll
            for (int x = 0; x < 4; ++x) s[j][x] = ldexpf(s[j][x], -(qe[x / 2] + int(k_exp[8 * j + 2 * t4 + x % 2])));

        // ---- online softmax per row ----
        float rescale[2];
        flash_tile_softmax(s, m, l, rescale, w0 + g, nq, qpos0, k0, nk);

        // ---- the tile's units: 2^(14 + its smallest ev, rows of zeros left out); the
        // accumulators follow. Where that would grow them past 2^100 the units grow less (the
        // probability operands are then smaller than 2^14, never larger). Warp-uniform. ----
        float vmin = lane < nk ? v_exp[lane] : INFINITY;
        for (int o = 16; o > 0; o >>= 1) vmin = fminf(vmin, __shfl_xor_sync(kFullMask, vmin, o));
        int next = vmin == INFINITY ? units : kFlashF16PExp + int(vmin);   // (every value row zero: as they were)
        if (next > units) {
            float amax = 0.0f;
#pragma unroll
            for (int a = 0; a < kVTiles; ++a)
#pragma unroll
                for (int x = 0; x < 4; ++x) amax = fmaxf(amax, fabsf(acc[a][x]));
            amax = warp_max(amax);
            if (amax > 0.0f && amax < INFINITY && next - units > 100 - ilogbf(amax)) next = units + 100 - ilogbf(amax);
        }
#pragma unroll
        for (int a = 0; a < kVTiles; ++a)
#pragma unroll
            for (int x = 0; x < 4; ++x) acc[a][x] = ldexpf(acc[a][x] * rescale[x / 2], next - units);
        units = next;

        // ---- acc += P V: A = the probabilities times 2^(units - ev_key), B[k][n] = the value tile ----
#pragma unroll
        for (int kk = 0; kk < kFlashMmaKeys / 16; ++kk) {
            if (16 * kk >= nk) break;
            // a[0] / a[1]: rows g / g + 8, keys 16 kk + 2 t4 (+1) (score tile 2 kk); a[2] / a[3] the
            // same rows, keys 8 further (tile 2 kk + 1).
            uint32_t a_hi[4], a_lo[4] = {};
#pragma unroll
            for (int f = 0; f < 4; ++f) {
                const int j = 2 * kk + f / 2, half = f % 2;
                uint16_t h0, l0, h1, l1;
                const int key = 8 * j + 2 * t4;
                // (a row of zeros, or a key past the tile: +inf, whose operand is 0)
                const float e0 = v_exp[key], e1 = v_exp[key + 1];
                f16_operand<kSplit>(s[j][2 * half], e0 == INFINITY ? 0.0f : ldexpf(1.0f, units - int(e0)), h0, l0);
                f16_operand<kSplit>(s[j][2 * half + 1], e1 == INFINITY ? 0.0f : ldexpf(1.0f, units - int(e1)), h1, l1);
                a_hi[f] = f16_pair(h0, h1);
                if constexpr (kSplit) a_lo[f] = f16_pair(l0, l1);
            }
#pragma unroll   // (acc is indexed by constants only once unrolled: registers, not local memory)
            for (int a = 0; a < kVTiles; a += 2) {          // two value tiles a B load (one ldmatrix)
                if (8 * a >= dv) break;
                uint32_t bh[4], bl[4] = {};
                f16_frag_b_rows_x2(bh, vh + 8 * a * kFlashF16LdV + 16 * kk, kFlashF16LdV);
                if constexpr (kSplit) f16_frag_b_rows_x2(bl, vl + 8 * a * kFlashF16LdV + 16 * kk, kFlashF16LdV);
                mma_f16_pair<kSplit, true>(acc[a], acc[a + 1], 8 * (a + 1) < dv, a_hi, a_lo, bh, bl);
            }
        }
    }
#pragma unroll
    for (int a = 0; a < kVTiles; ++a)
#pragma unroll
        for (int x = 0; x < 4; ++x) acc[a][x] = ldexpf(acc[a][x], -units);
    rows.store(st, m, l, acc);
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS
