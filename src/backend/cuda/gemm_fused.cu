// The prefill GEMM on fp16 tensor cores with the weights decoded inside the kernel (kernels.h
// fused_gemm_matmul / fused_gemm_grouped): y[t * ldy + r] = W.row(r) . x[t] for the quantized types
// of matvec_supported, taken with KINFER_CUDA_GEMM=fused.
//
// Why a third prefill path. gemm.cu's form decodes every weight to a 2-byte copy in global memory
// and has cuBLAS read it back: about 4 bytes an element besides the 0.56 a 4-bit weight takes to
// read, and a MoE layer's grouped GEMM fills 256 MiB of workspace with whole experts before one
// cuBLAS call. mmq.cu reads the weights once but multiplies int8 activations (the CPU's rounding of
// them). This one reads the quantized weights once a 128-token tile, decodes them into shared memory
// as fp16 (block_decode.cuh's values, the bits dequant_rows writes) and multiplies them on fp16
// tensor cores (mma_f16.cuh) with the activations gemm.cu's fp16 GEMM takes (convert_rows_f16_scaled,
// its per-token power of two folded into the store here instead of unscale_tokens' pass). So both
// operands are gemm.cu's, bit for bit; only the order of the fp32 sums differs (test_gemm_fused).
// Which of the three wins at which token count is for a GPU to say (kinfer_gpu_check's gemm table).
//
// A block is 64 weight rows x 128 tokens, 8 warps of 32 x 32 (2 x 4 m16n8 tiles). Decoding a weight
// costs several times the tensor-core work of its 16-wide k step for one 8-token tile, so the
// tile is wide in tokens: each weight is decoded once for 128 tokens, and a MoE expert's share of a
// prefill chunk (tens of tokens) once in all. The width goes in chunks of 128 elements (half a
// super-block, or four 32-element blocks; the last chunk of a 32-element type may be 32, 64 or 96):
//  1. the block starts the copies of its 128 tokens' fp16 activations (cp.async, 16 bytes each:
//     they need no registers and run while the block decodes), decodes its 64 rows' chunk into
//     fp16 in shared memory (a thread a (row, piece): block_decode.cuh's pieces, whose ranges of
//     kChunks * 128 / kElems cover 128 elements in order), then waits for the copies;
//  2. each warp multiplies k16 steps: A (its two 16-row tiles) and B (its four 8-token tiles, two a
//     load) by ldmatrix, fp32 accumulation.
// Rows past the matrix decode its last row again and tokens past the tile read its last token again:
// their outputs are never stored, and a row or token of the product depends on its own operand
// alone. Past the width nothing is read: the k steps stop at the chunk's width.
#include "backend/cuda/async_copy.cuh"
#include "backend/cuda/block_decode.cuh"
#include "backend/cuda/group_task.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma_f16.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

constexpr int kFusedRows = 64;        // weight rows a block
constexpr int kFusedTokens = 128;     // tokens a block
constexpr int kFusedK = 128;          // elements of a chunk
constexpr int kFusedLd = kFusedK + 8; // a shared row's fp16 elements: 272 bytes, 16-byte aligned (ldmatrix), and
                                      // 68 words, so the 8 rows one ldmatrix matrix reads start 4 banks apart
constexpr int kFusedThreads = 256;    // 8 warps: 2 of rows x 4 of tokens
constexpr int kFusedBlocksPerSm = 4;  // what the shared memory allows; the launch bounds hold the
                                      // registers to it (64 a thread: ptxas takes 62-64, no spills)

// 52,224 bytes: past the 48 KiB a launch takes without an opt-in (the launchers opt in), 4 blocks
// an SM.
struct FusedShared {
    uint16_t w[kFusedRows][kFusedLd];     // the chunk's weights, fp16 bits
    uint16_t x[kFusedTokens][kFusedLd];   // the chunk's activations, fp16 bits
};
static_assert(sizeof(FusedShared) <= kDynamicOptInMax, "the fused GEMM's shared memory must fit an SM");

// decode()'s put for one piece: element j of its block into the chunk's row at j + at (at: where
// the block starts in the chunk, -128 for the second half of a super-block), rounded as
// dequant_rows rounds to fp16 (row_decode.cuh's store_elem).
struct PutChunkF16 {
    uint16_t* row;
    int at;
    __device__ void operator()(int j, float v) const {
#if !defined(__CUDACC__)
        if (j + at < 0 || j + at >= kFusedK) throw std::logic_error("cuda cpu mode: a fused GEMM piece outside its chunk");
#endif
        row[j + at] = bq::fp32_to_fp16(v);
    }
};

// One block: weight rows [0, nr) of W and tokens [0, nt) of x16 / y (the tile's first row and token
// already applied); x16 rows `cols` apart, scale[t] the power of two token t's outputs are
// multiplied by (convert_rows_f16_scaled's).
template <class D>
__device__ __forceinline__ void fused_block(const uint8_t* __restrict__ W, size_t row_bytes, int nr, int64_t cols,
                                            const uint16_t* __restrict__ x16, const float* __restrict__ scale, int nt,
                                            float* __restrict__ y, int64_t ldy) {
    KINFER_DYNAMIC_SHARED(FusedShared, sm);
    FusedShared& s = *sm;
    const int warp = int(threadIdx.x / 32), lane = int(threadIdx.x % 32), g = lane / 4, t = lane % 4;
    const int wr = 32 * (warp / 4), wt = 32 * (warp % 4);
    float acc[2][4][4] = {};
    for (int64_t k0 = 0; k0 < cols; k0 += kFusedK) {
        const int kw = cols - k0 < kFusedK ? int(cols - k0) : kFusedK;
        // The activations, 8 elements a copy, in flight while the weights are decoded.
        const int per_row = kw / 8;
        for (int i = int(threadIdx.x); i < kFusedTokens * per_row; i += kFusedThreads) {
            const int tt = i / per_row, j = i % per_row;
            cp_async16(&s.x[tt][8 * j], x16 + int64_t(tt < nt ? tt : nt - 1) * cols + k0 + 8 * j);
        }
        // The weights: piece p of the chunk is piece P = first + p of the row, of block P / kChunks.
        const int pieces = kw * D::kChunks / D::kElems;
        const int64_t first = k0 / D::kElems * D::kChunks + k0 % D::kElems * D::kChunks / D::kElems;
        for (int i = int(threadIdx.x); i < kFusedRows * pieces; i += kFusedThreads) {
            const int r = i / pieces;
            const int64_t P = first + i % pieces, blk = P / D::kChunks;
            PutChunkF16 put{s.w[r], int(blk * D::kElems - k0)};
            D::decode(W + size_t(r < nr ? r : nr - 1) * row_bytes + size_t(blk) * D::kBytes, int(P % D::kChunks), put);
        }
        cp_async_wait_all();
        __syncthreads();
        for (int k = 0; k < kw; k += 16) {
            uint32_t a[2][4], b[2][4];   // b[p]: n tiles 2p (registers 0, 1) and 2p + 1 (2, 3)
#pragma unroll
            for (int m = 0; m < 2; ++m) f16_frag_a(a[m], &s.w[wr + 16 * m][k], kFusedLd);
#pragma unroll
            for (int p = 0; p < 2; ++p) f16_frag_b_rows_x2(b[p], &s.x[wt + 16 * p][k], kFusedLd);
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int n = 0; n < 4; ++n) {
                    const uint32_t bn[2] = {b[n / 2][2 * (n % 2)], b[n / 2][2 * (n % 2) + 1]};
                    mma_f16(acc[m][n], a[m], bn);
                }
        }
        __syncthreads();   // the next chunk overwrites what this one read
    }
    // Element e of tile (m, n): row wr + 16 m + g + 8 (e / 2), token wt + 8 n + 2 t + e % 2
    // (mma_f16.cuh's layout of C). A token scaled on the way in is multiplied back as
    // unscale_tokens does (not at all when its scale is 1).
#pragma unroll
    for (int n = 0; n < 4; ++n)
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int tok = wt + 8 * n + 2 * t + i;
            if (tok >= nt) continue;
            const float sc = scale[tok];
#pragma unroll
            for (int m = 0; m < 2; ++m)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int r = wr + 16 * m + g + 8 * h;
                    const float v = acc[m][n][2 * h + i];
                    if (r < nr) y[int64_t(tok) * ldy + r] = sc == 1.0f ? v : v * sc;
                }
        }
}

template <class D>
__global__ void __launch_bounds__(kFusedThreads, kFusedBlocksPerSm)
    fused_gemm_kernel(const uint8_t* __restrict__ W, size_t row_bytes, int64_t rows, int64_t cols,
                      const uint16_t* __restrict__ x16, const float* __restrict__ scale, int64_t n, float* __restrict__ y,
                      int64_t ldy) {
    const int64_t r0 = int64_t(blockIdx.x) * kFusedRows, t0 = int64_t(blockIdx.y) * kFusedTokens;
    const int nr = rows - r0 < kFusedRows ? int(rows - r0) : kFusedRows;
    const int nt = n - t0 < kFusedTokens ? int(n - t0) : kFusedTokens;
    fused_block<D>(W + size_t(r0) * row_bytes, row_bytes, nr, cols, x16 + t0 * cols, scale + t0, nt, y + t0 * ldy + r0, ldy);
}

// The launch's task: weight rows, its tokens' fp16 activations (cols apart) and scales, its outputs.
struct FusedTask {
    const void* W = nullptr;
    const uint16_t* x = nullptr;
    const float* scale = nullptr;
    float* y = nullptr;
    int64_t rows = 0, n = 0, ldy = 0;
};
using FusedGroup = TaskGroup<FusedTask>;
static_assert(sizeof(FusedGroup) + sizeof(size_t) + sizeof(int64_t) <= 4096, "a launch takes at most 4 KiB of parameters");

// Block u computes task_tile(g, u): fused_block as fused_gemm_kernel calls it, so a task's results
// are the bits it gets alone.
template <class D>
__global__ void __launch_bounds__(kFusedThreads, kFusedBlocksPerSm)
    fused_group_kernel(FusedGroup g, size_t row_bytes, int64_t cols) {
    const TaskTile tile = task_tile<kFusedRows, kFusedTokens>(g, blockIdx.x);
    const FusedTask& task = g.task[tile.task];
    fused_block<D>(static_cast<const uint8_t*>(task.W) + size_t(tile.r0) * row_bytes, row_bytes, tile.nr, cols,
                   task.x + tile.t0 * cols, task.scale + tile.t0, tile.nt, task.y + tile.t0 * task.ldy + tile.r0, task.ldy);
}

// f(Dec{}) for a type the fused GEMM takes, or std::invalid_argument naming `what`.
template <class F>
void with_fused_dec(quant::Type type, int64_t cols, const char* what, F&& f) {
    if (!fused_gemm_supported(type)) {
        const char* name = quant::type_facts(type).name;
        throw std::invalid_argument(std::string("cuda ") + what + ": no fused form for weight type " + (name ? name : "?"));
    }
    with_dec(type, what, [&](auto dec) {
        using D = decltype(dec);
        if constexpr (!D::kUnblocked) {
            static_assert(D::kElems % 32 == 0 && (D::kElems <= kFusedK ? kFusedK % D::kElems == 0 : D::kElems % kFusedK == 0),
                          "a chunk is whole blocks or whole pieces of one");
            if (cols <= 0 || cols % D::kElems != 0)
                throw std::invalid_argument(std::string("cuda ") + what + ": " + std::to_string(cols) +
                                            " columns are not whole blocks of " + std::to_string(D::kElems));
            f(dec);
        }
    });
}

// n tokens' activations in the workspace: gemm.cu's fp16 layout (values, then scales).
size_t fused_scale_at(int64_t cols, int64_t n) { return gemm_act_layout(Elem::F16, cols, n).values; }
size_t fused_act_bytes(int64_t cols, int64_t n) { return gemm_act_layout(Elem::F16, cols, n).total; }

// The opt-in to FusedShared's bytes. The attribute belongs to the kernel on the current device,
// and a process may drive several GPUs (--device cuda0,cuda1), so it is set at every launch (a
// host call, no stream work); a refusal shows as the launch's error.
template <class Kernel>
void opt_in(Kernel* kernel) {
    static_assert(sizeof(FusedShared) > kDynamicNoOptIn, "no opt-in needed: drop this");
    (void)cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(sizeof(FusedShared)));
}

void launch_group(quant::Type type, size_t row_bytes, int64_t cols, const FusedGroup& in, void* stream) {
    FusedGroup g;
    const int64_t blocks = compact_group(in, g, [](const FusedTask& t) {
        return (t.rows + kFusedRows - 1) / kFusedRows * ((t.n + kFusedTokens - 1) / kFusedTokens);
    });
    if (blocks == 0) return;
    if (blocks > 2147483647) throw std::invalid_argument("cuda fused_gemm_grouped: more than 2^31 - 1 blocks");
    with_fused_dec(type, cols, "fused_gemm_grouped", [&](auto dec) {
        auto* kernel = &fused_group_kernel<decltype(dec)>;
        opt_in(kernel);
        KINFER_LAUNCH(kernel, dim3(unsigned(blocks)), dim3(kFusedThreads), sizeof(FusedShared), as_stream(stream), g,
                      row_bytes, cols);
    });
}

}  // namespace

bool fused_gemm_supported(quant::Type t) {
    return matvec_supported(t) && t != quant::Type::F32 && t != quant::Type::F16 && t != quant::Type::BF16;
}

size_t fused_gemm_workspace_bytes(int64_t cols, int64_t n) {
    return n <= 0 || cols <= 0 ? 0 : fused_act_bytes(cols, std::min(n, kGemmMaxTokens));
}

void fused_gemm_matmul(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, const float* x,
                       int64_t ldx, int64_t n, float* y, int64_t ldy, void* workspace, size_t ws_bytes, void* stream) {
    if (rows <= 0 || n <= 0) return;
    if (ldx == 0) ldx = cols;
    if (ldy == 0) ldy = rows;
    with_fused_dec(type, cols, "fused_gemm_matmul", [&](auto dec) {
        // Tokens a chunk: kGemmMaxTokens (convert_rows_f16_scaled's most), fewer when the
        // workspace holds fewer.
        int64_t tokens = std::min(n, kGemmMaxTokens);
        while (tokens > 0 && fused_act_bytes(cols, tokens) > ws_bytes)
            tokens = std::min(tokens - 1, int64_t(ws_bytes / (size_t(cols) * 2 + 4)));
        if (tokens <= 0)
            throw std::invalid_argument("cuda fused_gemm_matmul: workspace of " + std::to_string(ws_bytes) + " bytes, " +
                                        std::to_string(fused_act_bytes(cols, 1)) + " needed at least");
        if ((rows + kFusedRows - 1) / kFusedRows > 2147483647)
            throw std::invalid_argument("cuda fused_gemm_matmul: " + std::to_string(rows) +
                                        " rows, more than 2^31 - 1 tiles of 64");
        auto* ws = static_cast<uint8_t*>(workspace);
        auto* x16 = reinterpret_cast<uint16_t*>(ws);
        auto* scale = reinterpret_cast<float*>(ws + fused_scale_at(cols, tokens));
        auto* kernel = &fused_gemm_kernel<decltype(dec)>;
        opt_in(kernel);
        for (int64_t t0 = 0; t0 < n; t0 += tokens) {
            const int64_t nt = std::min(n - t0, tokens);
            convert_rows_f16_scaled(x + t0 * ldx, ldx, nt, cols, x16, cols, scale, stream);
            const dim3 grid(unsigned((rows + kFusedRows - 1) / kFusedRows), unsigned((nt + kFusedTokens - 1) / kFusedTokens));
            KINFER_LAUNCH(kernel, grid, dim3(kFusedThreads), sizeof(FusedShared), as_stream(stream),
                          static_cast<const uint8_t*>(W), row_bytes, rows, cols, x16, scale, nt, y + t0 * ldy, ldy);
        }
    });
}

size_t fused_gemm_grouped_workspace_bytes(int64_t cols, const GemmTask* tasks, int64_t count) {
    size_t sum = 0, alone = 0;
    for (int64_t i = 0; i < count; ++i) {
        if (tasks[i].rows <= 0 || tasks[i].n <= 0) continue;
        const size_t b = fused_gemm_workspace_bytes(cols, tasks[i].n);
        sum += b;
        alone = std::max(alone, b);
    }
    return std::max(std::min(sum, kGemmGroupBytes), alone);
}

void fused_gemm_grouped(quant::Type type, size_t row_bytes, int64_t cols, const GemmTask* tasks, int64_t count,
                        void* workspace, size_t ws_bytes, void* stream) {
    with_fused_dec(type, cols, "fused_gemm_grouped", [](auto) {});   // the type and width, before anything is queued
    auto* ws = static_cast<uint8_t*>(workspace);
    FusedGroup group;
    size_t used = 0;
    auto flush = [&] {
        launch_group(type, row_bytes, cols, group, stream);
        group.n_tasks = 0;
        used = 0;
    };
    for (int64_t i = 0; i < count; ++i) {
        const GemmTask& t = tasks[i];
        if (t.rows <= 0 || t.n <= 0) continue;
        const int64_t ldx = t.ldx ? t.ldx : cols, ldy = t.ldy ? t.ldy : t.rows;
        const size_t bytes = fused_act_bytes(cols, t.n);
        if (t.n > kGemmMaxTokens || bytes > ws_bytes) {
            // Alone, in chunks; after the group so far, whose activations it would overwrite.
            if (group.n_tasks) flush();
            fused_gemm_matmul(type, t.W, row_bytes, t.rows, cols, t.x, ldx, t.n, t.y, ldy, workspace, ws_bytes, stream);
            continue;
        }
        if (used + bytes > ws_bytes || group.n_tasks == kMatvecGroupMax) flush();
        auto* x16 = reinterpret_cast<uint16_t*>(ws + used);
        auto* scale = reinterpret_cast<float*>(ws + used + fused_scale_at(cols, t.n));
        convert_rows_f16_scaled(t.x, ldx, t.n, cols, x16, cols, scale, stream);
        group.task[group.n_tasks++] = {t.W, x16, scale, t.y, t.rows, t.n, ldy};
        used += bytes;
    }
    if (group.n_tasks) flush();
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
