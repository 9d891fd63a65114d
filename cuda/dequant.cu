// First CUDA kernel: Q8_0 dequantization (34-byte blocks: fp16 scale + 32 int8). It exists so the
// CUDA toolchain is exercised from day one; tests/gpu/run.sh checks it against the CPU path.
// The block layout and the fp16 conversion are quant/'s (blocks.h, fp16.h), compiled for the device.
#include "cuda/dequant.h"

#include <cuda_runtime.h>

#include "quant/blocks.h"
#include "quant/fp16.h"

namespace kinfer::cuda {

namespace {
using quant::block_q8_0;
constexpr int kQK8_0 = quant::QK8_0;

__global__ void dequant_q8_0_kernel(const block_q8_0* x, float* y, int64_t n) {
    const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const block_q8_0& b = x[i / kQK8_0];
    y[i] = quant::fp16_to_fp32(b.d) * float(b.qs[i % kQK8_0]);
}
}  // namespace

int dequant_q8_0(const void* host_blocks, float* host_out, int64_t n) {
    if (n % kQK8_0 || n < 0) return -1;
    if (n == 0) return 0;   // a launch of no blocks is an error on a GPU
    const size_t in_bytes = size_t(n / kQK8_0) * sizeof(block_q8_0);
    void* d_in = nullptr;
    float* d_out = nullptr;
    if (cudaMalloc(&d_in, in_bytes) != cudaSuccess) return -2;
    if (cudaMalloc(&d_out, n * sizeof(float)) != cudaSuccess) { cudaFree(d_in); return -2; }
    cudaMemcpy(d_in, host_blocks, in_bytes, cudaMemcpyHostToDevice);
    const int threads = 256;
    dequant_q8_0_kernel<<<unsigned((n + threads - 1) / threads), threads>>>(static_cast<const block_q8_0*>(d_in), d_out, n);
    cudaError_t err = cudaGetLastError();   // a refused launch, which the copy below would not report
    if (err == cudaSuccess) err = cudaMemcpy(host_out, d_out, n * sizeof(float), cudaMemcpyDeviceToHost);
    cudaFree(d_in);
    cudaFree(d_out);
    return err == cudaSuccess ? 0 : -3;
}

}  // namespace kinfer::cuda
