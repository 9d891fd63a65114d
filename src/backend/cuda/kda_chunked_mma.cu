// The chunked KDA form (kda_chunked.cu's header has the math) with its state products on the
// tensor cores: TF32 mma.sync (mma_tf32.cuh), by default as three-term splits ("3xTF32"), which
// keep fp32 accuracy. Why: per token and head the chunked form does 3 D^2 multiply-adds on the
// state (S0^T exp(G) k, S0^T exp(G) q, and the update), 9.4 M flops a token on a 96-head D = 128
// K3 layer, so the issue's 5 M tokens/s per layer is 47 TFLOPS: about 70 % of an H200's fp32
// CUDA-core peak (67), far past what kda_chunked.cu's FMAs, shuffles and shared loads can issue,
// and a third of what TF32 tensor cores give even at three products each. Not run on a GPU yet:
// kinfer_gpu_check times it beside the fp32 kernel; CudaBackend takes it with KINFER_CUDA_KDA.
// The same kernel on fp16 tensor cores is kda_chunked_mma_f16.cuh, included below; the launchers
// at the end serve both.
//
// Mapping. A block owns a head and J value columns (J = D / slices, a multiple of 16, at most
// 128); warp w owns columns 16w .. 16w + 15 of them and keeps their state rows M[j][i] = S[i][j]
// for every key index i in registers for the whole call, as mma accumulator tiles: tile kappa
// holds M[16w + g (+8)][8 kappa + 2t (+1)] (g = lane / 4, t = lane % 4), D / 2 floats a lane.
// Per chunk, after stage_chunk_tc (kda_chunk.cuh), which also forms the C x C products on 3xTF32
// (chunk_products_tf32, its scratch the q products' array, free until P^T is written back) and,
// at C = 16 in one slice, has the next chunk's rows read into registers while this one computes:
//   P^T = M [exp(G) k ; exp(G) q]^T   M as the A operand straight from the accumulators: the k
//        index i is summed over, so A's logical k position t holds physical column 2t and t + 4
//        holds 2t + 1, and B (a chunk row) is read at the same columns: one 8-byte load a lane.
//   the right-hand sides R: beta_t (v_t - P^T_k[j][t]), and the q products I go to shared memory;
//        U = T R, with T = (I + A)^-1 formed by the last warp before its own P^T (invert_chunk),
//        then O = I + Aqk U: both products on the tensor cores, the warp's own columns
//        (solve_columns, outputs_tc);
//   M = diag(exp(G_L)) M + U^T Z   (Z = exp(G_L - G_s) k_s rows): the accumulators again.
// Only stage_chunk_tc's barriers, one before U (T's readers) and one at the end of
// a chunk are block-wide. Row strides D + 8 and J + 8 floats put a fragment load's 32 lanes in 32
// banks (a couple of 2-way conflicts remain on the right-hand sides' writes, and A / Aqk's C + 1
// gives their fragments some).
//
// Shared memory (floats): K, Q, G rows 3 C (D + 8); U and the q products 2 C (J + 8); A and Aqk
// 2 C (C + 1); G_L, exp(-G_L) 2 D; beta C; a flag. D = 128, J = 128: C = 16 45.7 KiB (under the
// 46 KiB a launch may take without opting in), C = 32 94 KiB, C = 64 204 KiB (opted in).
#include "backend/cuda/kda_chunk.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_tf32.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMmaMaxColumns = 128;   // 8 warps; a lane holds D / 2 state floats (64 at D = 128)

// kda_chunk.cuh's arrays at row strides D + 8 and J + 8, then the q products [C][J + 8].
__host__ __device__ constexpr size_t kda_mma_smem_floats(int D, int C, int J) {
    return chunk_smem_floats(D, C, D + 8, J + 8) + size_t(C * (J + 8));
}

// The A operand (16 x 8, rows j, logical k) for key indices 8 kappa .. 8 kappa + 7 from a state
// accumulator tile (rows j, columns i): logical k = t is column 2t, k = t + 4 column 2t + 1.
template <bool kSplit>
__device__ __forceinline__ void state_as_a(const float (&m)[4], uint32_t (&hi)[4], uint32_t (&lo)[4]) {
    const float x[4] = {m[0], m[2], m[1], m[3]};
#pragma unroll
    for (int e = 0; e < 4; ++e) tf32_operand<kSplit>(x[e], hi[e], lo[e]);
}
template <bool kSplit>
__device__ __forceinline__ void split2(float x0, float x1, uint32_t (&hi)[2], uint32_t (&lo)[2]) {
    tf32_operand<kSplit>(x0, hi[0], lo[0]);
    tf32_operand<kSplit>(x1, hi[1], lo[1]);
}

// The warp's state tiles (the layout in the header) from and to the state: rows0 is its row
// jw + g, rows0 + 8 D row jw + g + 8.
template <int D>
__device__ __forceinline__ void load_state_tiles(float (&m)[D / 8][4], const float* rows0) {
    const int t4 = int(threadIdx.x % 4);
#pragma unroll
    for (int kt = 0; kt < D / 8; ++kt) {
        const int i = 8 * kt + 2 * t4;
        m[kt][0] = rows0[i], m[kt][1] = rows0[i + 1];
        m[kt][2] = rows0[8 * D + i], m[kt][3] = rows0[8 * D + i + 1];
    }
}
template <int D>
__device__ __forceinline__ void store_state_tiles(const float (&m)[D / 8][4], float* rows0) {
    const int t4 = int(threadIdx.x % 4);
#pragma unroll
    for (int kt = 0; kt < D / 8; ++kt) {
        const int i = 8 * kt + 2 * t4;
        rows0[i] = m[kt][0], rows0[i + 1] = m[kt][1];
        rows0[8 * D + i] = m[kt][2], rows0[8 * D + i + 1] = m[kt][3];
    }
}

// Fragments of a 16 x 8 (A) or 8 x 8 (B) tile of a row-major matrix M (ld floats a row) whose
// element (row, column) is taken where keep(row, column) holds and is 0 elsewhere, as 3xTF32
// splits: A at rows t0 .., columns (k) s0 ..; B at rows (k) k0 .., columns n0 ...
template <class Keep>
__device__ __forceinline__ void masked_frag_a(uint32_t (&hi)[4], uint32_t (&lo)[4], const float* M, int ld, int t0,
                                              int s0, Keep keep) {
    const int lane = int(threadIdx.x % 32), g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const int t = t0 + g + 8 * (e & 1), s = s0 + t4 + 4 * (e >> 1);
        tf32_split(keep(t, s) ? M[t * ld + s] : 0.0f, hi[e], lo[e]);
    }
}
template <class Keep>
__device__ __forceinline__ void masked_frag_b(uint32_t (&hi)[2], uint32_t (&lo)[2], const float* M, int ld, int k0,
                                              int n0, Keep keep) {
    const int lane = int(threadIdx.x % 32), g = lane / 4, t4 = lane % 4;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
        const int k = k0 + t4 + 4 * e, n = n0 + g;
        tf32_split(keep(k, n) ? M[k * ld + n] : 0.0f, hi[e], lo[e]);
    }
}

// The A fragment of a lower-triangular matrix (Aqk; T) at rows t0, columns s0: M[t][s] where
// s <= t, 0 above the diagonal, where nothing is written (whatever the shared memory holds there,
// a NaN say, would reach the row's sum even times a zero u). Rows from nc on may hold an earlier
// chunk's values: they reach only their own rows of the product, which are not stored.
__device__ __forceinline__ void lower_frag(uint32_t (&hi)[4], uint32_t (&lo)[4], const float* M, int ld, int t0, int s0) {
    masked_frag_a(hi, lo, M, ld, t0, s0, [](int t, int s) { return s <= t; });
}

// The warp's outputs, o_t = (q products_t + sum_{s<=t} Aqk[t][s] u_s) * scale for its 16 columns
// (jw ..), on the tensor cores: O = I + Aqk U, with m tiles of 16 tokens t, n tiles of 8 columns
// and k the tokens s <= t, always as 3xTF32 splits (fp32-class, whatever the kernel's own form:
// they are few products, and the rounding of single TF32 would be added to every output). Token
// t's column 0 at o + t di. Why not per column on FMAs, as before: each lane then summed up to C
// terms for each of C / 2 tokens, two shared loads a term (Aqk's a broadcast, u's its column's),
// some 150 loads a lane a chunk at C = 16 against 24 here (fragments and I), and about 2 K against
// some 200 at C = 64.
// U's rows past nc are zero and lower_frag masks what is above the diagonal, so whole tiles are summed.
__device__ __forceinline__ void outputs_tc(int C, const float* sU, const float* sI, const float* sAqk, int LU, int nc,
                                           float* o, int64_t di, float scale) {
    const int lane = int(threadIdx.x % 32), jw = 16 * int(threadIdx.x / 32), g = lane / 4, t4 = lane % 4;
    for (int t0 = 0; t0 < nc; t0 += 16) {   // (uniform over the warp)
        float acc[2][4];
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)   // element e: token t0 + g + 8 (e / 2), column jw + 8 nt + 2 t4 + e % 2
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int t = t0 + g + 8 * (e >> 1), col = jw + 8 * nt + 2 * t4 + (e & 1);
                acc[nt][e] = t < nc ? sI[t * LU + col] : 0.0f;
            }
        for (int s0 = 0; s0 < t0 + 16; s0 += 8) {
            uint32_t a_hi[4], a_lo[4];
            lower_frag(a_hi, a_lo, sAqk, C + 1, t0, s0);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                uint32_t b_hi[2], b_lo[2];
                tf32_frag_b_cols<true>(b_hi, b_lo, sU + s0 * LU + jw + 8 * nt, LU);
                mma_f32_via_tf32<true>(acc[nt], a_hi, a_lo, b_hi, b_lo);
            }
        }
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int t = t0 + g + 8 * (e >> 1), col = jw + 8 * nt + 2 * t4 + (e & 1);
                if (t < nc) o[t * di + col] = acc[nt][e] * scale;
            }
    }
}

// The inverse's off-diagonal block of two n x n diagonal blocks already inverted, n = 16 or 32:
// with T_00 at (c0, c0), T_11 and A_10 below it (rows r0 = c0 + n ..), T_10 = -T_11 (A_10 T_00),
// on the tensor cores (3xTF32), written over A_10. W = A_10 T_00 first, an m tile (16 rows) at a
// time, each written over the rows of A_10 it alone read; then T_10 from the last m tile to the
// first, each written over the rows of W it alone still needs (tile mt reads W's rows up to
// 16 mt + 15). A_10's rows from nc on are masked out of W, a B operand of the second product (a
// NaN there would reach every row); T_11's rows from nc on reach only their own rows of T_10.
// Nothing to do when no row of the lower block is used (nc <= r0: uniform over the warp).
template <int ld, int n>
__device__ __forceinline__ void inverse_off_diagonal(float* sA, int c0, int nc) {
    const int r0 = c0 + n;
    if (nc <= r0) return;
    float* const a10 = sA + r0 * ld + c0;
    const float* const t00 = sA + c0 * ld + c0;
    const float* const t11 = sA + r0 * ld + r0;
    __syncwarp();   // T_00 and T_11 written
#pragma unroll
    for (int mt = 0; mt < n / 16; ++mt) {   // W's rows 16 mt .. 16 mt + 15
        float w[n / 8][4] = {};
#pragma unroll
        for (int ks = 0; ks < n / 8; ++ks) {   // T_00 is lower triangular: n tile nt needs k >= 8 nt
            uint32_t a_hi[4], a_lo[4];
            masked_frag_a(a_hi, a_lo, a10, ld, 16 * mt, 8 * ks, [nc, r0](int t, int) { return r0 + t < nc; });
#pragma unroll
            for (int nt = 0; nt <= ks; ++nt) {
                uint32_t b_hi[2], b_lo[2];
                masked_frag_b(b_hi, b_lo, t00, ld, 8 * ks, 8 * nt, [](int k, int col) { return col <= k; });
                mma_f32_via_tf32<true>(w[nt], a_hi, a_lo, b_hi, b_lo);
            }
        }
        __syncwarp();   // these rows of A_10 read by every lane before W replaces them
#pragma unroll
        for (int nt = 0; nt < n / 8; ++nt) tf32_store_c(w[nt], a10 + 16 * mt * ld + 8 * nt, ld);
    }
    __syncwarp();   // W written
#pragma unroll
    for (int mt = n / 16 - 1; mt >= 0; --mt) {   // T_10's rows 16 mt .. 16 mt + 15
        float t10[n / 8][4] = {};
#pragma unroll
        for (int ks = 0; ks < 2 * mt + 2; ++ks) {   // T_11's row tile mt is 0 past column 16 mt + 15
            uint32_t a_hi[4], a_lo[4];
            lower_frag(a_hi, a_lo, t11, ld, 16 * mt, 8 * ks);
#pragma unroll
            for (int nt = 0; nt < n / 8; ++nt) {
                uint32_t b_hi[2], b_lo[2];
                tf32_frag_b_cols<true>(b_hi, b_lo, a10 + 8 * ks * ld + 8 * nt, ld);
                mma_f32_via_tf32<true>(t10[nt], a_hi, a_lo, b_hi, b_lo);
            }
        }
        __syncwarp();   // these rows of W read by every lane before T_10 replaces them
#pragma unroll
        for (int nt = 0; nt < n / 8; ++nt) {
            const float neg[4] = {-t10[nt][0], -t10[nt][1], -t10[nt][2], -t10[nt][3]};
            tf32_store_c(neg, a10 + 16 * mt * ld + 8 * nt, ld);
        }
    }
}

// T = (I + A)^-1 (A strictly lower triangular, so T is unit lower triangular: the UT form's
// inverse), which makes the forward substitution u_t = rhs_t - sum_{s<t} A[t][s] u_s a product,
// U = T R (solve_columns). It is formed once a chunk by one warp where every warp used to run the
// substitution's chain for its own columns: C - 1 dependent steps, each reading its row of A, a
// broadcast shared load a term (about 120 loads a lane a chunk at C = 16, 8 warps of them, some
// 500 at C = 32 and 2 K at C = 64, where a shuffle joined each step's two halves too). T is
// written over A's lower triangle and diagonal by the block's last warp (the others return at
// once); its readers need a block barrier. First each 16 x 16 diagonal block of
// T, (I + A_bb)^-1, two blocks at a time: lane c of a block holds column c and eliminates by the
// columns of A_bb in turn (x_t -= A[t][s] x_s for s < t, s ascending): steps for different rows
// are independent, so the chain is 15 multiply-adds deep, and every A load is a broadcast that does
// not wait on it. Then the off-diagonal blocks, doubling the inverted blocks' size: at C = 32 one
// 16 x 16 block (inverse_off_diagonal); at C = 64 two 16 x 16 blocks, then the 32 x 32 one below
// the first 32 rows. Each block of A is read whole before it is overwritten. T's rows from nc on
// come from whatever A's rows there hold (pairwise chunks form only nc rows): row t of T depends
// on A's rows up to t only, and reaches only row t of U, which is not stored.
template <int C>
__device__ __forceinline__ void invert_chunk(float* sA, int nc) {
    static_assert(C == 16 || C == 32 || C == 64, "16 x 16 diagonal blocks, one to four");
    constexpr int ld = C + 1, kBlocks = C / 16;
    if (int(threadIdx.x / 32) != int(blockDim.x / 32) - 1) return;
    const int lane = int(threadIdx.x % 32), c = lane % 16;
#pragma unroll
    for (int b0 = 0; b0 < kBlocks; b0 += 2) {
        const int b = b0 + lane / 16;                      // the lane's block (C = 16: lanes 16 .. 31 have none)
        const int o = 16 * (b < kBlocks ? b : b0);         // its origin (those lanes read block b0's A and store nothing)
        float x[16];
#pragma unroll
        for (int t = 0; t < 16; ++t) x[t] = t == c ? 1.0f : 0.0f;
#pragma unroll
        for (int s = 0; s < 15; ++s) {
            if (o + s + 1 >= nc) break;
#pragma unroll
            for (int t = s + 1; t < 16; ++t) x[t] = fmaf(-sA[(o + t) * ld + o + s], x[s], x[t]);
        }
        __syncwarp();   // every lane has read its block of A before any of it is overwritten
        if (b < kBlocks) {
#pragma unroll
            for (int t = 0; t < 16; ++t)
                if (c <= t) sA[(o + t) * ld + o + c] = x[t];
        }
    }
    if constexpr (C >= 32) inverse_off_diagonal<ld, 16>(sA, 0, nc);
    if constexpr (C == 64) {
        inverse_off_diagonal<ld, 16>(sA, 32, nc);
        inverse_off_diagonal<ld, 32>(sA, 0, nc);
    }
}

// Per column of the warp (its 16 columns jw ..), with U's rows holding the right-hand sides and
// sI the q products, each warp's own columns: U = T R (sA holds T, invert_chunk's), then the
// outputs (outputs_tc). Every thread of the block calls it; it starts with the block barrier
// T needs and ends with U written and the warp's lanes past it.
// U = T R is a 3xTF32 product of the warp's columns, from the last m tile to the first, each
// written over the rows of R it alone still needs (tile mt reads R's rows up to 16 mt + 15).
// Its error is fp32-class, about 2.7 times the substitution's on random chunks in a numpy model of
// the CPU mode's arithmetic at C <= 32 (T's unit diagonal goes through the split, 2^-22 of |r|;
// C = 64's second level of off-diagonal products is not modelled: test_kda_chunked's figures at
// C = 64 stayed in the substitution's order). Starting the
// accumulators from R with T's strict lower triangle in the product keeps that diagonal exact,
// but modelled worse (up to 10x the substitution's): every term is then rounded to the ulp of |r|.
template <int C>
__device__ __forceinline__ void solve_columns(float* sU, const float* sI, const float* sA, const float* sAqk, int LU,
                                              int nc, float* o, int64_t di, float scale) {
    const int lane = int(threadIdx.x % 32), jw = 16 * int(threadIdx.x / 32);
    const int g = lane / 4, t4 = lane % 4;
    __syncthreads();   // T (the last warp's) and every warp's right-hand sides
#pragma unroll
    for (int mt = C / 16 - 1; mt >= 0; --mt) {
        if (16 * mt >= nc) continue;   // (uniform) rows that are not stored
        float acc[2][4] = {};
#pragma unroll
        for (int s0 = 0; s0 < 16 * mt + 16; s0 += 8) {
            uint32_t a_hi[4], a_lo[4];
            lower_frag(a_hi, a_lo, sA, C + 1, 16 * mt, s0);
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                uint32_t b_hi[2], b_lo[2];
                tf32_frag_b_cols<true>(b_hi, b_lo, sU + s0 * LU + jw + 8 * nt, LU);
                mma_f32_via_tf32<true>(acc[nt], a_hi, a_lo, b_hi, b_lo);
            }
        }
        __syncwarp();   // these rows of R read by every lane before U replaces them (as mma.sync waits too)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {   // element e: token 16 mt + g + 8 (e / 2), column jw + 8 nt + 2 t4 + e % 2
                const int t = 16 * mt + g + 8 * (e >> 1);
                if (t < nc) sU[t * LU + jw + 8 * nt + 2 * t4 + (e & 1)] = acc[nt][e];
            }
    }
    __syncwarp();   // the whole U (the warp's columns) is written before it is read across lanes
    outputs_tc(C, sU, sI, sAqk, LU, nc, o, di, scale);
}

template <int D, int C, bool kSplit>
__global__ void __launch_bounds__(2 * kMmaMaxColumns)
    kda_chunked_mma_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                           const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ state,
                           float* __restrict__ o, int64_t n, int64_t H) {
    constexpr int LD = D + 8, kTiles = D / 8, kTokTiles = C / 8;
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int gq = lane / 4, t4 = lane % 4;
    const int J = int(blockDim.x) / 2, LU = J + 8;   // 16 columns a warp
    const int jw = 16 * warp;                        // the warp's first column in the block
    const int64_t h = blockIdx.x, j0 = int64_t(blockIdx.y) * J;
    const int64_t di = H * D;

    // kda_chunk.cuh's layout (k, q, G rows [C][LD], v / u [C][LU], ...), then the q products
    // (S0^T exp(G_t) q_t) [C][LU].
    KINFER_DYNAMIC_SHARED(float, smem);
    const ChunkSmem chunk = chunk_smem(smem, D, C, LD, LU);
    const float *const sK = chunk.K, *const sQ = chunk.Q, *const sG = chunk.G;
    const float *const sA = chunk.A, *const sAqk = chunk.Aqk, *const sGL = chunk.GL, *const sBeta = chunk.Beta;
    float* const sU = chunk.U;
    float* const sI = smem + chunk_smem_floats(D, C, LD, LU);

    // The warp's state rows as accumulator tiles (the layout in the header).
    float* rows0 = state + (h * D + j0 + jw + gq) * D;   // row j = jw + g; rows0 + 8 D is row j + 8
    float m[kTiles][4];
    load_state_tiles<D>(m, rows0);

    const float scale = 1.0f / sqrtf(float(D));
    ChunkAhead<D, C> ahead;   // the next chunk's rows, in flight while this one computes (kda_chunk.cuh)
    for (int64_t c0 = 0; c0 < n; c0 += C) {
        const int nc = stage_chunk_tc<D, C, LD>(chunk, ahead, q, k, v, g, beta, c0, n, h, H, j0, J, sI);
        invert_chunk<C>(chunk.A, nc);   // (the last warp; read after the barrier below)

        // ---- P^T = M [exp(G) k ; exp(G) q]^T: 16 columns x 2C tokens a warp ----
        float pk[kTokTiles][4], pq[kTokTiles][4];
#pragma unroll
        for (int nt = 0; nt < kTokTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) pk[nt][e] = pq[nt][e] = 0.0f;
#pragma unroll
        for (int kt = 0; kt < kTiles; ++kt) {
            uint32_t a_hi[4], a_lo[4];
            state_as_a<kSplit>(m[kt], a_hi, a_lo);
            const int i = 8 * kt + 2 * t4;
#pragma unroll
            for (int nt = 0; nt < kTokTiles; ++nt) {
                const int row = (8 * nt + gq) * LD + i;   // token 8 nt + g, key columns i, i + 1
                uint32_t b_hi[2], b_lo[2];
                split2<kSplit>(sK[row], sK[row + 1], b_hi, b_lo);
                mma_f32_via_tf32<kSplit>(pk[nt], a_hi, a_lo, b_hi, b_lo);
                split2<kSplit>(sQ[row], sQ[row + 1], b_hi, b_lo);
                mma_f32_via_tf32<kSplit>(pq[nt], a_hi, a_lo, b_hi, b_lo);
            }
        }
        // Tile element e: column jw + g + 8 (e / 2), token 8 nt + 2t + e % 2.
#pragma unroll
        for (int nt = 0; nt < kTokTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int t = 8 * nt + 2 * t4 + (e & 1), at = t * LU + jw + gq + 8 * (e >> 1);
                if (t < nc) {
                    sU[at] = sBeta[t] * (sU[at] - pk[nt][e]);
                    sI[at] = pq[nt][e];
                }
            }
        // ---- U = T R; then the outputs, O = I + Aqk U ----
        solve_columns<C>(sU, sI, sA, sAqk, LU, nc, o + c0 * di + h * D + j0, di, scale);

        // ---- M = diag(exp(G_L)) M + U^T Z: the accumulators, k = the chunk's tokens ----
#pragma unroll
        for (int kt = 0; kt < kTiles; ++kt) {
            const int i = 8 * kt + 2 * t4;
            const float e0 = expf(sGL[i]), e1 = expf(sGL[i + 1]);
            m[kt][0] *= e0, m[kt][1] *= e1, m[kt][2] *= e0, m[kt][3] *= e1;
        }
#pragma unroll
        for (int st = 0; st < kTokTiles; ++st) {
            // A = U^T: rows j (jw + g, + 8), k = tokens 8 st + t, + 4 (rows nc .. C - 1 of U are 0).
            const float* u0 = sU + (8 * st + t4) * LU + jw + gq;
            const float* u4 = u0 + 4 * LU;
            uint32_t a_hi[4], a_lo[4];
            const float x[4] = {u0[0], u0[8], u4[0], u4[8]};
#pragma unroll
            for (int e = 0; e < 4; ++e) tf32_operand<kSplit>(x[e], a_hi[e], a_lo[e]);
#pragma unroll
            for (int kt = 0; kt < kTiles; ++kt) {   // B = Z: k = the token, column = the key index
                uint32_t b_hi[2], b_lo[2];
                tf32_frag_b_cols<kSplit>(b_hi, b_lo, sG + 8 * st * LD + 8 * kt, LD);
                mma_f32_via_tf32<kSplit>(m[kt], a_hi, a_lo, b_hi, b_lo);
            }
        }
        __syncthreads();   // the next chunk's loads overwrite what the other warps still read
    }
    store_state_tiles<D>(m, rows0);
}

}  // namespace

}  // namespace kinfer::cuda::KINFER_CUDA_NS

#include "backend/cuda/kda_chunked_mma_f16.cuh"

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

// The shared memory of either product's kernel (kF16: kda_chunked_mma_f16.cuh's).
template <bool kF16>
constexpr size_t kda_tc_smem_floats(int D, int C, int J) {
    return kF16 ? kda_f16_smem_floats(D, C, J) : kda_mma_smem_floats(D, C, J);
}

template <int D, int C, bool kF16, bool kSplit>
void launch_kda_mma(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                    float* o, int64_t n, int64_t H, int slices, void* stream) {
    const int J = D / slices;
    const size_t bytes = kda_tc_smem_floats<kF16>(D, C, J) * sizeof(float);
    if (bytes > kDynamicOptInMax)
        throw std::invalid_argument("cuda kda_chunked_mma: chunk " + std::to_string(C) + " at head dim " +
                                    std::to_string(D) + " needs " + std::to_string(bytes) + " bytes of shared memory");
    auto* kern = [] {   // (a ternary would compile both kernels at every shape, the unlaunchable ones too)
        if constexpr (kF16) return &kda_chunked_mma_f16_kernel<D, C, kSplit>;
        else return &kda_chunked_mma_kernel<D, C, kSplit>;
    }();
    // Past 48 KiB a kernel must opt in, on each device, so at every launch (kda_chunked.cu's reason).
    if (bytes > kDynamicNoOptIn) (void)cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
    const dim3 grid{unsigned(H), unsigned(slices)}, block{unsigned(2 * J)};
    KINFER_LAUNCH(kern, grid, block, bytes, as_stream(stream), q, k, v, g, beta, state, o, n, H);
}

template <int D, bool kF16, bool kSplit>
void launch_mma_chunk(int C, const float* q, const float* k, const float* v, const float* g, const float* beta,
                      float* state, float* o, int64_t n, int64_t H, int slices, void* stream) {
    switch (C) {
        case 16: return launch_kda_mma<D, 16, kF16, kSplit>(q, k, v, g, beta, state, o, n, H, slices, stream);
        case 32: return launch_kda_mma<D, 32, kF16, kSplit>(q, k, v, g, beta, state, o, n, H, slices, stream);
        case 64:
            if constexpr (kda_tc_smem_floats<kF16>(D, 64, D < kMmaMaxColumns ? D : kMmaMaxColumns) * 4 <= kDynamicOptInMax)
                return launch_kda_mma<D, 64, kF16, kSplit>(q, k, v, g, beta, state, o, n, H, slices, stream);
            break;
        default: break;
    }
    throw std::invalid_argument("cuda kda_chunked_mma: chunk " + std::to_string(C) + " at head dim " +
                                std::to_string(D) + " is not 16, 32 or 64 (64 only up to head dim " +
                                (kF16 ? "64 on fp16" : "128") + ")");
}

template <bool kF16, bool kSplit>
void dispatch_mma(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                  float* o, int64_t n, int64_t H, int64_t D, void* stream, int chunk, int slices) {
    switch (D) {
        case 32: return launch_mma_chunk<32, kF16, kSplit>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        case 64: return launch_mma_chunk<64, kF16, kSplit>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        case 128: return launch_mma_chunk<128, kF16, kSplit>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        case 256: return launch_mma_chunk<256, kF16, kSplit>(chunk, q, k, v, g, beta, state, o, n, H, slices, stream);
        default: break;
    }
    throw std::invalid_argument("cuda kda_chunked_mma: head dim " + std::to_string(D) + " is not 32, 64, 128 or 256");
}

// mma_tf32_check's warp: A B four ways, each stored by mma_tf32.cuh's layout of C into a 16 x 8
// row-major matrix of out (the kernels.h comment lists them).
__global__ void __launch_bounds__(32) mma_tf32_check_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                            float* __restrict__ out) {
    const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
    uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2], a[4], b[2], unused4[4], unused2[2];
    tf32_frag_a<true>(a_hi, a_lo, A, 8);
    tf32_frag_b_rows<true>(b_hi, b_lo, B, 8);
    tf32_frag_a<false>(a, unused4, A, 8);
    tf32_frag_b_rows<false>(b, unused2, B, 8);
    float c[4][4] = {};
    mma_tf32(c[0], a, b);
    mma_tf32_plain(c[1], a, b);
    mma_f32_via_tf32<true>(c[2], a_hi, a_lo, b_hi, b_lo);
    mma_tf32_plain(c[3], a_lo, b_hi);
    mma_tf32_plain(c[3], a_hi, b_lo);
    mma_tf32_plain(c[3], a_hi, b_hi);
    for (int f = 0; f < 4; ++f)
        for (int e = 0; e < 4; ++e) out[128 * f + 8 * (g + 8 * (e / 2)) + 2 * t + e % 2] = c[f][e];
}

}  // namespace

void mma_tf32_check(const float* A, const float* B, float* out, void* stream) {
    auto* kernel = &mma_tf32_check_kernel;
    KINFER_LAUNCH(kernel, dim3(1), dim3(32), 0, as_stream(stream), A, B, out);
}

void kda_chunked_mma(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                     float* o, int64_t n, int64_t H, int64_t D, void* stream, F32Math math, int chunk, int slices) {
    if (n <= 0 || H <= 0) return;
    if (slices == 0) slices = D > kMmaMaxColumns ? int(D / kMmaMaxColumns) : 1;
    if (slices < 1 || D % slices != 0 || (D / slices) % 16 != 0 || D / slices > kMmaMaxColumns)
        throw std::invalid_argument("cuda kda_chunked_mma: " + std::to_string(slices) +
                                    " value slices do not split head dim " + std::to_string(D) +
                                    " into multiples of 16 of at most 128");
    switch (math) {
        case F32Math::tf32x3: return dispatch_mma<false, true>(q, k, v, g, beta, state, o, n, H, D, stream, chunk, slices);
        case F32Math::tf32: return dispatch_mma<false, false>(q, k, v, g, beta, state, o, n, H, D, stream, chunk, slices);
        case F32Math::f16x3: return dispatch_mma<true, true>(q, k, v, g, beta, state, o, n, H, D, stream, chunk, slices);
        case F32Math::f16: return dispatch_mma<true, false>(q, k, v, g, beta, state, o, n, H, D, stream, chunk, slices);
        default: break;
    }
    throw std::invalid_argument("cuda kda_chunked_mma: not a tensor-core form of the KDA (tf32x3, tf32, f16x3 or f16)");
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
