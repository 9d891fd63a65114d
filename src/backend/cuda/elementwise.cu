// Element-wise kernels of the forward pass (grid-stride, one element per thread per step): add,
// the sigmoid gate, sigmoid, the MoE slot sum, the KDA decay gate, and the causal conv + SiLU
// (one thread per channel walks the tokens, keeping the last W - 1 inputs in registers). Each
// follows the CPU op's formula (src/backend/cpu_backend.cpp, cpu/kda_kernels.cpp).
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kThreads = 256;

dim3 grid_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return dim3(unsigned(b < 8192 ? (b > 0 ? b : 1) : 8192));
}

#define KINFER_GRID_STRIDE(i, n) \
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__device__ __forceinline__ float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

__global__ void add_kernel(float* y, const float* a, int64_t n) {
    KINFER_GRID_STRIDE(i, n) y[i] += a[i];
}
__global__ void mul_sigmoid_kernel(float* y, const float* g, int64_t n) {
    KINFER_GRID_STRIDE(i, n) y[i] *= sigmoidf(g[i]);
}
__global__ void sigmoid_kernel(float* x, int64_t n) {
    KINFER_GRID_STRIDE(i, n) x[i] = sigmoidf(x[i]);
}
__global__ void scale_rows_kernel(float* y, const float* w, int64_t rows, int64_t cols) {
    KINFER_GRID_STRIDE(i, rows * cols) y[i] = y[i] * w[i / cols];
}
// out[t][c] = ys[t][0][c] + ys[t][1][c] + ... in slot order (ggml's chain of adds).
__global__ void sum_slots_kernel(const float* ys, int64_t n, int64_t K, int64_t cols, float* out) {
    KINFER_GRID_STRIDE(i, n * cols) {
        const int64_t t = i / cols, c = i % cols;
        const float* y = ys + t * K * cols + c;
        float s = y[0];
        for (int64_t k = 1; k < K; ++k) s += y[k * cols];
        out[i] = s;
    }
}
__global__ void kda_decay_kernel(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D,
                                 bool lower_bound, float lb) {
    const int64_t di = H * D;
    KINFER_GRID_STRIDE(i, n * di) {
        const int64_t c = i % di;
        const float f = g[i] + dt_bias[c];
        const float ah = a[c / D];                // -exp(A_log)
        // K3: lb * sigmoid(exp(A_log) f); Kimi Linear: softplus(f) * a (linear above 20).
        g[i] = lower_bound ? sigmoidf(-(f * ah)) * lb : (f > 20.0f ? f : logf(1.0f + expf(f))) * ah;
    }
}

constexpr int kMaxConvWidth = 8;

// One thread per channel: output t = silu(sum_j taps[j] * window[t + j]) over the window
// [state; x], written over x[t] once x[t] itself has been read.
__global__ void conv_silu_kernel(float* x, int64_t n, int64_t di, int W, const float* taps, float* state) {
    const int64_t ch = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (ch >= di) return;
    const int S = W - 1;
    float ring[kMaxConvWidth], w[kMaxConvWidth];
    for (int j = 0; j < W; ++j) w[j] = taps[ch * W + j];
    for (int j = 0; j < S; ++j) ring[j] = state[ch * S + j];
    for (int64_t t = 0; t < n; ++t) {
        const float cur = x[t * di + ch];
        float o = 0.0f;
        for (int j = 0; j < S; ++j) o += ring[j] * w[j];
        o += cur * w[S];
        x[t * di + ch] = o / (1.0f + expf(-o));
        for (int j = 0; j + 1 < S; ++j) ring[j] = ring[j + 1];
        if (S > 0) ring[S - 1] = cur;
    }
    for (int j = 0; j < S; ++j) state[ch * S + j] = ring[j];
}

__global__ void __launch_bounds__(kThreads) l2_norm_kernel(float* x, int64_t d, float eps) {
    float* xr = x + int64_t(blockIdx.x) * d;
    float s = 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i] * xr[i];
    const float scale = 1.0f / fmaxf(sqrtf(block_sum(s)), eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) xr[i] *= scale;
}

}  // namespace

void add(float* y, const float* a, int64_t n, void* stream) {
    if (n <= 0) return;
    auto* k = &add_kernel;
    KINFER_LAUNCH(k, grid_for(n), dim3(kThreads), 0, as_stream(stream), y, a, n);
}

void mul_sigmoid(float* y, const float* g, int64_t n, void* stream) {
    if (n <= 0) return;
    auto* k = &mul_sigmoid_kernel;
    KINFER_LAUNCH(k, grid_for(n), dim3(kThreads), 0, as_stream(stream), y, g, n);
}

void scale_rows(float* y, const float* w, int64_t rows, int64_t cols, void* stream) {
    if (rows <= 0 || cols <= 0) return;
    auto* k = &scale_rows_kernel;
    KINFER_LAUNCH(k, grid_for(rows * cols), dim3(kThreads), 0, as_stream(stream), y, w, rows, cols);
}

void sigmoid(float* x, int64_t n, void* stream) {
    if (n <= 0) return;
    auto* k = &sigmoid_kernel;
    KINFER_LAUNCH(k, grid_for(n), dim3(kThreads), 0, as_stream(stream), x, n);
}

void sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out, void* stream) {
    if (n <= 0 || K <= 0) return;
    auto* k = &sum_slots_kernel;
    KINFER_LAUNCH(k, grid_for(n * cols), dim3(kThreads), 0, as_stream(stream), ys, n, K, cols, out);
}

void kda_decay(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D, bool lower_bound,
               float lb, void* stream) {
    if (n <= 0) return;
    auto* k = &kda_decay_kernel;
    KINFER_LAUNCH(k, grid_for(n * H * D), dim3(kThreads), 0, as_stream(stream), g, dt_bias, a, n, H, D, lower_bound, lb);
}

void conv_silu(float* x, int64_t n, int64_t channels, int64_t W, const float* taps, float* state, void* stream) {
    if (W < 1 || W > kMaxConvWidth)
        throw std::invalid_argument("cuda conv_silu: kernel width " + std::to_string(W) + " is not 1..8");
    if (channels <= 0) return;
    auto* k = &conv_silu_kernel;
    const unsigned blocks = unsigned((channels + kThreads - 1) / kThreads);
    KINFER_LAUNCH(k, dim3(blocks), dim3(kThreads), 0, as_stream(stream), x, n, channels, int(W), taps, state);
}

void l2_norm(float* x, int64_t rows, int64_t d, float eps, void* stream) {
    if (rows <= 0) return;
    auto* k = &l2_norm_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(rows)), dim3(kThreads), 0, as_stream(stream), x, d, eps);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
