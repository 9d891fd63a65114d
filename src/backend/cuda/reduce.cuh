// Warp and block reductions the kernels share: butterfly shuffles inside a warp, one shared slot
// per warp across the block. Every thread of the block gets the result.
#pragma once
#include "backend/cuda/compat.h"

namespace kinfer::cuda::KINFER_CUDA_NS {

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFullMask, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}

// One row's online-softmax step over a tile of up to 32 columns, lane j holding column j's score
// (-inf where masked or past the tile): the row's running max m and sum l (the same in every lane)
// advance, rescale is e^(m_old - m_new) for what came before (0 while no column has been seen),
// and the lane's e^(s - m_new) is returned. Every lane of the warp calls it.
__device__ __forceinline__ float online_softmax_step(float s, float& m, float& l, float& rescale) {
    const float mn = fmaxf(m, warp_max(s));
    const float safe = mn == -INFINITY ? 0.0f : mn;   // nothing seen yet: e^-inf = 0 below
    const float p = expf(s - safe);
    rescale = expf(m - safe);
    l = l * rescale + warp_sum(p);
    m = mn;
    return p;
}

// The static shared memory one instantiation of block_reduce holds (its per-warp slots; within
// compat.h's kStaticSharedBudget with the rest of a kernel's).
inline constexpr size_t kBlockReduceSmem = 32 * sizeof(float);

// Block-wide reduction with op (sum or max); blockDim.x a multiple of 32, every thread calls it.
template <bool kMax>
__device__ float block_reduce(float v) {
    __shared__ float per_warp[kBlockReduceSmem / sizeof(float)];
    v = kMax ? warp_max(v) : warp_sum(v);
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
    __syncthreads();                        // the previous call's readers are done with per_warp
    if (lane == 0) per_warp[warp] = v;
    __syncthreads();
    const float ident = kMax ? -INFINITY : 0.0f;
    const float w = lane < n_warps ? per_warp[lane] : ident;
    return kMax ? warp_max(w) : warp_sum(w);
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce<false>(v); }
__device__ __forceinline__ float block_max(float v) { return block_reduce<true>(v); }

}  // namespace kinfer::cuda::KINFER_CUDA_NS
