// Row-wise and element-wise kernels: RMSNorm and softmax (one block per row, block reductions),
// the GLU activations (grid-stride, one element per thread). The arithmetic follows the CPU
// ops (src/backend/cpu/ops.cpp) operation for operation; the sums are fp32 in tree order where
// the CPU sums in double, which the CPU-mode tests bound.
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kRowThreads = 256;

__global__ void __launch_bounds__(kRowThreads)
    rms_norm_kernel(const float* x, const float* w, float* y, int64_t d, float eps, int64_t ld) {
    const float* xr = x + int64_t(blockIdx.x) * ld;
    float* yr = y + int64_t(blockIdx.x) * ld;
    float s = 0;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += xr[i] * xr[i];
    const float mean = block_sum(s) / float(d);
    const float scale = 1.0f / sqrtf(mean + eps);
    // Scale first, then the weight: ggml's two ops, two roundings.
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
}

__global__ void __launch_bounds__(kRowThreads) softmax_kernel(float* x, int64_t n, float scale) {
    float* xr = x + int64_t(blockIdx.x) * n;
    float mx = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) mx = fmaxf(mx, xr[i] * scale);
    mx = block_max(mx);
    float s = 0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
        const float e = expf(xr[i] * scale - mx);
        xr[i] = e;
        s += e;
    }
    const float inv = 1.0f / block_sum(s);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) xr[i] *= inv;
}

__global__ void glu_kernel(float* g, const float* u, int64_t n, bool situ, float beta, float ib, float linear_beta,
                           float ilb) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float gi = g[i];
        if (!situ) {
            g[i] = gi / (1.0f + expf(-gi)) * u[i];
        } else {
            const float a = (tanhf(gi * ib) * beta) * (1.0f / (1.0f + expf(-gi)));
            const float up = linear_beta > 0.0f ? tanhf(u[i] * ilb) * linear_beta : u[i];
            g[i] = a * up;
        }
    }
}

}  // namespace

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps, int64_t ld, void* stream) {
    if (rows <= 0) return;
    auto* k = &rms_norm_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(rows)), dim3(kRowThreads), 0, as_stream(stream), x, w, y, d, eps, ld ? ld : d);
}

void softmax_rows(float* x, int64_t rows, int64_t n, float scale, void* stream) {
    if (rows <= 0) return;
    auto* k = &softmax_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(rows)), dim3(kRowThreads), 0, as_stream(stream), x, n, scale);
}

void glu(float* g, const float* u, int64_t n, bool situ, float beta, float linear_beta, void* stream) {
    if (n <= 0) return;
    // The reciprocals as the CPU op computes them (once, in fp32).
    const float ib = situ ? 1.0f / beta : 0.0f;
    const float ilb = linear_beta > 0.0f ? 1.0f / linear_beta : 0.0f;
    const int64_t threads = 256, blocks = (n + threads - 1) / threads;
    auto* k = &glu_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(blocks < 4096 ? blocks : 4096)), dim3(unsigned(threads)), 0, as_stream(stream), g, u,
                  n, situ, beta, ib, linear_beta, ilb);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
