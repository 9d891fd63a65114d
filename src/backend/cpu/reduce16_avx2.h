// _mm512_reduce_add_ps's summation tree over 16 lanes, given as two 8-lane halves: the order the
// golden (AVX-512) llama.cpp build sums a 16-lane accumulator in, for the AVX2 kernels that
// reproduce its bits (the vision softmax, tinyBLAS-order F32 matmul). Include only from
// *_avx2.cpp files (they get -mavx2 -mfma).
#pragma once
#include <immintrin.h>

namespace kinfer::backend::cpu {

inline float reduce16(__m256 lo, __m256 hi) {
    const __m256 t3 = _mm256_add_ps(hi, lo);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}

}  // namespace kinfer::backend::cpu
