// AVX-512 (F, BW, VL, VNNI) dot products (reached only through dispatch.cpp after a CPU check).
// The kernels themselves live in vec_dot_simd.inc; this file supplies VNNI primitives (vpdpbusd on 256-bit lanes) and 512-bit F32.
#include <immintrin.h>

#include <cstdint>

#include "quant/blocks.h"
#include "quant/kernels.h"

namespace kinfer::quant::avx512 {

namespace {

// vpdpbusd multiplies unsigned by signed bytes and sums 4 products straight into int32 lanes
// (no int16 intermediate to saturate): move x's sign onto y for the signed case.
__m256i dot_s8(__m256i x, __m256i y) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
}
__m256i dot_u8(__m256i u, __m256i y) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, y); }

// vpdpwssd: scale the maddubs pair sums and accumulate in one instruction.
__m256i acc_u8(__m256i acc, __m256i u, __m256i y, __m256i s16) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, y), s16);
}
__m256i acc_s8(__m256i acc, __m256i x, __m256i y, __m256i s16) {
    return acc_u8(acc, _mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x), s16);
}

float hsum_f32(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}
float h2f(uint16_t h) { return _cvtsh_ss(h); }
float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : uint32_t(e - 1) << 23;
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

float k_f32_f32(int64_t n, const void* vx, const void* vy) {
    const float* x = static_cast<const float*>(vx);
    const float* y = static_cast<const float*>(vy);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        for (int k = 0; k < 4; ++k) {
            acc[k] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i + 16 * k), _mm512_loadu_ps(y + i + 16 * k), acc[k]);
        }
    }
    for (; i + 16 <= n; i += 16) acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i), acc[0]);
    if (i < n) {  // masked tail
        const __mmask16 m = __mmask16((1u << (n - i)) - 1);
        acc[1] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i), acc[1]);
    }
    const __m512 v = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    // Fold the upper 256 bits onto the lower. (maskz forms: GCC 12 warns on the plain ones'
    // internal _mm512_undefined_ps.)
    const __m256 lo = _mm512_maskz_extractf32x8_ps(0xff, v, 0), hi = _mm512_maskz_extractf32x8_ps(0xff, v, 1);
    return hsum_f32(_mm256_add_ps(lo, hi));
}

#include "quant/vec_dot_simd.inc"

}  // namespace

#define KINFER_DEFINE_VEC_DOT(name) \
    float vec_dot_##name(int64_t n, const void* x, const void* y) { return k_##name(n, x, y); }
KINFER_SIMD_VEC_DOTS(KINFER_DEFINE_VEC_DOT)
#undef KINFER_DEFINE_VEC_DOT

#define KINFER_DEFINE_VEC_DOT_MULTI(name)                                                                \
    void vec_dot_multi_##name(int64_t n, const void* x, const void* y, size_t y_stride, int ny, float* out) { \
        m_##name(n, x, y, y_stride, ny, out);                                                            \
    }
KINFER_SIMD_VEC_DOTS_MULTI(KINFER_DEFINE_VEC_DOT_MULTI)
#undef KINFER_DEFINE_VEC_DOT_MULTI

}  // namespace kinfer::quant::avx512
