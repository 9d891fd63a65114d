// AVX2/FMA fp32 dot product; compiled with -mavx2 -mfma and reached only through dot_f32's
// run-time check.
#include <immintrin.h>
#include <cstdint>

namespace kinfer::model {

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    __m256 s = _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    float r = _mm_cvtss_f32(h);
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
}

// 4 dot products of one activation row against 4 weight rows: x is loaded once per step.
void dot4_f32_avx2(const float* const* w, const float* x, int64_t n, float* out) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps(), s2 = _mm256_setzero_ps(), s3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(w[0] + i), xv, s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(w[1] + i), xv, s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(w[2] + i), xv, s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(w[3] + i), xv, s3);
    }
    __m256 v[4] = {s0, s1, s2, s3};
    for (int k = 0; k < 4; ++k) {
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(v[k]), _mm256_extractf128_ps(v[k], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        float r = _mm_cvtss_f32(h);
        for (int64_t j = i; j < n; ++j) r += w[k][j] * x[j];
        out[k] = r;
    }
}

}  // namespace kinfer::model
