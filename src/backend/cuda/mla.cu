// Absorbed MLA decode attention over the latent cache, flash-decoding style (DESIGN.md 3.3).
// A token t at position pos0 + t attends to cache rows [0, pos0 + t]. The positions are split
// into pieces; pass 1 gives each piece of each (head, token) its running max m, its sum of exp l
// and its unnormalised sum of exp * c (r floats); pass 2 combines the pieces per (head, token)
// with exp(m_s - M) rescaling. Long contexts thus spread over many blocks instead of one block
// walking 1M positions. The rows come from contiguous f32 (the untiled path) or through the
// pages of the paged cache (mla_attend_paged), converted as they are read.
//
// Two pass-1 kernels (MlaKernel):
//  - per_head: one block per (head, piece, token). Simple (scores of the whole piece in shared
//    memory, then one softmax), but every head reads the piece's cache rows again: 64 reads of
//    each row for K3, 77 GB a layer and a token at 1M positions in an f16 cache, served from L2
//    at best.
//  - grouped: one block per (16 heads, piece, token). A tile of 16 cache rows is read into shared
//    memory once and used by all 16 heads (each warp scores two heads with their q held in
//    registers, lanes across the row), an online softmax per head rescales the accumulators
//    between tiles, and each thread accumulates two latent dims for all 16 heads. The cache is
//    read H / 16 times instead of H times. FlashMLA's idea without its tensor-core tiles;
//  - the grouped kernel with its products on TF32 tensor cores (mla_mma.cuh, MlaArgs::math), and
//    for the paged f16 cache on fp16 ones (mla_mma_f16.cuh).
#include "backend/cuda/kernels.h"
#include "backend/cuda/latent.cuh"
#include "backend/cuda/mla_mma.cuh"
#include "backend/cuda/mla_mma_f16.cuh"
#include "backend/cuda/reduce.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMlaThreads = 256;

template <class Rows>
__global__ void __launch_bounds__(kMlaThreads)
    mla_partial_kernel(Rows cache, const float* __restrict__ Q, int64_t pos0, int64_t H,
                       int64_t r, int64_t R, float scale, int64_t split, int64_t pieces, float* __restrict__ part) {
    KINFER_DYNAMIC_SHARED(float, smem);          // q: R floats, then the piece's scores
    float* qs = smem;
    float* sc = smem + R;
    const MlaPiece b(1, pos0, H, r, split, pieces, part);
    if (b.empty(1)) return;
    const int64_t h = b.h0, t = b.t, j0 = b.j0, j1 = b.j1;
    float* out = b.out(0);
    const float* q = Q + (t * H + h) * R;
    for (int64_t i = threadIdx.x; i < R; i += blockDim.x) qs[i] = q[i];
    __syncthreads();
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32), n_warps = int(blockDim.x / 32);
    for (int64_t j = j0 + warp; j < j1; j += n_warps) {
        float acc = 0;
        const typename Rows::Row row = cache.row(j);
        for (int64_t i = lane; i < R; i += 32) acc += qs[i] * cache.at(row, i);
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

// The grouped kernel's shape: 16 heads a block (two a warp), cache rows 16 a tile, q and the
// rows up to kGroupLanes * 32 = 640 floats (K3 and Kimi Linear: 576), r up to 2 * kMlaThreads
// = 512 latent dims (two a thread). Shared memory: 16 x 640 + 16 x 16 + 16 floats, 41 KiB.
constexpr int kGroupHeads = 2 * (kMlaThreads / 32), kGroupRows = 16, kGroupLanes = 20, kGroupDims = 2;
// The tensor-core form (mla_mma.cuh) takes the same groups and tiles, so mla_split serves both.
static_assert(kMmaHeads == kGroupHeads && kMmaRows == kGroupRows);
constexpr size_t kGroupSmemBytes = sizeof(float) * (kGroupRows * kGroupLanes * 32 + kGroupHeads * kGroupRows + kGroupHeads);

template <class Rows>
__global__ void __launch_bounds__(kMlaThreads)
    mla_partial_grouped_kernel(Rows cache, const float* __restrict__ Q, int64_t pos0, int64_t H, int64_t r,
                               int64_t R, float scale, int64_t split, int64_t pieces, float* __restrict__ part) {
    // Dynamic shared memory (kGroupSmemBytes), so that the CPU mode's poisoned fill reaches it:
    // rows: the tile's cache rows, all kGroupLanes * 32 columns written (zero past R and past the
    //       piece: the score loop reads every column, and stale shared memory may hold a NaN);
    // prob: exp(score - running max) per head and row; rescale: exp(old max - new max) per head.
    KINFER_DYNAMIC_SHARED(float, smem);
    auto rows = reinterpret_cast<float (*)[kGroupLanes * 32]>(smem);
    auto prob = reinterpret_cast<float (*)[kGroupRows]>(smem + kGroupRows * kGroupLanes * 32);
    float* rescale = smem + kGroupRows * kGroupLanes * 32 + kGroupHeads * kGroupRows;
    const MlaPiece b(kGroupHeads, pos0, H, r, split, pieces, part);
    if (b.empty(kGroupHeads)) return;
    const int64_t h0 = b.h0, t = b.t, j0 = b.j0, j1 = b.j1;
    const int lane = int(threadIdx.x % 32), warp = int(threadIdx.x / 32);
    // This warp's two heads (warp-uniform liveness): q element lane + 32 i in q[a][i].
    float q[2][kGroupLanes];
    bool live[2];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};   // the same in every lane of the warp
    for (int a = 0; a < 2; ++a) {
        const int64_t h = h0 + 2 * warp + a;
        live[a] = h < H;
        for (int i = 0; i < kGroupLanes; ++i) {
            const int64_t e = lane + 32 * i;
            q[a][i] = live[a] && e < R ? Q[(t * H + h) * R + e] : 0.0f;
        }
    }
    float acc[kGroupHeads][kGroupDims];
    for (int g = 0; g < kGroupHeads; ++g)
        for (int k = 0; k < kGroupDims; ++k) acc[g][k] = 0.0f;
    for (int64_t jt = j0; jt < j1; jt += kGroupRows) {
        const int tl = int(j1 - jt < kGroupRows ? j1 - jt : kGroupRows);
        // Row by row, the threads across the row: each row's address is found once (a page
        // lookup divides), and the reads of a row are neighbours (coalesced). No barrier before:
        // a thread overwrites only the columns it read itself in the last tile's sums (threadIdx.x
        // + kMlaThreads k), and the score loop, which reads every column, ended at the barrier
        // before those sums.
        for (int j = 0; j < kGroupRows; ++j) {
            const typename Rows::Row row = cache.row(j < tl ? jt + j : jt);
            for (int64_t i = threadIdx.x; i < kGroupLanes * 32; i += blockDim.x)
                rows[j][i] = j < tl && i < R ? cache.at(row, i) : 0.0f;
        }
        __syncthreads();
        for (int a = 0; a < 2; ++a) {
            const int g = 2 * warp + a;
            if (!live[a]) {                                // a head past H: nothing to add
                if (lane < kGroupRows) prob[g][lane] = 0.0f;
                if (lane == 0) rescale[g] = 0.0f;
                continue;
            }
            float mine = -INFINITY;                        // lane j keeps row j's score
            for (int j = 0; j < tl; ++j) {
                float d = 0;
                for (int i = 0; i < kGroupLanes; ++i) d += q[a][i] * rows[j][lane + 32 * i];
                d = warp_sum(d) * scale;
                if (lane == j) mine = d;
            }
            const float mn = fmaxf(m[a], warp_max(mine));
            const float p = lane < tl ? expf(mine - mn) : 0.0f;
            const float alpha = expf(m[a] - mn);           // 0 on the first tile (m = -inf)
            l[a] = l[a] * alpha + warp_sum(p);
            m[a] = mn;
            if (lane < kGroupRows) prob[g][lane] = p;
            if (lane == 0) rescale[g] = alpha;
        }
        __syncthreads();
        // Latent dims threadIdx.x + kMlaThreads k of every head: rescale, then add the tile's rows.
        for (int g = 0; g < kGroupHeads; ++g)
            for (int k = 0; k < kGroupDims; ++k) acc[g][k] *= rescale[g];
        for (int j = 0; j < tl; ++j) {
            float v[kGroupDims];
            for (int k = 0; k < kGroupDims; ++k) v[k] = rows[j][threadIdx.x + kMlaThreads * k];
            for (int g = 0; g < kGroupHeads; ++g) {
                const float p = prob[g][j];
                for (int k = 0; k < kGroupDims; ++k) acc[g][k] += p * v[k];
            }
        }
    }
    for (int g = 0; g < kGroupHeads && h0 + g < H; ++g)
        for (int k = 0; k < kGroupDims; ++k) {
            const int64_t d = threadIdx.x + kMlaThreads * k;
            if (d < r) b.out(g)[2 + d] = acc[g][k];
        }
    if (lane == 0)
        for (int a = 0; a < 2; ++a)
            if (live[a]) {
                b.out(2 * warp + a)[0] = m[a];
                b.out(2 * warp + a)[1] = l[a];
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

bool mla_grouped(const MlaArgs& a) {
    const bool fits = a.r <= int64_t(kGroupDims) * kMlaThreads && a.r + a.dr <= int64_t(kGroupLanes) * 32;
    switch (a.kernel) {
        case MlaKernel::per_head: return false;
        case MlaKernel::grouped: return fits;
        default: return fits && a.H > 1;
    }
}

int64_t mla_split(const MlaArgs& a) {
    if (a.split > 0) return a.split;
    if (!mla_grouped(a)) return 256;                       // the per-head kernel keeps a piece's scores in shared memory
    // Enough blocks to fill an H200 (132 SMs) a few times over, and no more pieces than that:
    // each piece costs (r + 2) floats per head in scratch and in the combine pass (at 1M
    // positions and a split of 256, 0.5 GB for K3).
    constexpr int64_t kTargetBlocks = 528;
    const int64_t groups = (a.H + kGroupHeads - 1) / kGroupHeads, n_kv = a.pos0 + a.n;
    const int64_t want = std::max<int64_t>(1, kTargetBlocks / std::max<int64_t>(1, groups * a.n));
    const int64_t split = (n_kv + want - 1) / want;
    return std::max<int64_t>(64, (split + kGroupRows - 1) / kGroupRows * kGroupRows);
}

namespace {

int64_t n_pieces(const MlaArgs& a) {
    const int64_t split = mla_split(a);
    return (a.pos0 + a.n + split - 1) / split;
}

}  // namespace

size_t mla_scratch_floats(const MlaArgs& a) {
    return a.n > 0 ? size_t(a.n * a.H * n_pieces(a) * (a.r + 2)) : 0;
}

namespace {

// Past 48 KiB a kernel must opt in, on each device, so at every launch (kda_chunked.cu's reason).
template <class Kernel>
void opt_in(Kernel* k, size_t bytes) {
    if (bytes > kDynamicNoOptIn) (void)cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes));
}

template <class Rows>
constexpr bool kPaged = false;
template <>
constexpr bool kPaged<PagedRows> = true;

template <class Rows>
void attend(Rows rows, const float* Q, float* lat, const MlaArgs& a, float* scratch, void* stream, const char* what) {
    if (!math_taken(a.math, false))   // f16x3: the KDA's
        throw std::invalid_argument(std::string("cuda ") + what + ": not a form of the MLA: " + math_choices(false));
    if (a.n <= 0) return;
    const int64_t R = a.r + a.dr, split = mla_split(a);
    const bool grouped = mla_grouped(a);
    if (a.kernel == MlaKernel::grouped && !grouped)
        throw std::invalid_argument(std::string("cuda ") + what + ": the grouped kernel takes r <= " +
                                    std::to_string(kGroupDims * kMlaThreads) + " and r + dr <= " +
                                    std::to_string(kGroupLanes * 32));
    const size_t smem = grouped ? 0 : size_t(R + split) * sizeof(float);
    // With the per-head kernel's static bytes (block_max's and block_sum's per-warp slots and
    // nvcc's own, within kStaticSharedBudget), 48 KiB in all without an opt-in.
    if (a.n > 65535 || smem > kDynamicNoOptIn)
        throw std::invalid_argument(std::string("cuda ") + what +
                                    ": (r + dr + split) floats must fit 48 KiB of shared memory and n <= 65535");
    const int64_t pieces = n_pieces(a);
    if (pieces > 65535) throw std::invalid_argument(std::string("cuda ") + what + ": more than 65535 pieces of positions");
    const bool f16_math = a.math == F32Math::f16x2 || a.math == F32Math::f16;
    const bool split_math = a.math == F32Math::f16x2 || a.math == F32Math::tf32x3;
    bool f16_cache = false;
    if constexpr (kPaged<Rows>) f16_cache = rows.c.type == kLatentF16;
    if (grouped && f16_math && f16_cache) {
        if constexpr (kPaged<Rows>) {
            const size_t bytes = mla_f16_smem_bytes(R, split_math);
            auto* k1 = split_math ? &mla_partial_f16_kernel<true> : &mla_partial_f16_kernel<false>;
            opt_in(k1, bytes);
            KINFER_LAUNCH(k1, dim3(unsigned((a.H + kMmaHeads - 1) / kMmaHeads), unsigned(pieces), unsigned(a.n)),
                          dim3(kMmaThreads), bytes, as_stream(stream), rows.c, Q, a.pos0, a.H, a.r, R, a.scale, split,
                          pieces, scratch);
        }
    } else if (grouped && a.math != F32Math::fp32) {   // TF32, also for f16x2 / f16 over other rows
        const size_t bytes = mla_mma_smem_bytes(R);
        auto* k1 = split_math ? &mla_partial_mma_kernel<Rows, true> : &mla_partial_mma_kernel<Rows, false>;
        opt_in(k1, bytes);
        KINFER_LAUNCH(k1, dim3(unsigned((a.H + kMmaHeads - 1) / kMmaHeads), unsigned(pieces), unsigned(a.n)),
                      dim3(kMmaThreads), bytes, as_stream(stream), rows, Q, a.pos0, a.H, a.r, R, a.scale, split, pieces,
                      scratch);
    } else if (grouped) {
        auto* k1 = &mla_partial_grouped_kernel<Rows>;
        KINFER_LAUNCH(k1, dim3(unsigned((a.H + kGroupHeads - 1) / kGroupHeads), unsigned(pieces), unsigned(a.n)),
                      dim3(kMlaThreads), kGroupSmemBytes, as_stream(stream), rows, Q, a.pos0, a.H, a.r, R, a.scale, split, pieces,
                      scratch);
    } else {
        auto* k1 = &mla_partial_kernel<Rows>;
        KINFER_LAUNCH(k1, dim3(unsigned(a.H), unsigned(pieces), unsigned(a.n)), dim3(kMlaThreads), smem,
                      as_stream(stream), rows, Q, a.pos0, a.H, a.r, R, a.scale, split, pieces, scratch);
    }
    auto* k2 = &mla_combine_kernel;
    KINFER_LAUNCH(k2, dim3(unsigned(a.H), unsigned(a.n)), dim3(kMlaThreads), 0, as_stream(stream), scratch, a.pos0, a.H,
                  a.r, split, pieces, lat);
}

// mma_f16_check's warp: the operands rounded to fp16 in shared memory (the fragment loaders read
// fp16 bits from there), A B by mma_f16 and by mma_f16_plain, by mma_f16 with B loaded from its
// row-major copy (f16_frag_b_cols), and by mma_f16 with both n tiles of 16-column copies loaded by
// one ldmatrix each: row-major (f16_frag_b_cols_x2) and by columns (f16_frag_b_rows_x2). Columns
// 0 .. 7 of each copy are B's, 8 .. 15 B's in reverse order, whose product is stored back in B's
// order. Then two k16 steps of one n tile by one ldmatrix (f16_frag_b_rows_k2), from a copy by
// columns whose k 0 .. 15 are B's and k 16 .. 31 B's columns in reverse order. Each product
// stored by the C layout into a 16 x 8 row-major matrix of out.
__global__ void __launch_bounds__(32) mma_f16_check_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                           float* __restrict__ out) {
    // A [16][16], B's columns [8][16], B row-major [16][8], then 16 columns row-major [16][16] and
    // by columns [16][16], and 32 k by columns [8][32] (16-byte aligned rows)
    KINFER_DYNAMIC_SHARED(uint16_t, sm);
    const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
    for (int i = lane; i < 16 * 16 + 8 * 16; i += 32) sm[i] = f16_round(i < 256 ? A[i] : B[i - 256]);
    for (int i = lane; i < 16 * 8; i += 32) sm[384 + i] = f16_round(B[16 * (i % 8) + i / 8]);   // k = i / 8, column i % 8
    for (int i = lane; i < 16 * 16; i += 32) {   // (k, column) = (i / 16, i % 16) and (i % 16, i / 16)
        const int col = i % 16 < 8 ? i % 16 : 15 - i % 16, col_t = i / 16 < 8 ? i / 16 : 15 - i / 16;
        sm[512 + i] = f16_round(B[16 * col + i / 16]);
        sm[768 + i] = f16_round(B[16 * col_t + i % 16]);
        const int n = i / 32, k = i % 32;   // [8][32]: column n, k
        sm[1024 + i] = f16_round(B[16 * (k < 16 ? n : 7 - n) + k % 16]);
    }
    __syncwarp();
    uint32_t a[4], b[2], bc[2], bx[4], by[4], bk[4];
    f16_frag_a(a, sm, 16);
    f16_frag_b_rows(b, sm + 256, 16);
    f16_frag_b_cols(bc, sm + 384, 8);
    f16_frag_b_cols_x2(bx, sm + 512, 16);
    f16_frag_b_rows_x2(by, sm + 768, 16);
    f16_frag_b_rows_k2(bk, sm + 1024, 32);
    const uint32_t b_tiles[6][2] = {{bx[0], bx[1]}, {bx[2], bx[3]}, {by[0], by[1]},
                                    {by[2], by[3]}, {bk[0], bk[1]}, {bk[2], bk[3]}};
    float c[9][4] = {};
    mma_f16(c[0], a, b);
    mma_f16_plain(c[1], a, b);
    mma_f16(c[2], a, bc);
    for (int f = 3; f < 9; ++f) mma_f16(c[f], a, b_tiles[f - 3]);
    for (int f = 0; f < 9; ++f)
        for (int e = 0; e < 4; ++e) {
            const int col = 2 * t + e % 2;
            out[128 * f + 8 * (g + 8 * (e / 2)) + (f == 4 || f == 6 || f == 8 ? 7 - col : col)] = c[f][e];
        }
}

}  // namespace

void mma_f16_check(const float* A, const float* B, float* out, void* stream) {
    auto* kernel = &mma_f16_check_kernel;
    KINFER_LAUNCH(kernel, dim3(1), dim3(32), (16 * 16 + 2 * 8 * 16 + 2 * 16 * 16 + 8 * 32) * sizeof(uint16_t),
                  as_stream(stream), A, B, out);
}

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
