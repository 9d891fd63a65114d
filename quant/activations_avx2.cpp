// The activation quantizers with AVX2 (prefill quantizes every layer input with them):
// - Q8_K, byte-identical to quantize_row_q8_K_ref (which is what ggml runs on x86): the same
//   -127/max scale from the first element of largest magnitude, the same products, and
//   round-half-even (cvtps_epi32 in the default rounding mode equals the ref's 1.5*2^23 trick for
//   |v| <= 127);
// - Q8_0, byte-identical to the scalar form of ggml's x86 quantizer in activations.cpp: scale
//   127/amax, products rounded half to even.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"

namespace kinfer::quant {

void quantize_row_q8_0_avx2(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_0*>(vy);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
        __m256 v[4];
        for (int k = 0; k < 4; ++k) v[k] = _mm256_loadu_ps(x + 8 * k);
        __m256 vmax = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v[0]), _mm256_andnot_ps(sign, v[1])),
                                    _mm256_max_ps(_mm256_andnot_ps(sign, v[2]), _mm256_andnot_ps(sign, v[3])));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        // F16C rounds to nearest even, as ggml-cpu's conversion does. (No inline helpers from
        // headers here: a copy compiled with AVX2 flags must not be what the linker keeps.)
        y[i].d = uint16_t(_cvtss_sh(amax / 127.f, 0));
        const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
        __m256i q[4];
        for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
        // int32 -> int16 -> int8 packs interleave 128-bit lanes; one permute restores the order.
        const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs),
                            _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

void quantize_row_q8_K_avx2(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<block_q8_K*>(vy);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        __m256 vmax = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m = _mm_max_ps(_mm256_castps256_ps128(vmax), _mm256_extractf128_ps(vmax, 1));
        m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        m = _mm_max_ss(m, _mm_movehdup_ps(m));
        const float amax = _mm_cvtss_f32(m);
        if (!amax) {
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        // The ref keeps the first element whose magnitude is the largest (its sign matters).
        float max = 0;
        const __m256 va = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), va, _CMP_EQ_OQ));
            if (hit) {
                max = x[j + __builtin_ctz(unsigned(hit))];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i top = _mm256_set1_epi32(127);
        for (int g = 0; g < QK_K / 16; ++g) {
            const float* xg = x + 16 * g;
            const __m256i a = _mm256_min_epi32(top, _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(xg))));
            const __m256i b = _mm256_min_epi32(top, _mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(xg + 8))));
            const __m256i s = _mm256_add_epi32(a, b);
            __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
            s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
            s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
            y[i].bsums[g] = int16_t(_mm_cvtsi128_si32(s4));
            // int32 -> int16 (lanes interleave a/b per 128 bits; the permute restores order) -> int8.
            const __m256i w = _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
            const __m128i q = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
            _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * g), q);
        }
        y[i].d = 1 / iscale;
    }
}

}  // namespace kinfer::quant
