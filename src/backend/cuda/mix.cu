// The MoE gather and scatter and the AttnRes mix (DESIGN.md 3.1 / 3.4).
//  - gather_rows: dst row j = src row idx[j] / div, one block a row (idx in device memory).
//  - scatter_weighted: dst row idx[j] = src row j * wj[j] (idx and wj in device memory; the
//    backend uploads the host lists).
//  - attn_res_mix: one block per token. Each source (the banked blocks, then the partial sum p)
//    is scored as <RMSNorm(v), w> with two block reductions; a softmax over the m + 1 scores;
//    then the weighted sum, banked blocks first in order, as the CPU op adds them.
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMixThreads = 256;

__global__ void scatter_weighted_kernel(const float* src, int64_t cols, const int64_t* idx, const float* wj, int64_t rows,
                                        float* dst) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < rows * cols; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t j = i / cols, c = i % cols;
        dst[idx[j] * cols + c] = src[i] * wj[j];
    }
}

__global__ void gather_rows_kernel(const float* __restrict__ src, int64_t cols, const int64_t* __restrict__ idx,
                                   int64_t div, float* __restrict__ dst) {
    const int64_t j = blockIdx.x;
    const float* s = src + (idx[j] / div) * cols;
    float* d = dst + j * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) d[c] = s[c];
}

__global__ void __launch_bounds__(kMixThreads)
    attn_res_kernel(AttnResStack stack, const float* p, const float* w, float* out, int64_t d, float eps) {
    const int64_t t = blockIdx.x;
    const int m = stack.m;
    float a[kAttnResMaxBlocks + 1];
    for (int j = 0; j <= m; ++j) {
        const float* v = (j < m ? stack.blocks[j] : p) + t * d;
        float ss = 0;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) ss += v[i] * v[i];
        const float scale = 1.0f / sqrtf(block_sum(ss) / float(d) + eps);
        float s = 0;
        for (int64_t i = threadIdx.x; i < d; i += blockDim.x) s += (v[i] * scale) * w[i];
        a[j] = block_sum(s);
    }
    float mx = a[0];
    for (int j = 1; j <= m; ++j) mx = fmaxf(mx, a[j]);
    float sum = 0;
    for (int j = 0; j <= m; ++j) {
        a[j] = expf(a[j] - mx);
        sum += a[j];
    }
    const float inv = 1.0f / sum;
    for (int j = 0; j <= m; ++j) a[j] *= inv;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < m; ++j) acc += stack.blocks[j][t * d + i] * a[j];
        out[t * d + i] = acc + p[t * d + i] * a[m];
    }
}

}  // namespace

void gather_rows(const float* src, int64_t cols, const int64_t* idx, int64_t div, int64_t rows, float* dst, void* stream) {
    if (rows <= 0 || cols <= 0) return;
    if (div < 1 || rows > 0x7fffffff) throw std::invalid_argument("cuda gather_rows: div >= 1 and at most 2^31 - 1 rows");
    auto* k = &gather_rows_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(rows)), dim3(kMixThreads), 0, as_stream(stream), src, cols, idx, div, dst);
}

void scatter_weighted(const float* src, int64_t cols, const int64_t* idx, const float* wj, int64_t rows, float* dst,
                      void* stream) {
    if (rows <= 0) return;
    const int64_t blocks = (rows * cols + kMixThreads - 1) / kMixThreads;
    auto* k = &scatter_weighted_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(blocks < 8192 ? blocks : 8192)), dim3(kMixThreads), 0, as_stream(stream), src, cols,
                  idx, wj, rows, dst);
}

void attn_res_mix(const AttnResStack& stack, const float* p, const float* w, float* out, int64_t n, int64_t d,
                  float eps, void* stream) {
    if (stack.m < 0 || stack.m > kAttnResMaxBlocks)
        throw std::invalid_argument("cuda attn_res_mix: at most 32 banked blocks");
    if (n <= 0) return;
    auto* k = &attn_res_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(n)), dim3(kMixThreads), 0, as_stream(stream), stack, p, w, out, d, eps);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
