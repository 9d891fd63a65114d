// The vision attention's scores, q . k for every key, as llama.cpp's golden build computes them:
// ggml_vec_dot_f32 on head_dim (24 .. 72) values, all in its scalar tail, which GCC compiles as
// a chain from 0 over the dimensions in order, s = s + k_i q_i with the product rounded first for
// the 16- and 8-element chunks it vectorizes and fused for the last D % 8 (matmul_f32_avx2.cpp,
// tail_ggml). The chains of R queries x 16 keys run side by side in registers (K transposed:
// kt[i * n + j] is dimension i of key j), one K load feeding R queries. The attribute / pragma
// stop the compiler from contracting the unfused part.
#include <immintrin.h>

#include <cstdint>

namespace kinfer::backend::cpu {

namespace {

template <int R>
#if defined(__clang__)
void scores_rows(const float* kt, int64_t n, int64_t D, const float* const* q, float* const* s) {
#pragma clang fp contract(off)
#else
__attribute__((optimize("fp-contract=off"))) void scores_rows(const float* kt, int64_t n, int64_t D, const float* const* q,
                                                            float* const* s) {
#endif
    const int64_t unfused = D / 16 * 16 + (D % 16 >= 8 ? 8 : 0);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        __m256 acc[R][2];
        for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
        int64_t i = 0;
        for (; i < unfused; ++i) {
            const __m256 k0 = _mm256_loadu_ps(kt + i * n + j), k1 = _mm256_loadu_ps(kt + i * n + j + 8);
            for (int r = 0; r < R; ++r) {
                const __m256 qb = _mm256_broadcast_ss(q[r] + i);
                acc[r][0] = _mm256_add_ps(_mm256_mul_ps(k0, qb), acc[r][0]);
                acc[r][1] = _mm256_add_ps(_mm256_mul_ps(k1, qb), acc[r][1]);
            }
        }
        for (; i < D; ++i) {
            const __m256 k0 = _mm256_loadu_ps(kt + i * n + j), k1 = _mm256_loadu_ps(kt + i * n + j + 8);
            for (int r = 0; r < R; ++r) {
                const __m256 qb = _mm256_broadcast_ss(q[r] + i);
                acc[r][0] = _mm256_fmadd_ps(k0, qb, acc[r][0]);
                acc[r][1] = _mm256_fmadd_ps(k1, qb, acc[r][1]);
            }
        }
        for (int r = 0; r < R; ++r) {
            _mm256_storeu_ps(s[r] + j, acc[r][0]);
            _mm256_storeu_ps(s[r] + j + 8, acc[r][1]);
        }
    }
    for (; j < n; ++j)
        for (int r = 0; r < R; ++r) {
            float a = 0;
            for (int64_t i = 0; i < D; ++i)
                a = i < unfused ? a + kt[i * n + j] * q[r][i] : __builtin_fmaf(kt[i * n + j], q[r][i], a);
            s[r][j] = a;
        }
}

}  // namespace

// Rows q[0..nq) of scores s[r][0..n); nq any count (groups of 4, then single rows).
void attn_scores_avx2(const float* kt, int64_t n, int64_t D, const float* const* q, float* const* s, int64_t nq) {
    int64_t r = 0;
    for (; r + 4 <= nq; r += 4) scores_rows<4>(kt, n, D, q + r, s + r);
    for (; r < nq; ++r) scores_rows<1>(kt, n, D, q + r, s + r);
}

}  // namespace kinfer::backend::cpu
