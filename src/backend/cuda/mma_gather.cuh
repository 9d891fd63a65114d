// The gather that every plain (shuffle) tensor-core product starts with: mma.cuh's int8 forms,
// mma_tf32.cuh's and mma_f16.cuh's. Their fragments share one layout (g = lane / 4, t = lane % 4):
// a lane holds two A words, rows g and g + 8 (both k halves in each 64-bit word), and one B word,
// column g. Lane (g, t) computes rows g and g + 8 of columns 2t and 2t + 1, so for src = 0..3 it
// needs the A words of lane 4g + src and the B words of lanes 8t + src (column 2t) and
// 8t + 4 + src (column 2t + 1).
//
// On a GPU (and under nvcc) the gather is 16 shuffles of 64-bit words (mma_s8_k16_plain's words
// have zero high halves: twice the shuffle instructions it needs, only in mmq.cu's check kernel).
// In the CPU execution mode each shuffle is a pass through the warp's 32 fibers, and those passes
// were three quarters of the tensor-core kernels' CPU-mode test time; there the same 16 values
// come from one exchange of three words a lane (cpu_mode::share_warp). test_cpu_mode holds the two to the same values.
#pragma once
#include "backend/cuda/compat.h"

#include <cstdint>

namespace kinfer::cuda::KINFER_CUDA_NS {

// What lane (g, t) gathers, by src: A's row g and row g + 8 words, B's column 2t and 2t + 1 words.
struct MmaGather {
    uint64_t a_g[4], a_g8[4], b_c0[4], b_c1[4];
};

__device__ __forceinline__ MmaGather mma_gather_shuffled(uint64_t a_g, uint64_t a_g8, uint64_t b_c) {
    const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    MmaGather r;
    for (int src = 0; src < 4; ++src) {   // (nvcc unrolls it: a constant count of 4)
        r.a_g[src] = __shfl_sync(kFullMask, a_g, 4 * g + src);
        r.a_g8[src] = __shfl_sync(kFullMask, a_g8, 4 * g + src);
        r.b_c0[src] = __shfl_sync(kFullMask, b_c, 4 * (2 * t) + src);
        r.b_c1[src] = __shfl_sync(kFullMask, b_c, 4 * (2 * t + 1) + src);
    }
    return r;
}

#if !defined(__CUDACC__)
__device__ __forceinline__ MmaGather mma_gather_shared(uint64_t a_g, uint64_t a_g8, uint64_t b_c) {
    namespace cm = ::kinfer::cuda::cpu_mode;
    const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    const uint64_t mine[3] = {a_g, a_g8, b_c};
    const uint64_t* table = cm::share_warp(mine, 3).table;
    MmaGather r;
    for (int src = 0; src < 4; ++src) {
        r.a_g[src] = table[cm::kShareWords * unsigned(4 * g + src)];
        r.a_g8[src] = table[cm::kShareWords * unsigned(4 * g + src) + 1];
        r.b_c0[src] = table[cm::kShareWords * unsigned(4 * (2 * t) + src) + 2];
        r.b_c1[src] = table[cm::kShareWords * unsigned(4 * (2 * t + 1) + src) + 2];
    }
    return r;
}
#endif

// Every lane of the warp takes part (as in mma.sync).
__device__ __forceinline__ MmaGather mma_gather(uint64_t a_g, uint64_t a_g8, uint64_t b_c) {
#if defined(__CUDACC__)
    return mma_gather_shuffled(a_g, a_g8, b_c);
#else
    return mma_gather_shared(a_g, a_g8, b_c);
#endif
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
