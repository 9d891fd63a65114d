// AVX-512 (F, BW, VL, VNNI) dot products (reached only through dispatch.cpp after a CPU check).
// The kernels themselves live in vec_dot_simd.inc; this file supplies VNNI primitives (vpdpbusd on 256-bit lanes) and 512-bit F32.
#include <immintrin.h>

#include <bit>

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/matmul.h"

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
__m256i acc_w16(__m256i acc, __m256i w, __m256i s16) { return _mm256_dpwssd_epi32(acc, w, s16); }

#include "quant/vec_dot_simd_prims.inc"

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

// The shared kernels' AVX-512 parts (the 512-bit decode kernels, four weight rows at a time) are
// compiled here only: a macro of this file rather than __AVX512BW__, which -march=native
// (KINFER_NATIVE) would define in vec_dot_avx2.cpp too.
#define KINFER_SIMD_AVX512 1
// GCC 12 reports its own 512-bit intrinsics (their deliberately undefined pass-through operand)
// as used uninitialized once inlined into those kernels.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "quant/vec_dot_simd.inc"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

#include "quant/vec_dot_simd_exports.inc"

}  // namespace kinfer::quant::avx512
