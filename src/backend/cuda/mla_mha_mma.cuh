// mla_mha.cu's flash kernel with its two products on TF32 tensor cores (mma_tf32.cuh): for 16
// queries of one head and one block of expanded keys, scores = q . k and acc += p . v as mma.sync
// m16n8k8, on operands split into 3xTF32 (fp32 accuracy) or rounded once (kSplit false). Why: a
// prefill chunk of n queries over n_kv keys costs H n n_kv (dk + dv) multiply-adds (K3: 20 K per
// query-key pair), so a long prompt's attention is compute-bound, and the fp32 CUDA cores give
// a fraction of what the tensor cores do. Included by mla_mha.cu, which launches it where
// MlaMhaArgs::math asks (CudaBackend: KINFER_CUDA_MLA); same workspace, state and finish pass.
//
// Block: 4 warps, the 16 queries as the m dimension of both products, tiles of 16 keys.
//   scores [16 x 16]: warp w takes keys 8 (w % 2) .. + 7 and half the k steps (w / 2), both
//     halves added in shared memory;
//   softmax: warp w keeps queries 4w .. 4w + 3's running max and sum, lane j key j (causal mask);
//   acc [16 x dv]: warp w owns the 8-column tiles w, w + 4, ... (dv <= 256: at most 8 a warp),
//     loaded from the workspace's state at the start and stored back at the end.
// Shared memory (floats): q and the key tile 2 x 16 x (dkp + 4) (dkp: dk rounded up to 8), the
// value tile 16 x (dv rounded up to 32, + 8), scores 2 x 16 x 20, probabilities 16 x 20, rescale
// 16; the paddings put a fragment load's lanes in distinct banks. K3 (dk 192, dv 128): 37 KiB.
#pragma once
#include "backend/cuda/mma_tf32.cuh"
#include "backend/cuda/reduce.cuh"

#include <cmath>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

// The online softmax state of every (query, head) between key blocks, in the workspace; and, where
// the keys were expanded on fp16 tensor cores from weight rows scaled by powers of two (mla_mha.cu),
// the factors that undo it: on q_nope as the queries are staged (k_nope row h dn + d came out
// 2^e times too large, so q's element d takes 2^-e), and on the outputs (each value dim's).
struct FlashState {
    float* m;     // [n][H] running max of the scaled scores
    float* l;     // [n][H] running sum of e^(s - m)
    float* acc;   // [n][H][dv] running sum of e^(s - m) v
    const float* k_unscale = nullptr;   // [H][dn], or none
    const float* v_unscale = nullptr;   // [H][dv], or none
};
// Query element d of head h as a flash kernel stages it: times the softmax scale, and for k_nope's
// dims times the expansion's unscale factor (exact: a power of two).
__device__ __forceinline__ float flash_query(const float* q, const FlashState& st, int64_t t, int64_t h, int64_t H,
                                             int64_t dn, int64_t dk, int64_t d, float scale) {
    const float x = q[(t * H + h) * dk + d] * scale;
    return st.k_unscale && d < dn ? x * st.k_unscale[h * dn + d] : x;
}

constexpr int kFlashMmaQ = 16, kFlashMmaK = 16, kFlashMmaThreads = 128, kFlashMmaLdP = 20;
constexpr int64_t kFlashMmaMaxDv = 256;   // 8 accumulator tiles a warp

__host__ __device__ inline int64_t flash_mma_ldk(int64_t dk) { return (dk + 7) / 8 * 8 + 4; }
__host__ __device__ inline int64_t flash_mma_ldv(int64_t dv) { return (dv + 31) / 32 * 32 + 8; }
inline size_t flash_mma_smem_bytes(int64_t dk, int64_t dv) {
    return sizeof(float) * size_t(2 * kFlashMmaQ * flash_mma_ldk(dk) + kFlashMmaK * flash_mma_ldv(dv) +
                                  3 * kFlashMmaQ * kFlashMmaLdP + kFlashMmaQ);
}

// Keys [b0, b0 + bn) of one block, as mha_flash_kernel (mla_mha.cu) takes them.
template <bool kSplit>
__global__ void __launch_bounds__(kFlashMmaThreads)
    mha_flash_mma_kernel(const float* __restrict__ q, const float* __restrict__ kn, const float* __restrict__ lat,
                         const float* __restrict__ vv, FlashState st, int64_t n, int64_t pos0, int64_t H, int64_t r,
                         int64_t R, int64_t dn, int64_t dr, int64_t dv, float scale, int64_t b0, int64_t bn, int first) {
    const int64_t dk = dn + dr, ldk = flash_mma_ldk(dk), dkp = ldk - 4, ldv = flash_mma_ldv(dv);
    KINFER_DYNAMIC_SHARED(float, smem);
    float* qs = smem;                              // [16][ldk] scaled queries (zero past dk and n)
    float* ks = qs + kFlashMmaQ * ldk;             // [16][ldk] the key tile
    float* vs = ks + kFlashMmaK * ldk;             // [16][ldv] the value tile
    float* sS = vs + kFlashMmaK * ldv;             // [2][16][kFlashMmaLdP] partial scores, by k half
    float* sP = sS + 2 * kFlashMmaQ * kFlashMmaLdP;   // [16][kFlashMmaLdP] e^(s - m)
    float* sC = sP + kFlashMmaQ * kFlashMmaLdP;       // [16] e^(m_old - m_new)
    const int64_t t0 = int64_t(blockIdx.x) * kFlashMmaQ, h = blockIdx.y;
    const int nq = int(n - t0 < kFlashMmaQ ? n - t0 : kFlashMmaQ);
    const int64_t qpos0 = pos0 + t0;
    const int64_t k_end = b0 + bn < qpos0 + nq ? b0 + bn : qpos0 + nq;
    if (k_end <= b0) return;                       // every query of the tile comes before the block
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, gq = lane / 4, t4 = lane % 4;

    for (int64_t p = tid; p < kFlashMmaQ * dkp; p += kFlashMmaThreads) {
        const int64_t i = p / dkp, d = p % dkp;
        qs[i * ldk + d] = i < nq && d < dk ? flash_query(q, st, t0 + i, h, H, dn, dk, d, scale) : 0.0f;
    }
    // This warp's queries' softmax state, and its accumulator tiles (8-column tile warp + 4 a).
    float m[4], l[4];
    for (int a = 0; a < 4; ++a) {
        const int i = 4 * warp + a;
        const bool live = !first && i < nq;
        m[a] = live ? st.m[(t0 + i) * H + h] : -INFINITY;
        l[a] = live ? st.l[(t0 + i) * H + h] : 0.0f;
    }
    // Element e of tile a in the workspace's accumulators (query row g or g + 8, value column
    // 8 (warp + 4 a) + 2 t4 (+1)), or -1 past the tile's queries or dv.
    auto state_at = [&](int a, int e) -> int64_t {
        const int i = gq + 8 * (e / 2);
        const int64_t d = 8 * (warp + 4 * a) + 2 * t4 + e % 2;
        return i < nq && d < dv ? ((t0 + i) * H + h) * dv + d : -1;
    };
    float acc[kFlashMmaMaxDv / 32][4];
#pragma unroll
    for (int a = 0; a < kFlashMmaMaxDv / 32; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int64_t at = first ? -1 : state_at(a, e);
            acc[a][e] = at >= 0 ? st.acc[at] : 0.0f;
        }
    const int ksteps = int(dkp / 8), kh = warp / 2, ks0 = kh ? ksteps / 2 : 0, ks1 = kh ? ksteps : ksteps / 2;
    const int nkey = 8 * (warp % 2);               // this warp's score keys

    for (int64_t k0 = b0; k0 < k_end; k0 += kFlashMmaK) {
        const int nk = int(k_end - k0 < kFlashMmaK ? k_end - k0 : kFlashMmaK);
        __syncthreads();                           // the previous tile's readers are done (and qs is written)
        for (int64_t p = tid; p < kFlashMmaK * dkp; p += kFlashMmaThreads) {
            const int64_t j = p / dkp, d = p % dkp, kb = k0 - b0 + j;
            ks[j * ldk + d] = j >= nk || d >= dk ? 0.0f : d < dn ? kn[(kb * H + h) * dn + d] : lat[kb * R + r + (d - dn)];
        }
        for (int64_t p = tid; p < kFlashMmaK * dv; p += kFlashMmaThreads) {
            const int64_t j = p / dv, a = p % dv;
            vs[j * ldv + a] = j < nk ? vv[((k0 - b0 + j) * H + h) * dv + a] : 0.0f;
        }
        __syncthreads();

        // ---- scores: A = queries, B[k][n] = ks[n][k]; half the k steps this warp ----
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_rows_tf32<kSplit>(c, qs, ldk, ks + nkey * ldk, ldk, ks0, ks1);
        tf32_store_c(c, sS + kh * kFlashMmaQ * kFlashMmaLdP + nkey, kFlashMmaLdP);
        __syncthreads();

        // ---- online softmax: warp w's four queries, lane j key j; a key after the query is -inf ----
        for (int a = 0; a < 4; ++a) {
            const int i = 4 * warp + a;
            const bool seen = i < nq && lane < nk && k0 + lane <= qpos0 + i;
            const float s = seen ? sS[i * kFlashMmaLdP + lane] + sS[(kFlashMmaQ + i) * kFlashMmaLdP + lane] : -INFINITY;
            float cr;
            const float p = online_softmax_step(s, m[a], l[a], cr);
            if (lane < kFlashMmaK) sP[i * kFlashMmaLdP + lane] = p;
            if (lane == 0) sC[i] = cr;
        }
        __syncthreads();

        // ---- acc = diag(c) acc + P V: A = P (queries x keys), B[k][n] = vs[k][n] ----
        mma_pv_tf32<kSplit, kFlashMmaK>(acc, sC[gq], sC[gq + 8], sP, kFlashMmaLdP, vs, ldv, 8 * warp, 32, dv);
    }
#pragma unroll
    for (int a = 0; a < kFlashMmaMaxDv / 32; ++a)
#pragma unroll
        for (int e = 0; e < 4; ++e)
            if (const int64_t at = state_at(a, e); at >= 0) st.acc[at] = acc[a][e];
    if (lane == 0)
        for (int a = 0; a < 4; ++a)
            if (4 * warp + a < nq) {
                st.m[(t0 + 4 * warp + a) * H + h] = m[a];
                st.l[(t0 + 4 * warp + a) * H + h] = l[a];
            }
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS
