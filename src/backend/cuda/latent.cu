// The paged latent cache on the GPU (latent.cuh says where a row lives): rows written from f32 and
// read back into f32, converted to the cache type with the CPU cache's arithmetic, so that a
// cache a GPU layer wrote is the bits the CPU would have written.
#include "backend/cuda/latent.cuh"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kLatentThreads = 128;

// One block per row; f32 / f16: threads over the elements; q8_0: one warp per block of 32
// (lane i holds element i), the scale from the warp's absolute maximum.
__global__ void __launch_bounds__(kLatentThreads)
    latent_store_kernel(LatentArgs c, int64_t j0, const float* __restrict__ rows, int64_t ld) {
    const float* x = rows + int64_t(blockIdx.x) * ld;
    uint8_t* dst = const_cast<uint8_t*>(latent_row(c, j0 + blockIdx.x));
    if (c.type == kLatentF32) {
        for (int64_t i = threadIdx.x; i < c.R; i += blockDim.x) reinterpret_cast<float*>(dst)[i] = x[i];
    } else if (c.type == kLatentF16) {
        for (int64_t i = threadIdx.x; i < c.R; i += blockDim.x) reinterpret_cast<quant::fp16_t*>(dst)[i] = quant::fp32_to_fp16(x[i]);
    } else {
        const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
        for (int64_t b = warp; b < c.R / quant::QK8_0; b += n_warps) {
            const float v = x[b * quant::QK8_0 + lane];
            const float amax = warp_max(fabsf(v));
            const float d = amax / 127;
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            uint8_t* blk = dst + b * int64_t(sizeof(quant::block_q8_0));
            if (lane == 0) {
                const quant::fp16_t h = quant::fp32_to_fp16(d);
                blk[0] = uint8_t(h & 0xff);
                blk[1] = uint8_t(h >> 8);
            }
            blk[2 + lane] = uint8_t(int8_t(roundf(v * id)));   // half away from zero, as the CPU's std::round
        }
    }
}

__global__ void __launch_bounds__(kLatentThreads) latent_load_kernel(LatentArgs c, int64_t j0, float* __restrict__ rows) {
    const uint8_t* src = latent_row(c, j0 + blockIdx.x);
    float* y = rows + int64_t(blockIdx.x) * c.R;
    for (int64_t i = threadIdx.x; i < c.R; i += blockDim.x) y[i] = latent_at(c, src, i);
}

void check_shape(const LatentArgs& c, int64_t n, const char* what) {
    if (c.R <= 0 || c.page_rows <= 0 || n > 2147483647 || (c.type == kLatentQ8_0 && c.R % quant::QK8_0 != 0) ||
        c.type < kLatentF32 || c.type > kLatentQ8_0)
        throw std::invalid_argument(std::string("cuda ") + what + ": a cache of type " + std::to_string(c.type) + " with R = " +
                                    std::to_string(c.R) + " (q8_0: a multiple of 32), " + std::to_string(n) + " rows");
}

}  // namespace

void latent_store(const LatentArgs& c, int64_t j0, int64_t n, const float* rows, int64_t ld, void* stream) {
    if (n <= 0) return;
    check_shape(c, n, "latent_store");
    auto* k = &latent_store_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(n)), dim3(kLatentThreads), 0, as_stream(stream), c, j0, rows, ld ? ld : c.R);
}

void latent_load(const LatentArgs& c, int64_t j0, int64_t n, float* rows, void* stream) {
    if (n <= 0) return;
    check_shape(c, n, "latent_load");
    auto* k = &latent_load_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(n)), dim3(kLatentThreads), 0, as_stream(stream), c, j0, rows);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
