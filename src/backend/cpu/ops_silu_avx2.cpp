// SiLU over 8 floats at a time with the AVX2+FMA form of ggml's vector exp, which ggml_silu runs
// on machines without AVX-512 (see ops_silu_avx512.cpp for why this follows ggml's arithmetic).
// The exp is ggml's vector exp (exp_avx2.h).
#include "backend/cpu/exp_avx2.h"

#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace kinfer::backend::cpu::ops {

void silu_avx2(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), v));
        _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
    }
    for (; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}

}  // namespace kinfer::backend::cpu::ops
