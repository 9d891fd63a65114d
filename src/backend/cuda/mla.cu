// Absorbed MLA decode attention over the latent cache, flash-decoding style (DESIGN.md 3.3).
// A token t at position pos0 + t attends to cache rows [0, pos0 + t]. Pass 1: one block per
// (head, piece of `split` positions, token) scores its positions (one warp per cache row, lanes
// across the row: coalesced), and writes its running max m, its sum of exp l and its
// unnormalised sum of exp * c (r floats). Pass 2: per (head, token), the pieces are combined
// with exp(m_s - M) rescaling. Long contexts thus spread over many blocks instead of one block
// walking 1M positions. The rows come from contiguous f32 (the untiled path) or through the
// pages of the paged cache (mla_attend_paged), converted as they are read.
#include "backend/cuda/kernels.h"
#include "backend/cuda/latent.cuh"
#include "backend/cuda/reduce.cuh"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMlaThreads = 256;

int64_t n_pieces(const MlaArgs& a) { return (a.pos0 + a.n + a.split - 1) / a.split; }

template <class Rows>
__global__ void __launch_bounds__(kMlaThreads)
    mla_partial_kernel(Rows cache, const float* __restrict__ Q, int64_t pos0, int64_t H,
                       int64_t r, int64_t R, float scale, int64_t split, int64_t pieces, float* __restrict__ part) {
    KINFER_DYNAMIC_SHARED(float, smem);          // q: R floats, then the piece's scores
    float* qs = smem;
    float* sc = smem + R;
    const int64_t h = blockIdx.x, s = blockIdx.y, t = blockIdx.z;
    const int64_t n_kv = pos0 + t + 1;           // causal
    const int64_t j0 = s * split, j1 = j0 + split < n_kv ? j0 + split : n_kv;
    float* out = part + ((t * H + h) * pieces + s) * (r + 2);
    if (j0 >= j1) {                              // this token's context ends before the piece
        for (int64_t d = threadIdx.x; d < r + 2; d += blockDim.x) out[d] = d == 0 ? -INFINITY : 0.0f;
        return;
    }
    const float* q = Q + (t * H + h) * R;
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x) qs[i] = q[i];
    __syncthreads();
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
    for (int64_t j = j0 + warp; j < j1; j += n_warps) {
        float acc = 0;
        for (int64_t i = lane; i < R; i += 32) acc += qs[i] * cache.at(j, i);
        acc = warp_sum(acc);
        if (lane == 0) sc[j - j0] = acc * scale;
    }
    __syncthreads();
    const int64_t len = j1 - j0;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) m = fmaxf(m, sc[j]);
    m = block_max(m);
    float l = 0;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) {
        const float e = expf(sc[j] - m);
        sc[j] = e;
        l += e;
    }
    l = block_sum(l);                            // its barriers also publish the sc[] writes
    // Each thread owns output dims d, d + blockDim, ...: the block reads each cache row's r
    // floats side by side (coalesced).
    for (int64_t d = threadIdx.x; d < r; d += blockDim.x) {
        float acc = 0;
        for (int64_t j = 0; j < len; ++j) acc += sc[j] * cache.at(j0 + j, d);
        out[2 + d] = acc;
    }
    if (threadIdx.x == 0) {
        out[0] = m;
        out[1] = l;
    }
}

__global__ void __launch_bounds__(kMlaThreads)
    mla_combine_kernel(const float* __restrict__ part, int64_t pos0, int64_t H, int64_t r, int64_t split,
                       int64_t pieces, float* __restrict__ lat) {
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const int64_t used = (pos0 + t + 1 + split - 1) / split;
    const float* p = part + (t * H + h) * pieces * (r + 2);
    float M = -INFINITY;
    for (int64_t s = 0; s < used; ++s) M = fmaxf(M, p[s * (r + 2)]);
    float L = 0;
    for (int64_t s = 0; s < used; ++s) L += p[s * (r + 2) + 1] * expf(p[s * (r + 2)] - M);
    const float inv = 1.0f / L;
    for (int64_t d = threadIdx.x; d < r; d += blockDim.x) {
        float acc = 0;
        for (int64_t s = 0; s < used; ++s) acc += p[s * (r + 2) + 2 + d] * expf(p[s * (r + 2)] - M);
        lat[(t * H + h) * r + d] = acc * inv;
    }
}

}  // namespace

size_t mla_scratch_floats(const MlaArgs& a) {
    return a.split > 0 ? size_t(a.n * a.H * n_pieces(a) * (a.r + 2)) : 0;
}

namespace {

template <class Rows>
void attend(Rows rows, const float* Q, float* lat, const MlaArgs& a, float* scratch, void* stream, const char* what) {
    if (a.n <= 0) return;
    const int64_t R = a.r + a.dr;
    const size_t smem = size_t(R + a.split) * sizeof(float);
    if (a.split < 1 || a.n > 65535 || smem > 48 * 1024)
        throw std::invalid_argument(std::string("cuda ") + what +
                                    ": (r + dr + split) floats must fit 48 KiB of shared memory and n <= 65535");
    const int64_t pieces = n_pieces(a);
    auto* k1 = &mla_partial_kernel<Rows>;
    KINFER_LAUNCH(k1, dim3(unsigned(a.H), unsigned(pieces), unsigned(a.n)), dim3(kMlaThreads), smem, as_stream(stream),
                  rows, Q, a.pos0, a.H, a.r, R, a.scale, a.split, pieces, scratch);
    auto* k2 = &mla_combine_kernel;
    KINFER_LAUNCH(k2, dim3(unsigned(a.H), unsigned(a.n)), dim3(kMlaThreads), 0, as_stream(stream), scratch, a.pos0, a.H,
                  a.r, a.split, pieces, lat);
}

}  // namespace

void mla_attend_absorbed(const float* cache, const float* Q, float* lat, const MlaArgs& a, float* scratch,
                         void* stream) {
    attend(F32Rows{cache, a.r + a.dr}, Q, lat, a, scratch, stream, "mla_attend_absorbed");
}

void mla_attend_paged(const LatentArgs& c, const float* Q, float* lat, const MlaArgs& a, float* scratch, void* stream) {
    if (c.R != a.r + a.dr) throw std::invalid_argument("cuda mla_attend_paged: cache rows of R = " + std::to_string(c.R) +
                                                       " floats, the shape wants r + dr = " + std::to_string(a.r + a.dr));
    attend(PagedRows{c}, Q, lat, a, scratch, stream, "mla_attend_paged");
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
