// What the chunked KDA kernels share (kda_chunked.cu: fp32 on the CUDA cores;
// kda_chunked_mma.cu / kda_chunked_mma_f16.cuh: the state products on TF32 / fp16 tensor cores): a
// chunk's rows staged in shared memory, its cumulative log-decay, and its C x C products (on FMAs
// for the first; for the others a factored chunk's on 3xTF32 tensor-core products, a pairwise
// one's on FMAs). The math is kda_chunked.cu's header's.
#pragma once
#include "backend/cuda/compat.h"
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/kernel_math.h"
#include "backend/cuda/mma_tf32.cuh"

#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// Sum over the 4 lanes of a group (lanes 4g .. 4g + 3 of a warp); every lane gets it.
__device__ __forceinline__ float group4_sum(float v) {
    v += __shfl_xor_sync(kFullMask, v, 1);
    v += __shfl_xor_sync(kFullMask, v, 2);
    return v;
}
// Their largest value, likewise.
__device__ __forceinline__ float group4_max(float v) {
    v = fmaxf(v, __shfl_xor_sync(kFullMask, v, 1));
    return fmaxf(v, __shfl_xor_sync(kFullMask, v, 2));
}

// The largest span of G over a chunk (its decay, -G_L, when g <= 0) for which the C x C products
// are factored: exp(G_t - G_s) as exp(G_t) * exp(-G_s), both inside fp32's normal range
// (exp(80) = 5.5e34). Each factor has
// its own rounding, so the product is as exact as the pairwise exp; what it saves is the
// C (C + 1) / 2 * D exps of the pairwise form. K3's gate is above -5 a token, so C = 16 always
// factors; a chunk that decays more (long chunks, Kimi Linear's unbounded gate) goes pairwise.
constexpr float kMaxFactoredDecay = 80.0f;

// A[t][s] = beta_t k_t.(exp(G_t - G_s) k_s) (s < t, zero on the diagonal) and
// Aqk[t][s] = q_t.(exp(G_t - G_s) k_s) (s <= t), each pair by one group of 4 lanes, lane p
// summing a quarter of the keys. The 8 groups of a warp take 8 consecutive pairs; lane p reads
// key 4((ii + q8) mod D/4) + p, so the warp's 32 reads hit 32 banks whatever rows the pairs are
// when the row stride LD is a multiple of 32 (D); at D + 8 (kda_chunked_mma.cu) two rows may share.
// The loop is uniform per warp (the shuffles need every lane); idle groups add zeros.
//   kFactored false: X = k, Y = q, Z = G (cumulative log-decay) rows: exp(G_t - G_s) pairwise.
//   kFactored true:  X = exp(G_t) k_t, Y = exp(G_t) q_t, Z = exp(G_L - G_s) k_s rows, r = exp(-G_L):
//                    exp(G_t - G_s) k_s = Z_s r and the key products are plain dots.
template <int D, int C, int LD, bool kFactored>
__device__ __forceinline__ void chunk_products(const float* X, const float* Y, const float* Z, const float* r,
                                               const float* sBeta, float* sA, float* sAqk, int nc, int groups) {
    constexpr int kQuarter = D / 4;
    const int tid = int(threadIdx.x), p = tid % 4, q8 = (tid / 4) % 8, warp = tid / 32;
    const int npairs = nc * (nc + 1) / 2;
    for (int base = warp * 8; base < npairs; base += groups) {
        const int pi = base + q8;
        const bool live = pi < npairs;
        int t = 0, s = 0;
        if (live) {
            t = int((sqrtf(8.0f * float(pi) + 1.0f) - 1.0f) * 0.5f);   // pi = t (t + 1) / 2 + s
            while ((t + 1) * (t + 2) / 2 <= pi) ++t;
            while (t * (t + 1) / 2 > pi) --t;
            s = pi - t * (t + 1) / 2;
        }
        float akk = 0, aqk = 0;
        if (live) {
            const float* Kt = X + t * LD;
            const float* Qt = Y + t * LD;
            for (int ii = 0; ii < kQuarter; ++ii) {
                const int i = 4 * ((ii + q8) & (kQuarter - 1)) + p;
                float ks;
                if constexpr (kFactored) ks = Z[s * LD + i] * r[i];
                else ks = expf(Z[t * LD + i] - Z[s * LD + i]) * X[s * LD + i];
                akk = fmaf(Kt[i], ks, akk);
                aqk = fmaf(Qt[i], ks, aqk);
            }
        }
        akk = group4_sum(akk);
        aqk = group4_sum(aqk);
        if (live && p == 0) {
            sA[t * (C + 1) + s] = s < t ? sBeta[t] * akk : 0.0f;
            sAqk[t * (C + 1) + s] = aqk;
        }
    }
}

// A chunk's shared arrays. K, Q, G: [C][LD] (k, q, the log-decay rows; after stage_chunk exp(G_t) k_t,
// exp(G_t) q_t and exp(G_L - G_s) k_s); U: [C][ldu] the block's J value columns of v; A, Aqk:
// [C][C + 1]; GL, RGL: [D] G of the chunk's last token and exp(-G_L); Beta: [C]; Slow: a flag.
struct ChunkSmem {
    float *K, *Q, *G, *U;
    int ldu;
    float *A, *Aqk, *GL, *RGL, *Beta, *Slow;
};

// Their floats for head dim D, chunk C, k / q / G rows ld apart and U rows ldu apart, laid out in
// the order above (a kernel's own arrays may follow), and the layout itself over smem.
__host__ __device__ constexpr size_t chunk_smem_floats(int D, int C, int ld, int ldu) {
    return size_t(3 * C * ld + C * ldu + 2 * C * (C + 1) + 2 * D + C + 1);
}
__device__ inline ChunkSmem chunk_smem(float* smem, int D, int C, int ld, int ldu) {
    ChunkSmem s{};
    s.K = smem, s.Q = s.K + C * ld, s.G = s.Q + C * ld, s.U = s.G + C * ld, s.ldu = ldu;
    s.A = s.U + C * ldu, s.Aqk = s.A + C * (C + 1), s.GL = s.Aqk + C * (C + 1), s.RGL = s.GL + D;
    s.Beta = s.RGL + D, s.Slow = s.Beta + C;
    return s;
}

// (load_pair, two adjacent floats in one 8-byte load: mma_tf32.cuh's; every array of ChunkSmem
// has rows of an even number of floats, so an even index is 8-byte aligned.)
// x * rho rounded once (__fmul_rn: no multiply-add fused into the split that follows, as in the
// CPU mode), split for 3xTF32.
__device__ __forceinline__ void split_weighted(float x, float rho, uint32_t& hi, uint32_t& lo) {
    tf32_split(__fmul_rn(x, rho), hi, lo);
}

// The A fragment of chunk_products_tf32 (below) from a row pointer at row g's key pair (row g + 8
// is 8 LD further), each value weighted by its key's rho (r0, r1) and split.
template <int LD>
__device__ __forceinline__ void weighted_a(const float* p, float r0, float r1, uint32_t (&hi)[4], uint32_t (&lo)[4]) {
    float v0, v1, v8, v9;
    load_pair(p, v0, v1);
    load_pair(p + 8 * LD, v8, v9);
    split_weighted(v0, r0, hi[0], lo[0]);
    split_weighted(v8, r0, hi[1], lo[1]);
    split_weighted(v1, r1, hi[2], lo[2]);
    split_weighted(v9, r1, hi[3], lo[3]);
}

// A factored chunk's products on the tensor cores, 3xTF32 (mma_tf32.cuh: fp32-class, whatever
// the calling kernel's own form), for the tensor-core kernels (kda_chunked_mma.cu); a pairwise
// chunk's stay on FMAs (chunk_products). As FMAs they are 35 K multiply-adds a chunk at D = 128,
// C = 16, each with two shared loads: some 2 K shared-memory wavefronts by count. As mma.sync
// they are 192 products and about 400 wavefronts of 8-byte fragment loads. Neither is measured.
// Computed over every C x C tile that has a pair s <= t:
//   A = X W^T, Aqk = Y W^T, with X = exp(G_t) k_t rows (s.K), Y = exp(G_t) q_t (s.Q),
//   W = exp(G_L - G_s) k_s (s.G), every key index i weighted by rho_i = exp(-G_L / 2) on both
//   sides (s.RGL holds rho under kTensorProducts): rho_i^2 = exp(-G_L) is chunk_products' r.
// Why the weight is split in half: with g <= 0 (the models' gates), X rho = exp(G_t - G_L / 2) k_t
// and W rho = exp(G_L / 2 - G_s) k_s stay within e^+-40 of k in a chunk whose G spans up to
// kMaxFactoredDecay, where X alone goes down to e^-80 of k: a TF32 split's low part of that
// (2^-11 further down) is subnormal, which a tensor core may flush. Here every operand part is a
// normal number (some hi x lo products of far-apart pairs are not: terms near 1e-38). A G that
// rises as well (finish_chunk's span test) keeps them within e^+-80: finite, if less exact.
// Fragments: the k index is summed over, so logical k position t4 is key 8 ks + 2 t4 and t4 + 4
// is the key after it (mma_tf32.cuh's note): each row's pair is one 8-byte load, and a
// half-warp's loads (rows g, pairs t4, rows LD = D + 8 floats apart) hit 32 distinct banks.
// Work: (m tile of 16 t, n tile of 8 s) units, both products a unit (they share the W fragment),
// each unit's keys cut into kparts (1, 2 or 4) so that the units fill the block's warps. With
// kparts > 1 the parts are stored to scratch ([kparts][2][C][C] floats; the kernels give their q
// products' array, C (J + 8) floats, which holds it: kparts units <= J / 16 warps) and summed in
// a fixed order after a barrier. Every thread of the block calls it; it does not end with a barrier.
template <int D, int C, int LD>
__device__ void chunk_products_tf32(const ChunkSmem& s, float* scratch) {
    constexpr int kMTiles = C / 16, kUnits = kMTiles * (kMTiles + 1);   // m tile mt has n tiles 0 .. 2 mt + 1
    const int tid = int(threadIdx.x), nthreads = int(blockDim.x), warps = nthreads / 32, warp = tid / 32;
    const int lane = tid % 32, gq = lane / 4, t4 = lane % 4;
    int kparts = 1;   // block-uniform
    while (kparts < 4 && 2 * kparts * kUnits <= warps) kparts *= 2;
    const int steps = D / 8 / kparts;   // k steps (8 keys) a part
    for (int u = warp; u < kUnits * kparts; u += warps) {
        const int kp = u % kparts;
        int mt = 0, nt = u / kparts;
        while (nt >= 2 * mt + 2) nt -= 2 * mt + 2, ++mt;
        const float* x = s.K + (16 * mt + gq) * LD + 2 * t4;   // A rows t (g, g + 8), keys 2 t4, + 1
        const float* y = s.Q + (16 * mt + gq) * LD + 2 * t4;
        const float* w = s.G + (8 * nt + gq) * LD + 2 * t4;    // B column s = g, the same keys
        const float* rho = s.RGL + 2 * t4;
        float ca[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cq[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 1   // (unrolled, its hoisted loads took 3xTF32 at D = 128, C = 32 from 170 registers to 252)
        for (int ks = kp * steps; ks < (kp + 1) * steps; ++ks) {
            const int i = 8 * ks;
            float r0, r1, v0, v1;   // rho of the two keys; W's two values
            load_pair(rho + i, r0, r1);
            uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2];
            load_pair(w + i, v0, v1);
            split_weighted(v0, r0, b_hi[0], b_lo[0]);
            split_weighted(v1, r1, b_hi[1], b_lo[1]);
            weighted_a<LD>(x + i, r0, r1, a_hi, a_lo);
            mma_f32_via_tf32<true>(ca, a_hi, a_lo, b_hi, b_lo);
            weighted_a<LD>(y + i, r0, r1, a_hi, a_lo);
            mma_f32_via_tf32<true>(cq, a_hi, a_lo, b_hi, b_lo);
        }
        // Element e: t = 16 mt + g + 8 (e / 2), s = 8 nt + 2 t4 + e % 2.
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int t = 16 * mt + gq + 8 * (e >> 1), sj = 8 * nt + 2 * t4 + (e & 1);
            if (kparts > 1) {
                scratch[((2 * kp) * C + t) * C + sj] = ca[e];
                scratch[((2 * kp + 1) * C + t) * C + sj] = cq[e];
            } else if (sj <= t) {
                s.A[t * (C + 1) + sj] = sj < t ? s.Beta[t] * ca[e] : 0.0f;
                s.Aqk[t * (C + 1) + sj] = cq[e];
            }
        }
    }
    if (kparts == 1) return;
    __syncthreads();
    for (int e = tid; e < C * C; e += nthreads) {
        const int t = e / C, sj = e % C;
        if (sj > t) continue;
        float a = 0, aq = 0;
        for (int kp = 0; kp < kparts; ++kp) {
            a += scratch[(2 * kp * C + t) * C + sj];
            aq += scratch[((2 * kp + 1) * C + t) * C + sj];
        }
        s.A[t * (C + 1) + sj] = sj < t ? s.Beta[t] * a : 0.0f;
        s.Aqk[t * (C + 1) + sj] = aq;
    }
}

// Chunk [c0, c0 + nc) of head h's rows (value columns j0 .. j0 + J) into shared memory: k, q, g,
// v and beta, zeros past nc; the pairwise flag cleared. No barrier: finish_chunk starts with one.
template <int D, int C, int LD>
__device__ void load_chunk_rows(const ChunkSmem& s, const float* __restrict__ q, const float* __restrict__ k,
                                const float* __restrict__ v, const float* __restrict__ g,
                                const float* __restrict__ beta, int64_t c0, int nc, int64_t h, int64_t H, int64_t j0,
                                int J) {
    const int nthreads = int(blockDim.x), tid = int(threadIdx.x);
    const int64_t di = H * D;
    for (int e = tid; e < C * D; e += nthreads) {
        const int t = e / D, i = e % D;
        const int64_t src = (c0 + t) * di + h * D + i;
        const bool live = t < nc;
        s.K[t * LD + i] = live ? k[src] : 0.0f;
        s.Q[t * LD + i] = live ? q[src] : 0.0f;
        s.G[t * LD + i] = live ? g[src] : 0.0f;
    }
    for (int e = tid; e < C * J; e += nthreads) {
        const int t = e / J, c = e % J;
        s.U[t * s.ldu + c] = t < nc ? v[(c0 + t) * di + h * D + j0 + c] : 0.0f;
    }
    // (A loop: kda_chunked_mma's block of one warp has fewer threads than C = 64.)
    for (int t = tid; t < C; t += nthreads) s.Beta[t] = t < nc ? beta[(c0 + t) * H + h] : 0.0f;
    if (tid == 0) *s.Slow = 0.0f;
}

// The same rows read one chunk ahead into registers, for the tensor-core kernels: a block reads
// its chunk's rows from global memory and can do nothing else until they arrive (some hundreds of
// cycles, once a chunk), so those kernels issue the next chunk's loads as soon as this chunk's
// rows are stored, so that they can arrive while it computes (not measured). On where the
// registers allow it: a block of one slice (J = D value columns, 2 D threads) at D <= 128 and
// C = 16, 32 floats a thread (ptxas, sm_90, D = 128, C = 16: 236 registers for 3xTF32 and 236 for
// f16x3 with it, no spills; at C = 32 its 64 floats took f16x3 to 255 and spilled). Thread tid
// holds key index (and value column) tid % D of tokens tid / D + 2 m.
template <int D, int C>
struct ChunkAhead {
    static constexpr bool kOn = D <= 128 && C == 16;
    static constexpr int kRows = C / 2;
    float k[kRows], q[kRows], g[kRows], v[kRows], beta;

    // Whether the calling block takes this path (uniform over the block).
    __device__ static bool on() { return kOn && int(blockDim.x) == 2 * D; }

    __device__ void load(const float* __restrict__ qg, const float* __restrict__ kg, const float* __restrict__ vg,
                         const float* __restrict__ gg, const float* __restrict__ bg, int64_t c0, int nc, int64_t h,
                         int64_t H) {
        const int tid = int(threadIdx.x), i = tid % D, t0 = tid / D;
        const int64_t di = H * D;
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
            const int t = t0 + 2 * m;
            const int64_t src = (c0 + t) * di + h * D + i;
            const bool live = t < nc;
            k[m] = live ? kg[src] : 0.0f;
            q[m] = live ? qg[src] : 0.0f;
            g[m] = live ? gg[src] : 0.0f;
            v[m] = live ? vg[src] : 0.0f;
        }
        beta = tid < nc ? bg[(c0 + tid) * H + h] : 0.0f;   // (tid < 2 D; only tid < C is stored)
    }
    __device__ void store(const ChunkSmem& s, int LD) const {
        const int tid = int(threadIdx.x), i = tid % D, t0 = tid / D;
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
            const int t = t0 + 2 * m;
            s.K[t * LD + i] = k[m], s.Q[t * LD + i] = q[m], s.G[t * LD + i] = g[m];
            s.U[t * s.ldu + i] = v[m];
        }
        if (tid < C) s.Beta[tid] = beta;
        if (tid == 0) *s.Slow = 0.0f;
    }
};

// After the rows are stored (by any thread): the running log-decay, G_L, the factoring decision,
// and the C x C products. Every thread of the block calls it, and it ends after a barrier.
// Rows nc .. C - 1 of K, Q, G and U, and Beta there, are zero, so a kernel may run whole C-row
// tiles over a partial chunk. kTensorProducts: a factored chunk's products on the tensor cores
// (chunk_products_tf32, which says what scratch must hold); otherwise on FMAs (chunk_products),
// and scratch is unused.
template <int D, int C, int LD, bool kTensorProducts>
__device__ void finish_chunk(const ChunkSmem& s, int nc, float* scratch) {
    const int nthreads = int(blockDim.x), tid = int(threadIdx.x);
    __syncthreads();
    // The running sum over t, 16 tokens at a time through registers, so that a block's 16 loads
    // can go out together, where a load-add-store a token waits out shared memory's latency at
    // every token.
    // Rows nc .. C - 1 hold zeros and add nothing (and stay zero: only rows < nc are written).
    for (int i = tid; i < D; i += nthreads) {
        float acc = 0, lo = 0, hi = 0;   // lo, hi: G's range (g <= 0 in KDA, but do not rely on it)
        for (int t0 = 0; t0 < nc; t0 += 16) {
            float run[16];
#pragma unroll
            for (int t = 0; t < 16; ++t) run[t] = t0 + t < C ? s.G[(t0 + t) * LD + i] : 0.0f;
#pragma unroll
            for (int t = 0; t < 16; ++t) {
                acc += run[t];
                run[t] = acc;
                lo = fminf(lo, acc);
                hi = fmaxf(hi, acc);
            }
#pragma unroll
            for (int t = 0; t < 16; ++t)
                if (t0 + t < nc) s.G[(t0 + t) * LD + i] = run[t];
        }
        s.GL[i] = acc;
        // Used only when the chunk factors: exp(-G_L) by chunk_products, exp(-G_L / 2) by
        // chunk_products_tf32 (its header says why).
        s.RGL[i] = expf(kTensorProducts ? -0.5f * acc : -acc);
        // Factored when G spans at most kMaxFactoredDecay (G starts at 0, so lo <= 0 <= hi): both
        // factors exp(G_t) and exp(-G_s) are then within e^80, whichever way G moves.
        if (hi - lo > kMaxFactoredDecay) *s.Slow = 1.0f;   // all writers write 1
    }
    __syncthreads();

    // ---- the C x C products (pairwise exps when the chunk decays too much to factor) ----
    const bool pairwise = *s.Slow != 0.0f;
    if (pairwise) {
        chunk_products<D, C, LD, false>(s.K, s.Q, s.G, s.RGL, s.Beta, s.A, s.Aqk, nc, nthreads / 4);
        __syncthreads();
    }
    // ---- in place: exp(G_t) q_t, exp(G_t) k_t, and exp(G_L - G_s) k_s over G (rows < nc) ----
    for (int e = tid; e < nc * D; e += nthreads) {
        const int i = e % D, at = (e / D) * LD + i;
        const float G = s.G[at], eg = expf(G), kk = s.K[at];
        s.Q[at] *= eg;
        s.K[at] = kk * eg;
        s.G[at] = kk * expf(s.GL[i] - G);
    }
    __syncthreads();
    if (!pairwise) {
        if constexpr (kTensorProducts) chunk_products_tf32<D, C, LD>(s, scratch);
        else chunk_products<D, C, LD, true>(s.K, s.Q, s.G, s.RGL, s.Beta, s.A, s.Aqk, nc, nthreads / 4);
        __syncthreads();
    }
}

// Stages chunk [c0, c0 + nc) of head h (value columns j0 .. j0 + J): its rows, then finish_chunk.
template <int D, int C, int LD>
__device__ void stage_chunk(const ChunkSmem& s, const float* __restrict__ q, const float* __restrict__ k,
                            const float* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                            int64_t c0, int nc, int64_t h, int64_t H, int64_t j0, int J) {
    load_chunk_rows<D, C, LD>(s, q, k, v, g, beta, c0, nc, h, H, j0, J);
    finish_chunk<D, C, LD, false>(s, nc, nullptr);
}

// The tensor-core kernels' staging of chunk c0 of n tokens, with the C x C products on the tensor
// cores (scratch: chunk_products_tf32's); returns the chunk's token count. Where ahead is on,
// chunk c0's rows come from it (read there now when c0 is the first), and the next chunk's loads
// are issued before anything else.
template <int D, int C, int LD>
__device__ int stage_chunk_tc(const ChunkSmem& s, ChunkAhead<D, C>& ahead, const float* __restrict__ q,
                               const float* __restrict__ k, const float* __restrict__ v, const float* __restrict__ g,
                               const float* __restrict__ beta, int64_t c0, int64_t n, int64_t h, int64_t H,
                               int64_t j0, int J, float* scratch) {
    const int nc = int(n - c0 < C ? n - c0 : C);
    if constexpr (ChunkAhead<D, C>::kOn) {
        if (ChunkAhead<D, C>::on()) {
            if (c0 == 0) ahead.load(q, k, v, g, beta, 0, nc, h, H);
            ahead.store(s, LD);
            const int64_t c1 = c0 + C;
            if (c1 < n) ahead.load(q, k, v, g, beta, c1, int(n - c1 < C ? n - c1 : C), h, H);
            finish_chunk<D, C, LD, true>(s, nc, scratch);
            return nc;
        }
    }
    load_chunk_rows<D, C, LD>(s, q, k, v, g, beta, c0, nc, h, H, j0, J);
    finish_chunk<D, C, LD, true>(s, nc, scratch);
    return nc;
}

// kda_chunked_mma.cu's entry, which kda_chunked (kernels.h) calls for math tf32x3 / tf32 (TF32
// products, split or single) and f16x3 / f16 (fp16 ones, kda_chunked_mma_f16.cuh), with the chunk
// resolved; slices 0 takes its default.
void kda_chunked_mma(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                     float* o, int64_t n, int64_t H, int64_t D, void* stream, F32Math math, int chunk, int slices);

}  // namespace kinfer::cuda::KINFER_CUDA_NS
