// The warp's fp32 tensor-core product on TF32 operands: D = A B + C with A 16 x 8, B 8 x 8 and
// C / D 16 x 8 fp32, each operand element a TF32 value (fp32 with 10 mantissa bits) held in the
// bits of a 32-bit register. On the GPU, PTX's mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32
// (sm_80 on); everywhere, the same product from a warp gather (mma_tf32_plain, mma_gather.cuh):
// what the CPU execution mode runs, and a reference a GPU check can hold the tensor cores to.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k8", .tf32), with g = lane / 4, t = lane % 4:
//   A: a[0] (row g, k t)  a[1] (row g + 8, k t)  a[2] (row g, k t + 4)  a[3] (row g + 8, k t + 4)
//   B: b[0] (k t, column g)  b[1] (k t + 4, column g)
//   C, D: c[0], c[1] row g, columns 2t, 2t + 1;  c[2], c[3] row g + 8, the same columns
// The k index is summed over, so a caller may give logical k positions any physical meaning as
// long as A and B agree (kda_chunked_mma.cu feeds an accumulator back in as an A operand that way).
//
// One TF32 product keeps 11 significant bits of each operand (a relative error up to 2^-11 each).
// The three-term split (tf32_split, "3xTF32") recovers fp32 accuracy: x = hi + lo with hi and lo
// both TF32, and a b ~ a_hi b_hi + a_hi b_lo + a_lo b_hi, off by a_lo b_lo and lo's own rounding,
// about 2^-21 of |a b|: three tensor-core products in place of one.
#pragma once
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/compat.h"
#include "backend/cuda/mma_gather.cuh"

#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// x rounded to TF32, nearest with ties away from zero (cvt.rna.tf32.f32), in a 32-bit register
// whose 13 low bits are zero. Infinities and NaNs pass unchanged.
__device__ __forceinline__ uint32_t tf32_round(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return r;
#else
    const uint32_t u = __float_as_uint(x);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;   // half an ulp of the kept bits onto the magnitude, then cut
#endif
}

// x = hi + lo, both TF32; x - hi is exact in fp32 (it has at most 13 significant bits).
__device__ __forceinline__ void tf32_split(float x, uint32_t& hi, uint32_t& lo) {
    hi = tf32_round(x);
    lo = tf32_round(x - __uint_as_float(hi));
}

// An fp32 operand for mma_f32_via_tf32: its split (kSplit), or its TF32 rounding alone (lo 0).
template <bool kSplit>
__device__ __forceinline__ void tf32_operand(float x, uint32_t& hi, uint32_t& lo) {
    if constexpr (kSplit) tf32_split(x, hi, lo);
    else hi = tf32_round(x), lo = 0;
}

// Fragment loads from fp32 arrays (shared or global memory) as TF32 operands, each given its
// tile's origin (row 0, k 0) and the distance between rows in floats:
//   tf32_frag_a       A from rows of A (k contiguous);
//   tf32_frag_b_rows  B from rows that each hold one column of B (k contiguous: B^T row-major);
//   tf32_frag_b_cols  B from rows that each hold one k of B (B row-major).
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_a(uint32_t (&hi)[4], uint32_t (&lo)[4], const float* A, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const float* p = A + g * ld + t;
    tf32_operand<kSplit>(p[0], hi[0], lo[0]);
    tf32_operand<kSplit>(p[8 * ld], hi[1], lo[1]);
    tf32_operand<kSplit>(p[4], hi[2], lo[2]);
    tf32_operand<kSplit>(p[8 * ld + 4], hi[3], lo[3]);
}
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_b_rows(uint32_t (&hi)[2], uint32_t (&lo)[2], const float* Bt, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const float* p = Bt + g * ld + t;
    tf32_operand<kSplit>(p[0], hi[0], lo[0]);
    tf32_operand<kSplit>(p[4], hi[1], lo[1]);
}
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_b_cols(uint32_t (&hi)[2], uint32_t (&lo)[2], const float* B, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const float* p = B + t * ld + g;
    tf32_operand<kSplit>(p[0], hi[0], lo[0]);
    tf32_operand<kSplit>(p[4 * ld], hi[1], lo[1]);
}

// Two adjacent floats in one 8-byte load (p 8-byte aligned: an even index into rows of an even
// number of floats).
__device__ __forceinline__ void load_pair(const float* p, float& a, float& b) {
    const uint2 w = load_aligned<uint2>(reinterpret_cast<const uint8_t*>(p));
    a = __uint_as_float(w.x), b = __uint_as_float(w.y);
}

// The same fragments with logical k t standing for physical k 2t and k t + 4 for 2t + 1 (any
// order of k is a valid product when A and B take the same one): a row's two values are adjacent,
// one 8-byte load. Each takes a pointer to row 0, k 0 of its 8 k; ld even, and with ld = 8 mod 32
// a half-warp's loads hit 32 distinct banks. A second gain: an accumulator tile c (columns 2t,
// 2t + 1) is, as it stands, the A fragment of these k positions (tf32_frag_a_from_c), so a
// product's output can be the next product's A without a trip through shared memory.
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_a_pairs(uint32_t (&hi)[4], uint32_t (&lo)[4], const float* A, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    float v0, v1, v8, v9;
    load_pair(A + g * ld + 2 * t, v0, v1);
    load_pair(A + (g + 8) * ld + 2 * t, v8, v9);
    tf32_operand<kSplit>(v0, hi[0], lo[0]);
    tf32_operand<kSplit>(v8, hi[1], lo[1]);
    tf32_operand<kSplit>(v1, hi[2], lo[2]);
    tf32_operand<kSplit>(v9, hi[3], lo[3]);
}
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_b_row_pairs(uint32_t (&hi)[2], uint32_t (&lo)[2], const float* Bt, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    float v0, v1;
    load_pair(Bt + g * ld + 2 * t, v0, v1);
    tf32_operand<kSplit>(v0, hi[0], lo[0]);
    tf32_operand<kSplit>(v1, hi[1], lo[1]);
}
// B from rows that each hold one k of B (B row-major), k rows 2t and 2t + 1: two 4-byte loads
// (with ld = 4 mod 32 they hit 32 distinct banks).
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_b_col_pairs(uint32_t (&hi)[2], uint32_t (&lo)[2], const float* B, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const float* p = B + 2 * t * ld + g;
    tf32_operand<kSplit>(p[0], hi[0], lo[0]);
    tf32_operand<kSplit>(p[ld], hi[1], lo[1]);
}
// An accumulator tile as the A fragment of the paired k order: c[0] (row g, column 2t) is logical
// k t, c[1] (row g, 2t + 1) k t + 4, and c[2], c[3] the same for row g + 8.
template <bool kSplit>
__device__ __forceinline__ void tf32_frag_a_from_c(uint32_t (&hi)[4], uint32_t (&lo)[4], const float (&c)[4]) {
    tf32_operand<kSplit>(c[0], hi[0], lo[0]);
    tf32_operand<kSplit>(c[2], hi[1], lo[1]);
    tf32_operand<kSplit>(c[1], hi[2], lo[2]);
    tf32_operand<kSplit>(c[3], hi[3], lo[3]);
}

// The plain form: each lane gathers rows g and g + 8 of A and columns 2t and 2t + 1 of B from the
// lanes that hold them (mma_gather.cuh: 16 shuffles on a GPU, both k halves of a source lane in
// one 64-bit word) and adds the eight products to its outputs in k order. The tensor cores read
// only an operand's TF32 bits, so the low 13 bits are cut here too; the products of two TF32
// values are exact in fp32. Every lane takes part.
__device__ __forceinline__ void mma_tf32_plain(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    constexpr uint32_t kKeep = 0xffffe000u;
    const MmaGather w = mma_gather(uint64_t(a[0] & kKeep) | uint64_t(a[2] & kKeep) << 32,
                                   uint64_t(a[1] & kKeep) | uint64_t(a[3] & kKeep) << 32,
                                   uint64_t(b[0] & kKeep) | uint64_t(b[1] & kKeep) << 32);
    float A0[8], A8[8], B0[8], B1[8];   // rows g, g + 8 of A; columns 2t, 2t + 1 of B; by k
#pragma unroll
    for (int src = 0; src < 4; ++src) {   // the lane of t = src holds k = src and src + 4
        const uint64_t ra = w.a_g[src], ra8 = w.a_g8[src], cb0 = w.b_c0[src], cb1 = w.b_c1[src];
        A0[src] = __uint_as_float(uint32_t(ra)), A0[src + 4] = __uint_as_float(uint32_t(ra >> 32));
        A8[src] = __uint_as_float(uint32_t(ra8)), A8[src + 4] = __uint_as_float(uint32_t(ra8 >> 32));
        B0[src] = __uint_as_float(uint32_t(cb0)), B0[src + 4] = __uint_as_float(uint32_t(cb0 >> 32));
        B1[src] = __uint_as_float(uint32_t(cb1)), B1[src + 4] = __uint_as_float(uint32_t(cb1 >> 32));
    }
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        c[0] = __fadd_rn(c[0], __fmul_rn(A0[k], B0[k]));
        c[1] = __fadd_rn(c[1], __fmul_rn(A0[k], B1[k]));
        c[2] = __fadd_rn(c[2], __fmul_rn(A8[k], B0[k]));
        c[3] = __fadd_rn(c[3], __fmul_rn(A8[k], B1[k]));
    }
}

// c += A B on the tensor cores where there are some, by the plain form otherwise.
__device__ __forceinline__ void mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    mma_tf32_plain(c, a, b);
#endif
}

// c += A B with fp32 operands given as their TF32 splits (kSplit: the three products, small
// terms first) or as TF32 values alone (hi; lo unused).
template <bool kSplit>
__device__ __forceinline__ void mma_f32_via_tf32(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                                 const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
    if constexpr (kSplit) {
        mma_tf32(c, a_lo, b_hi);
        mma_tf32(c, a_hi, b_lo);
    }
    mma_tf32(c, a_hi, b_hi);
}

// c += A B^T over k steps [ks0, ks1) (8 k each): A's 16 rows and Bt's 8 rows, both k-contiguous,
// lda / ldb floats apart (scores: query or head rows against key or cache rows).
template <bool kSplit>
__device__ __forceinline__ void mma_rows_tf32(float (&c)[4], const float* A, int64_t lda, const float* Bt, int64_t ldb,
                                              int ks0, int ks1) {
    for (int ks = ks0; ks < ks1; ++ks) {
        uint32_t a_hi[4], a_lo[4], b_hi[2], b_lo[2];
        tf32_frag_a<kSplit>(a_hi, a_lo, A + 8 * ks, lda);
        tf32_frag_b_rows<kSplit>(b_hi, b_lo, Bt + 8 * ks, ldb);
        mma_f32_via_tf32<kSplit>(c, a_hi, a_lo, b_hi, b_lo);
    }
}
// The online softmax's value update for a warp: acc = diag(r) acc + P V. P holds the 16 rows'
// kK probabilities (k contiguous, ldp apart), V kK rows of values (ldv apart); r is r0 for the
// lane's row g and r8 for g + 8. Accumulator tile a covers value columns col0 + a step .. + 7,
// those that start before n_cols (warp-uniform: every lane stops at the same tile).
template <bool kSplit, int kK, int kTiles>
__device__ __forceinline__ void mma_pv_tf32(float (&acc)[kTiles][4], float r0, float r8, const float* P, int64_t ldp,
                                            const float* V, int64_t ldv, int64_t col0, int64_t step, int64_t n_cols) {
#pragma unroll
    for (int a = 0; a < kTiles; ++a) acc[a][0] *= r0, acc[a][1] *= r0, acc[a][2] *= r8, acc[a][3] *= r8;
#pragma unroll
    for (int ks = 0; ks < kK / 8; ++ks) {
        uint32_t a_hi[4], a_lo[4];
        tf32_frag_a<kSplit>(a_hi, a_lo, P + 8 * ks, ldp);
#pragma unroll   // (acc is indexed by constants only once unrolled: registers, not local memory)
        for (int a = 0; a < kTiles; ++a) {
            const int64_t col = col0 + a * step;
            if (col >= n_cols) break;
            uint32_t b_hi[2], b_lo[2];
            tf32_frag_b_cols<kSplit>(b_hi, b_lo, V + 8 * ks * ldv + col, ldv);
            mma_f32_via_tf32<kSplit>(acc[a], a_hi, a_lo, b_hi, b_lo);
        }
    }
}
// An accumulator tile stored at its origin in a row-major array, ld floats apart.
__device__ __forceinline__ void tf32_store_c(const float (&c)[4], float* C, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    C[g * ld + 2 * t] = c[0], C[g * ld + 2 * t + 1] = c[1];
    C[(g + 8) * ld + 2 * t] = c[2], C[(g + 8) * ld + 2 * t + 1] = c[3];
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
