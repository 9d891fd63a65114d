// The vision attention's softmax with ggml's AVX2 arithmetic (ggml_vec_soft_max_f32): the row
// scaled, its max subtracted, exp 8 lanes at a time with ggml's vector exp, each lane group's
// sum (ggml's horizontal order) added in double, then one multiply by 1 / sum.
#include "backend/cpu/exp_avx2.h"

#include <cmath>
#include <cstdint>

namespace kinfer::backend::cpu {

void softmax_row_avx2(float* x, int64_t n, float scale) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
        x[i] *= scale;
        mx = x[i] > mx ? x[i] : mx;
    }
    double sum = 0;
    int64_t i = 0;
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
    for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

}  // namespace kinfer::backend::cpu
