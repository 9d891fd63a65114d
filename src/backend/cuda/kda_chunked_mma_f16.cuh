// The chunked KDA with its state products on fp16 tensor cores (mma.sync m16n8k16, mma_f16.cuh),
// included by kda_chunked_mma.cu, whose TF32 kernel this follows step for step: the same block,
// warps, state tiles, staging, inverse (U = T R) and outputs. Taken with KINFER_CUDA_KDA=f16x3 (both
// operands of each product split into two fp16 parts, three products: fp32-class, as 3xTF32) or
// f16 (each rounded to fp16 once, one product: about 2^-11 of each term, as single TF32).
//
// Why: an fp16 product covers 16 k a step where TF32's covers 8, at the same rate a step (an
// H200: 989 TFLOPS dense fp16, 494 TF32), so three fp16 products a k16 step cost half of 3xTF32's
// six m16n8k8 ones. Where kda_chunked_mma.cu's three state products are what limits it (47 TFLOPS
// of them at the issue's 5 M tokens/s per 96-head layer), this form halves that time. Not run
// on a GPU: kinfer_gpu_check times it beside the others.
//
// fp16's range is 2^-24 .. 65504, so every operand is scaled by a power of two (exact) into it
// before its split, along an index the product does not sum over, and the result scaled back:
//   P^T = M [exp(G) k ; exp(G) q]^T:  M's rows (value columns j) from the registers, each by the
//        power that puts its largest |M[j][i]| in [2^14, 2^15) (f16_scale_exponent); the chunk
//        rows (tokens t) likewise, each its own power, in split_chunk_f16 below. P^T[j][t] is
//        then scaled back by both powers.
//   M = diag(exp(G_L)) M + U^T Z:  U^T's rows (j) by their powers, Z's columns (key index i) by
//        theirs; each 16 x 8 tile of U^T Z is summed from zero (the tokens are k) and added to the
//        decayed M, so M itself is never scaled.
// A result is scaled back by the sum of its two exponents at once (ldexpf: one rounding, as fp32
// would give it), not by two inverses in turn, whose intermediate could leave fp32's range.
// The error is normwise: elements far below their row's largest keep fewer bits (fp16's
// subnormals below 2^-14), about 2^-24 / 2^14 of that row's largest |x| each, so a product
// carried by elements 2^24 below their rows' largest is only 2e-6 of its sum |a b| (3xTF32: 4e-9).
// In the KDA the small elements are the fast-decaying channels, small in both operands. That
// holds while G falls inside a chunk (g <= 0, as every model's gate): a G that rises makes u_t
// large where Z's row is small and the reverse, and the update loses those terms
// (test_kda_chunked's rising case runs the fp32 forms only).
//
// Layout beyond kda_chunked_mma.cu's:
//   K and Q rows, in place after stage_chunk_tc: the fp32 pair (2p, 2p + 1) of a row becomes one 8-byte
//     unit, the hi parts' pair then the lo parts' pair, in the same 8 bytes (a warp a row, each
//     lane rewriting only what it read). A B fragment's register is then half of one 8-byte load,
//     and a half-warp's loads (rows g, pairs t, 8 bytes each, rows D + 8 floats apart) hit 32
//     distinct banks.
//   Zt [D][C + 8] words: Z transposed (key-major) and split the same way, token pairs as units, so
//     the update's B fragments (k = tokens) are 8-byte loads too; C + 8 keeps a half-warp's loads
//     in distinct banks. Written a thread a key column, each thread starting at its own token pair
//     (i mod C / 2): a half-warp's 8-byte stores then hit distinct banks (2-way at C = 16), where
//     all starting at pair 0 would be 4-way, and its reads of Z stay conflict-free.
//   exps: 2 C token exponents (k rows, q rows), then D key-index ones (ints).
// Included by kda_chunked_mma.cu after its kMmaMaxColumns and kda_mma_smem_floats.
// D = 128, J = 128: C = 16 58.3 KiB, C = 32 115.1 KiB (both opted in); C = 64 only up to D = 64.
#pragma once
#include "backend/cuda/mma_f16.cuh"
#include "backend/cuda/reduce.cuh"

namespace kinfer::cuda::KINFER_CUDA_NS {

// Zt's offset (floats; even, for its 8-byte units) and the whole layout's size.
__host__ __device__ constexpr size_t kda_f16_zt_offset(int D, int C, int J) { return (kda_mma_smem_floats(D, C, J) + 1) & ~size_t(1); }
__host__ __device__ constexpr size_t kda_f16_smem_floats(int D, int C, int J) {
    return kda_f16_zt_offset(D, C, J) + size_t(D * (C + 8)) + size_t(2 * C + D);
}

// An 8-byte unit of split pairs: (hi pair, lo pair).
__device__ __forceinline__ uint2 f16_unit(const uint32_t* p) { return load_aligned<uint2>(reinterpret_cast<const uint8_t*>(p)); }
__device__ __forceinline__ void f16_store_unit(uint32_t* p, uint32_t hi, uint32_t lo) {
    store_aligned<uint2>(reinterpret_cast<uint8_t*>(p), uint2{hi, lo});
}
template <bool kSplit>
__device__ __forceinline__ void f16_split_pair(float x0, float x1, float scale, uint32_t& hi, uint32_t& lo) {
    uint16_t h0, l0, h1, l1;
    f16_operand<kSplit>(x0, scale, h0, l0);
    f16_operand<kSplit>(x1, scale, h1, l1);
    hi = f16_pair(h0, h1), lo = f16_pair(l0, l1);
}

// After stage_chunk_tc: K and Q rows split in place, Z into Zt, their scales' exponents into ex
// (tokens of K, tokens of Q, key indices of Z). Ends after a barrier.
template <int D, int C, int LD, bool kSplit>
__device__ void split_chunk_f16(const ChunkSmem& s, uint32_t* Zt, int* ex) {
    constexpr int LDZ = C + 8, kPairs = (D / 2 + 31) / 32;   // a lane's pairs of a row: lane + 32 m
    const int tid = int(threadIdx.x), lane = tid % 32, nwarps = int(blockDim.x) / 32;
    for (int r = tid / 32; r < 2 * C; r += nwarps) {
        uint32_t* row = reinterpret_cast<uint32_t*>((r < C ? s.K : s.Q) + (r % C) * LD);
        float x[kPairs][2];
        float mx = 0;
#pragma unroll
        for (int m = 0; m < kPairs; ++m) {
            const int p = lane + 32 * m;
            x[m][0] = x[m][1] = 0.0f;
            if (p < D / 2) {   // the pair in one 8-byte load
                const uint2 w = f16_unit(row + 2 * p);
                x[m][0] = __uint_as_float(w.x), x[m][1] = __uint_as_float(w.y);
            }
            mx = fmaxf(mx, fmaxf(fabsf(x[m][0]), fabsf(x[m][1])));
        }
        const int e = f16_scale_exponent(warp_max(mx));
        const float up = ldexpf(1.0f, e);
#pragma unroll
        for (int m = 0; m < kPairs; ++m) {
            uint32_t hi, lo;
            f16_split_pair<kSplit>(x[m][0], x[m][1], up, hi, lo);
            if (lane + 32 * m < D / 2) f16_store_unit(row + 2 * (lane + 32 * m), hi, lo);
        }
        if (lane == 0) ex[r] = e;
    }
    for (int i = tid; i < D; i += int(blockDim.x)) {
        float mx = 0;
        for (int t = 0; t < C; ++t) mx = fmaxf(mx, fabsf(s.G[t * LD + i]));
        const int e = f16_scale_exponent(mx);
        const float up = ldexpf(1.0f, e);
        for (int uu = 0; uu < C / 2; ++uu) {   // token pairs from a place of the thread's own (banks below)
            const int u = (uu + i) % (C / 2);
            uint32_t hi, lo;
            f16_split_pair<kSplit>(s.G[2 * u * LD + i], s.G[(2 * u + 1) * LD + i], up, hi, lo);
            f16_store_unit(Zt + i * LDZ + 2 * u, hi, lo);
        }
        ex[2 * C + i] = e;
    }
    __syncthreads();
}

template <int D, int C, bool kSplit>
__global__ void __launch_bounds__(2 * kMmaMaxColumns)
    kda_chunked_mma_f16_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                               const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ state,
                               float* __restrict__ o, int64_t n, int64_t H) {
    constexpr int LD = D + 8, LDZ = C + 8, kTiles = D / 8, kTokTiles = C / 8, kSteps = C / 16;
    const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32;
    const int gq = lane / 4, t4 = lane % 4;
    const int J = int(blockDim.x) / 2, LU = J + 8;   // 16 columns a warp
    const int jw = 16 * warp;
    const int64_t h = blockIdx.x, j0 = int64_t(blockIdx.y) * J;
    const int64_t di = H * D;

    KINFER_DYNAMIC_SHARED(float, smem);
    const ChunkSmem chunk = chunk_smem(smem, D, C, LD, LU);
    const float *const sA = chunk.A, *const sAqk = chunk.Aqk, *const sGL = chunk.GL, *const sBeta = chunk.Beta;
    const uint32_t* const wK = reinterpret_cast<const uint32_t*>(chunk.K);
    const uint32_t* const wQ = reinterpret_cast<const uint32_t*>(chunk.Q);
    float* const sU = chunk.U;
    float* const sI = smem + chunk_smem_floats(D, C, LD, LU);
    uint32_t* const Zt = reinterpret_cast<uint32_t*>(smem + kda_f16_zt_offset(D, C, J));
    int* const ex = reinterpret_cast<int*>(smem + kda_f16_zt_offset(D, C, J) + D * LDZ);

    float* rows0 = state + (h * D + j0 + jw + gq) * D;   // the state tiles as kda_chunked_mma_kernel's
    float m[kTiles][4];
    load_state_tiles<D>(m, rows0);

    const float scale = 1.0f / sqrtf(float(D));
    ChunkAhead<D, C> ahead;   // the next chunk's rows, in flight while this one computes (kda_chunk.cuh)
    for (int64_t c0 = 0; c0 < n; c0 += C) {
        const int nc = stage_chunk_tc<D, C, LD>(chunk, ahead, q, k, v, g, beta, c0, n, h, H, j0, J, sI);
        split_chunk_f16<D, C, LD, kSplit>(chunk, Zt, ex);
        invert_chunk<C>(chunk.A, nc);   // (the last warp; read after the barrier below)

        // ---- P^T = M [exp(G) k ; exp(G) q]^T, M's rows g and g + 8 scaled by their powers ----
        float mx0 = 0, mx8 = 0;
#pragma unroll
        for (int kt = 0; kt < kTiles; ++kt) {
            mx0 = fmaxf(mx0, fmaxf(fabsf(m[kt][0]), fabsf(m[kt][1])));
            mx8 = fmaxf(mx8, fmaxf(fabsf(m[kt][2]), fabsf(m[kt][3])));
        }
        const int e0 = f16_scale_exponent(group4_max(mx0)), e8 = f16_scale_exponent(group4_max(mx8));
        const float up0 = ldexpf(1.0f, e0), up8 = ldexpf(1.0f, e8);
        float pk[kTokTiles][4], pq[kTokTiles][4];
#pragma unroll
        for (int nt = 0; nt < kTokTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) pk[nt][e] = pq[nt][e] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            // A: rows g / g + 8, k = key indices 16 ks + 2t, + 1 (tile 2 ks) and + 8, + 9 (tile 2 ks + 1).
            uint32_t a_hi[4], a_lo[4];
            f16_split_pair<kSplit>(m[2 * ks][0], m[2 * ks][1], up0, a_hi[0], a_lo[0]);
            f16_split_pair<kSplit>(m[2 * ks][2], m[2 * ks][3], up8, a_hi[1], a_lo[1]);
            f16_split_pair<kSplit>(m[2 * ks + 1][0], m[2 * ks + 1][1], up0, a_hi[2], a_lo[2]);
            f16_split_pair<kSplit>(m[2 * ks + 1][2], m[2 * ks + 1][3], up8, a_hi[3], a_lo[3]);
#pragma unroll
            for (int nt = 0; nt < kTokTiles; ++nt) {
                // B: column = token 8 nt + g, k = key pairs 8 ks + t and 8 ks + 4 + t of its row.
                const int at = (8 * nt + gq) * LD + 2 * (8 * ks + t4);
                const uint2 k0 = f16_unit(wK + at), k1 = f16_unit(wK + at + 8);
                const uint32_t bk_hi[2] = {k0.x, k1.x}, bk_lo[2] = {k0.y, k1.y};
                mma_split_f16<kSplit>(pk[nt], a_hi, a_lo, bk_hi, bk_lo);
                const uint2 q0 = f16_unit(wQ + at), q1 = f16_unit(wQ + at + 8);
                const uint32_t bq_hi[2] = {q0.x, q1.x}, bq_lo[2] = {q0.y, q1.y};
                mma_split_f16<kSplit>(pq[nt], a_hi, a_lo, bq_hi, bq_lo);
            }
        }
        // Tile element e: column jw + g + 8 (e / 2), token 8 nt + 2t + e % 2; both scales undone.
#pragma unroll
        for (int nt = 0; nt < kTokTiles; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int t = 8 * nt + 2 * t4 + (e & 1), at = t * LU + jw + gq + 8 * (e >> 1);
                const int ej = e < 2 ? e0 : e8;
                if (t < nc) {
                    sU[at] = sBeta[t] * (sU[at] - ldexpf(pk[nt][e], -(ej + ex[t])));
                    sI[at] = ldexpf(pq[nt][e], -(ej + ex[C + t]));
                }
            }
        // ---- U and the outputs, as kda_chunked_mma_kernel ----
        solve_columns<C>(sU, sI, sA, sAqk, LU, nc, o + c0 * di + h * D + j0, di, scale);

        // ---- M = diag(exp(G_L)) M + U^T Z, U^T's rows and Z's columns scaled ----
        // Lanes c and c + 16 take column jw + c's largest |u| (each half of the tokens, then both);
        // rows g and g + 8 take theirs.
        float umax = 0;
        for (int t = lane / 16; t < nc; t += 2) umax = fmaxf(umax, fabsf(sU[t * LU + jw + lane % 16]));
        umax = fmaxf(umax, __shfl_xor_sync(kFullMask, umax, 16));
        const int eu = f16_scale_exponent(umax);
        const int eu0 = __shfl_sync(kFullMask, eu, gq), eu8 = __shfl_sync(kFullMask, eu, gq + 8);
        const float uup0 = ldexpf(1.0f, eu0), uup8 = ldexpf(1.0f, eu8);
        // A = U^T: rows j (jw + g, + 8), k = tokens 16 st + 2t, + 1 and + 8, + 9 (rows past nc are 0).
        uint32_t au_hi[kSteps][4], au_lo[kSteps][4];
#pragma unroll
        for (int st = 0; st < kSteps; ++st) {
            const float* u0 = sU + (16 * st + 2 * t4) * LU + jw + gq;   // tokens 2t, 2t + 1: rows LU apart
            const float* u8 = u0 + 8 * LU;
            f16_split_pair<kSplit>(u0[0], u0[LU], uup0, au_hi[st][0], au_lo[st][0]);
            f16_split_pair<kSplit>(u0[8], u0[LU + 8], uup8, au_hi[st][1], au_lo[st][1]);
            f16_split_pair<kSplit>(u8[0], u8[LU], uup0, au_hi[st][2], au_lo[st][2]);
            f16_split_pair<kSplit>(u8[8], u8[LU + 8], uup8, au_hi[st][3], au_lo[st][3]);
        }
#pragma unroll
        for (int kt = 0; kt < kTiles; ++kt) {
            float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int st = 0; st < kSteps; ++st) {   // B = Z: column = key 8 kt + g, k = token pairs
                const uint32_t* z = Zt + (8 * kt + gq) * LDZ + 2 * (8 * st + t4);
                const uint2 z0 = f16_unit(z), z1 = f16_unit(z + 8);
                const uint32_t b_hi[2] = {z0.x, z1.x}, b_lo[2] = {z0.y, z1.y};
                mma_split_f16<kSplit>(c, au_hi[st], au_lo[st], b_hi, b_lo);
            }
            const int i = 8 * kt + 2 * t4;
            const float d0 = expf(sGL[i]), d1 = expf(sGL[i + 1]);
            const int z0 = ex[2 * C + i], z1 = ex[2 * C + i + 1];
            m[kt][0] = fmaf(m[kt][0], d0, ldexpf(c[0], -(eu0 + z0)));
            m[kt][1] = fmaf(m[kt][1], d1, ldexpf(c[1], -(eu0 + z1)));
            m[kt][2] = fmaf(m[kt][2], d0, ldexpf(c[2], -(eu8 + z0)));
            m[kt][3] = fmaf(m[kt][3], d1, ldexpf(c[3], -(eu8 + z1)));
        }
        __syncthreads();   // the next chunk's loads overwrite what the other warps still read
    }
    store_state_tiles<D>(m, rows0);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
