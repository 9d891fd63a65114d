// ggml-compatible block layouts. Every struct is byte-for-byte the on-disk GGUF layout, so a
// tensor view can be cast to an array of these blocks; the static_asserts pin the sizes to ggml's.
// nvcc compiles this header too (the CUDA kernels decode the same structs), so what the device
// needs of a format is a KINFER_HD function here, not a copy in cuda/.
#pragma once
#include <cstdint>

#include "quant/hd.h"

namespace kinfer::quant {

using fp16_t = uint16_t;  // IEEE binary16 bits
using bf16_t = uint16_t;  // bfloat16 bits

inline constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
inline constexpr int QK_K = 256;          // K-quant super-block
inline constexpr int K_SCALE_SIZE = 12;   // packed 6-bit scales+mins of Q4_K / Q5_K
inline constexpr int QK4_NL = 32;
inline constexpr int QK_MXFP4 = 32;

// x = d * (q - 8), q in 0..15; element j in the low nibble of qs[j], j+16 in the high nibble.
struct block_q4_0 { fp16_t d; uint8_t qs[QK4_0 / 2]; };
// x = d * q + m.
struct block_q4_1 { fp16_t d, m; uint8_t qs[QK4_1 / 2]; };
// x = d * (q - 16); bit 4 of element j is bit j of the little-endian qh word.
struct block_q5_0 { fp16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { fp16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { fp16_t d; int8_t qs[QK8_0]; };
// s = d * sum(qs): lets a Q4_1 / Q5_1 dot add the min term without touching the quants again.
struct block_q8_1 { fp16_t d, s; int8_t qs[QK8_1]; };

// K-quants: 256 elements, sub-blocks of 16 or 32 with quantized scales.
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; fp16_t d, dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; fp16_t d; };
struct block_q4_K { fp16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { fp16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; fp16_t d; };
// Activation type of the K-quants: fp32 scale, and sums of 16 quants for the min terms.
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

// Non-linear 4-bit: x = d * kvalues_iq4nl[q].
struct block_iq4_nl { fp16_t d; uint8_t qs[QK4_NL / 2]; };
// 256-element super-block, 6-bit sub-block scales (ls - 32) for 8 sub-blocks of 32.
struct block_iq4_xs { fp16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
// OCP MX FP4 (E2M1) with a shared E8M0 exponent.
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_K) == 2 * 2 + QK_K / 16 + QK_K / 4);            // 84
static_assert(sizeof(block_q3_K) == 2 + QK_K / 4 + QK_K / 8 + 12);            // 110
static_assert(sizeof(block_q4_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2);         // 144
static_assert(sizeof(block_q5_K) == 2 * 2 + K_SCALE_SIZE + QK_K / 2 + QK_K / 8);  // 176
static_assert(sizeof(block_q6_K) == 2 + QK_K / 16 + 3 * QK_K / 4);            // 210
static_assert(sizeof(block_q8_K) == 4 + QK_K + QK_K / 16 * 2);                // 292
static_assert(sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_iq4_xs) == 2 + 2 + QK_K / 64 + QK_K / 2);          // 136
static_assert(sizeof(block_mxfp4) == 17);

// Code books. IQ4_NL's non-uniform levels; MXFP4's E2M1 values doubled so they are integers
// (the E8M0 scale is halved to compensate, see e8m0_to_fp32_half). Each list is written once,
// as a macro, because device code cannot index a host constexpr array: the arrays serve the CPU
// kernels (SIMD shuffle tables), the *_level() functions the device.
#define KINFER_IQ4NL_LEVELS -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113
#define KINFER_MXFP4_LEVELS 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12
inline constexpr int8_t kvalues_iq4nl[16] = {KINFER_IQ4NL_LEVELS};
inline constexpr int8_t kvalues_mxfp4[16] = {KINFER_MXFP4_LEVELS};
// The 16 levels packed into two 64-bit constants at compile time, so a lookup is a shift in
// registers (a local array would be a memory access per element on the GPU).
KINFER_HD constexpr uint64_t pack_levels8(const int8_t* v) {
    uint64_t r = 0;
    for (int i = 7; i >= 0; --i) r = r << 8 | uint8_t(v[i]);
    return r;
}
KINFER_HD inline int iq4nl_level(int q) {
    constexpr int8_t v[16] = {KINFER_IQ4NL_LEVELS};
    constexpr uint64_t lo = pack_levels8(v), hi = pack_levels8(v + 8);
    return int8_t(((q & 8) ? hi : lo) >> (8 * (q & 7)));
}
KINFER_HD inline int mxfp4_level(int q) {
    constexpr int8_t v[16] = {KINFER_MXFP4_LEVELS};
    constexpr uint64_t lo = pack_levels8(v), hi = pack_levels8(v + 8);
    return int8_t(((q & 8) ? hi : lo) >> (8 * (q & 7)));
}

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K super-block: j < 4 in the low
// six bits of bytes j and j + 4; j >= 4 split between the nibbles of byte j + 4 and the top two
// bits of bytes j - 4 and j.
KINFER_HD inline void scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
    if (j < 4) {
        d = uint8_t(q[j] & 63);
        m = uint8_t(q[j + 4] & 63);
    } else {
        d = uint8_t((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        m = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

}  // namespace kinfer::quant
