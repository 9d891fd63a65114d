// mla_mha.cu's flash kernel with its two products on TF32 tensor cores (mma_tf32.cuh), laid out
// as FlashAttention-2 lays it out: each warp owns 16 queries of one head, scores = q . k for a
// tile of 32 keys and acc += p . v as mma.sync m16n8k8 on operands split into 3xTF32 (fp32
// accuracy) or rounded once (kSplit false), the online softmax in registers, and the
// probabilities fed from the score accumulators straight into the second product (the paired k
// order, mma_tf32.cuh). Why: a prefill chunk of n queries over n_kv keys costs H n n_kv (dk + dv)
// multiply-adds (K3: 20 K per query-key pair), so a long prompt's attention is compute-bound
// on the fp32 CUDA cores; on the tensor cores, what a block reads per multiply-add decides: each
// key tile (dk + dv floats a key) serves the block's 16 W queries, so up to 4 warps (64 queries)
// read a quarter of what a 16-query block reads for the same products. Included by mla_mha.cu,
// which launches it where MlaMhaArgs::math asks (CudaBackend: KINFER_CUDA_MLA); same workspace,
// state and finish pass as the fp32 kernel.
//
// Block: W warps (1 to 4: as many 16-query groups as the chunk has, so a short chunk does not pay
// for empty ones), warp w the queries 16 w .. + 15 of the block's 16 W.
//   scores [16 x 32] a warp: four 8-key accumulator tiles over dk / 8 k steps; lane (g, t) holds
//     rows g and g + 8, keys 8 j + 2t and + 1 of tile j;
//   softmax: a row's max and sum over its quad of lanes (two xor shuffles), the running max and sum
//     kept in all four lanes;
//   acc [16 x dv] a warp: dv / 8 tiles in registers (kVTiles: 16 for dv <= 128, 32 for dv <= 256),
//     loaded from the workspace's state at the start and stored back at the end.
// A warp whose queries all come before a key tile skips it (its state would not change); the
// block's barriers stay outside that test.
// Shared memory (floats): the block's queries 16 W x ldk and one key tile 32 x ldk (ldk: dk
// rounded up to 32, + 8, so the 8-byte fragment loads of a half-warp hit 32 banks), the value
// tile 32 x ldv (dv rounded up to 32, + 4: rows 2t and 2t + 1 at column g, 32 banks). K3 (dk 192,
// dv 128) with 4 warps: 91.5 KiB, so two blocks an SM on sm_90 (227 KiB a block at most, 228 an SM;
// one on sm_80's 164).
#pragma once
#include "backend/cuda/mma_tf32.cuh"

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

constexpr int kFlashMmaRows = 16;      // queries a warp (the mma's m)
constexpr int kFlashMmaKeys = 32;      // keys a tile
constexpr int kFlashMmaMaxWarps = 4;
constexpr int64_t kFlashMmaMaxDv = 256;   // 32 accumulator tiles a warp

__host__ __device__ inline int64_t flash_mma_ldk(int64_t dk) { return (dk + 31) / 32 * 32 + 8; }
__host__ __device__ inline int64_t flash_mma_ldv(int64_t dv) { return (dv + 31) / 32 * 32 + 4; }
// Warps a block for a chunk of n queries: one per 16, at most kFlashMmaMaxWarps.
inline int flash_mma_warps(int64_t n) {
    return int(n >= kFlashMmaMaxWarps * kFlashMmaRows ? kFlashMmaMaxWarps : (n + kFlashMmaRows - 1) / kFlashMmaRows);
}
inline size_t flash_mma_smem_bytes(int64_t dk, int64_t dv, int warps) {
    return sizeof(float) *
           size_t((warps * kFlashMmaRows + kFlashMmaKeys) * flash_mma_ldk(dk) + kFlashMmaKeys * flash_mma_ldv(dv));
}

// A lane's rows of the workspace's state, both tensor-core flash kernels': the block's query row
// (g of its warp; + 8 the other half) of head h, the block's queries from t0, nq of them. load sets
// the running max and sum and the accumulator tiles (query rows g, g + 8, value columns 8 a + 2 t4
// and + 1) from the workspace st, or to -inf and zeros for the first key block and past nq; store
// writes them back (m and l from one lane of the quad), nothing past nq or dv.
struct FlashRows {
    int row, nq;
    int64_t t0, h, H, dv;

    // The workspace index of accumulator element e of tile a, or -1 past the queries or dv.
    __device__ int64_t at(int a, int e) const {
        const int i = row + 8 * (e / 2);
        const int64_t d = 8 * a + 2 * int(threadIdx.x % 4) + e % 2;
        return i < nq && d < dv ? ((t0 + i) * H + h) * dv + d : -1;
    }
    template <int kVTiles>
    __device__ __forceinline__ void load(const FlashState& st, float (&m)[2], float (&l)[2], float (&acc)[kVTiles][4],
                                         int first) const {
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = row + 8 * half;
            const bool live = !first && i < nq;
            m[half] = live ? st.m[(t0 + i) * H + h] : -INFINITY;
            l[half] = live ? st.l[(t0 + i) * H + h] : 0.0f;
        }
#pragma unroll
        for (int a = 0; a < kVTiles; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int64_t k = first ? -1 : at(a, e);
                acc[a][e] = k >= 0 ? st.acc[k] : 0.0f;
            }
    }
    template <int kVTiles>
    __device__ __forceinline__ void store(const FlashState& st, const float (&m)[2], const float (&l)[2],
                                          const float (&acc)[kVTiles][4]) const {
#pragma unroll
        for (int a = 0; a < kVTiles; ++a)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                if (const int64_t k = at(a, e); k >= 0) st.acc[k] = acc[a][e];
        if (threadIdx.x % 4 == 0)
#pragma unroll
            for (int half = 0; half < 2; ++half)
                if (const int i = row + 8 * half; i < nq) {
                    st.m[(t0 + i) * H + h] = m[half];
                    st.l[(t0 + i) * H + h] = l[half];
                }
    }
};

// One key tile's online softmax for a warp's rows, both tensor-core flash kernels': s holds the
// scores of the lane's rows (row: the block's query index of row g; half 1 is row + 8) as four
// 8-key accumulator tiles (keys 8 j + 2 t4 and + 1 in elements 2 half and 2 half + 1). A key past
// the tile's nk, or after the row's query (position qpos0 + row), or a row past nq is -inf. The
// rows' running max m and sum l (the same in the quad's four lanes) advance, s becomes
// e^(s - m_new) and rescale e^(m_old - m_new) (0 while the row has seen nothing).
__device__ __forceinline__ void flash_tile_softmax(float (&s)[kFlashMmaKeys / 8][4], float (&m)[2], float (&l)[2],
                                                   float (&rescale)[2], int row, int nq, int64_t qpos0, int64_t k0,
                                                   int nk) {
    const int t4 = int(threadIdx.x % 4);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
        const int64_t qpos = qpos0 + row + 8 * half;
        const bool row_live = row + 8 * half < nq;
        float mx = -INFINITY;
#pragma unroll
        for (int j = 0; j < kFlashMmaKeys / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const int key = 8 * j + 2 * t4 + e;
                float& x = s[j][2 * half + e];
                if (!row_live || key >= nk || k0 + key > qpos) x = -INFINITY;
                mx = fmaxf(mx, x);
            }
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(kFullMask, mx, 2));
        const float mn = fmaxf(m[half], mx);
        const float safe = mn == -INFINITY ? 0.0f : mn;   // nothing seen yet: e^-inf = 0 below
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < kFlashMmaKeys / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                float& x = s[j][2 * half + e];
                x = expf(x - safe);
                sum += x;
            }
        sum += __shfl_xor_sync(kFullMask, sum, 1);
        sum += __shfl_xor_sync(kFullMask, sum, 2);
        rescale[half] = expf(m[half] - safe);
        l[half] = l[half] * rescale[half] + sum;
        m[half] = mn;
    }
}

// Where the keys a warp's queries may see end: the queries are w0 .. w0 + 15 of the block's nq at
// positions from qpos0, the key block's usable keys end at k_end. b0 (so that the warp skips every
// tile) when the warp has no query. Both tensor-core flash kernels' warps.
__device__ __forceinline__ int64_t flash_warp_key_end(int w0, int nq, int64_t qpos0, int64_t k_end, int64_t b0) {
    const int wn = nq - w0 < 0 ? 0 : nq - w0 < kFlashMmaRows ? nq - w0 : kFlashMmaRows;
    return wn == 0 ? b0 : k_end < qpos0 + w0 + wn ? k_end : qpos0 + w0 + wn;
}

// Keys [b0, b0 + bn) of one block, as mha_flash_kernel (mla_mha.cu) takes them; blockDim.x is 32
// times the warps, the block's queries 16 a warp from 16 W blockIdx.x.
template <bool kSplit, int kVTiles>
__global__ void __launch_bounds__(kFlashMmaMaxWarps * 32)
    mha_flash_mma_kernel(const float* __restrict__ q, const float* __restrict__ kn, const float* __restrict__ lat,
                         const float* __restrict__ vv, FlashState st, int64_t n, int64_t pos0, int64_t H, int64_t r,
                         int64_t R, int64_t dn, int64_t dr, int64_t dv, float scale, int64_t b0, int64_t bn, int first) {
    const int64_t dk = dn + dr, ldk = flash_mma_ldk(dk), dkp = (dk + 7) / 8 * 8, ldv = flash_mma_ldv(dv);
    const int64_t dvp = (dv + 7) / 8 * 8;          // value columns staged (whole accumulator tiles)
    const int bq = int(blockDim.x / 32) * kFlashMmaRows;
    KINFER_DYNAMIC_SHARED(float, smem);
    float* qs = smem;                              // [bq][ldk] scaled queries (zero past dk and n)
    float* ks = qs + bq * ldk;                     // [32][ldk] the key tile (zero past dk and the keys)
    float* vs = ks + kFlashMmaKeys * ldk;          // [32][ldv] the value tile (zero past dv and the keys)
    const int64_t t0 = int64_t(blockIdx.x) * bq, h = blockIdx.y;
    const int nq = int(n - t0 < bq ? n - t0 : bq);
    const int64_t qpos0 = pos0 + t0;
    const int64_t k_end = b0 + bn < qpos0 + nq ? b0 + bn : qpos0 + nq;
    if (k_end <= b0) return;                       // every query of the block comes before the key block
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, g = lane / 4;

    for (int64_t p = tid; p < bq * dkp; p += blockDim.x) {
        const int64_t i = p / dkp, d = p % dkp;
        qs[i * ldk + d] = i < nq && d < dk ? flash_query(q, st, t0 + i, h, H, dn, dk, d, scale) : 0.0f;
    }
    // This warp's rows: queries w0 + g (half 0) and w0 + g + 8 (half 1); the keys they may see end
    // at w_end (b0 when the warp has no query, so that it skips every tile).
    const int w0 = warp * kFlashMmaRows;
    const int64_t w_end = flash_warp_key_end(w0, nq, qpos0, k_end, b0);
    const FlashRows rows{w0 + g, nq, t0, h, H, dv};
    float m[2], l[2], acc[kVTiles][4];
    rows.load(st, m, l, acc, first);
    const int ksteps = int(dkp / 8);

    for (int64_t k0 = b0; k0 < k_end; k0 += kFlashMmaKeys) {
        const int nk = int(k_end - k0 < kFlashMmaKeys ? k_end - k0 : kFlashMmaKeys);
        __syncthreads();                           // the previous tile's readers are done (and qs is written)
        for (int64_t p = tid; p < kFlashMmaKeys * dkp; p += blockDim.x) {
            const int64_t j = p / dkp, d = p % dkp, kb = k0 - b0 + j;
            ks[j * ldk + d] = j >= nk || d >= dk ? 0.0f : d < dn ? kn[(kb * H + h) * dn + d] : lat[kb * R + r + (d - dn)];
        }
        for (int64_t p = tid; p < kFlashMmaKeys * dvp; p += blockDim.x) {
            const int64_t j = p / dvp, a = p % dvp;
            vs[j * ldv + a] = j < nk && a < dv ? vv[((k0 - b0 + j) * H + h) * dv + a] : 0.0f;
        }
        __syncthreads();
        if (k0 >= w_end) continue;                 // (warp-uniform) no query of this warp sees these keys
        const int ktiles = (nk + 7) / 8;           // 8-key tiles holding a key

        // ---- scores: A = this warp's queries, B[k][n] = ks[n][k], both in the paired k order ----
        float s[kFlashMmaKeys / 8][4] = {};
        for (int kstep = 0; kstep < ksteps; ++kstep) {
            uint32_t a_hi[4], a_lo[4];
            tf32_frag_a_pairs<kSplit>(a_hi, a_lo, qs + w0 * ldk + 8 * kstep, ldk);
#pragma unroll
            for (int j = 0; j < kFlashMmaKeys / 8; ++j) {
                if (j >= ktiles) break;
                uint32_t b_hi[2], b_lo[2];
                tf32_frag_b_row_pairs<kSplit>(b_hi, b_lo, ks + 8 * j * ldk + 8 * kstep, ldk);
                mma_f32_via_tf32<kSplit>(s[j], a_hi, a_lo, b_hi, b_lo);
            }
        }

        // ---- online softmax per row ----
        float rescale[2];
        flash_tile_softmax(s, m, l, rescale, w0 + g, nq, qpos0, k0, nk);

        // ---- acc = diag(rescale) acc + P V: A = the probabilities as they lie, B[k][n] = vs[k][n] ----
#pragma unroll
        for (int a = 0; a < kVTiles; ++a)
            acc[a][0] *= rescale[0], acc[a][1] *= rescale[0], acc[a][2] *= rescale[1], acc[a][3] *= rescale[1];
#pragma unroll
        for (int j = 0; j < kFlashMmaKeys / 8; ++j) {
            if (j >= ktiles) break;
            uint32_t a_hi[4], a_lo[4];
            tf32_frag_a_from_c<kSplit>(a_hi, a_lo, s[j]);
#pragma unroll   // (acc is indexed by constants only once unrolled: registers, not local memory)
            for (int a = 0; a < kVTiles; ++a) {
                if (8 * a >= dv) break;
                uint32_t b_hi[2], b_lo[2];
                tf32_frag_b_col_pairs<kSplit>(b_hi, b_lo, vs + 8 * j * ldv + 8 * a, ldv);
                mma_f32_via_tf32<kSplit>(acc[a], a_hi, a_lo, b_hi, b_lo);
            }
        }
    }
    rows.store(st, m, l, acc);
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS
