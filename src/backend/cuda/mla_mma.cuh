// mla.cu's grouped pass 1 with its two products on TF32 tensor cores (mma_tf32.cuh): for 16 heads,
// a piece of positions and a token, scores = q rows . cache rows and acc += p . cache rows, as
// mma.sync m16n8k8 on operands split into 3xTF32 (fp32 accuracy) or rounded once (kSplit false).
// Why: absorbed MLA decode does H (2 R - dr) multiply-adds a cached position (K3 at 1M positions:
// 139 GFLOP a layer and token), compute-bound on the CUDA cores long before the cache's bytes are.
// Included by mla.cu, whose attend() launches it where MlaArgs::math asks (CudaBackend: the
// environment's KINFER_CUDA_MLA); same pieces, same partial results and combine pass.
//
// Block: 4 warps, 16 heads (the m dimension of every product), tiles of 16 cache rows.
//   scores [16 heads x 16 rows]: warp w takes rows 8 (w % 2) .. + 7 and half the k steps
//     (w / 2), both halves added in shared memory;
//   softmax: warp w keeps heads 4w .. 4w + 3's running max and sum, lane j row j;
//   acc [16 heads x r]: warp w owns latent dims 128 w .. 128 w + 127, as 16 accumulator tiles
//     (64 floats a lane), rescaled and added to each tile.
// Shared memory (floats): q and the tile's rows 2 x 16 x (Rp + 4) (Rp: R rounded up to 8; the
// + 4 puts the score products' fragment loads in 32 banks; the value loads, down the rows, then
// meet 2-way conflicts, which no one padding avoids for both), scores 2 x 16 x 20, probabilities 16 x 20,
// rescale 16: 76 KiB at K3's R = 576 (opted in; two blocks an SM).
#pragma once
#include "backend/cuda/latent.cuh"
#include "backend/cuda/mma_tf32.cuh"
#include "backend/cuda/reduce.cuh"

#include <cmath>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMmaHeads = 16, kMmaRows = 16, kMmaThreads = 128, kMmaLdP = 20;

// Rows of R floats padded to a multiple of 8 (the k step) plus 4.
__host__ __device__ inline int64_t mla_mma_ld(int64_t R) { return (R + 7) / 8 * 8 + 4; }
inline size_t mla_mma_smem_bytes(int64_t R) {
    return sizeof(float) * size_t(2 * kMmaHeads * mla_mma_ld(R) + 3 * kMmaHeads * kMmaLdP + kMmaHeads);
}

// A pass-1 block's place in the grid, for every pass-1 kernel (mla.cu's two fp32 ones, the
// tensor-core ones): heads h0 .. h0 + heads - 1 (blockIdx.x), piece s of positions (blockIdx.y)
// of token t (blockIdx.z), the positions [j0, j1) it covers (causal: token t sees pos0 + t + 1),
// and where a head's partial result goes: r + 2 floats (max, sum, r accumulators) in part.
struct MlaPiece {
    int64_t h0, s, t, j0, j1, H, r, pieces;
    float* part;
    __device__ MlaPiece(int heads, int64_t pos0, int64_t H_, int64_t r_, int64_t split, int64_t pieces_, float* part_)
        : h0(int64_t(blockIdx.x) * heads), s(blockIdx.y), t(blockIdx.z), H(H_), r(r_), pieces(pieces_), part(part_) {
        const int64_t n_kv = pos0 + t + 1;
        j0 = s * split;
        j1 = j0 + split < n_kv ? j0 + split : n_kv;
    }
    __device__ float* out(int64_t g) const { return part + ((t * H + h0 + g) * pieces + s) * (r + 2); }
    // A piece that starts past its token's context: true, after the block's threads have written
    // each head's empty partial result (max -inf, sum and accumulator 0), which the combine pass
    // skips over. The block then returns.
    __device__ bool empty(int heads) const {
        if (j0 < j1) return false;
        for (int64_t g = 0; g < heads && h0 + g < H; ++g)
            for (int64_t d = threadIdx.x; d < r + 2; d += blockDim.x) out(g)[d] = d == 0 ? -INFINITY : 0.0f;
        return true;
    }
};

// A warp's running state in the tensor-core kernels (this file's and mla_mma_f16.cuh's): heads
// 4 w + a's running max m and sum l (the same in every lane), and its accumulator tiles acc[nt]
// (latent dims 128 w + 8 nt + 2 t4 (+1) of heads g and g + 8). Indexed by constants only (the
// loops over them unrolled), so it lives in registers.
struct MlaMmaRunning {
    float m[4], l[4], acc[16][4];
    __device__ MlaMmaRunning() {
#pragma unroll
        for (int a = 0; a < 4; ++a) m[a] = -INFINITY, l[a] = 0.0f;
#pragma unroll
        for (int nt = 0; nt < 16; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[nt][e] = 0.0f;
    }
};

// The tensor-core kernels' partial results: warp w's accumulator tiles times unscale, and by
// lane 0 its four heads' running max and sum.
__device__ inline void mla_mma_store(const MlaPiece& b, const MlaMmaRunning& run, float unscale) {
    const auto& acc = run.acc;
    const auto& m = run.m;
    const auto& l = run.l;
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), gq = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t g = gq + 8 * (e / 2), d = 128 * warp + 8 * nt + 2 * t4 + e % 2;
            if (b.h0 + g < b.H && d < b.r) b.out(g)[2 + d] = acc[nt][e] * unscale;
        }
    if (lane == 0)
        for (int a = 0; a < 4; ++a)
            if (b.h0 + 4 * warp + a < b.H) {
                b.out(4 * warp + a)[0] = m[a];
                b.out(4 * warp + a)[1] = l[a];
            }
}

template <class Rows, bool kSplit>
__global__ void __launch_bounds__(kMmaThreads)
    mla_partial_mma_kernel(Rows cache, const float* __restrict__ Q, int64_t pos0, int64_t H, int64_t r, int64_t R,
                           float scale, int64_t split, int64_t pieces, float* __restrict__ part) {
    const int64_t ld = mla_mma_ld(R), Rp = ld - 4;
    KINFER_DYNAMIC_SHARED(float, smem);
    float* sq = smem;                              // [16][ld] the heads' q rows (zero past R and H)
    float* rows = sq + kMmaHeads * ld;             // [16][ld] the tile's cache rows (zero past R and the piece)
    float* sS = rows + kMmaRows * ld;              // [2][16][kMmaLdP] partial scores, by k half
    float* sP = sS + 2 * kMmaHeads * kMmaLdP;      // [16][kMmaLdP] exp(score - running max)
    float* rescale = sP + kMmaHeads * kMmaLdP;     // [16] exp(old max - new max)
    const MlaPiece b(kMmaHeads, pos0, H, r, split, pieces, part);
    if (b.empty(kMmaHeads)) return;
    const int64_t h0 = b.h0, t = b.t, j0 = b.j0, j1 = b.j1;
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, gq = lane / 4;
    for (int64_t e = tid; e < kMmaHeads * Rp; e += kMmaThreads) {
        const int64_t g = e / Rp, i = e % Rp;
        sq[g * ld + i] = h0 + g < H && i < R ? Q[(t * H + h0 + g) * R + i] : 0.0f;
    }
    MlaMmaRunning run;
    const int ksteps = int(Rp / 8), kh = warp / 2, ks0 = kh ? ksteps / 2 : 0, ks1 = kh ? ksteps : ksteps / 2;
    const int nrow = 8 * (warp % 2);               // this warp's score rows
    for (int64_t jt = j0; jt < j1; jt += kMmaRows) {
        const int tl = int(j1 - jt < kMmaRows ? j1 - jt : kMmaRows);
        for (int j = 0; j < kMmaRows; ++j) {       // row by row, the threads across the row (coalesced)
            const typename Rows::Row row = cache.row(j < tl ? jt + j : jt);
            for (int64_t i = tid; i < Rp; i += kMmaThreads) rows[j * ld + i] = j < tl && i < R ? cache.at(row, i) : 0.0f;
        }
        __syncthreads();   // also publishes sq on the first tile

        // ---- scores: A = q rows (heads), B[k][n] = rows[n][k]; half the k steps this warp ----
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_rows_tf32<kSplit>(c, sq, ld, rows + nrow * ld, ld, ks0, ks1);
        tf32_store_c(c, sS + kh * kMmaHeads * kMmaLdP + nrow, kMmaLdP);
        __syncthreads();

        // ---- online softmax: warp w's four heads, lane j row j ----
        for (int a = 0; a < 4; ++a) {
            const int g = 4 * warp + a;
            const float sc = lane < tl ? (sS[g * kMmaLdP + lane] + sS[(kMmaHeads + g) * kMmaLdP + lane]) * scale : -INFINITY;
            float alpha;                           // 0 on the first tile (m = -inf)
            const float p = online_softmax_step(sc, run.m[a], run.l[a], alpha);
            if (lane < kMmaRows) sP[g * kMmaLdP + lane] = p;
            if (lane == 0) rescale[g] = alpha;
        }
        __syncthreads();

        // ---- acc = diag(rescale) acc + P rows: A = P (heads x tile rows), B[k][n] = rows[k][n] ----
        mma_pv_tf32<kSplit, kMmaRows>(run.acc, rescale[gq], rescale[gq + 8], sP, kMmaLdP, rows, ld, 128 * warp, 8, r);
        __syncthreads();   // the next tile overwrites rows, sS and sP
    }
    mla_mma_store(b, run, 1.0f);
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS
