// The prefill GEMM on int8 tensor cores: y[t * ldy + r] = W.row(r) . x[t] for every quantized type
// of matvec_q8 (kernels.h mmq_matmul / mmq_group), on the activations quantize_act wrote (Q8_K for
// the super-block types, Q8_0 / Q8_1 for the 32-element ones, as the CPU pairs them).
//
// Why a second prefill path beside gemm.cu. gemm.cu dequantizes every weight tile to fp16 (two
// bytes an element written and read again: about 4 bytes an element more than a 4-bit weight's 0.56)
// and multiplies on fp16 tensor cores; here the quantized weights are read once a 64-token tile,
// turned into int8 levels in shared memory, and multiplied on int8 tensor cores (mma.cuh), twice
// fp16's rate on sm_90. Which one wins at which token count is for a GPU to say: the backend takes
// this one when KINFER_CUDA_GEMM=int8 (CudaBackend), and kinfer_gpu_check times both.
//
// A block is 64 weight rows x 64 tokens, 4 warps of 32 x 32 (2 x 4 mma tiles). The width goes in
// chunks of 256 (one super-block, eight 32-element blocks):
//  1. the block decodes its 64 rows' chunk to int8 levels in shared memory (q8_formats.cuh's
//     decoders, the dp4a matvec's) at the byte positions of the activations each level pairs with,
//     so both operands are k-contiguous rows (mma.cuh's fragments), with each 32-element group's
//     integer scale (16-element for Q6_K) and the float scales beside them; and copies its 64
//     tokens' activation bytes (cp.async, started before the weights' decoding) and scales;
//  2. each warp multiplies a 32-element group at a time (Q6_K: two of 16, with the k16 form) into
//     exact int32 sums; the super-block types add them times the group's integer scale (still
//     exact), then per chunk y += d_x (d_w sum - dmin_w sum_g m_g bsum_g) (the mins only for
//     Q4_K / Q5_K); the 32-element types y += sum (d_w d_x) (+ m_w s_x for Q4_1 / Q5_1) per group.
// The integer sums are the CPU's (the same int8 activations and levels): results agree with the
// CPU backend to fp32 rounding of a few float steps (test_mmq), as the dp4a matvec's do.
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/group_task.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/q8_formats.cuh"

#include <stdexcept>
#include <string>
#include <type_traits>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kMmqRows = 64;     // weight rows a block
constexpr int kMmqTokens = 64;   // tokens a block
constexpr int kMmqK = 256;       // elements of a chunk
constexpr int kMmqLd = kMmqK + 16;   // a shared row's bytes: 16-byte aligned, and the 8 rows a fragment load reads
                                     // (4 words apart mod 32 banks) with its 4 k-words fall in 32 different banks
constexpr int kMmqThreads = 128;

// One block's shared memory: a chunk of its weight rows as int8 levels and of its tokens'
// activations, and their scales. 46,080 bytes, within the 48 KiB a launch takes without an opt-in
// (less compat.h's room for static shared memory).
struct MmqShared {
    int8_t w[kMmqRows][kMmqLd];
    int8_t x[kMmqTokens][kMmqLd];
    int16_t gs[kMmqRows][16];   // super-block types: each group's integer scale (Q6_K: 16 of 16 elements)
    int16_t gm[kMmqRows][8];    // Q4_K / Q5_K: each 32-group's min
    float wf[kMmqRows][8];      // super-block: [0] d, [1] dmin; 32-element: each block's d
    float wm[kMmqRows][8];      // Q4_1 / Q5_1: each block's m
    float xf[kMmqTokens][8];    // Q8_K: [0] d; Q8_0 / Q8_1: each block's d
    union {
        int32_t xb[kMmqTokens][8];   // Q8_K: each 32-group's sum of quants (two of its 16-element sums)
        float xm[kMmqTokens][8];     // Q8_1: each block's s
    };
};
static_assert(sizeof(MmqShared) <= kDynamicNoOptIn, "mmq's shared memory must fit without an opt-in");

template <class F>
constexpr bool kG16 = std::is_same_v<F, SbQ6_K>;   // 16-element groups: the k16 product
template <class F>
constexpr bool kKMins = std::is_same_v<F, SbQ4_K> || std::is_same_v<F, SbQ5_K>;

__device__ __forceinline__ void put16(int8_t* dst, uint4 v) { store_aligned(reinterpret_cast<uint8_t*>(dst), v); }
__device__ __forceinline__ void put4(int8_t* dst, uint32_t v) { store_aligned(reinterpret_cast<uint8_t*>(dst), v); }

// float(c) for |c| <= 2^22 without the int-to-float conversion (several times slower than an FMA
// by the programming guide's throughput table): c added to the bits of 1.5 * 2^23, whose ulp is 1, then 1.5 * 2^23 taken off again,
// both exact. An mma sum is at most 2^19 in magnitude.
__device__ __forceinline__ float small_int_to_float(int c) {
    return __fsub_rn(__uint_as_float(uint32_t(c) + 0x4B400000u), 12582912.0f);
}

// The warp's accumulator elements: f(m, n, e, r, tok) for mma tile m (16 rows) x n (8 tokens) of
// the warp's 32 x 32, element e at the block's row r = wr + 16 m + g + 8 (e / 2) and token
// tok = wt + 8 n + 2 t + e % 2 (mma.cuh's layout of C).
template <class Fn>
__device__ __forceinline__ void for_each_acc(int wr, int wt, Fn&& f) {
    const int lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
#pragma unroll
    for (int m = 0; m < 2; ++m)
#pragma unroll
        for (int n = 0; n < 4; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) f(m, n, e, wr + 16 * m + g + 8 * (e / 2), wt + 8 * n + 2 * t + e % 2);
}

// The weights' part of a chunk, elements [k0, k0 + kw) of the block's rows (r < nr: the matrix's;
// the others zeros, never read from W). One overload per format family; `i` runs over the
// block's (row, piece) items, kMmqThreads apart.
template <bool kFive>
__device__ void load_w(SbK4<kFive>, MmqShared& s, const uint8_t* W, size_t row_bytes, int nr, int64_t k0, int, const uint32_t*) {
    using F = SbK4<kFive>;
    for (int i = int(threadIdx.x); i < kMmqRows * 8; i += kMmqThreads) {
        const int r = i / 8, k = i % 8, g = k / 2, l0 = 16 * (k % 2);
        typename F::Weights w{};
        if (r < nr) w = F::weights(W + size_t(r) * row_bytes + size_t(k0 / kQK) * F::kBytes, k);
        put16(&s.w[r][64 * g + l0], w.lo);
        put16(&s.w[r][64 * g + 32 + l0], w.hi);
        if (k % 2 == 0) {
            s.gs[r][2 * g] = int16_t(w.sc_a), s.gs[r][2 * g + 1] = int16_t(w.sc_b);
            s.gm[r][2 * g] = int16_t(w.m_a), s.gm[r][2 * g + 1] = int16_t(w.m_b);
        }
        if (k == 0) s.wf[r][0] = w.dw, s.wf[r][1] = w.dmin;
    }
}
__device__ void load_w(SbQ6_K, MmqShared& s, const uint8_t* W, size_t row_bytes, int nr, int64_t k0, int, const uint32_t*) {
    for (int i = int(threadIdx.x); i < kMmqRows * 16; i += kMmqThreads) {
        const int r = i / 16, c = i % 16, h = c / 8, l0 = 4 * (c % 8);
        SbQ6_K::Weights w{};
        if (r < nr) w = SbQ6_K::weights(W + size_t(r) * row_bytes + size_t(k0 / kQK) * SbQ6_K::kBytes, c);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            put4(&s.w[r][128 * h + 32 * k + l0], r < nr ? bytes_minus(w.lv[k], 32) : 0u);   // -32..31
            if (l0 % 16 == 0) s.gs[r][8 * h + 2 * k + l0 / 16] = int16_t(w.sc[k]);
        }
        if (c == 0) s.wf[r][0] = w.d;
    }
}
__device__ void load_w(SbIQ4_XS, MmqShared& s, const uint8_t* W, size_t row_bytes, int nr, int64_t k0, int, const uint32_t*) {
    for (int i = int(threadIdx.x); i < kMmqRows * 8; i += kMmqThreads) {
        const int r = i / 8, k = i % 8;
        SbIQ4_XS::Weights w{};
        if (r < nr) w = SbIQ4_XS::weights(W + size_t(r) * row_bytes + size_t(k0 / kQK) * SbIQ4_XS::kBytes, k);
        else w.ls = 32;
        put16(&s.w[r][32 * k], uint4{w.lv[0], w.lv[2], w.lv[4], w.lv[6]});
        put16(&s.w[r][32 * k + 16], uint4{w.lv[1], w.lv[3], w.lv[5], w.lv[7]});
        s.gs[r][k] = int16_t(w.ls - 32);
        if (k == 0) s.wf[r][0] = w.dw;
    }
}
// The 32-element formats: piece c of block b gives the levels of activation bytes 8c .. 8c + 7.
template <class P>
__device__ void load_w(P, MmqShared& s, const uint8_t* W, size_t row_bytes, int nr, int64_t k0, int kw, const uint32_t* t) {
    const int nb = kw / 32;
    for (int i = int(threadIdx.x); i < kMmqRows * nb * 4; i += kMmqThreads) {
        const int r = i / (4 * nb), b = i / 4 % nb, c = i % 4;
        uint32_t lo = 0, hi = 0;
        float d = 0, m = 0;
        if (r < nr) {
            const uint8_t* blk = W + size_t(r) * row_bytes + size_t(k0 / 32 + b) * P::kBytes;
            P::levels(blk, c, t, lo, hi);
            d = P::scale(blk);
            if constexpr (P::kMin) m = P::min(blk);
        }
        put4(&s.w[r][32 * b + 8 * c], lo);
        put4(&s.w[r][32 * b + 8 * c + 4], hi);
        if (c == 0) {
            s.wf[r][b] = d;
            if constexpr (P::kMin) s.wm[r][b] = m;
        }
    }
}

// The activations' part of a chunk: tokens tt < nt of the block (rows xq_stride apart), else
// zeros. The quants by 16-byte cp.async copies (load_x_quants, started before the weights are
// decoded; the block waits for them before its barrier), then the scales (load_x_scales).
__device__ void load_x_quants(MmqShared& s, const uint8_t* xq, size_t xq_stride, int nt, int64_t k0, int kw) {
    const int per_row = kw / 16;
    for (int i = int(threadIdx.x); i < kMmqTokens * per_row; i += kMmqThreads) {
        const int tt = i / per_row, j = i % per_row;
        if (tt < nt) cp_async16(&s.x[tt][16 * j], xq + size_t(tt) * xq_stride + size_t(k0) + 16 * size_t(j));
        else put16(&s.x[tt][16 * j], uint4{0, 0, 0, 0});
    }
}
template <class F>
__device__ void load_x_scales(MmqShared& s, const uint8_t* xq, size_t xq_stride, int64_t cols, int nt, int64_t k0, int kw) {
    if constexpr (F::kSuperBlock) {
        for (int i = int(threadIdx.x); i < kMmqTokens * 8; i += kMmqThreads) {
            const int tt = i / 8, g = i % 8;
            int32_t sum = 0;
            float d = 0;
            if (tt < nt) {
                const Q8Row a = q8_row(xq + size_t(tt) * xq_stride, cols);
                sum = a.bsum[k0 / 16 + 2 * g] + a.bsum[k0 / 16 + 2 * g + 1];
                d = a.d[k0 / kQK];
            }
            s.xb[tt][g] = sum;
            if (g == 0) s.xf[tt][0] = d;
        }
    } else {
        const int nb = kw / 32;
        for (int i = int(threadIdx.x); i < kMmqTokens * nb; i += kMmqThreads) {
            const int tt = i / nb, b = i % nb;
            float d = 0, sum = 0;
            if (tt < nt) {
                const uint8_t* row = xq + size_t(tt) * xq_stride;
                d = q8_0_row_d(row, cols)[k0 / 32 + b];
                if constexpr (F::kMin) sum = q8_1_row_s(row, cols)[k0 / 32 + b];
            }
            s.xf[tt][b] = d;
            if constexpr (F::kMin) s.xm[tt][b] = sum;
        }
    }
}

// One block: weight rows [r0, r0 + nr) of W (r0 already applied) and tokens [0, nt) of xq / y
// (the tile's first token already applied). Warp (wm, wn) owns rows 32 wm .. + 31 and tokens
// 32 wn .. + 31: mma tiles m (16 rows) x n (8 tokens), element e of a tile at row
// 16 m + g + 8 (e / 2), token 8 n + 2 t + e % 2 (mma.cuh).
template <class F>
__device__ __forceinline__ void mmq_block(const uint8_t* __restrict__ W, size_t row_bytes, int nr, int64_t cols,
                                          const uint8_t* __restrict__ xq, size_t xq_stride, int nt, float* __restrict__ y,
                                          int64_t ldy, uint64_t levels_lo, uint64_t levels_hi) {
    KINFER_DYNAMIC_SHARED(MmqShared, sm);
    MmqShared& s = *sm;
    const uint32_t table[4] = {uint32_t(levels_lo), uint32_t(levels_lo >> 32), uint32_t(levels_hi), uint32_t(levels_hi >> 32)};
    const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    const int wr = 32 * (warp / 2), wt = 32 * (warp % 2);
    // Rounded float operations throughout (no contraction): every instantiation, alone or in a
    // group, gives the same bits.
    float acc[2][4][4] = {};
    for (int64_t k0 = 0; k0 < cols; k0 += kMmqK) {
        const int kw = cols - k0 < kMmqK ? int(cols - k0) : kMmqK;
        load_x_quants(s, xq, xq_stride, nt, k0, kw);
        load_w(F{}, s, W, row_bytes, nr, k0, kw, table);
        load_x_scales<F>(s, xq, xq_stride, cols, nt, k0, kw);
        cp_async_wait_all();
        __syncthreads();
        [[maybe_unused]] int isb[2][4][4] = {};   // super-block types: sum over groups of scale x exact sum
        for (int q = 0; q < kw / 32; ++q) {
            uint32_t a[2][4], b[4][2];
#pragma unroll
            for (int m = 0; m < 2; ++m) mma_frag_a32(a[m], &s.w[wr + 16 * m][32 * q], kMmqLd);
#pragma unroll
            for (int n = 0; n < 4; ++n) mma_frag_b32(b[n], &s.x[wt + 8 * n][32 * q], kMmqLd);
            if constexpr (F::kSuperBlock) {
                // Exact: each group's integer scale times its exact sum (Q6_K: two groups of 16).
                constexpr int kHalves = kG16<F> ? 2 : 1;
#pragma unroll
                for (int h = 0; h < kHalves; ++h)
#pragma unroll
                    for (int m = 0; m < 2; ++m) {
                        const int ra = wr + 16 * m + g, grp = kHalves * q + h;   // this lane's rows: ra, ra + 8
                        const int sa = s.gs[ra][grp], sb = s.gs[ra + 8][grp];
#pragma unroll
                        for (int n = 0; n < 4; ++n) {
                            int c[4] = {};
                            if constexpr (kG16<F>) mma_s8_k16(c, a[m][2 * h], a[m][2 * h + 1], b[n][h]);
                            else mma_s8_k32(c, a[m], b[n]);
                            isb[m][n][0] += sa * c[0], isb[m][n][1] += sa * c[1];
                            isb[m][n][2] += sb * c[2], isb[m][n][3] += sb * c[3];
                        }
                    }
            } else {
                // Per block: d_w d_x times the exact sum (+ m_w s_x), each scale read once for
                // this lane's rows and tokens.
                float dw[2][2], dx[4][2], mw[2][2] = {}, sx[4][2] = {};
#pragma unroll
                for (int m = 0; m < 2; ++m)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        dw[m][i] = s.wf[wr + 16 * m + g + 8 * i][q];
                        if constexpr (F::kMin) mw[m][i] = s.wm[wr + 16 * m + g + 8 * i][q];
                    }
#pragma unroll
                for (int n = 0; n < 4; ++n)
#pragma unroll
                    for (int i = 0; i < 2; ++i) {
                        dx[n][i] = s.xf[wt + 8 * n + 2 * t + i][q];
                        if constexpr (F::kMin) sx[n][i] = s.xm[wt + 8 * n + 2 * t + i][q];
                    }
                int c[2][4][4] = {};
#pragma unroll
                for (int m = 0; m < 2; ++m)
#pragma unroll
                    for (int n = 0; n < 4; ++n) mma_s8_k32(c[m][n], a[m], b[n]);
                for_each_acc(wr, wt, [&](int m, int n, int e, int, int) {
                    float v = __fmul_rn(small_int_to_float(c[m][n][e]), __fmul_rn(dw[m][e / 2], dx[n][e % 2]));
                    if constexpr (F::kMin) v = __fadd_rn(v, __fmul_rn(mw[m][e / 2], sx[n][e % 2]));
                    acc[m][n][e] = __fadd_rn(acc[m][n][e], v);
                });
            }
        }
        if constexpr (F::kSuperBlock) {
            // Per chunk (one super-block): d_x (d_w S - dmin_w sum_g m_g bsum_g).
            for_each_acc(wr, wt, [&](int m, int n, int e, int r, int tok) {
                float v = __fmul_rn(s.wf[r][0], float(isb[m][n][e]));
                if constexpr (kKMins<F>) {
                    int mins = 0;
#pragma unroll
                    for (int j = 0; j < 8; ++j) mins += int(s.gm[r][j]) * s.xb[tok][j];
                    v = __fsub_rn(v, __fmul_rn(s.wf[r][1], float(mins)));
                }
                acc[m][n][e] = __fadd_rn(acc[m][n][e], __fmul_rn(s.xf[tok][0], v));
            });
        }
        __syncthreads();   // the next chunk overwrites what this one read
    }
    for_each_acc(wr, wt, [&](int m, int n, int e, int r, int tok) {
        if (r < nr && tok < nt) y[int64_t(tok) * ldy + r] = acc[m][n][e];
    });
}

template <class F>
__global__ void __launch_bounds__(kMmqThreads)
    mmq_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int64_t cols, const uint8_t* __restrict__ xq,
               size_t xq_stride, float* __restrict__ y, int64_t n, int64_t ldy, uint64_t levels_lo, uint64_t levels_hi) {
    const int64_t r0 = int64_t(blockIdx.x) * kMmqRows, t0 = int64_t(blockIdx.y) * kMmqTokens;
    const int nr = rows - r0 < kMmqRows ? int(rows - r0) : kMmqRows, nt = n - t0 < kMmqTokens ? int(n - t0) : kMmqTokens;
    mmq_block<F>(W + size_t(r0) * row_bytes, row_bytes, nr, cols, xq + size_t(t0) * xq_stride, xq_stride, nt,
                 y + t0 * ldy + r0, ldy, levels_lo, levels_hi);
}

// A group: block u computes task_tile(g, u); the same block code as mmq_matmul's, so a task's
// results are the bits it gets alone.
template <class F>
__global__ void __launch_bounds__(kMmqThreads)
    mmq_group_kernel(MatvecQ8Group g, size_t row_bytes, int64_t cols, size_t xq_stride, uint64_t levels_lo,
                     uint64_t levels_hi) {
    const TaskTile tile = task_tile<kMmqRows, kMmqTokens>(g, blockIdx.x);
    const MatvecQ8Task& task = g.task[tile.task];
    mmq_block<F>(static_cast<const uint8_t*>(task.W) + size_t(tile.r0) * row_bytes, row_bytes, tile.nr, cols,
                 static_cast<const uint8_t*>(task.xq) + size_t(tile.t0) * xq_stride, xq_stride, tile.nt,
                 task.y + tile.t0 * task.ldy + tile.r0, task.ldy, levels_lo, levels_hi);
}

// mma_check's warp: the product A B both ways and in both shapes, each stored by mma.cuh's layout
// of C (row g / g + 8, columns 2t, 2t + 1) into a 16 x 8 row-major matrix of out.
__global__ void __launch_bounds__(32) mma_check_kernel(const int8_t* __restrict__ A, const int8_t* __restrict__ B,
                                                       int32_t* __restrict__ out) {
    const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
    uint32_t a[4], b[2];
    mma_frag_a32(a, A, 32);
    mma_frag_b32(b, B, 32);
    int c[4][4] = {};
    mma_s8_k32(c[0], a, b);
    mma_s8_k32_plain(c[1], a, b);
    mma_s8_k16(c[2], a[0], a[1], b[0]);
    mma_s8_k16_plain(c[3], a[0], a[1], b[0]);
    for (int f = 0; f < 4; ++f)
        for (int e = 0; e < 4; ++e) out[128 * f + 8 * (g + 8 * (e / 2)) + 2 * t + e % 2] = c[f][e];
}

}  // namespace

void mma_check(const int8_t* A, const int8_t* B, int32_t* out, void* stream) {
    auto* kernel = &mma_check_kernel;
    KINFER_LAUNCH(kernel, dim3(1), dim3(32), 0, as_stream(stream), A, B, out);
}

void mmq_matmul(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const void* xq, int64_t n,
                float* y, int64_t ldy, void* stream) {
    if (rows <= 0 || n <= 0) return;
    check_q8_width(type, cols, "mmq_matmul");
    const int64_t row_tiles = (rows + kMmqRows - 1) / kMmqRows, tok_tiles = (n + kMmqTokens - 1) / kMmqTokens;
    if (row_tiles > 2147483647 || tok_tiles > 65535)
        throw std::invalid_argument("cuda mmq_matmul: " + std::to_string(rows) + " rows x " + std::to_string(n) +
                                    " tokens (at most 2^31 - 1 tiles of 64 rows and 65535 of 64 tokens a call)");
    with_q8_format(type, "mmq_matmul", [&](auto format, const int8_t* levels) {
        using F = decltype(format);
        auto* kernel = &mmq_kernel<F>;
        KINFER_LAUNCH(kernel, dim3(unsigned(row_tiles), unsigned(tok_tiles)), dim3(kMmqThreads), sizeof(MmqShared),
                      as_stream(stream), static_cast<const uint8_t*>(W), row_bytes, rows, cols, static_cast<const uint8_t*>(xq),
                      q8_act_row_bytes(type, cols), y, n, ldy ? ldy : rows, levels_word(levels, 0), levels_word(levels, 1));
    });
}

void mmq_group(quant::Type type, size_t row_bytes, int64_t cols, const MatvecQ8Group& group, void* stream) {
    if (group.n_tasks < 0 || group.n_tasks > kMatvecGroupMax)
        throw std::invalid_argument("cuda mmq_group: " + std::to_string(group.n_tasks) + " tasks, at most " +
                                    std::to_string(kMatvecGroupMax));
    MatvecQ8Group g;
    const int64_t blocks = compact_group(group, g, [](const MatvecQ8Task& t) {
        return (t.rows + kMmqRows - 1) / kMmqRows * ((t.n + kMmqTokens - 1) / kMmqTokens);
    });
    if (g.n_tasks == 0) return;
    check_q8_width(type, cols, "mmq_group");
    if (blocks > 2147483647) throw std::invalid_argument("cuda mmq_group: more than 2^31 - 1 blocks");
    with_q8_format(type, "mmq_group", [&](auto format, const int8_t* levels) {
        using F = decltype(format);
        auto* kernel = &mmq_group_kernel<F>;
        KINFER_LAUNCH(kernel, dim3(unsigned(blocks)), dim3(kMmqThreads), sizeof(MmqShared), as_stream(stream), g, row_bytes,
                      cols, q8_act_row_bytes(type, cols), levels_word(levels, 0), levels_word(levels, 1));
    });
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
