// ggml's AVX2+FMA vector exp (ggml_v_expf), shared by the kernels that follow ggml's arithmetic
// (SiLU, the vision softmax, the tiled attention). Include only from *_avx2.cpp files (they get -mavx2 -mfma).
// Same polynomial; 2^n is built in the exponent bits, with a two-factor scale near over/underflow.
#pragma once
#include <immintrin.h>

#include <cstdint>

namespace kinfer::backend::cpu::ops {

inline __m256 exp8(__m256 x) {
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
    const __m256 n = _mm256_sub_ps(z, shift);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);           // n in the exponent field
    const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1.0f))));   // 2^n
    const __m256 absn = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), n);
    const __m256 near_limit = _mm256_cmp_ps(absn, _mm256_set1_ps(126), _CMP_GT_OQ);
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 p45 = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f));
    const __m256 p23 = _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f));
    const __m256 j = _mm256_fmadd_ps(_mm256_fmadd_ps(p45, u, p23), u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
    if (!_mm256_movemask_ps(near_limit)) return _mm256_fmadd_ps(j, k, k);    // 2^n * (1 + j)
    // |n| > 126: 2^n does not fit one float, scale by s1 * s2 instead; |n| > 192 saturates.
    const __m256i g = _mm256_and_si256(_mm256_castps_si256(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ)),
                                       _mm256_set1_epi32(int32_t(0x82000000u)));
    const __m256 s1 = _mm256_castsi256_ps(_mm256_add_epi32(g, _mm256_set1_epi32(0x7f000000)));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_sub_epi32(e, g));
    const __m256 huge = _mm256_cmp_ps(absn, _mm256_set1_ps(192), _CMP_GT_OQ);
    const __m256 scaled = _mm256_blendv_ps(_mm256_fmadd_ps(k, j, k), _mm256_mul_ps(_mm256_fmadd_ps(s2, j, s2), s1), near_limit);
    return _mm256_blendv_ps(scaled, _mm256_mul_ps(s1, s1), huge);
}

}  // namespace kinfer::backend::cpu::ops
