// The KDA delta-rule recurrence (DESIGN.md 3.2), token by token: for each value index j of a head,
// column j of the state S (row j of the stored M) evolves on its own given the token's k, q, g:
//   M_j *= exp(g);  u = beta (v_j - M_j . k);  M_j += u k;  o_j = (M_j . q) / sqrt(D).
// So one warp owns one state row for the whole call: it reads the row once, keeps it in
// registers (D / 32 floats a lane) across all n tokens and writes it back once. The state (64 KiB
// a head at D = 128) is the traffic; k, q, g of a token are shared by the head's D warps via L1.
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kKdaWarps = 4;   // state rows per block

template <int kPerLane>
__global__ void __launch_bounds__(kKdaWarps * 32)
    kda_recurrent_kernel(const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                         const float* __restrict__ g, const float* __restrict__ beta, float* __restrict__ state,
                         float* __restrict__ o, int64_t n, int64_t H) {
    constexpr int D = 32 * kPerLane;
    const int lane = int(threadIdx.x % 32);
    const int64_t h = blockIdx.x, j = int64_t(blockIdx.y) * kKdaWarps + threadIdx.x / 32;
    const int64_t di = H * D;
    float* Mj = state + (h * D + j) * D;
    float m[kPerLane];
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) m[s] = Mj[lane + 32 * s];
    const float scale = 1.0f / sqrtf(float(D));
    for (int64_t t = 0; t < n; ++t) {
        const int64_t base = t * di + h * D;
        float dk = 0;
#pragma unroll
        for (int s = 0; s < kPerLane; ++s) {
            const int64_t i = base + lane + 32 * s;
            m[s] *= expf(g[i]);
            dk += m[s] * k[i];
        }
        dk = warp_sum(dk);
        const float u = (v[base + j] - dk) * beta[t * H + h];
        float dq = 0;
#pragma unroll
        for (int s = 0; s < kPerLane; ++s) {
            const int64_t i = base + lane + 32 * s;
            m[s] = fmaf(k[i], u, m[s]);
            dq += m[s] * q[i];
        }
        dq = warp_sum(dq);
        if (lane == 0) o[base + j] = dq * scale;
    }
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) Mj[lane + 32 * s] = m[s];
}

template <int kPerLane>
void launch(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state, float* o,
            int64_t n, int64_t H, void* stream) {
    constexpr int D = 32 * kPerLane;
    auto* kern = &kda_recurrent_kernel<kPerLane>;
    KINFER_LAUNCH(kern, dim3(unsigned(H), unsigned(D / kKdaWarps)), dim3(kKdaWarps * 32), 0, as_stream(stream), q, k,
                  v, g, beta, state, o, n, H);
}

}  // namespace

void kda_recurrent(const float* q, const float* k, const float* v, const float* g, const float* beta, float* state,
                   float* o, int64_t n, int64_t H, int64_t D, void* stream) {
    if (n <= 0 || H <= 0) return;
    switch (D) {
        case 32: return launch<1>(q, k, v, g, beta, state, o, n, H, stream);
        case 64: return launch<2>(q, k, v, g, beta, state, o, n, H, stream);
        case 128: return launch<4>(q, k, v, g, beta, state, o, n, H, stream);
        case 256: return launch<8>(q, k, v, g, beta, state, o, n, H, stream);
        default: break;
    }
    throw std::invalid_argument("cuda kda_recurrent: head dim " + std::to_string(D) + " is not 32, 64, 128 or 256");
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
