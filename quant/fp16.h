// Scalar fp16 / bf16 / E8M0 conversions, bit-exact with ggml's (ggml-impl.h):
// - fp32 -> fp16 rounds to nearest even, keeps subnormals, overflows to inf, and maps every NaN
//   to ggml's canonical quiet NaN (sign | 0x7E00). F16C hardware agrees on every non-NaN input.
// - fp32 -> bf16 rounds to nearest even; NaNs are truncated and forced quiet (| 0x40).
// - E8M0 is a bare exponent: 2^(e-127); MXFP4 stores doubled E2M1 values, so it uses half that.
// Baseline code only (no F16C), so these are safe to call anywhere; nvcc compiles them for the
// device too (KINFER_HD), where the bit moves are register moves and fp16 -> fp32 is the
// hardware conversion (exact, so the same value; only a NaN's payload may differ).
#pragma once
#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/hd.h"

#if defined(__CUDA_ARCH__)
#include <cuda_fp16.h>
#endif

namespace kinfer::quant {

#if defined(__CUDA_ARCH__)
KINFER_HD inline uint32_t f32_bits(float f) { return __float_as_uint(f); }
KINFER_HD inline float f32_from_bits(uint32_t u) { return __uint_as_float(u); }
#else
KINFER_HD inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
KINFER_HD inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
#endif

KINFER_HD inline float fp16_to_fp32(fp16_t h) {
#if defined(__CUDA_ARCH__)
    return __half2float(__ushort_as_half(h));
#else
    const uint32_t sign = uint32_t(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t man = h & 0x3ff;
    if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000 | (man << 13));  // inf / NaN
    if (exp != 0) return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
    // Zero or subnormal: man * 2^-24 is exact in fp32.
    const float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
#endif
}

KINFER_HD inline fp16_t fp32_to_fp16(float f) {
    const uint32_t x = f32_bits(f);
    const uint32_t sign = (x >> 16) & 0x8000;
    const uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) return fp16_t(sign | 0x7e00);   // NaN
    if (ax >= 0x477ff000) return fp16_t(sign | 0x7c00);  // >= 65520 rounds to inf
    if (ax >= 0x38800000) {                              // normal fp16 range (>= 2^-14)
        // Round the 13 dropped mantissa bits to nearest even, then rebias 127 -> 15; a carry
        // out of the mantissa correctly bumps the exponent.
        const uint32_t r = ax + 0xfff + ((ax >> 13) & 1);
        return fp16_t(sign | ((r - 0x38000000) >> 13));
    }
    const uint32_t e = ax >> 23;
    if (e < 102) return fp16_t(sign);  // below half the smallest subnormal: rounds to zero
    // Subnormal result: q = round_even(|f| * 2^24) with |f| = m * 2^(e-150).
    const uint32_t m = (ax & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - e;  // 14..24
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1))) ++q;
    return fp16_t(sign | q);
}

KINFER_HD inline float bf16_to_fp32(bf16_t h) { return f32_from_bits(uint32_t(h) << 16); }

KINFER_HD inline bf16_t fp32_to_bf16(float f) {
    const uint32_t x = f32_bits(f);
    if ((x & 0x7fffffff) > 0x7f800000) return bf16_t((x >> 16) | 0x40);
    return bf16_t((x + 0x7fff + ((x >> 16) & 1)) >> 16);
}

// 2^(e-127); e = 0 is the subnormal 2^-127 (ggml ignores the NaN code 0xFF).
KINFER_HD inline float e8m0_to_fp32(uint8_t e) { return f32_from_bits(e == 0 ? 0x00400000u : uint32_t(e) << 23); }
// 2^(e-128): the MXFP4 block scale applied to the doubled kvalues_mxfp4. Its bits alone are a
// constant expression (the SIMD kernels build a table of them at compile time).
KINFER_HD constexpr uint32_t e8m0_half_bits(uint8_t e) { return e < 2 ? (0x00200000u << e) : uint32_t(e - 1) << 23; }
KINFER_HD inline float e8m0_to_fp32_half(uint8_t e) { return f32_from_bits(e8m0_half_bits(e)); }

}  // namespace kinfer::quant
