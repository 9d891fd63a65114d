// tanhf for 8 floats at a time, bit-identical to glibc 2.36's tanhf (what llama.cpp's ggml_tanh
// calls on Debian 12, the machines behind the golden logits): the same fdlibm algorithm,
// tanh(x) = 1 - 2 / (expm1(2|x|) + 2) for |x| >= 1 and -expm1(-2|x|) / (expm1(-2|x|) + 2) below,
// with expm1f's argument reduction, rational approximation and exponent reconstruction done
// lane by lane without FMA (glibc's generic build has none). Lanes outside 2^-12 <= |x| < 9 (NaN,
// huge, tiny) are handed to the C library. Checked against tanhf over every float in that range
// (tests/model/test_ops.cpp). SiTU-GLU computes two of these per element.
// glibc rounds every operation separately: no multiply-add may be fused here.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#include <immintrin.h>

#include <cmath>
#include <cstdint>

namespace kinfer::backend::cpu::ops {

namespace {

inline __m256 f(float v) { return _mm256_set1_ps(v); }
inline __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
inline __m256 sub(__m256 a, __m256 b) { return _mm256_sub_ps(a, b); }
inline __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline __m256 sel(__m256 mask, __m256 a, __m256 b) { return _mm256_blendv_ps(b, a, mask); }   // mask ? a : b
inline __m256 bits(__m256i v) { return _mm256_castsi256_ps(v); }
inline __m256i ints(__m256 v) { return _mm256_castps_si256(v); }

// fdlibm expm1f for arguments with 2^-11 <= |x| <= 18 (no overflow / -1 saturation / tiny paths).
__m256 expm1_mid(__m256 x) {
    const __m256 ln2_hi = f(6.9313812256e-01f), ln2_lo = f(9.0580006145e-06f), invln2 = f(1.4426950216e+00f);
    const __m256i hx = _mm256_and_si256(ints(x), _mm256_set1_epi32(0x7fffffff));
    const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
    // k = 0 for |x| <= 0.5 ln2; +-1 for |x| < 1.5 ln2; else trunc(invln2 * x +- 0.5).
    const __m256 k0 = bits(_mm256_cmpgt_epi32(_mm256_set1_epi32(0x3eb17219), hx));           // hx <= 0x3eb17218
    const __m256 k1 = bits(_mm256_andnot_si256(ints(k0), _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F851592), hx)));
    const __m256 kf_general = _mm256_round_ps(add(mul(invln2, x), sel(neg, f(-0.5f), f(0.5f))), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 kf = sel(k0, _mm256_setzero_ps(), sel(k1, sel(neg, f(-1.0f), f(1.0f)), kf_general));
    const __m256i k = _mm256_cvttps_epi32(kf);
    // hi / lo: x -+ ln2_hi, +-ln2_lo for |k| == 1 (exactly as written there), x - t*ln2_hi, t*ln2_lo otherwise.
    const __m256 hi = sel(k1, sel(neg, add(x, ln2_hi), sub(x, ln2_hi)), sub(x, mul(kf, ln2_hi)));
    const __m256 lo = sel(k1, sel(neg, sub(_mm256_setzero_ps(), ln2_lo), ln2_lo), mul(kf, ln2_lo));
    const __m256 xr = sel(k0, x, sub(hi, lo));
    const __m256 c = sub(sub(hi, xr), lo);
    const __m256 hfx = mul(f(0.5f), xr);
    const __m256 hxs = mul(xr, hfx);
    __m256 r1 = add(f(4.0082177293e-06f), mul(hxs, f(-2.0109921195e-07f)));
    r1 = add(f(-7.9365076090e-05f), mul(hxs, r1));
    r1 = add(f(1.5873016091e-03f), mul(hxs, r1));
    r1 = add(f(-3.3333335072e-02f), mul(hxs, r1));
    r1 = add(f(1.0f), mul(hxs, r1));
    const __m256 t = sub(f(3.0f), mul(r1, hfx));
    __m256 e = mul(hxs, _mm256_div_ps(sub(r1, t), sub(f(6.0f), mul(xr, t))));
    const __m256 res_k0 = sub(xr, sub(mul(xr, e), hxs));
    e = sub(sub(mul(xr, sub(e, c)), c), hxs);
    const __m256 res_km1 = sub(mul(f(0.5f), sub(xr, e)), f(0.5f));
    const __m256 res_kp1 = sel(_mm256_cmp_ps(xr, f(-0.25f), _CMP_LT_OQ), mul(f(-2.0f), sub(e, add(xr, f(0.5f)))),
                               add(f(1.0f), mul(f(2.0f), sub(xr, e))));
    const __m256i kshift = _mm256_slli_epi32(k, 23);
    // k <= -2 (k > 56 cannot happen here): 2^k * (1 - (e - x)) - 1.
    const __m256 res_kneg = sub(bits(_mm256_add_epi32(ints(sub(f(1.0f), sub(e, xr))), kshift)), f(1.0f));
    // 2 <= k < 23: 2^k * ((1 - 2^-k) - (e - x)).
    const __m256 t_small = bits(_mm256_sub_epi32(_mm256_set1_epi32(0x3f800000), _mm256_srlv_epi32(_mm256_set1_epi32(0x1000000), k)));
    const __m256 res_ksmall = bits(_mm256_add_epi32(ints(sub(t_small, sub(e, xr))), kshift));
    // k >= 23: 2^k * ((x - (e + 2^-k)) + 1).
    const __m256 t_big = bits(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_set1_epi32(0x7f), k), 23));
    const __m256 res_kbig = bits(_mm256_add_epi32(ints(add(sub(xr, add(e, t_big)), f(1.0f))), kshift));
    const __m256 is_km1 = bits(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(-1)));
    const __m256 is_kp1 = bits(_mm256_cmpeq_epi32(k, _mm256_set1_epi32(1)));
    const __m256 is_kneg = bits(_mm256_cmpgt_epi32(_mm256_set1_epi32(-1), k));
    const __m256 is_kbig = bits(_mm256_cmpgt_epi32(k, _mm256_set1_epi32(22)));
    __m256 r = sel(is_kbig, res_kbig, res_ksmall);
    r = sel(is_kneg, res_kneg, r);
    r = sel(is_kp1, res_kp1, r);
    r = sel(is_km1, res_km1, r);
    return sel(k0, res_k0, r);
}

__m256 tanh8(__m256 x, int* fallback) {
    const __m256 ax = _mm256_andnot_ps(f(-0.0f), x);
    const __m256 in_range = _mm256_and_ps(_mm256_cmp_ps(ax, f(0x1p-12f), _CMP_GE_OQ), _mm256_cmp_ps(ax, f(9.0f), _CMP_LT_OQ));
    *fallback = ~_mm256_movemask_ps(in_range) & 0xff;
    const __m256 big = _mm256_cmp_ps(ax, f(1.0f), _CMP_GE_OQ);
    const __m256 two_ax = mul(f(2.0f), ax);
    // Out-of-range lanes get a harmless argument; they are replaced afterwards.
    const __m256 arg = sel(in_range, sel(big, two_ax, sub(_mm256_setzero_ps(), two_ax)), f(1.0f));
    const __m256 t = expm1_mid(arg);
    const __m256 z = sel(big, sub(f(1.0f), _mm256_div_ps(f(2.0f), add(t, f(2.0f)))),
                         _mm256_div_ps(_mm256_xor_ps(t, f(-0.0f)), add(t, f(2.0f))));
    return _mm256_or_ps(z, _mm256_and_ps(x, f(-0.0f)));     // the sign of x
}

}  // namespace

void tanh_avx2(const float* x, float* y, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        int fb = 0;
        alignas(32) float in[8];                 // x and y may alias: keep the inputs for fallbacks
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm256_store_ps(in, v);
        _mm256_storeu_ps(y + i, tanh8(v, &fb));
        for (; fb; fb &= fb - 1) {
            const int l = __builtin_ctz(unsigned(fb));
            y[i + l] = std::tanh(in[l]);
        }
    }
    for (; i < n; ++i) y[i] = std::tanh(x[i]);
}

}  // namespace kinfer::backend::cpu::ops
