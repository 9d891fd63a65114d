// Element-wise and row-wise operators of the forward pass, written to follow ggml's CPU
// arithmetic (double accumulation where ggml uses it, the same operation order) so fp32 results
// stay within float noise of llama.cpp.
#pragma once
#include <cstdint>

namespace kinfer::backend::cpu::ops {

// y = x / sqrt(mean(x^2) + eps) [* w]: the sum of squares in double, as ggml_rms_norm.
// w may be null (no weight). x and y may alias.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);
// y = x / max(sqrt(sum x^2), eps) (ggml_l2_norm).
void l2_norm(const float* x, float* y, int64_t n, float eps);

inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
// y[i] = silu(x[i]) the way ggml_silu computes it: 16- or 8-wide vector exp (ggml's polynomial)
// on AVX-512 / AVX2 machines, libm for the tail and without SIMD. x and y may alias.
void silu(const float* x, float* y, int64_t n);
// y[i] = tanhf(x[i]) bit for bit (glibc 2.36's algorithm, vectorised with AVX2; the C library for
// the lanes it does not cover and without AVX2). x and y may alias.
void tanh(const float* x, float* y, int64_t n);
// ggml's softplus: linear above 20.
inline float softplus(float x) { return x > 20.0f ? x : __builtin_logf(1.0f + __builtin_expf(x)); }

// out[i] = act(g[i], u[i]): SwiGLU (silu(g) * u) or SiTU-GLU (DESIGN.md 3.4).
void swiglu(const float* g, const float* u, float* out, int64_t n);   // out may alias g, not u
void situ_glu(const float* g, const float* u, float* out, int64_t n, float beta, float linear_beta);

// In-place softmax of x[0..n) after x*scale; sum in double like ggml_soft_max.
void softmax(float* x, int64_t n, float scale = 1.0f);

// Sum of x in double, returned as float (ggml_sum_rows).
float sum(const float* x, int64_t n);


}  // namespace kinfer::backend::cpu::ops
