// The warp's fp32 tensor-core product on fp16 operands: D = A B + C with A 16 x 16 and B 16 x 8
// fp16, C / D 16 x 8 fp32. On the GPU, PTX's mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32
// (sm_80 on), twice TF32's rate a k element and half its operand bytes; everywhere, the same
// product from a warp gather (mma_f16_plain, mma_gather.cuh): what the CPU execution mode runs, and
// the reference a GPU check holds the tensor cores to.
//
// Fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"), g = lane / 4,
// t = lane % 4, each 32-bit register two fp16 of consecutive k, the lower k in the low half:
//   A: a[0] row g, k 2t, 2t + 1;  a[1] row g + 8, the same k;  a[2] row g, k 2t + 8, 2t + 9;
//      a[3] row g + 8, k 2t + 8, 2t + 9
//   B: b[0] column g, k 2t, 2t + 1;  b[1] column g, k 2t + 8, 2t + 9
//   C, D: as m16n8k8's (mma_tf32.cuh): c[0], c[1] row g, columns 2t, 2t + 1; c[2], c[3] row g + 8
// (Byte for byte the int8 m16n8k32 fragments of mma.cuh, with two-byte elements.)
//
// Why fp16 where the data is fp32: a product of two fp16 values (11 significant bits each) is exact
// in fp32, so an operand that is already fp16 (the f16 latent cache) costs nothing, and an fp32
// operand split into two fp16 parts (f16_split: x = hi + lo, about 22 significant bits) makes two
// products instead of 3xTF32's three at half the rate: fp32-class accuracy at a third of the
// tensor-core time. The split needs the operand in fp16's range, so its caller scales it by a power
// of two first (exact) and divides the result by it.
#pragma once
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/mma_gather.cuh"
#include "quant/fp16.h"

#include <cmath>
#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// x rounded to fp16 (nearest even, cvt.rn.f16.f32), as its bits: the hardware conversion on the GPU,
// quant/fp16.h's (the same rounding) elsewhere.
__device__ __forceinline__ uint16_t f16_round(float x) {
#if defined(__CUDA_ARCH__)
    return __half_as_ushort(__float2half_rn(x));
#else
    return quant::fp32_to_fp16(x);
#endif
}
__device__ __forceinline__ float f16_value(uint16_t h) { return quant::fp16_to_fp32(h); }

// x = hi + lo, both fp16: x - hi is exact in fp32 while |x| < 65520 (hi finite). Below fp16's
// normal range (2^-14) both parts fall on the subnormal grid (2^-24), so the caller's scaling puts
// the largest values near 2^14 .. 2^15.
__device__ __forceinline__ void f16_split(float x, uint16_t& hi, uint16_t& lo) {
    hi = f16_round(x);
    lo = f16_round(x - f16_value(hi));
}

// The power of two that puts a row or operand whose largest magnitude is max_abs into the split's
// range: 2^e with max_abs 2^e in [2^14, 2^15). A zero or infinite max keeps 2^0 (the result is then
// what fp32 would give: 0, inf; a NaN element reaches the result through itself, as fmaxf drops it
// from the max); e stays within +-126 (2^e and 2^-e normal floats).
__device__ __forceinline__ int f16_scale_exponent(float max_abs) {
    const int e = max_abs > 0.0f && max_abs <= 0x1.fffffep127f ? 14 - ilogbf(max_abs) : 0;   // (FLT_MAX)
    return e < -126 ? -126 : e > 126 ? 126 : e;
}

__device__ __forceinline__ uint32_t f16_pair(uint16_t lo_k, uint16_t hi_k) { return uint32_t(lo_k) | uint32_t(hi_k) << 16; }
__device__ __forceinline__ uint32_t f16_word(const uint16_t* p) {
    return load_aligned<uint32_t>(reinterpret_cast<const uint8_t*>(p));
}

// ldmatrix.sync.aligned.m8n8.x4.shared.b16 (sm_75 on), .trans with kTrans: four 8 x 8 matrices of
// 16-bit elements from shared memory in one instruction, each named by the addresses of its 8
// rows (lane 8m + i names row i of matrix m, 16 bytes, 16-byte aligned), into one register of
// each lane a matrix: lane (g, t) gets of matrix m the pair in row g, columns 2t, 2t + 1 (the lower
// column in the low half), or with kTrans the pair in column g, rows 2t, 2t + 1. That is the
// mma fragments' pairing, so one ldmatrix makes four fragment registers where 32-bit loads take
// four instructions and the 16-bit pairs of a transposed B eight loads and four packs. The CPU
// mode exchanges the 32 row addresses and reads them as the hardware does (a lane reads the rows
// other lanes named), checking each row's alignment, and holds the warp at a __syncwarp until
// every lane has read (one instruction of the warp: no lane's later store may reach another
// lane's read); every lane of the warp takes part.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const uint16_t* row) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 750
#error "ldmatrix needs sm_75 or newer (the build targets sm_90)"
#elif defined(__CUDA_ARCH__)
    const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(row));
    if constexpr (kTrans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                     : "r"(addr));
#elif defined(__CUDACC__)
    (void)row;   // nvcc's host pass, which never runs a kernel
    r[0] = r[1] = r[2] = r[3] = 0;
#else
    namespace cm = ::kinfer::cuda::cpu_mode;
    if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
        throw std::logic_error("cuda cpu mode: ldmatrix given a row address that is not 16-byte aligned");
    const uint64_t mine[1] = {uint64_t(reinterpret_cast<uintptr_t>(row))};
    const uint64_t* table = cm::share_warp(mine, 1).table;
    const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    auto named = [table](int l) {   // the row lane l named
        return reinterpret_cast<const uint16_t*>(uintptr_t(table[cm::kShareWords * unsigned(l)]));
    };
    for (int m = 0; m < 4; ++m) {
        if constexpr (kTrans) r[m] = f16_pair(named(8 * m + 2 * t)[g], named(8 * m + 2 * t + 1)[g]);
        else r[m] = f16_pair(named(8 * m + g)[2 * t], named(8 * m + g)[2 * t + 1]);
    }
    __syncwarp();
#endif
}

// Fragment loads from fp16 arrays (bits, in shared memory), each given its tile's origin (row 0,
// k 0) and the distance between rows in elements:
//   f16_frag_a          A from rows of A (k contiguous): one ldmatrix;
//   f16_frag_b_rows     B from rows that each hold one column of B (k contiguous: B^T row-major):
//                       two 32-bit loads (f16_frag_b_rows_x2: two n tiles in one ldmatrix;
//                       f16_frag_b_rows_k2: two k16 steps of one n tile in one ldmatrix);
//   f16_frag_b_cols     B from rows that each hold one k of B (B row-major): two 16-bit loads a
//                       register (f16_frag_b_cols_x2: two n tiles in one ldmatrix.trans, what the
//                       kernels take; this one stays as mma_f16_check's plain reference).
// The 32-bit loads want the origin 4-byte aligned and ld even; ldmatrix wants the origin 16-byte
// aligned and 2 ld bytes a multiple of 16 (the CPU mode checks both). Each ldmatrix form names,
// by lane, the row of its matrix m (ldmatrix_x4) that makes register m the fragment's.
__device__ __forceinline__ void f16_frag_a(uint32_t (&a)[4], const uint16_t* A, int64_t ld) {
    const int lane = int(threadIdx.x % 32), m = lane / 8;   // matrix m: rows 8 (m % 2) .., k 8 (m / 2) ..
    ldmatrix_x4<false>(a, A + (lane % 8 + 8 * (m % 2)) * ld + 8 * (m / 2));
}
__device__ __forceinline__ void f16_frag_b_rows(uint32_t (&b)[2], const uint16_t* Bt, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const uint16_t* p = Bt + g * ld + 2 * t;
    b[0] = f16_word(p), b[1] = f16_word(p + 8);
}
__device__ __forceinline__ void f16_frag_b_cols(uint32_t (&b)[2], const uint16_t* B, int64_t ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const uint16_t* p = B + 2 * t * ld + g;
    b[0] = f16_pair(p[0], p[ld]), b[1] = f16_pair(p[8 * ld], p[9 * ld]);
}
// Two adjacent n tiles: b[0], b[1] are columns 0 .. 7's fragment (f16_frag_b_rows of Bt, or
// f16_frag_b_cols of B), b[2], b[3] columns 8 .. 15's.
__device__ __forceinline__ void f16_frag_b_rows_x2(uint32_t (&b)[4], const uint16_t* Bt, int64_t ld) {
    const int lane = int(threadIdx.x % 32), m = lane / 8;   // matrix m: rows of Bt 8 (m / 2) .., k 8 (m % 2) ..
    ldmatrix_x4<false>(b, Bt + (lane % 8 + 8 * (m / 2)) * ld + 8 * (m % 2));
}
__device__ __forceinline__ void f16_frag_b_cols_x2(uint32_t (&b)[4], const uint16_t* B, int64_t ld) {
    const int lane = int(threadIdx.x % 32), m = lane / 8;   // matrix m: rows (k) 8 (m % 2) .., columns 8 (m / 2) ..
    ldmatrix_x4<true>(b, B + (lane % 8 + 8 * (m % 2)) * ld + 8 * (m / 2));
}
// One n tile over two k16 steps: b[0], b[1] are k 0 .. 15's fragment (f16_frag_b_rows of Bt),
// b[2], b[3] k 16 .. 31's (of Bt + 16).
__device__ __forceinline__ void f16_frag_b_rows_k2(uint32_t (&b)[4], const uint16_t* Bt, int64_t ld) {
    const int lane = int(threadIdx.x % 32);   // matrix m: columns (rows of Bt) 0 .. 7, k 8 m ..
    ldmatrix_x4<false>(b, Bt + (lane % 8) * ld + 8 * (lane / 8));
}

// The plain form: each lane gathers rows g and g + 8 of A and columns 2t and 2t + 1 of B from the
// lanes that hold them (mma_gather.cuh: 16 shuffles on a GPU, a source lane's four k in one 64-bit
// word) and adds the sixteen products to its outputs in k order. Products of two fp16 values are
// exact in fp32; the tensor cores add them in an order (and with an alignment) of their own, so
// results agree to fp32 rounding, not bit for bit. Every lane takes part.
__device__ __forceinline__ void mma_f16_plain(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const MmaGather w = mma_gather(uint64_t(a[0]) | uint64_t(a[2]) << 32, uint64_t(a[1]) | uint64_t(a[3]) << 32,
                                   uint64_t(b[0]) | uint64_t(b[1]) << 32);
    float A0[16], A8[16], B0[16], B1[16];   // rows g, g + 8 of A; columns 2t, 2t + 1 of B; by k
#pragma unroll
    for (int src = 0; src < 4; ++src) {      // the lane of t = src holds k 2 src, 2 src + 1, 2 src + 8, 2 src + 9
        const uint64_t ra = w.a_g[src], ra8 = w.a_g8[src], cb0 = w.b_c0[src], cb1 = w.b_c1[src];
#pragma unroll
        for (int e = 0; e < 4; ++e) {        // element e of the 64 bits: k 2 src + e % 2 + 8 (e / 2)
            const int k = 2 * src + e % 2 + 8 * (e / 2);
            A0[k] = f16_value(uint16_t(ra >> (16 * e))), A8[k] = f16_value(uint16_t(ra8 >> (16 * e)));
            B0[k] = f16_value(uint16_t(cb0 >> (16 * e))), B1[k] = f16_value(uint16_t(cb1 >> (16 * e)));
        }
    }
#pragma unroll
    for (int k = 0; k < 16; ++k) {
        c[0] = __fadd_rn(c[0], __fmul_rn(A0[k], B0[k]));
        c[1] = __fadd_rn(c[1], __fmul_rn(A0[k], B1[k]));
        c[2] = __fadd_rn(c[2], __fmul_rn(A8[k], B0[k]));
        c[3] = __fadd_rn(c[3], __fmul_rn(A8[k], B1[k]));
    }
}

// c += A B on the tensor cores where there are some, by the plain form otherwise.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    mma_f16_plain(c, a, b);
#endif
}

// c += A B with A given as its fp16 split (kSplit: A_lo B, then A_hi B) or as fp16 values alone
// (hi; lo unused), B exact in fp16.
template <bool kSplit>
__device__ __forceinline__ void mma_split_a_f16(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                                const uint32_t (&b)[2]) {
    if constexpr (kSplit) mma_f16(c, a_lo, b);
    mma_f16(c, a_hi, b);
}

// c += A B with both operands given as fp16 splits (kSplit: A_lo B_hi, A_hi B_lo, then A_hi B_hi,
// the smaller terms first; A_lo B_lo, about 2^-22 of |a b|, is left out) or as fp16 values alone.
// The chunked KDA's form (kda_chunked_mma_f16.cuh), where neither operand is fp16 to begin with.
template <bool kSplit>
__device__ __forceinline__ void mma_split_f16(float (&c)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                              const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
    if constexpr (kSplit) {
        mma_f16(c, a_lo, b_hi);
        mma_f16(c, a_hi, b_lo);
    }
    mma_f16(c, a_hi, b_hi);
}

// The products of two adjacent n tiles whose B fragments came from one ldmatrix
// (f16_frag_b_rows_x2 / f16_frag_b_cols_x2): c0 += A B0 and, where both (warp-uniform: the second
// tile is in use), c1 += A B1. kSplitB: B is split too (bh, and bl under kSplit: mma_split_f16);
// otherwise B is exact in fp16 (bh; bl is not read: mma_split_a_f16).
template <bool kSplit, bool kSplitB>
__device__ __forceinline__ void mma_f16_pair(float (&c0)[4], float (&c1)[4], bool both, const uint32_t (&a_hi)[4],
                                             const uint32_t (&a_lo)[4], const uint32_t (&bh)[4], const uint32_t (&bl)[4]) {
    const uint32_t h0[2] = {bh[0], bh[1]}, h1[2] = {bh[2], bh[3]};
    if constexpr (kSplitB) {
        const uint32_t l0[2] = {bl[0], bl[1]}, l1[2] = {bl[2], bl[3]};
        mma_split_f16<kSplit>(c0, a_hi, a_lo, h0, l0);
        if (both) mma_split_f16<kSplit>(c1, a_hi, a_lo, h1, l1);
    } else {
        (void)bl;
        mma_split_a_f16<kSplit>(c0, a_hi, a_lo, h0);
        if (both) mma_split_a_f16<kSplit>(c1, a_hi, a_lo, h1);
    }
}

// x times 2^e (scale, a power of two), split into fp16 parts (hi, and lo under kSplit; lo stays 0
// otherwise): the operand side of mma_split_f16.
template <bool kSplit>
__device__ __forceinline__ void f16_operand(float x, float scale, uint16_t& hi, uint16_t& lo) {
    if constexpr (kSplit) f16_split(x * scale, hi, lo);
    else hi = f16_round(x * scale), lo = 0;
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
