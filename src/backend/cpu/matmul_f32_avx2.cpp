// AVX2/FMA fp32 dot product; compiled with -mavx2 -mfma and reached only through dot_f32's
// run-time check.
#include "backend/cpu/reduce16_avx2.h"

#include <cmath>
#include <cstdint>
#include <immintrin.h>

namespace kinfer::backend::cpu {

// The exact operation order of ggml_vec_dot_f32 on an AVX-512 build (what llama.cpp's CPU runs
// for single-row F32 products): four 16-lane FMA accumulators over steps of 64, folded
// (0+2, 1+3, then 0+1), a _mm512_reduce_add_ps tree, then the scalar tail as GCC compiles it
// (tail_ggml). Each 16-lane register is emulated by two 8-lane halves; float results are identical.
namespace {
// Everything but the scalar tail: the first n & ~63 elements, reduced to one float.
inline float dot_main(const float* a, const float* b, int64_t np) {
    __m256 lo[4], hi[4];
    for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
    for (int64_t i = 0; i < np; i += 64)
        for (int j = 0; j < 4; ++j) {
            lo[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16 * j), _mm256_loadu_ps(b + i + 16 * j), lo[j]);
            hi[j] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16 * j + 8), _mm256_loadu_ps(b + i + 16 * j + 8), hi[j]);
        }
    lo[0] = _mm256_add_ps(lo[0], lo[2]); hi[0] = _mm256_add_ps(hi[0], hi[2]);
    lo[1] = _mm256_add_ps(lo[1], lo[3]); hi[1] = _mm256_add_ps(hi[1], hi[3]);
    lo[0] = _mm256_add_ps(lo[0], lo[1]); hi[0] = _mm256_add_ps(hi[0], hi[1]);
    const __m256 t3 = _mm256_add_ps(hi[0], lo[0]);                                   // lanes i+8, i
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}
// The scalar tail of ggml_vec_dot_f32 (`sumf += x[i]*y[i]` from np to n) as GCC 12 compiles it
// at -O3 -march=native for AVX-512, the golden build: it vectorizes the multiplies of 16-element
// chunks, then of one 8-element chunk, rounding each product before the in-order adds, and only
// the last (n - np) % 8 elements become scalar FMAs. (The products are written with single-lane
// intrinsics so this file's own -mfma build cannot fuse them.)
inline int64_t tail_unfused_end(int64_t np, int64_t n) {
    const int64_t m = n - np;
    return np + m / 16 * 16 + (m % 16 >= 8 ? 8 : 0);
}
inline float madd_apart(float s, float a, float b) {
    return _mm_cvtss_f32(_mm_add_ss(_mm_set_ss(s), _mm_mul_ss(_mm_set_ss(a), _mm_set_ss(b))));
}
inline float tail_ggml(const float* a, const float* b, int64_t np, int64_t n, float s) {
    const int64_t u = tail_unfused_end(np, n);
    int64_t i = np;
    for (; i < u; ++i) s = madd_apart(s, a[i], b[i]);
    for (; i < n; ++i) s = __builtin_fmaf(a[i], b[i], s);
    return s;
}
}  // namespace

float dot_f32_avx2(const float* a, const float* b, int64_t n) {
    const int64_t np = n & ~int64_t(63);
    return tail_ggml(a, b, np, n, dot_main(a, b, np));
}

// Four dot products of a with b[0..3], each with dot_f32_avx2's exact operation order; the four
// scalar tails (n % 64 elements, tail_ggml's rule) run interleaved so their latencies overlap.
void dot4_f32_avx2(const float* a, const float* const* b, int64_t n, float* out) {
    const int64_t np = n & ~int64_t(63);
    float r0 = dot_main(a, b[0], np), r1 = dot_main(a, b[1], np), r2 = dot_main(a, b[2], np), r3 = dot_main(a, b[3], np);
    const int64_t u = tail_unfused_end(np, n);
    for (int64_t i = np; i < u; ++i) {
        r0 = madd_apart(r0, a[i], b[0][i]);
        r1 = madd_apart(r1, a[i], b[1][i]);
        r2 = madd_apart(r2, a[i], b[2][i]);
        r3 = madd_apart(r3, a[i], b[3][i]);
    }
    for (int64_t i = u; i < n; ++i) {
        r0 = __builtin_fmaf(a[i], b[0][i], r0);
        r1 = __builtin_fmaf(a[i], b[1][i], r1);
        r2 = __builtin_fmaf(a[i], b[2][i], r2);
        r3 = __builtin_fmaf(a[i], b[3][i], r3);
    }
    out[0] = r0, out[1] = r1, out[2] = r2, out[3] = r3;
}

}  // namespace kinfer::backend::cpu

namespace kinfer::backend::cpu {

namespace {
// dot_main's fold of its accumulators, given as acc[2j] = lo[j], acc[2j + 1] = hi[j].
inline float fold8(const __m256* acc) {
    const __m256 l0 = _mm256_add_ps(_mm256_add_ps(acc[0], acc[4]), _mm256_add_ps(acc[2], acc[6]));
    const __m256 h0 = _mm256_add_ps(_mm256_add_ps(acc[1], acc[5]), _mm256_add_ps(acc[3], acc[7]));
    const __m256 t3 = _mm256_add_ps(h0, l0);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, 1));
}

}  // namespace

// out[t * 4 + r] = dot_f32_avx2(w[r], x[t], n) for two activation rows and four weight rows, bit
// for bit: dot_main's eight accumulators are independent sums over the 64-element blocks, so
// they are taken one at a time (accumulator g of all eight products in registers, 6 loads per
// 8 FMAs where four dot_f32 calls load twice per FMA), then folded as dot_main folds them.
void dot_f32_tile_avx2(const float* const* w, const float* const* x, int64_t n, float* out) {
    const int64_t np = n & ~int64_t(63);
    __m256 acc[8][8];   // [product][accumulator], in fold8's order
    for (int g = 0; g < 8; ++g) {
        __m256 c[8];
        for (auto& v : c) v = _mm256_setzero_ps();
        for (int64_t i = 8 * g; i < np; i += 64) {
            const __m256 x0 = _mm256_loadu_ps(x[0] + i), x1 = _mm256_loadu_ps(x[1] + i);
            for (int r = 0; r < 4; ++r) {
                const __m256 wv = _mm256_loadu_ps(w[r] + i);
                c[r] = _mm256_fmadd_ps(wv, x0, c[r]);
                c[4 + r] = _mm256_fmadd_ps(wv, x1, c[4 + r]);
            }
        }
        for (int k = 0; k < 8; ++k) acc[k][g] = c[k];
    }
    float s[8];
    for (int k = 0; k < 8; ++k) s[k] = fold8(acc[k]);
    // The eight tails interleaved, so their dependent adds overlap.
    const int64_t u = tail_unfused_end(np, n);
    for (int64_t i = np; i < u; ++i)
        for (int k = 0; k < 8; ++k) s[k] = madd_apart(s[k], w[k % 4][i], x[k / 4][i]);
    for (int64_t i = u; i < n; ++i)
        for (int k = 0; k < 8; ++k) s[k] = __builtin_fmaf(w[k % 4][i], x[k / 4][i], s[k]);
    for (int k = 0; k < 8; ++k) out[k] = s[k];
}

namespace {
// R rows of the KDA recurrence (state rows M + r D = columns of S), each with ggml's arithmetic:
// decay (mul), delta from a vec_dot, FMA update (ggml_vec_mad_f32), output vec_dot. Each dot is
// folded into the pass that writes its operand, accumulating in dot_f32_avx2's exact order (the
// accumulator of element i is (i / 8) % 8 over the first D & ~63 elements, then its fold, then
// tail_ggml), so two passes over a row replace four with the same bits.
template <int R>
void kda_rows(float* M, const float* eg, const float* k, const float* q, int64_t D, const float* v, float beta, float* o) {
    const int64_t np = D & ~int64_t(63);
    __m256 acc[R][8];
    for (int r = 0; r < R; ++r)
        for (int a = 0; a < 8; ++a) acc[r][a] = _mm256_setzero_ps();
    for (int64_t i0 = 0; i0 < np; i0 += 64)
    for (int a = 0; a < 8; ++a) {   // static accumulator indices: they must stay in registers
        const int64_t i = i0 + 8 * a;
        const __m256 e = _mm256_loadu_ps(eg + i), kk = _mm256_loadu_ps(k + i);
        for (int r = 0; r < R; ++r) {
            float* m = M + r * D + i;
            const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(m), e);
            _mm256_storeu_ps(m, x);
            acc[r][a] = _mm256_fmadd_ps(x, kk, acc[r][a]);
        }
    }
    float d[R];
    for (int r = 0; r < R; ++r) {
        float* m = M + r * D;
        for (int64_t i = np; i < D; ++i) m[i] *= eg[i];
        float s = fold8(acc[r]);
        s = tail_ggml(m, k, np, D, s);
        d[r] = (v[r] - s) * beta;
        for (int a = 0; a < 8; ++a) acc[r][a] = _mm256_setzero_ps();
    }
    for (int64_t i0 = 0; i0 < np; i0 += 64)
    for (int a = 0; a < 8; ++a) {
        const int64_t i = i0 + 8 * a;
        const __m256 kk = _mm256_loadu_ps(k + i), qq = _mm256_loadu_ps(q + i);
        for (int r = 0; r < R; ++r) {
            float* m = M + r * D + i;
            const __m256 x = _mm256_fmadd_ps(kk, _mm256_set1_ps(d[r]), _mm256_loadu_ps(m));
            _mm256_storeu_ps(m, x);
            acc[r][a] = _mm256_fmadd_ps(x, qq, acc[r][a]);
        }
    }
    for (int r = 0; r < R; ++r) {
        float* m = M + r * D;
        for (int64_t i = np; i < D; ++i) m[i] = __builtin_fmaf(k[i], d[r], m[i]);
        float s = fold8(acc[r]);
        s = tail_ggml(m, q, np, D, s);
        o[r] = s;
    }
}
}  // namespace

// Rows 0..nrows-1 of M (D floats apart); o[r] gets row r's unscaled output. One row at a time:
// its eight accumulators and operands fill AVX2's sixteen registers (two rows spilled and ran
// slower than the four-pass form).
void kda_rows_step_avx2(float* M, int64_t nrows, const float* eg, const float* k, const float* q, int64_t D,
                        const float* v, float beta, float* o) {
    for (int64_t r = 0; r < nrows; ++r) kda_rows<1>(M + r * D, eg, k, q, D, v + r, beta, o + r);
}

}  // namespace kinfer::backend::cpu

namespace kinfer::backend::cpu {

// llamafile's tinyBLAS order (what llama.cpp runs for F32 matmuls of >= 2 rows on an AVX-512
// build): one 16-lane FMA accumulator per output over k (k % 16 == 0), then the reduce tree.
// Four weight rows share each activation load.
void dot4_f32_sgemm_avx2(const float* const* w, const float* x, int64_t n, float* out) {
    __m256 lo[4], hi[4];
    for (int j = 0; j < 4; ++j) lo[j] = hi[j] = _mm256_setzero_ps();
    for (int64_t l = 0; l < n; l += 16) {
        const __m256 xl = _mm256_loadu_ps(x + l), xh = _mm256_loadu_ps(x + l + 8);
        for (int j = 0; j < 4; ++j) {
            lo[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w[j] + l), xl, lo[j]);
            hi[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w[j] + l + 8), xh, hi[j]);
        }
    }
    for (int j = 0; j < 4; ++j) out[j] = reduce16(lo[j], hi[j]);
}

// out[t * 4 + j] = the tinyBLAS-order product of w[j] and x[t] for two activation rows, bit for
// bit with dot4_f32_sgemm_avx2: each product's two 8-lane halves are independent sums over k, so
// the low halves of all eight run in one pass and the high halves in a second (6 loads per
// 8 FMAs instead of 10), then each pair goes through the reduce tree.
void dot_f32_sgemm_tile_avx2(const float* const* w, const float* const* x, int64_t n, float* out) {
    __m256 half[2][8];
    for (int h = 0; h < 2; ++h) {
        __m256 c[8];
        for (auto& v : c) v = _mm256_setzero_ps();
        for (int64_t l = 8 * h; l < n; l += 16) {
            const __m256 x0 = _mm256_loadu_ps(x[0] + l), x1 = _mm256_loadu_ps(x[1] + l);
            for (int j = 0; j < 4; ++j) {
                const __m256 wv = _mm256_loadu_ps(w[j] + l);
                c[j] = _mm256_fmadd_ps(wv, x0, c[j]);
                c[4 + j] = _mm256_fmadd_ps(wv, x1, c[4 + j]);
            }
        }
        for (int k = 0; k < 8; ++k) half[h][k] = c[k];
    }
    for (int k = 0; k < 8; ++k) out[k] = reduce16(half[0][k], half[1][k]);
}

float dot_f32_sgemm_avx2(const float* a, const float* b, int64_t n) {
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    for (int64_t l = 0; l < n; l += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + l), _mm256_loadu_ps(b + l), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + l + 8), _mm256_loadu_ps(b + l + 8), hi);
    }
    return reduce16(lo, hi);
}

}  // namespace kinfer::backend::cpu

namespace kinfer::backend::cpu {

// y += a * x, multiply and add rounded separately: the arithmetic of the scalar loop this
// replaced, which keeps the fp32 perplexities within llama.cpp's own spread (a fused version moved
// them by 1.5x). The attribute / pragma stop the compiler from contracting it into an FMA.
#if defined(__clang__)
void mad_f32_avx2(float* y, const float* x, float a, int64_t n) {
#pragma clang fp contract(off)
#else
__attribute__((optimize("fp-contract=off"))) void mad_f32_avx2(float* y, const float* x, float a, int64_t n) {
#endif
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), va), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

// y[i] = fma(a[i], b[i], y[i]): one rounding per element (see fma_f32 in matmul.h).
void fma_f32_avx2(float* y, const float* a, const float* b, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] = std::fma(a[i], b[i], y[i]);
}

}  // namespace kinfer::backend::cpu
