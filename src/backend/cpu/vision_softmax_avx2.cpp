// The vision attention's softmax with the arithmetic of llama.cpp's golden build
// (ggml_vec_soft_max_f32 on AVX-512): the row scaled, its max subtracted, exp 16 lanes at a time
// with the AVX-512 ggml_v_expf, each 16-lane group's sum by _mm512_reduce_add_ps's tree added in
// double, the last n % 16 values with the libm expf, then one multiply by 1 / sum. Each 16-lane
// register is two 8-lane halves here. The AVX-512 exp is not the AVX2 one (exp_avx2.h): it adds
// the 1 inside the polynomial's last FMA and scales by 2^n with scalef, so some values differ
// from it by an ulp.
#include "backend/cpu/reduce16_avx2.h"

#include <immintrin.h>
#include <cmath>
#include <cstdint>

namespace kinfer::backend::cpu {

namespace {

// ggml_v_expf(__m512) on 8 lanes, for x <= 0 (a softmax's x - max): scalef(j, n) = j * 2^n is
// one multiply while 2^n is a normal float, else two (the first exact), so the result is rounded
// once, as scalef rounds it; |n| > 192 gives 0.
inline __m256 exp8_avx512_order(__m256 x) {
    const __m256 r = _mm256_set1_ps(0x1.8p23f);
    const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
    const __m256 n = _mm256_sub_ps(z, r);
    const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f), _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    const __m256 u = _mm256_mul_ps(b, b);
    const __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 deep = _mm256_cmp_ps(n, _mm256_set1_ps(-126.0f), _CMP_LT_OQ);   // 2^n subnormal
    if (!_mm256_movemask_ps(deep)) {   // the usual case: one exact scaling
        const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
        return _mm256_mul_ps(j, _mm256_castsi256_ps(e));
    }
    const __m256 n2 = _mm256_and_ps(deep, _mm256_set1_ps(-100.0f));
    const __m256i n1i = _mm256_cvtps_epi32(_mm256_sub_ps(n, n2));
    const __m256i n2i = _mm256_cvtps_epi32(n2);
    const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1i, _mm256_set1_epi32(127)), 23));
    const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2i, _mm256_set1_epi32(127)), 23));
    const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
    const __m256 huge = _mm256_cmp_ps(n, _mm256_set1_ps(-192.0f), _CMP_LT_OQ);
    return _mm256_andnot_ps(huge, res);
}

}  // namespace

void softmax_row_avx2(float* x, int64_t n, float scale) {
    // Scale and max 8 lanes at a time: the same products, and a max does not depend on the order.
    const __m256 vs = _mm256_set1_ps(scale);
    __m256 vm = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
        _mm256_storeu_ps(x + i, v);
        vm = _mm256_max_ps(vm, v);
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(vm, 1), _mm256_castps256_ps128(vm));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    float mx = _mm_cvtss_f32(m4);
    for (; i < n; ++i) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    double sum = 0;
    i = 0;
    const __m256 m = _mm256_set1_ps(mx);
    for (; i + 16 <= n; i += 16) {
        const __m256 lo = exp8_avx512_order(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        const __m256 hi = exp8_avx512_order(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), m));
        _mm256_storeu_ps(x + i, lo);
        _mm256_storeu_ps(x + i + 8, hi);
        sum += double(reduce16(lo, hi));
    }
    for (; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        sum += double(x[i]);
    }
    const float inv = float(1.0 / sum);
    const __m256 vi = _mm256_set1_ps(inv);
    int64_t k = 0;
    for (; k + 8 <= n; k += 8) _mm256_storeu_ps(x + k, _mm256_mul_ps(_mm256_loadu_ps(x + k), vi));
    for (; k < n; ++k) x[k] *= inv;
}

}  // namespace kinfer::backend::cpu
