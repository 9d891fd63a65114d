// mla_mma.cuh's grouped pass 1 for an f16 latent cache, on fp16 tensor cores (mma_f16.cuh): the
// cache rows are fp16 already, so they enter both products exactly as stored, and only the fp32
// operands are split: q (scores = q rows . cache rows) and the probabilities (acc += p . cache
// rows), each as two fp16 parts (kSplit; about 22 significant bits, fp32-class) or rounded once.
// Why: two m16n8k16 products a k16 step where 3xTF32 takes six m16n8k8 ones, each as long as an
// m16n8k16 (TF32 runs at half fp16's rate), so about a third of the tensor-core time, and the tile
// is half the bytes in shared memory. At K3's 1M positions the split decode's 278 GFLOP of fp16
// products a layer and token take about 0.28 ms at an H200's datasheet peak, about as long as
// reading the cache (0.24 ms at 4.8 TB/s): near the memory bound, where 3xTF32 is 3 times past it.
// Included by mla.cu, whose attend() launches it for the paged f16 cache where MlaArgs::math asks
// f16x2 / f16 (other caches take the TF32 forms); the pieces, partial results and combine pass are
// mla_mma.cuh's.
//
// The split needs fp16's range and resolution, so each head's q row is scaled by 2^(14 - e), e the
// exponent of its largest |q| (the largest scaled value in [2^14, 2^15)), and the scores by 2^-(14 - e)
// back: powers of two, exact. The probabilities (<= 1) are scaled by 2^15 and the accumulator by
// 2^-15 at the end, so a probability down to ~2^-15 keeps its 22 bits and the smaller ones an
// absolute 2^-40.
//
// Block and warps as mla_mma.cuh. Shared memory: floats first (the partial scores 2 x 16 x 20, the
// rescale 16, the heads' q scales 16), then fp16 bits: q hi (and lo) and the tile's rows, 16 x ld
// each (ld: R rounded up to 16, + 8: ldmatrix's rows, an odd multiple of 16 bytes apart, fall in 8
// different 16-byte bank groups, and an odd last k step's 32-bit words in 32 banks), the
// probabilities hi (and lo) 16 x 24. At K3's R = 576: 59 KiB split (opted in; three blocks an
// SM), 40 KiB single. ptxas: 113 / 114 registers, no spills. The pages must be 16-byte aligned for the tile's
// 16-byte loads (cudaMalloc's are). The A fragments (q, the probabilities) come by ldmatrix, the
// scores' B fragments two k16 steps at a time (f16_frag_b_rows_k2), and the value product's by
// ldmatrix.trans two n tiles at a time (f16_frag_b_cols_x2).
#pragma once
#include "backend/cuda/mla_mma.cuh"
#include "backend/cuda/mma_f16.cuh"

#include <cmath>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kF16LdP = 24;              // fp16 elements a probability row (16 + 8)
constexpr float kF16PScale = 32768.0f;   // 2^15: the probabilities' scale in the split

__host__ __device__ inline int64_t mla_f16_ld(int64_t R) { return (R + 15) / 16 * 16 + 8; }
inline size_t mla_f16_smem_bytes(int64_t R, bool split) {
    const size_t floats = 2 * kMmaHeads * kMmaLdP + 2 * kMmaHeads;
    const size_t halves = size_t((split ? 3 : 2) * kMmaHeads * mla_f16_ld(R) + (split ? 2 : 1) * kMmaHeads * kF16LdP);
    return floats * sizeof(float) + halves * sizeof(uint16_t);
}

template <bool kSplit>
__global__ void __launch_bounds__(kMmaThreads)
    mla_partial_f16_kernel(LatentArgs c, const float* __restrict__ Q, int64_t pos0, int64_t H, int64_t r, int64_t R,
                           float scale, int64_t split, int64_t pieces, float* __restrict__ part) {
    const int64_t ld = mla_f16_ld(R), Rp = ld - 8;
    KINFER_DYNAMIC_SHARED(float, smem);
    float* sS = smem;                                        // [2][16][kMmaLdP] partial scores, by k half
    float* rescale = sS + 2 * kMmaHeads * kMmaLdP;           // [16] exp(old max - new max)
    float* q_unscale = rescale + kMmaHeads;                  // [16] the heads' 2^-(14 - e)
    uint16_t* sqh = reinterpret_cast<uint16_t*>(q_unscale + kMmaHeads);   // [16][ld] scaled q, its fp16 part
    uint16_t* sql = sqh + kMmaHeads * ld;                    // [16][ld] the remainder (kSplit)
    uint16_t* rows = sqh + (kSplit ? 2 : 1) * kMmaHeads * ld;   // [16][ld] the tile's cache rows (zero past R and the piece)
    uint16_t* sPh = rows + kMmaRows * ld;                    // [16][kF16LdP] 2^15 exp(score - running max)
    uint16_t* sPl = sPh + kMmaHeads * kF16LdP;               // its remainder (kSplit)
    const MlaPiece b(kMmaHeads, pos0, H, r, split, pieces, part);
    if (b.empty(kMmaHeads)) return;
    const int64_t h0 = b.h0, t = b.t, j0 = b.j0, j1 = b.j1;
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, gq = lane / 4;
    // q: warp w scales and splits heads 4w .. 4w + 3 (zero past R and H).
    for (int a = 0; a < 4; ++a) {
        const int g = 4 * warp + a;
        const bool live = h0 + g < H;
        const float* q = live ? Q + (t * H + h0 + g) * R : Q;   // (not read past H)
        float mx = 0.0f;
        if (live)
            for (int64_t i = lane; i < R; i += 32) mx = fmaxf(mx, fabsf(q[i]));
        const int e = f16_scale_exponent(warp_max(mx));
        const float up = ldexpf(1.0f, e);
        if (lane == 0) q_unscale[g] = ldexpf(1.0f, -e);
        for (int64_t i = lane; i < Rp; i += 32) {
            const float x = live && i < R ? q[i] * up : 0.0f;
            if constexpr (kSplit) f16_split(x, sqh[g * ld + i], sql[g * ld + i]);
            else sqh[g * ld + i] = f16_round(x);
        }
    }
    MlaMmaRunning run;
    const int ksteps = int(Rp / 16), kh = warp / 2, ks0 = kh ? ksteps / 2 : 0, ks1 = kh ? ksteps : ksteps / 2;
    const int nrow = 8 * (warp % 2);                         // this warp's score rows
    // The tile copy: lane groups of 8 copy a row each, warp w rows 4w .. 4w + 3, so a lane finds
    // its row's page once a tile; 16-byte pieces where the rows allow (R a multiple of 8).
    const bool vec = R % 8 == 0 && c.row_bytes % 16 == 0;
    const int jw = 4 * warp + lane / 8;
    for (int64_t jt = j0; jt < j1; jt += kMmaRows) {
        const int tl = int(j1 - jt < kMmaRows ? j1 - jt : kMmaRows);
        {
            const bool in = jw < tl;
            const uint8_t* src = in ? latent_row(c, jt + jw) : nullptr;
            uint16_t* dst = rows + jw * ld;
            if (vec) {
                for (int64_t i = 8 * (lane % 8); i < Rp; i += 64) {
                    uint4 v{};
                    if (in && i < R) v = load_aligned<uint4>(src + 2 * i);
                    store_aligned<uint4>(reinterpret_cast<uint8_t*>(dst + i), v);
                }
            } else {
                for (int64_t i = lane % 8; i < Rp; i += 8) dst[i] = in && i < R ? load_aligned<uint16_t>(src + 2 * i) : 0;
            }
        }
        __syncthreads();   // also publishes q and its scales on the first tile

        // ---- scores: A = scaled q (heads), B[k][n] = rows[n][k]; half the k steps this warp ----
        // Two k steps a B load (one ldmatrix) while two remain, then a last one alone; the k steps
        // add into cc in order either way.
        float cc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        auto step = [&](int ks, const uint32_t (&b)[2]) {
            uint32_t a_hi[4], a_lo[4];
            f16_frag_a(a_hi, sqh + 16 * ks, ld);
            if constexpr (kSplit) f16_frag_a(a_lo, sql + 16 * ks, ld);
            mma_split_a_f16<kSplit>(cc, a_hi, a_lo, b);
        };
        int ks = ks0;
        for (; ks + 1 < ks1; ks += 2) {
            uint32_t b[4];
            f16_frag_b_rows_k2(b, rows + nrow * ld + 16 * ks, ld);
            step(ks, {b[0], b[1]});
            step(ks + 1, {b[2], b[3]});
        }
        if (ks < ks1) {
            uint32_t b[2];
            f16_frag_b_rows(b, rows + nrow * ld + 16 * ks, ld);
            step(ks, b);
        }
        tf32_store_c(cc, sS + kh * kMmaHeads * kMmaLdP + nrow, kMmaLdP);
        __syncthreads();

        // ---- online softmax: warp w's four heads, lane j row j ----
        for (int a = 0; a < 4; ++a) {
            const int g = 4 * warp + a;
            const float sc =
                lane < tl ? (sS[g * kMmaLdP + lane] + sS[(kMmaHeads + g) * kMmaLdP + lane]) * q_unscale[g] * scale : -INFINITY;
            float alpha;                                     // 0 on the first tile (m = -inf)
            const float p = online_softmax_step(sc, run.m[a], run.l[a], alpha) * kF16PScale;
            if (lane < kMmaRows) {
                if constexpr (kSplit) f16_split(p, sPh[g * kF16LdP + lane], sPl[g * kF16LdP + lane]);
                else sPh[g * kF16LdP + lane] = f16_round(p);
            }
            if (lane == 0) rescale[g] = alpha;
        }
        __syncthreads();

        // ---- acc = diag(rescale) acc + P rows: A = P (heads x tile rows), B[k][n] = rows[k][n] ----
        {
            const float r0 = rescale[gq], r8 = rescale[gq + 8];
#pragma unroll
            for (int nt = 0; nt < 16; ++nt)
                run.acc[nt][0] *= r0, run.acc[nt][1] *= r0, run.acc[nt][2] *= r8, run.acc[nt][3] *= r8;
            uint32_t p_hi[4], p_lo[4];
            f16_frag_a(p_hi, sPh, kF16LdP);
            if constexpr (kSplit) f16_frag_a(p_lo, sPl, kF16LdP);
#pragma unroll   // (acc is indexed by constants only once unrolled: registers, not local memory)
            for (int nt = 0; nt < 16; nt += 2) {             // two n tiles a B load (one ldmatrix)
                const int64_t col = 128 * warp + 8 * nt;
                if (col >= r) break;                         // warp-uniform
                uint32_t b[4];
                f16_frag_b_cols_x2(b, rows + col, ld);       // (columns past r: within the row, not used)
                mma_f16_pair<kSplit, false>(run.acc[nt], run.acc[nt + 1], col + 8 < r, p_hi, p_lo, b, b);
            }
        }
        __syncthreads();   // the next tile overwrites rows, sS and the probabilities
    }
    mla_mma_store(b, run, 1.0f / kF16PScale);
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS
