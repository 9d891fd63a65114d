// AVX2 + FMA + F16C dot products (reached only through dispatch.cpp after a CPU check).
// The kernels themselves live in vec_dot_simd.inc; this file supplies the AVX2 primitives.
#include <immintrin.h>

#include <bit>

#include <cstdint>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/matmul.h"

namespace kinfer::quant::avx2 {

namespace {

// maddubs wants an unsigned left operand: move x's sign onto y. |x|*|y| <= 127*127, so the
// pairwise int16 sums cannot saturate.
__m256i dot_s8(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}
__m256i dot_u8(__m256i u, __m256i y) { return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1)); }

// maddubs pairs (<= 2*63*127 or 2*127*127, no saturation) then madd with the scales.
__m256i acc_u8(__m256i acc, __m256i u, __m256i y, __m256i s16) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), s16));
}
// acc + int32 lanes of s16 times the int16 pairs w (formed by the caller).
__m256i acc_w16(__m256i acc, __m256i w, __m256i s16) { return _mm256_add_epi32(acc, _mm256_madd_epi16(w, s16)); }

// Q4_K against several activation rows pairs the two 32-weight halves of a group into one madd
// (acc_u8x2 in vec_dot_simd_prims.inc): AVX2 cores with one vector integer multiplier (Zen 1 issues
// maddubs and madd on one pipe) are bound by those multiplies in prefill (measured on Zen 1: Q4_K
// GEMM 18.4 -> 16.0 ns per 256 weights per token; Q5_K / Q6_K and decode gained nothing).
// AVX-512 VNNI scales inside vpdpwssd and keeps acc_u8.
#define KINFER_SIMD_PAIRED_SCALES 1

#include "quant/vec_dot_simd_prims.inc"

float k_f32_f32(int64_t n, const void* vx, const void* vy) {
    const float* x = static_cast<const float*>(vx);
    const float* y = static_cast<const float*>(vy);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int k = 0; k < 4; ++k) {
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
        }
    }
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float sum = hsum_f32(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += x[i] * y[i];
    return sum;
}

// The Q8_0 formats' tiles and several-weight-row kernels: AVX2 only (the AVX-512 build has its
// own tiles, vec_dot_tiles_avx512.cpp, which serve its decode too).
#define KINFER_SIMD_Q8_0_AVX2 1
#include "quant/vec_dot_simd.inc"

}  // namespace

#include "quant/vec_dot_simd_exports.inc"

#define KINFER_DEFINE_VEC_DOT_TILE(name)                                                                            \
    void vec_dot_tile_##name(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out, \
                             size_t os) {                                                                           \
        t_##name(n, x, xs, nx, y, ys, ny, out, os);                                                                 \
    }
KINFER_SIMD_VEC_DOTS_TILE_Q8_0(KINFER_DEFINE_VEC_DOT_TILE)
#undef KINFER_DEFINE_VEC_DOT_TILE
#define KINFER_DEFINE_VEC_DOT_ROWS_Q8_0(name)                                                                \
    void vec_dot_rows_##name(int64_t n, const void* x, size_t x_stride, int nx, const void* y, float* out) { \
        r_##name(n, x, x_stride, nx, y, out);                                                                \
    }
KINFER_SIMD_VEC_DOTS_ROWS_Q8_0(KINFER_DEFINE_VEC_DOT_ROWS_Q8_0)
#undef KINFER_DEFINE_VEC_DOT_ROWS_Q8_0

}  // namespace kinfer::quant::avx2
