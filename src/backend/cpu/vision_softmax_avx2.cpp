// The vision attention's softmax with ggml's AVX2 arithmetic (ggml_vec_soft_max_f32): the row
// scaled, its max subtracted, exp 8 lanes at a time with ggml's vector exp, each lane group's
// sum (ggml's horizontal order) added in double, then one multiply by 1 / sum.
#include "backend/cpu/exp_avx2.h"

#include <cmath>
#include <cstdint>

namespace kinfer::backend::cpu {

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
    for (; i + 7 < n; i += 8) {
        const __m256 v = ops::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
        _mm256_storeu_ps(x + i, v);
        __m128 h = _mm_add_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        h = _mm_add_ss(h, _mm_movehdup_ps(h));
        sum += double(_mm_cvtss_f32(h));
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
