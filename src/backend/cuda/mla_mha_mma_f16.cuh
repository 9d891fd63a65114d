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
// term (about 2^-22 split, 2^-11 single).
//
// Shared memory: floats first (the query rows' 2^-eq, the key rows' 2^-ek and the value rows' ev),
// then fp16 bits, hi (and lo): the block's queries 16 W x ldk and the key tile 32 x ldk (ldk: dk
// rounded up to 16, + 8: an odd multiple of 8, so a fragment's 32-bit words fall in 32 banks), the
// value tile transposed (value dim rows of 32 keys + 8: the B fragment takes two keys of one
// column as one word). K3 (dk 192, dv 128) with 4 warps: 97 KiB split, 48 KiB single.
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
inline size_t flash_f16_smem_bytes(int64_t dk, int64_t dv, int warps, bool split) {
    const int64_t bq = warps * kFlashMmaRows, dvp = (dv + 7) / 8 * 8;
    const size_t floats = size_t(bq + 2 * kFlashMmaKeys);
    const size_t halves = size_t((split ? 2 : 1) * ((bq + kFlashMmaKeys) * flash_f16_ldk(dk) + dvp * kFlashF16LdV));
    return floats * sizeof(float) + halves * sizeof(uint16_t);
}

// One row of n values (value(i), i < n), scaled by a power of two into fp16's range and written as
// fp16 (hi, and lo under kSplit) at hi[i stride] / lo[i stride], zeros from n up to np. The whole
// warp calls it; every lane gets the exponent (0 for a row of zeros or none).
template <bool kSplit, class Value>
__device__ int f16_stage_row(const Value& value, int64_t n, int64_t np, uint16_t* hi, uint16_t* lo, int64_t stride) {
    const int lane = int(threadIdx.x % 32);
    float mx = 0.0f;
    for (int64_t i = lane; i < n; i += 32) mx = fmaxf(mx, fabsf(value(i)));
    const int e = f16_scale_exponent(warp_max(mx));
    const float up = ldexpf(1.0f, e);
    for (int64_t i = lane; i < np; i += 32) {
        uint16_t h = 0, l = 0;
        if (i < n) f16_operand<kSplit>(value(i), up, h, l);
        hi[i * stride] = h;
        if constexpr (kSplit) lo[i * stride] = l;
    }
    return e;
}

// Keys [b0, b0 + bn) of one block, as mha_flash_mma_kernel takes them.
template <bool kSplit, int kVTiles>
__global__ void __launch_bounds__(kFlashMmaMaxWarps * 32)
    mha_flash_f16_kernel(const float* __restrict__ q, const float* __restrict__ kn, const float* __restrict__ lat,
                         const float* __restrict__ vv, FlashState st, int64_t n, int64_t pos0, int64_t H, int64_t r,
                         int64_t R, int64_t dn, int64_t dr, int64_t dv, float scale, int64_t b0, int64_t bn, int first) {
    const int64_t dk = dn + dr, ldk = flash_f16_ldk(dk), dkp = ldk - 8, dvp = (dv + 7) / 8 * 8;
    const int nw = int(blockDim.x / 32), bq = nw * kFlashMmaRows;
    KINFER_DYNAMIC_SHARED(float, smem);
    float* q_unscale = smem;                       // [bq] 2^-eq of each query row
    float* k_unscale = q_unscale + bq;             // [32] 2^-ek of each key row of the tile
    float* v_exp = k_unscale + kFlashMmaKeys;      // [32] ev of each value row of the tile
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
    const int wn = nq - w0 < 0 ? 0 : nq - w0 < kFlashMmaRows ? nq - w0 : kFlashMmaRows;
    const int64_t w_end = k_end < qpos0 + w0 + wn ? k_end : qpos0 + w0 + wn;

    // This warp's query rows, scaled; only this warp reads them.
    for (int i = w0; i < w0 + kFlashMmaRows; ++i) {
        const int e = f16_stage_row<kSplit>([&](int64_t d) { return flash_query(q, st, t0 + i, h, H, dn, dk, d, scale); },
                                            i < nq ? dk : 0, dkp, qh + i * ldk, ql + i * ldk, 1);
        if (lane == 0) q_unscale[i] = ldexpf(1.0f, -e);
    }
    __syncwarp();
    const float qu[2] = {q_unscale[w0 + g], q_unscale[w0 + g + 8]};

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
            const int ek = f16_stage_row<kSplit>(
                [&](int64_t d) { return d < dn ? kn[(kb * H + h) * dn + d] : lat[kb * R + r + (d - dn)]; }, j < nk ? dk : 0,
                dkp, kh + j * ldk, kl + j * ldk, 1);
            const int ev = f16_stage_row<kSplit>([&](int64_t a) { return vv[(kb * H + h) * dv + a]; }, j < nk ? dv : 0, dvp,
                                                 vh + j, vl + j, kFlashF16LdV);
            if (lane == 0) k_unscale[j] = ldexpf(1.0f, -ek), v_exp[j] = float(ev);
        }
        __syncthreads();
        if (k0 >= w_end) continue;                 // (warp-uniform) no query of this warp sees these keys
        const int ktiles = (nk + 7) / 8;

        // ---- scores: A = this warp's queries, B[k][n] = the key rows ----
        float s[kFlashMmaKeys / 8][4] = {};
        for (int kk = 0; kk < int(dkp / 16); ++kk) {
            uint32_t a_hi[4], a_lo[4] = {};
            f16_frag_a(a_hi, qh + w0 * ldk + 16 * kk, ldk);
            if constexpr (kSplit) f16_frag_a(a_lo, ql + w0 * ldk + 16 * kk, ldk);
#pragma unroll
            for (int j = 0; j < kFlashMmaKeys / 8; ++j) {
                if (j >= ktiles) break;
                uint32_t b_hi[2], b_lo[2] = {};
                f16_frag_b_rows(b_hi, kh + 8 * j * ldk + 16 * kk, ldk);
                if constexpr (kSplit) f16_frag_b_rows(b_lo, kl + 8 * j * ldk + 16 * kk, ldk);
                mma_split_f16<kSplit>(s[j], a_hi, a_lo, b_hi, b_lo);
            }
        }
        // Unscaled: element (half, e) of tile j is row g + 8 half, key 8 j + 2 t4 + e.
#pragma unroll
        for (int j = 0; j < kFlashMmaKeys / 8; ++j)
#pragma unroll
            for (int x = 0; x < 4; ++x) s[j][x] = s[j][x] * qu[x / 2] * k_unscale[8 * j + 2 * t4 + x % 2];

        // ---- online softmax per row ----
        float rescale[2];
        flash_tile_softmax(s, m, l, rescale, w0 + g, nq, qpos0, k0, nk);

        // ---- the tile's units: 2^(14 + its smallest ev); the accumulators follow ----
        float vmin = lane < nk ? v_exp[lane] : INFINITY;
        for (int o = 16; o > 0; o >>= 1) vmin = fminf(vmin, __shfl_xor_sync(kFullMask, vmin, o));
        const int next = kFlashF16PExp + int(vmin);
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
                f16_operand<kSplit>(s[j][2 * half], ldexpf(1.0f, units - int(v_exp[key])), h0, l0);
                f16_operand<kSplit>(s[j][2 * half + 1], ldexpf(1.0f, units - int(v_exp[key + 1])), h1, l1);
                a_hi[f] = f16_pair(h0, h1);
                if constexpr (kSplit) a_lo[f] = f16_pair(l0, l1);
            }
#pragma unroll   // (acc is indexed by constants only once unrolled: registers, not local memory)
            for (int a = 0; a < kVTiles; ++a) {
                if (8 * a >= dv) break;
                uint32_t b_hi[2], b_lo[2] = {};
                f16_frag_b_rows(b_hi, vh + 8 * a * kFlashF16LdV + 16 * kk, kFlashF16LdV);
                if constexpr (kSplit) f16_frag_b_rows(b_lo, vl + 8 * a * kFlashF16LdV + 16 * kk, kFlashF16LdV);
                mma_split_f16<kSplit>(acc[a], a_hi, a_lo, b_hi, b_lo);
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
