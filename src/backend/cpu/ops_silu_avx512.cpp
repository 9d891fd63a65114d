// SiLU over 16 floats at a time with the AVX-512 form of ggml's vector exp (a degree-5
// polynomial on the reduced argument, scaled by 2^n with vscalefps). ggml_silu runs exactly this
// on AVX-512 machines, the machines the golden logits came from, so the fp32 conv outputs agree
// with llama.cpp bit for bit instead of within libm's ulp. Constants are those of the algorithm
// (Arm's optimized-routines expf, as adopted by ggml); see ops.h for the contract.
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace kinfer::backend::cpu::ops {

namespace {

__m512 exp16(__m512 x) {
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);            // round-to-integer trick
    const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);   // x * log2(e)
    const __m512 n = _mm512_sub_ps(z, shift);
    // b = x - n * ln2, ln2 split in a high and a low part
    const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    const __m512 u = _mm512_mul_ps(b, b);
    const __m512 p45 = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f));
    const __m512 p23 = _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f));
    const __m512 p01 = _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f));
    const __m512 poly = _mm512_fmadd_ps(_mm512_fmadd_ps(p45, u, p23), u, p01);
    const __m512 res = _mm512_maskz_scalef_ps(__mmask16(0xffff), poly, n);   // (maskz: GCC 12 warns on the unmasked form)
    // |n| > 192: the result is 0 (n <= 0) or +inf.
    const __mmask16 big = _mm512_cmp_ps_mask(_mm512_andnot_ps(_mm512_set1_ps(-0.0f), n), _mm512_set1_ps(192), _CMP_GT_OQ);
    if (!big) return res;
    const __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ), _mm512_set1_ps(INFINITY),
                                            _mm512_setzero_ps());
    return _mm512_mask_blend_ps(big, res, alt);
}

}  // namespace

void silu_avx512(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
        _mm512_storeu_ps(y + i, _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e)));
    }
    for (; i < n; ++i) y[i] = x[i] / (1.0f + std::exp(-x[i]));   // ggml's tail is scalar too
}

}  // namespace kinfer::backend::cpu::ops
