// Decompressed (MHA) MLA attention for prefill chunks (DESIGN.md 3.3), the GPU form of the CPU's
// tiled_mha (src/backend/cpu/attention_tiled_body.h). Per head, K_h = [attn_k_b[h]^T c | k_pe]
// and V_h = attn_v_b[h] c. A long chunk of n queries then costs dk + dv operations per (query,
// key) pair instead of the absorbed form's 2r + dr, plus expanding each key once per call.
//
// The steps of one call:
//  1. the weights as fp32: wkT [H][dn][r] (attn_k_b's rows, transposed per head, so that one GEMM
//     over the latent rows gives every head's k_nope) and wv [H][dv][r] (attn_v_b as it is);
//  2. per block of kb keys: the latent rows C (loaded from the pages, or the contiguous rows),
//     K_nope = C . wkT^T [kb][H*dn] and V = C . wv^T [kb][H*dv], two GEMMs (blas.h) for all heads
//     at once, since every head reads the same C: fp32 by default (no TF32); over an f16 cache
//     with MlaMhaArgs::math f16x2 / f16, fp16 GEMMs on the weights' scaled split; otherwise with
//     tf32x3 / f16x2, TF32 GEMMs on both operands' three-wide split, and with tf32 / f16 one TF32
//     GEMM on the rows as they are (below);
//  3. per block, mha_flash_kernel: one CUDA block per (tile of kTQ queries, head) walks the keys it
//     may see in tiles of kTK, scores S = Q . K^T with k_pe read from C, and keeps the online
//     softmax (running max m, sum l, unnormalised acc) in the workspace between key blocks;
//  4. mha_finish_kernel: o = acc / l.
// fp32 by default, as the CPU's tiled form; the sums run in another order (within 1e-5 in the
// CPU-mode tests). Not run on a GPU yet: the shared-memory layout is plain (no swizzle against bank
// conflicts); kinfer_gpu_check times it. The flash kernel's tensor-core forms (16 queries a warp,
// up to 4 warps a block) are mla_mha_mma.cuh's (TF32: tf32x3 / tf32) and mla_mha_mma_f16.cuh's
// (fp16: f16x2 / f16), taken where MlaMhaArgs::math asks.
#include "backend/cuda/kernels.h"
#include "backend/cuda/latent.cuh"
#include "backend/cuda/mla_mha_mma.cuh"
#include "backend/cuda/mla_mha_mma_f16.cuh"
#include "backend/cuda/mma_f16.cuh"
#include "backend/cuda/reduce.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kTQ = 16;            // queries per CUDA block: a key tile serves 16 queries
constexpr int kTK = 16;            // keys per tile
constexpr int kFlashThreads = 128;
constexpr int kTransposeThreads = 256;
constexpr size_t kMhaMaxSmemBytes = kDynamicOptInMax;   // what a block may opt in to on sm_90 (compat.h)

// Shared floats of one flash block: Q tile [kTQ][dk], K tile [kTK][dk + 1] (the padding puts the
// 16 key rows a warp reads at once in 16 different banks: at K3's dk = 192, a multiple of 32, they
// would all share one), V tile [kTK][dv], probabilities [kTQ][kTK], m / l / rescale [kTQ] each,
// acc [kTQ][dv].
size_t flash_smem_floats(int64_t dk, int64_t dv) {
    return size_t(kTQ * dk + kTK * (dk + 1) + kTK * dv + kTQ * kTK + 3 * kTQ + kTQ * dv);
}

// out[h][a][i] = in[h][i][a] for a < cols, i < rows: attn_k_b's [r][dn] per head as [dn][r].
__global__ void __launch_bounds__(kTransposeThreads)
    transpose_heads_kernel(const float* __restrict__ in, int64_t H, int64_t rows, int64_t cols, float* __restrict__ out) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= H * rows * cols) return;
    const int64_t h = p / (rows * cols), rem = p % (rows * cols), a = rem / rows, i = rem % rows;
    out[p] = in[(h * rows + i) * cols + a];
}

// FlashState (the online softmax between key blocks) is mla_mha_mma.cuh's, shared with the
// tensor-core form of the flash kernel.

// Keys [b0, b0 + bn) of one block: k_nope rows kn [bn][H*dn], the latent rows lat [bn][R] (k_pe at
// offset r), values vv [bn][H*dv]. Query t (position pos0 + t) sees keys <= pos0 + t.
__global__ void __launch_bounds__(kFlashThreads)
    mha_flash_kernel(const float* __restrict__ q, const float* __restrict__ kn, const float* __restrict__ lat,
                     const float* __restrict__ vv, FlashState st, int64_t n, int64_t pos0, int64_t H, int64_t r,
                     int64_t R, int64_t dn, int64_t dr, int64_t dv, float scale, int64_t b0, int64_t bn, int first) {
    KINFER_DYNAMIC_SHARED(float, smem);
    const int64_t dk = dn + dr;
    float* qs = smem;                       // [kTQ][dk], scaled
    const int64_t ldk = dk + 1;             // padded rows (flash_smem_floats)
    float* ks = qs + kTQ * dk;              // [kTK][ldk]
    float* vs = ks + kTK * ldk;             // [kTK][dv]
    float* ps = vs + kTK * dv;              // [kTQ][kTK]
    float* ms = ps + kTQ * kTK;             // [kTQ]
    float* ls = ms + kTQ;                   // [kTQ]
    float* cs = ls + kTQ;                   // [kTQ]
    float* acc = cs + kTQ;                  // [kTQ][dv]
    const int64_t t0 = int64_t(blockIdx.x) * kTQ, h = blockIdx.y;
    const int nq = int(n - t0 < kTQ ? n - t0 : kTQ);
    const int64_t qpos0 = pos0 + t0;
    // The keys this tile may see in this block: [b0, k_end).
    const int64_t k_end = b0 + bn < qpos0 + nq ? b0 + bn : qpos0 + nq;
    if (k_end <= b0) return;                // every query of the tile comes before the block
    const int tid = int(threadIdx.x), nt = int(blockDim.x);

    for (int64_t p = tid; p < kTQ * dk; p += nt) {
        const int64_t i = p / dk, d = p % dk;
        qs[p] = i < nq ? flash_query(q, st, t0 + i, h, H, dn, dk, d, scale) : 0.0f;
    }
    for (int64_t p = tid; p < kTQ * dv; p += nt) {
        const int64_t i = p / dv, a = p % dv;
        acc[p] = first || i >= nq ? 0.0f : st.acc[((t0 + i) * H + h) * dv + a];
    }
    if (tid < kTQ) {
        const bool live = !first && tid < nq;
        ms[tid] = live ? st.m[(t0 + tid) * H + h] : -INFINITY;
        ls[tid] = live ? st.l[(t0 + tid) * H + h] : 0.0f;
    }

    for (int64_t k0 = b0; k0 < k_end; k0 += kTK) {
        const int nk = int(k_end - k0 < kTK ? k_end - k0 : kTK);
        __syncthreads();                    // the previous tile's readers are done with ks / vs / ps
        for (int64_t p = tid; p < kTK * dk; p += nt) {
            const int64_t j = p / dk, d = p % dk, kb = k0 - b0 + j;
            ks[j * ldk + d] = j >= nk ? 0.0f : d < dn ? kn[(kb * H + h) * dn + d] : lat[kb * R + r + (d - dn)];
        }
        for (int64_t p = tid; p < kTK * dv; p += nt) {
            const int64_t j = p / dv, a = p % dv;
            vs[p] = j < nk ? vv[((k0 - b0 + j) * H + h) * dv + a] : 0.0f;
        }
        __syncthreads();
        // Scores; a key past the tile's keys or after the query's position is -inf.
        for (int p = tid; p < kTQ * kTK; p += nt) {
            const int i = p / kTK, j = p % kTK;
            float s = -INFINITY;
            if (i < nq && j < nk && k0 + j <= qpos0 + i) {
                s = 0.0f;
                for (int64_t d = 0; d < dk; ++d) s += qs[i * dk + d] * ks[j * ldk + d];
            }
            ps[p] = s;
        }
        __syncthreads();
        // The running softmax, one thread per query: e^(m_old - m_new) rescales what came before.
        if (tid < kTQ) {
            float mx = -INFINITY;
            for (int j = 0; j < kTK; ++j) mx = fmaxf(mx, ps[tid * kTK + j]);
            const float mo = ms[tid], mn = fmaxf(mo, mx);
            const float safe = mn == -INFINITY ? 0.0f : mn;   // no key seen yet: e^-inf = 0 below
            float sum = 0.0f;
            for (int j = 0; j < kTK; ++j) {
                const float e = expf(ps[tid * kTK + j] - safe);
                ps[tid * kTK + j] = e;
                sum += e;
            }
            const float c = expf(mo - safe);
            cs[tid] = c;
            ls[tid] = ls[tid] * c + sum;
            ms[tid] = mn;
        }
        __syncthreads();
        // acc = acc * c + P . V, one (query, value dim) per thread and step: a warp reads a V row
        // side by side.
        for (int64_t p = tid; p < kTQ * dv; p += nt) {
            const int64_t i = p / dv, a = p % dv;
            float s = acc[p] * cs[i];
            for (int j = 0; j < nk; ++j) s += ps[i * kTK + j] * vs[j * dv + a];
            acc[p] = s;
        }
    }
    __syncthreads();
    for (int64_t p = tid; p < int64_t(nq) * dv; p += nt) {
        const int64_t i = p / dv, a = p % dv;
        st.acc[((t0 + i) * H + h) * dv + a] = acc[p];
    }
    if (tid < nq) {
        st.m[(t0 + tid) * H + h] = ms[tid];
        st.l[(t0 + tid) * H + h] = ls[tid];
    }
}

// o[t][h][a] = acc / l (times the values' unscale factor where the expansion scaled them).
__global__ void __launch_bounds__(kTransposeThreads)
    mha_finish_kernel(FlashState st, int64_t rows, int64_t H, int64_t dv, float* __restrict__ o) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= rows * dv) return;
    const float x = st.acc[p] / st.l[p / dv];
    o[p] = st.v_unscale ? x * st.v_unscale[(p / dv) % H * dv + p % dv] : x;
}

// The keys' expansion on fp16 tensor cores (an f16 cache, KINFER_CUDA_MLA=f16x2 / f16): the f16
// cache's latent values are exact in fp16, so only the fp32 weights need a split. Row i of w
// (wkT's or wv's) is scaled by 2^e_i, its largest |w| into [2^14, 2^15) (mma_f16.cuh), and written
// as fp16 at [0, cols) and, split, its remainder at [cols, 2 cols): against latent rows [c | c]
// one GEMM of k = 2 cols sums w_hi c + w_lo c (about 22 bits of w, fp32-class), with the output
// row 2^e_i too large, which FlashState's factors 2^-e_i undo. A warp a row, staged as the fp16
// flash kernel stages its rows (f16_stage_row, mla_mha_mma_f16.cuh).
__global__ void __launch_bounds__(kTransposeThreads)
    split_rows_f16_kernel(const float* __restrict__ w, int64_t rows, int64_t cols, int split, uint16_t* __restrict__ out,
                          float* __restrict__ unscale) {
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    const int lane = int(threadIdx.x % 32);
    if (row >= rows) return;                      // whole warps: rows are warp-uniform
    const float* x = w + row * cols;
    uint16_t* o = out + row * cols * (split ? 2 : 1);   // (o + cols: the remainders, under split only)
    auto value = [&](int64_t i) { return x[i]; };
    const RowScale sc = split ? f16_stage_row<true>(value, cols, cols, o, o + cols, 1)
                              : f16_stage_row<false>(value, cols, cols, o, o + cols, 1);
    if (lane == 0) unscale[row] = ldexpf(1.0f, -sc.e);
}

// The keys' expansion on TF32 tensor cores, 3xTF32 (KINFER_CUDA_MLA=tf32x3): each fp32 value x of
// a row as x = hi + lo, both TF32 (tf32_split), written three times side by side: weight rows as
// [hi | hi | lo], latent rows as [hi | lo | hi]. One TF32 GEMM of k = 3 cols then sums
// w_hi c_hi + w_hi c_lo + w_lo c_hi, every product exact (its operands are TF32 already): off by
// w_lo c_lo and the halves' rounding, about 2^-21 of |w c|, fp32-class, as the flash kernel's own
// 3xTF32 products. Rows ld_in floats apart in, 3 cols apart out.
__global__ void __launch_bounds__(kTransposeThreads)
    split_rows_tf32_kernel(const float* __restrict__ in, int64_t rows, int64_t cols, int64_t ld_in, int weights,
                           float* __restrict__ out) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= rows * cols) return;
    const int64_t row = p / cols, i = p % cols;
    uint32_t hi, lo;
    tf32_split(in[row * ld_in + i], hi, lo);
    float* o = out + row * 3 * cols + i;
    o[0] = __uint_as_float(hi);
    o[cols] = __uint_as_float(weights ? hi : lo);
    o[2 * cols] = __uint_as_float(weights ? lo : hi);
}

// The latent part (the first r values) of f16 cache rows [j0, j0 + n), their bits as they are,
// `copies` times side by side: the expansion GEMM's B rows ([c | c] against [w_hi | w_lo]).
__global__ void __launch_bounds__(kTransposeThreads)
    latent_rows_f16_kernel(LatentArgs c, int64_t j0, int64_t n, int64_t r, int copies, uint16_t* __restrict__ out) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= n * r) return;
    const int64_t j = p / r, i = p % r;
    const uint16_t v = load_aligned<uint16_t>(latent_row(c, j0 + j) + 2 * i);
    for (int k = 0; k < copies; ++k) out[(j * copies + k) * r + i] = v;
}

dim3 flat_grid(int64_t threads) { return dim3(unsigned((threads + kTransposeThreads - 1) / kTransposeThreads)); }

constexpr size_t ws_align(size_t floats) { return (floats + 63) / 64 * 64; }

// Whether a call's keys are expanded on fp16 tensor cores: f16x2 / f16 over the pages of an f16
// cache (the contiguous rows are fp32), and the GEMM's k: the weights split in two (2r) or not.
bool f16_expansion(const MlaMhaArgs& a, const LatentArgs* pages) {
    return pages && pages->type == kLatentF16 && (a.math == F32Math::f16x2 || a.math == F32Math::f16);
}
int64_t f16_expansion_k(const MlaMhaArgs& a) { return a.math == F32Math::f16x2 ? 2 * a.r : a.r; }
// Whether a call's keys are expanded on TF32 tensor cores, and how: tf32x3 (the split rows above)
// or tf32 (cuBLAS's TF32 GEMM on the fp32 rows as they are). f16x2 / f16 over another cache than
// f16 take them too (the fp16 expansion needs the cache's fp16 values); their flash kernel stays
// the fp16 one.
bool splits_three_wide(F32Math m) { return m == F32Math::tf32x3 || m == F32Math::f16x2; }   // (where not fp16)
bool tf32x3_expansion(const MlaMhaArgs& a, const LatentArgs* pages) {
    return !f16_expansion(a, pages) && splits_three_wide(a.math);
}
bool tf32_expansion(const MlaMhaArgs& a, const LatentArgs* pages) {
    return tf32x3_expansion(a, pages) || (!f16_expansion(a, pages) && (a.math == F32Math::tf32 || a.math == F32Math::f16));
}

// The workspace, in floats: the fp32 weights (wkT, wv, and attn_k_b before its transpose), one
// key block (latent rows when paged, K_nope, V) and the softmax state; for the fp16 expansion,
// the weights as fp16 rows (wk16, wv16) with their unscale factors (ku, vu) and the block's
// latent rows as fp16 (lat16), only then (an f32 or q8_0 cache under f16x2 asks none of it); for
// the 3xTF32 expansion, the weights' and the block's latent rows split three wide (wk3, wv3, lat3).
struct MhaLayout {
    int64_t kb = 0;
    size_t wkT = 0, wv = 0, wk_raw = 0, lat = 0, kn = 0, vv = 0, m = 0, l = 0, acc = 0;
    size_t wk16 = 0, wv16 = 0, ku = 0, vu = 0, lat16 = 0, wk3 = 0, wv3 = 0, lat3 = 0, total = 0;
};

MhaLayout mha_layout(const MlaMhaArgs& a, const LatentArgs* pages) {
    MhaLayout L;
    const int64_t R = a.r + a.dr;
    L.kb = a.key_block > 0 ? a.key_block : mla_mha_default_key_block(a);
    size_t at = 0;
    auto take = [&](size_t floats) {
        const size_t here = at;
        at += ws_align(floats);
        return here;
    };
    L.wkT = take(size_t(a.H * a.dn * a.r));
    L.wv = take(size_t(a.H * a.dv * a.r));
    L.wk_raw = take(size_t(a.H * a.r * a.dn));
    L.lat = take(pages ? size_t(L.kb * R) : 0);
    L.kn = take(size_t(L.kb * a.H * a.dn));
    L.vv = take(size_t(L.kb * a.H * a.dv));
    L.m = take(size_t(a.n * a.H));
    L.l = take(size_t(a.n * a.H));
    L.acc = take(size_t(a.n * a.H * a.dv));
    if (f16_expansion(a, pages)) {   // fp16 arrays, sized in floats (two a float)
        const size_t k16 = size_t(f16_expansion_k(a));
        L.wk16 = take(size_t(a.H * a.dn) * k16 / 2 + 1);
        L.wv16 = take(size_t(a.H * a.dv) * k16 / 2 + 1);
        L.ku = take(size_t(a.H * a.dn));
        L.vu = take(size_t(a.H * a.dv));
        L.lat16 = take(size_t(L.kb) * k16 / 2 + 1);
    }
    if (tf32x3_expansion(a, pages)) {
        L.wk3 = take(size_t(a.H * a.dn * 3 * a.r));
        L.wv3 = take(size_t(a.H * a.dv * 3 * a.r));
        L.lat3 = take(size_t(L.kb * 3 * a.r));
    }
    L.total = at;
    return L;
}

void check_args(const MlaMhaArgs& a, const char* what) {
    if (!math_taken(a.math, false))   // f16x3: the KDA's
        throw std::invalid_argument(std::string("cuda ") + what + ": not a form of the MLA: " + math_choices(false));
    if (a.H <= 0 || a.r <= 0 || a.dn <= 0 || a.dv <= 0 || a.dr < 0 || a.pos0 < 0)
        throw std::invalid_argument(std::string("cuda ") + what + ": bad shape (H, r, dn, dv must be positive)");
    if (a.H > 65535) throw std::invalid_argument(std::string("cuda ") + what + ": at most 65535 heads");
    if ((a.n + kTQ - 1) / kTQ > 2147483647)
        throw std::invalid_argument(std::string("cuda ") + what + ": more than 2^31 - 1 query tiles");
    if (flash_smem_floats(a.dn + a.dr, a.dv) * sizeof(float) > kMhaMaxSmemBytes)
        throw std::invalid_argument(std::string("cuda ") + what + ": head dims dk " + std::to_string(a.dn + a.dr) +
                                    " and dv " + std::to_string(a.dv) + " do not fit a block's shared memory");
}

void attend_mha(Blas* blas, const HeadWeights& k_b, const HeadWeights& v_b, const LatentArgs* pages,
                const float* rows, const float* q, float* o, const MlaMhaArgs& a, void* workspace, size_t ws_bytes,
                void* stream, const char* what) {
    if (a.n <= 0) return;
    check_args(a, what);
    const MhaLayout L = mha_layout(a, pages);
    if (ws_bytes < L.total * sizeof(float))
        throw std::invalid_argument(std::string("cuda ") + what + ": workspace of " + std::to_string(ws_bytes) +
                                    " bytes, " + std::to_string(L.total * sizeof(float)) + " needed");
    const int64_t H = a.H, r = a.r, R = a.r + a.dr, dn = a.dn, dv = a.dv, n_keys = a.pos0 + a.n;
    float* ws = static_cast<float*>(workspace);
    float* wkT = ws + L.wkT;
    float* wv = ws + L.wv;

    // 1. fp32 weights: attn_k_b [H][r][dn] transposed to [H][dn][r]; attn_v_b [H][dv][r] as it is.
    dequant_rows(k_b.type, k_b.data, k_b.row_bytes, H * r, dn, Elem::F32, ws + L.wk_raw, dn, stream);
    auto* transpose = &transpose_heads_kernel;
    KINFER_LAUNCH(transpose, flat_grid(H * r * dn), dim3(kTransposeThreads), 0, as_stream(stream), ws + L.wk_raw, H, r,
                  dn, wkT);
    dequant_rows(v_b.type, v_b.data, v_b.row_bytes, H * dv, r, Elem::F32, wv, r, stream);

    // The fp16 expansion (an f16 cache, f16x2 / f16): the weights' fp16 rows and their factors.
    const bool f16x = f16_expansion(a, pages);
    const int64_t k16 = f16_expansion_k(a);
    auto* wk16 = reinterpret_cast<uint16_t*>(ws + L.wk16);
    auto* wv16 = reinterpret_cast<uint16_t*>(ws + L.wv16);
    auto* lat16 = reinterpret_cast<uint16_t*>(ws + L.lat16);
    FlashState st{ws + L.m, ws + L.l, ws + L.acc};
    if (f16x) {
        auto* split_rows = &split_rows_f16_kernel;
        const int split = a.math == F32Math::f16x2;
        KINFER_LAUNCH(split_rows, flat_grid(H * dn * 32), dim3(kTransposeThreads), 0, as_stream(stream), wkT, H * dn, r,
                      split, wk16, ws + L.ku);
        KINFER_LAUNCH(split_rows, flat_grid(H * dv * 32), dim3(kTransposeThreads), 0, as_stream(stream), wv, H * dv, r,
                      split, wv16, ws + L.vu);
        st.k_unscale = ws + L.ku, st.v_unscale = ws + L.vu;
    }
    // The 3xTF32 expansion: the weights split once a call.
    const bool x3 = tf32x3_expansion(a, pages);
    auto* split_tf32 = &split_rows_tf32_kernel;
    if (x3) {
        KINFER_LAUNCH(split_tf32, flat_grid(H * dn * r), dim3(kTransposeThreads), 0, as_stream(stream), wkT, H * dn, r, r, 1,
                      ws + L.wk3);
        KINFER_LAUNCH(split_tf32, flat_grid(H * dv * r), dim3(kTransposeThreads), 0, as_stream(stream), wv, H * dv, r, r, 1,
                      ws + L.wv3);
    }
    // The tensor-core forms where asked (their accumulators: dv <= 256), 16 queries a warp and as
    // many warps as the chunk fills up to 4: fp16 for f16x2 / f16 (mla_mha_mma_f16.cuh), TF32 for
    // tf32x3 / tf32; the fp32 one otherwise, kTQ queries a block. All take the same arguments.
    const bool mma = a.math != F32Math::fp32 && dv <= kFlashMmaMaxDv;
    const bool f16_flash = mma && (a.math == F32Math::f16x2 || a.math == F32Math::f16);
    const int warps = flash_mma_warps(a.n);
    const int64_t block_q = mma ? warps * kFlashMmaRows : kTQ;
    const bool split = a.math == F32Math::tf32x3 || a.math == F32Math::f16x2;
    const size_t smem = f16_flash ? flash_f16_smem_bytes(dn + a.dr, dv, warps, split)
                        : mma     ? flash_mma_smem_bytes(dn + a.dr, dv, warps)
                                  : flash_smem_floats(dn + a.dr, dv) * sizeof(float);
    using Flash = decltype(&mha_flash_kernel);
    const bool wide = dv > 128;   // 32 accumulator tiles a warp, or 16
    const Flash flash = !mma       ? &mha_flash_kernel
                        : f16_flash ? (wide ? (split ? &mha_flash_f16_kernel<true, 32> : &mha_flash_f16_kernel<false, 32>)
                                            : (split ? &mha_flash_f16_kernel<true, 16> : &mha_flash_f16_kernel<false, 16>))
                        : wide      ? (split ? &mha_flash_mma_kernel<true, 32> : &mha_flash_mma_kernel<false, 32>)
                                    : (split ? &mha_flash_mma_kernel<true, 16> : &mha_flash_mma_kernel<false, 16>);
    if (smem > kMhaMaxSmemBytes)   // (check_args holds the fp32 form's)
        throw std::invalid_argument(std::string("cuda ") + what + ": head dims dk " + std::to_string(dn + a.dr) + " and dv " +
                                    std::to_string(dv) + " do not fit a block's shared memory");
    // Past 48 KiB a kernel must opt in (kda_chunked.cu does the same).
    if (smem > kDynamicNoOptIn) (void)cudaFuncSetAttribute(flash, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    const dim3 grid{unsigned((a.n + block_q - 1) / block_q), unsigned(H)};
    for (int64_t b0 = 0; b0 < n_keys; b0 += L.kb) {
        const int64_t bn = std::min(L.kb, n_keys - b0);
        // 2. The block's latent rows, then every head's k_nope and v in two GEMMs.
        const float* lat = rows ? rows + b0 * R : ws + L.lat;
        if (pages) latent_load(*pages, b0, bn, ws + L.lat, stream);   // (k_pe: the flash kernel reads it from here)
        if (f16x) {
            auto* rows16 = &latent_rows_f16_kernel;
            KINFER_LAUNCH(rows16, flat_grid(bn * r), dim3(kTransposeThreads), 0, as_stream(stream), *pages, b0, bn, r,
                          int(k16 / r), lat16);
            gemm(blas, Elem::F16, H * dn, bn, k16, wk16, k16, lat16, k16, ws + L.kn, H * dn);
            gemm(blas, Elem::F16, H * dv, bn, k16, wv16, k16, lat16, k16, ws + L.vv, H * dv);
        } else if (x3) {
            KINFER_LAUNCH(split_tf32, flat_grid(bn * r), dim3(kTransposeThreads), 0, as_stream(stream), lat, bn, r, R, 0,
                          ws + L.lat3);
            gemm_tf32(blas, H * dn, bn, 3 * r, ws + L.wk3, 3 * r, ws + L.lat3, 3 * r, ws + L.kn, H * dn);
            gemm_tf32(blas, H * dv, bn, 3 * r, ws + L.wv3, 3 * r, ws + L.lat3, 3 * r, ws + L.vv, H * dv);
        } else if (tf32_expansion(a, pages)) {
            gemm_tf32(blas, H * dn, bn, r, wkT, r, lat, R, ws + L.kn, H * dn);
            gemm_tf32(blas, H * dv, bn, r, wv, r, lat, R, ws + L.vv, H * dv);
        } else {
            gemm(blas, Elem::F32, H * dn, bn, r, wkT, r, lat, R, ws + L.kn, H * dn);
            gemm(blas, Elem::F32, H * dv, bn, r, wv, r, lat, R, ws + L.vv, H * dv);
        }
        // 3. Every query tile that sees part of the block walks it.
        KINFER_LAUNCH(flash, grid, dim3(mma ? 32 * warps : kFlashThreads), smem, as_stream(stream), q, ws + L.kn,
                      lat, ws + L.vv, st, a.n, a.pos0, H, r, R, dn, a.dr, dv, a.scale, b0, bn, int(b0 == 0));
    }
    // 4. Normalise.
    auto* finish = &mha_finish_kernel;
    KINFER_LAUNCH(finish, flat_grid(a.n * H * dv), dim3(kTransposeThreads), 0, as_stream(stream), st, a.n * H, H, dv, o);
}

}  // namespace

int64_t mla_mha_default_key_block(const MlaMhaArgs& a) {
    // About 128 MiB of expanded keys (K_nope and V of every head, plus the latent row) a block,
    // in whole tiles, at most the keys there are. Unmeasured: fewer, larger GEMMs against the
    // workspace's size.
    // (Plus the latent row split three wide where the 3xTF32 expansion may take it.)
    const int64_t floats = a.r + a.dr + a.H * (a.dn + a.dv) + (splits_three_wide(a.math) ? 3 * a.r : 0);
    const int64_t per_key = std::max<int64_t>(1, floats) * int64_t(sizeof(float));
    const int64_t kb = std::clamp<int64_t>((int64_t(128) << 20) / per_key / kTK * kTK, kTK, 16384);
    return std::min(kb, (a.pos0 + a.n + kTK - 1) / kTK * kTK);
}

size_t mla_mha_workspace_bytes(const MlaMhaArgs& a) { return a.n <= 0 ? 0 : mha_layout(a, nullptr).total * sizeof(float); }
size_t mla_mha_workspace_bytes(const MlaMhaArgs& a, const LatentArgs& c) {
    return a.n <= 0 ? 0 : mha_layout(a, &c).total * sizeof(float);
}

void mla_attend_mha(Blas* blas, const HeadWeights& k_b, const HeadWeights& v_b, const float* cache, const float* q,
                    float* o, const MlaMhaArgs& a, void* workspace, size_t ws_bytes, void* stream) {
    attend_mha(blas, k_b, v_b, nullptr, cache, q, o, a, workspace, ws_bytes, stream, "mla_attend_mha");
}

void mla_attend_mha_paged(Blas* blas, const HeadWeights& k_b, const HeadWeights& v_b, const LatentArgs& c,
                          const float* q, float* o, const MlaMhaArgs& a, void* workspace, size_t ws_bytes,
                          void* stream) {
    if (c.R != a.r + a.dr)
        throw std::invalid_argument("cuda mla_attend_mha_paged: cache rows of R = " + std::to_string(c.R) +
                                    " floats, the shape wants r + dr = " + std::to_string(a.r + a.dr));
    attend_mha(blas, k_b, v_b, &c, nullptr, q, o, a, workspace, ws_bytes, stream, "mla_attend_mha_paged");
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
