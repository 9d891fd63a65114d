// Warp and block reductions the kernels share: butterfly shuffles inside a warp, one shared slot
// per warp across the block. Every thread of the block gets the result.
#pragma once
#include "backend/cuda/compat.h"

namespace kinfer::cuda::KINFER_CUDA_NS {

// v = op(v, lane l ^ o's v) for o = 16, 8, 4, 2, 1: every lane ends with the sum (or max).
// In the CPU execution mode each shuffle is a pass through the warp's 32 fibers, and these
// reductions were most of the emulated-runtime tests' time. There a full warp's 32 values come in
// one exchange (cpu_mode::share_warp), the warp's first lane back runs the five steps for every
// lane, in the same order, and each lane takes its own: the same bits, one pass instead of five.
template <class Op>
__device__ __forceinline__ float warp_butterfly(float v, Op op) {
#if !defined(__CUDACC__)
    namespace cm = ::kinfer::cuda::cpu_mode;
    if (cm::full_warp()) {
        const uint64_t mine[1] = {__float_as_uint(v)};
        const cm::WarpShare share = cm::share_warp(mine, 1);
        if (share.first) {
            float x[32], y[32];
            for (unsigned i = 0; i < 32; ++i) x[i] = __uint_as_float(uint32_t(share.table[cm::kShareWords * i]));
            for (int o = 16; o > 0; o >>= 1) {
                for (int i = 0; i < 32; ++i) y[i] = op(x[i], x[i ^ o]);
                for (int i = 0; i < 32; ++i) x[i] = y[i];
            }
            for (unsigned i = 0; i < 32; ++i) share.per_lane[i] = __float_as_uint(x[i]);
        }
        return __uint_as_float(uint32_t(share.per_lane[cm::lane()]));   // the lane the exchange knows (any block shape)
    }
#endif
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) {
    return warp_butterfly(v, [](float a, float b) { return a + b; });
}
__device__ __forceinline__ float warp_max(float v) {
    return warp_butterfly(v, [](float a, float b) { return fmaxf(a, b); });
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
