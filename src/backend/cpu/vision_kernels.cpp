#include "backend/cpu/vision_kernels.h"

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "quant/fp16.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kinfer::backend::cpu {

void softmax_row_avx2(float* x, int64_t n, float scale);   // vision_softmax_avx2.cpp
void attn_scores_avx2(const float* kt, int64_t n, int64_t D, const float* const* q, float* const* s,
                      int64_t nq);                             // vision_scores_avx2.cpp

namespace {

// GELU, tanh form, in float as the ggml build that made the table computes it: saturated
// outside (-10, 10), and 1 + a x^2 as one fused multiply-add (the compiler contracts it there;
// with a separate multiply and add one entry, x = -1.999, rounds the other way).
float gelu_tanh_f32(float x) {
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    constexpr float kCoefA = 0.044715f;
    if (x <= -10.0f) return 0.0f;
    if (x >= 10.0f) return x;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * std::fma(kCoefA * x, x, 1.0f)));
}

std::vector<uint16_t> build_gelu_table() {
    std::vector<uint16_t> t(65536);
    for (uint32_t i = 0; i < 65536; ++i)
        t[i] = quant::fp32_to_fp16(gelu_tanh_f32(quant::fp16_to_fp32(quant::fp16_t(i))));
    return t;
}

}  // namespace

const uint16_t* gelu_f16_table() {
    static const std::vector<uint16_t> table = build_gelu_table();
    return table.data();
}

void gelu(float* x, int64_t n) {
    const uint16_t* t = gelu_f16_table();
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i];
        if (v <= -10.0f) x[i] = 0.0f;
        else if (v >= 10.0f) x[i] = v;
        else x[i] = quant::fp16_to_fp32(t[quant::fp32_to_fp16(v)]);
    }
}

void gelu_erf(float* x, int64_t n) {
    constexpr float kInvSqrt2 = 0.70710678118654752440f;
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

// Contraction off: the pairs ggml computes unfused must stay so on a build with FMA enabled.
#if defined(__clang__)
void rope_2d(float* x, int64_t n, int64_t H, int64_t D, const int32_t* pos_x, const int32_t* pos_y, float theta,
             int64_t ld) {
#pragma clang fp contract(off)
#else
__attribute__((optimize("fp-contract=off"))) void rope_2d(float* x, int64_t n, int64_t H, int64_t D, const int32_t* pos_x,
                                                        const int32_t* pos_y, float theta, int64_t ld) {
#endif
    const int64_t half = D / 2;
    // ggml's rope cache: the angle starts at pos and is multiplied by theta^(-2 / n_dims) per pair.
    const float step = std::pow(theta, -2.0f / float(half));
    std::vector<float> cs(static_cast<size_t>(half));   // cos, sin per pair of one half
    for (int64_t t = 0; t < n; ++t) {
        for (int part = 0; part < 2; ++part) {
            float a = float(part == 0 ? pos_x[t] : pos_y[t]);
            for (int64_t i = 0; i < half / 2; ++i) {
                cs[size_t(2 * i)] = std::cos(a);
                cs[size_t(2 * i + 1)] = std::sin(a);
                a *= step;
            }
            for (int64_t h = 0; h < H; ++h) {
                float* v = x + t * ld + h * D + part * half;
                for (int64_t i = 0; i < half / 2; ++i) {
                    const float c = cs[size_t(2 * i)], s = cs[size_t(2 * i + 1)];
                    const float x0 = v[2 * i], x1 = v[2 * i + 1];
                    // ggml's rotate_pairs as GCC 12 vectorizes it for AVX-512: pairs in its 8- and
                    // 4-pair vector chunks get x0 c - x1 s and x0 s + x1 c with one product
                    // fused, the last P % 4 pairs multiply and add apart.
                    const int64_t P = half / 2, fused = P / 8 * 8 + (P % 8 >= 4 ? 4 : 0);
                    if (i < fused) {
                        v[2 * i] = std::fma(x0, c, -(x1 * s));
                        v[2 * i + 1] = std::fma(x0, s, x1 * c);
                    } else {
                        v[2 * i] = x0 * c - x1 * s;
                        v[2 * i + 1] = x1 * c + x0 * s;
                    }
                }
            }
        }
    }
}

void attend_full(runtime::ThreadPool& pool, const float* q, const float* k, const float* v, float* o, int64_t n,
                 int64_t H, int64_t D, float scale) {
    const int64_t ld = H * D;
    // As ggml without flash attention on the golden (AVX-512) build, per head: scores in f32 (a
    // multiply-add chain per score, vision_scores_avx2.cpp, four queries x 16 keys at a time), a
    // softmax over each query's row (ggml's AVX-512 arithmetic, vision_softmax_avx2.cpp), then
    // O = V^T P through the f32 matmul, which picks ggml's kernel (tinyBLAS or ggml_vec_dot_f32).
    // Queries go in blocks so the score rows stay small for large images.
    constexpr int64_t kBlock = 256;
    static const bool simd = quant::active_isa() != quant::Isa::scalar;   // AVX2 or better
    std::vector<float> kt(static_cast<size_t>(D * n)), vt(static_cast<size_t>(D * n));
    std::vector<float> sc(static_cast<size_t>(std::min(n, kBlock) * n));
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < n; ++j)
            for (int64_t i = 0; i < D; ++i) {
                kt[size_t(i * n + j)] = k[j * ld + h * D + i];
                vt[size_t(i * n + j)] = v[j * ld + h * D + i];
            }
        Mat Vt{quant::Type::F32, n, D, reinterpret_cast<const uint8_t*>(vt.data()), size_t(n) * sizeof(float), 0, "V"};
        for (int64_t q0 = 0; q0 < n; q0 += kBlock) {
            const int64_t b = std::min(kBlock, n - q0);
            pool.parallel_for(b, [&](int64_t r0, int64_t r1, int) {
                const float* qs[4];
                float* ss[4];
                for (int64_t g = r0; g < r1; g += 4) {
                    const int64_t m = std::min<int64_t>(4, r1 - g);
                    for (int64_t r = 0; r < m; ++r) {
                        qs[r] = q + (q0 + g + r) * ld + h * D;
                        ss[r] = sc.data() + (g + r) * n;
                    }
                    if (simd) attn_scores_avx2(kt.data(), n, D, qs, ss, m);
                    else
                        for (int64_t r = 0; r < m; ++r) {
                            std::fill_n(ss[r], n, 0.0f);
                            for (int64_t i = 0; i < D; ++i) mad_f32(ss[r], kt.data() + i * n, qs[r][i], n);
                        }
                    for (int64_t r = 0; r < m; ++r) {
                        if (simd) softmax_row_avx2(ss[r], n, scale);
                        else ops::softmax(ss[r], n, scale);
                    }
                }
            }, 4);
            matmul(pool, Vt, sc.data(), b, o + q0 * ld + h * D, n, ld);
        }
    }
}

}  // namespace kinfer::backend::cpu
