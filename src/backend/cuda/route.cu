// Sigmoid routing with a selection bias and top-K (DESIGN.md 3.4), one block per token: the
// scores in place, then K rounds of a block-wide argmax over score + bias (ties to the lower id),
// each round striking its winner out. K is small (8 of 256 .. 384 experts), so K block reductions
// cost less than a sort. The weights are the raw scores of the winners, renormalised like the
// CPU op (sum in double, at least 2^-14).
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kRouteThreads = 256;
constexpr int kMaxUsed = 64;
// E floats of dynamic shared memory, next to the static arrays below (best_v, best_id, chosen,
// within compat.h's kStaticSharedBudget): at most 48 KiB together, a kernel's bound without an
// opt-in. (The arrays' 512 bytes alone were subtracted before; nvcc's cubin gives the kernel
// 1536 static bytes, and 12160 experts would have been refused on a GPU.)
constexpr int64_t kMaxExperts = int64_t(kDynamicNoOptIn) / 4;

// (value, id) ordered by value descending, then id ascending.
__device__ __forceinline__ bool better(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }

__device__ void warp_argmax(float& v, int& id) {
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(kFullMask, v, o);
        const int oid = __shfl_xor_sync(kFullMask, id, o);
        if (better(ov, oid, v, id)) {
            v = ov;
            id = oid;
        }
    }
}

__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(float* probs, const float* bias, int E, int K, bool norm, float scale, int32_t* sel, float* w) {
    KINFER_DYNAMIC_SHARED(float, biased);        // E floats: score + bias, -inf once chosen
    __shared__ float best_v[32];
    __shared__ int best_id[32];
    __shared__ int chosen[kMaxUsed];
    float* p = probs + int64_t(blockIdx.x) * E;
    // A NaN score (a NaN logit: an overflow upstream) ranks as -inf, below every number; a
    // winner is struck out with a NaN, which no comparison picks again. So each round picks a
    // valid expert not yet chosen, even from a row of NaNs (one of them, the lowest id first).
    const float struck = __uint_as_float(0x7fc00000u);
    for (int e = int(threadIdx.x); e < E; e += int(blockDim.x)) {
        const float s = 1.0f / (1.0f + expf(-p[e]));
        p[e] = s;
        const float b = s + bias[e];
        biased[e] = b != b ? -INFINITY : b;
    }
    __syncthreads();
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
    for (int k = 0; k < K; ++k) {
        float v = -INFINITY;
        int id = E;
        for (int e = int(threadIdx.x); e < E; e += int(blockDim.x))
            if (better(biased[e], e, v, id)) {
                v = biased[e];
                id = e;
            }
        warp_argmax(v, id);
        if (lane == 0) {
            best_v[warp] = v;
            best_id[warp] = id;
        }
        __syncthreads();
        if (warp == 0) {
            v = lane < n_warps ? best_v[lane] : -INFINITY;
            id = lane < n_warps ? best_id[lane] : E;
            warp_argmax(v, id);
            if (lane == 0) {
                chosen[k] = id;
                biased[id] = struck;
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        int32_t* st = sel + int64_t(blockIdx.x) * K;
        float* wt = w + int64_t(blockIdx.x) * K;
        double sum = 0;
        for (int k = 0; k < K; ++k) {
            st[k] = chosen[k];
            wt[k] = p[chosen[k]];
            sum += double(wt[k]);
        }
        if (norm) {
            const float s = fmaxf(float(sum), 6.103515625e-5f);
            for (int k = 0; k < K; ++k) wt[k] /= s;
        }
        if (scale != 1.0f)
            for (int k = 0; k < K; ++k) wt[k] *= scale;
    }
}

}  // namespace

void route(float* probs, const float* bias, int64_t n, int64_t E, int64_t K, bool norm, float scale, int32_t* sel,
           float* w, void* stream) {
    if (n <= 0) return;
    if (K < 1 || K > kMaxUsed || K > E || E > kMaxExperts)
        throw std::invalid_argument("cuda route: needs 1 <= K <= min(E, 64) and E <= " + std::to_string(kMaxExperts) +
                                    " (48 KiB of shared memory)");
    auto* k = &route_kernel;
    KINFER_LAUNCH(k, dim3(unsigned(n)), dim3(kRouteThreads), size_t(E) * sizeof(float), as_stream(stream), probs, bias,
                  int(E), int(K), norm, scale, sel, w);
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
