// The warp-wide int8 tensor-core product of the GEMM (mmq.cu): D = A B + C with A 16 x K int8
// (weight rows), B K x 8 int8 (8 tokens' activations), C / D 16 x 8 int32, for K = 32 and 16.
// On the GPU, PTX's mma.sync.aligned.m16n8k{32,16}.row.col.s32.s8.s8.s32 (sm_80 on; kinfer builds
// for sm_90). Everywhere, the same product from a warp gather (mma_gather.cuh) and dp4a
// (mma_*_plain): what the CPU execution mode runs, and a reference a GPU check can compare the
// tensor cores with.
//
// Every lane holds a fixed piece of each matrix (PTX ISA, "Matrix Fragments for mma.m16n8k32",
// integer types). With g = lane / 4 and t = lane % 4, each register four int8 of consecutive k,
// the lowest byte first:
//   A (k = 32): a[0] row g, k 4t..4t+3;  a[1] row g + 8, k 4t..;  a[2] row g, k 16 + 4t..;
//               a[3] row g + 8, k 16 + 4t..   (k = 16: a[0], a[1] alone)
//   B (k = 32): b[0] column g, k 4t..4t+3;  b[1] column g, k 16 + 4t..   (k = 16: b[0] alone)
//   C, D:       c[0], c[1] row g, columns 2t, 2t + 1;  c[2], c[3] row g + 8, the same columns
// So the k = 16 form is the k = 32 one's first half, register for register. A caller loads a
// fragment as four bytes of a row of A or of a column of B (mma_frag_*), both k-contiguous.
//
// Integer products and sums are exact (|sum| <= 32 x 128 x 128 = 2^19 a call): the plain form
// gives the tensor cores' bits, whatever order it adds in.
#pragma once
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/mma_gather.cuh"

#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// Fragment loads from k-contiguous int8 rows (of A: a weight row; of B: a token's activations),
// `ld` bytes apart, starting at the tile's row 0 / column 0 and its k 0. Four-byte loads: base,
// ld and the tile's k offset must be multiples of 4 (the CPU mode checks).
__device__ __forceinline__ uint32_t mma_word(const int8_t* p) { return load_aligned<uint32_t>(reinterpret_cast<const uint8_t*>(p)); }
__device__ __forceinline__ void mma_frag_a32(uint32_t (&a)[4], const int8_t* A, int ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const int8_t* r0 = A + g * ld + 4 * t;
    const int8_t* r8 = r0 + 8 * ld;
    a[0] = mma_word(r0), a[1] = mma_word(r8), a[2] = mma_word(r0 + 16), a[3] = mma_word(r8 + 16);
}
__device__ __forceinline__ void mma_frag_b32(uint32_t (&b)[2], const int8_t* B, int ld) {
    const int g = int(threadIdx.x % 32) / 4, t = int(threadIdx.x % 4);
    const int8_t* c = B + g * ld + 4 * t;
    b[0] = mma_word(c), b[1] = mma_word(c + 16);
}

// The plain form of m16n8k32: every lane gathers the rows of A and the columns of B its four
// outputs need from the lanes that hold them (mma_gather.cuh: 16 shuffles on a GPU, both k halves
// of a source lane in one 64-bit word), and dots them with dp4a. Every lane takes part.
__device__ __forceinline__ void mma_s8_k32_plain(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    const MmaGather w = mma_gather(uint64_t(a[0]) | uint64_t(a[2]) << 32, uint64_t(a[1]) | uint64_t(a[3]) << 32,
                                   uint64_t(b[0]) | uint64_t(b[1]) << 32);
#pragma unroll
    for (int src = 0; src < 4; ++src) {   // k 4 src .. + 3 and 16 + 4 src .. + 3
        const uint64_t ra = w.a_g[src], ra8 = w.a_g8[src], cb0 = w.b_c0[src], cb1 = w.b_c1[src];
#pragma unroll
        for (int h = 0; h < 64; h += 32) {
            c[0] = __dp4a(int(uint32_t(ra >> h)), int(uint32_t(cb0 >> h)), c[0]);
            c[1] = __dp4a(int(uint32_t(ra >> h)), int(uint32_t(cb1 >> h)), c[1]);
            c[2] = __dp4a(int(uint32_t(ra8 >> h)), int(uint32_t(cb0 >> h)), c[2]);
            c[3] = __dp4a(int(uint32_t(ra8 >> h)), int(uint32_t(cb1 >> h)), c[3]);
        }
    }
}
// m16n8k16: k 0..15 of the above (a[0], a[1], b[0]).
__device__ __forceinline__ void mma_s8_k16_plain(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
    const MmaGather w = mma_gather(a0, a1, b0);
#pragma unroll
    for (int src = 0; src < 4; ++src) {
        const uint32_t a_g = uint32_t(w.a_g[src]), a_g8 = uint32_t(w.a_g8[src]);
        const uint32_t b_0 = uint32_t(w.b_c0[src]), b_1 = uint32_t(w.b_c1[src]);
        c[0] = __dp4a(int(a_g), int(b_0), c[0]);
        c[1] = __dp4a(int(a_g), int(b_1), c[1]);
        c[2] = __dp4a(int(a_g8), int(b_0), c[2]);
        c[3] = __dp4a(int(a_g8), int(b_1), c[3]);
    }
}

// c += A B on the tensor cores where there are some, by the plain form otherwise.
__device__ __forceinline__ void mma_s8_k32(int (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    mma_s8_k32_plain(c, a, b);
#endif
}
__device__ __forceinline__ void mma_s8_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
#else
    mma_s8_k16_plain(c, a0, a1, b0);
#endif
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
