#include "backend/cpu/ops.h"

#include "quant/types.h"

#include <algorithm>
#include <cmath>

namespace kinfer::backend::cpu::ops {

void silu_avx2(const float* x, float* y, int64_t n);
void silu_avx512(const float* x, float* y, int64_t n);
void tanh_avx2(const float* x, float* y, int64_t n);

void tanh(const float* x, float* y, int64_t n) {
    static const bool simd = quant::active_isa() != quant::Isa::scalar;
    if (simd) return tanh_avx2(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = std::tanh(x[i]);
}

void silu(const float* x, float* y, int64_t n) {
    // KINFER_ISA picks the level for these as for the quant kernels.
    static const quant::Isa isa = quant::active_isa();
    if (isa == quant::Isa::avx512) return silu_avx512(x, y, n);
    if (isa == quant::Isa::avx2) return silu_avx2(x, y, n);
    for (int64_t i = 0; i < n; ++i) y[i] = silu(x[i]);
}

void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
    const float mean = float(sum / double(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    // ggml scales first and multiplies by the weight in a separate op: keep that rounding.
    if (w) {
        for (int64_t i = 0; i < n; ++i) y[i] = (x[i] * scale) * w[i];
    } else {
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
    }
}

void l2_norm(const float* x, float* y, int64_t n, float eps) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
    const float scale = 1.0f / std::fmax(std::sqrt(float(sum)), eps);
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * scale;
}

void swiglu(const float* g, const float* u, float* out, int64_t n) {
    // ggml_swiglu: the vector silu of g, times u.
    silu(g, out, n);
    for (int64_t i = 0; i < n; ++i) out[i] *= u[i];
}

void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta, float linear_beta) {
    // ggml graph: scale(tanh(scale(g, 1/b)), b) * sigmoid(g) * [scale(tanh(scale(u, 1/bl)), bl)]
    // In blocks, so the two tanh run vectorised (bit-identical to tanhf, ops.h).
    const float ib = 1.0f / beta;
    const float ilb = linear_beta > 0.0f ? 1.0f / linear_beta : 0.0f;
    constexpr int64_t B = 256;
    float tg[B], tu[B];
    for (int64_t i0 = 0; i0 < n; i0 += B) {
        const int64_t m = std::min(B, n - i0);
        for (int64_t i = 0; i < m; ++i) tg[i] = g[i0 + i] * ib;
        tanh(tg, tg, m);
        if (linear_beta > 0.0f) {
            for (int64_t i = 0; i < m; ++i) tu[i] = u[i0 + i] * ilb;
            tanh(tu, tu, m);
        }
        for (int64_t i = 0; i < m; ++i) {
            const float a = (tg[i] * beta) * sigmoid(g[i0 + i]);
            const float up = linear_beta > 0.0f ? tu[i] * linear_beta : u[i0 + i];
            out[i0 + i] = a * up;
        }
    }
}

void softmax(float* x, int64_t n, float scale) {
    float mx = -INFINITY;
    for (int64_t i = 0; i < n; ++i) {
        x[i] *= scale;
        mx = std::fmax(mx, x[i]);
    }
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - mx);
        s += double(x[i]);
    }
    const float inv = float(1.0 / s);
    for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

float sum(const float* x, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += double(x[i]);
    return float(s);
}

}  // namespace kinfer::backend::cpu::ops
