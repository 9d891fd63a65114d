// The prefill GEMM (kernels.h gemm_matmul): a matmul over many tokens dequantizes its weight rows
// in tiles to a 16-bit copy and multiplies each tile with cuBLAS (blas.h), fp32 accumulate.
//  - dequant_rows: one thread per block_dot.cuh piece decodes its elements (row_decode.cuh's
//    kernels, block_decode.cuh's decoders: the CPU's values bit for bit) and stores them in the
//    tile's element type.
//  - convert_rows: the activations to the same element type (quant/fp16.h's rounding); for fp16,
//    convert_rows_f16_scaled first brings a token whose largest |x| is past fp16's range under it
//    by a power of two, and unscale_tokens multiplies that token's outputs back after the GEMM.
// Decoding and the GEMM run on the same stream, so one tile buffer serves every tile: tile i + 1
// is written only after the GEMM of tile i has read it. Not measured on a GPU yet.
#include "backend/cuda/blas.h"
#include "backend/cuda/block_decode.cuh"
#include "backend/cuda/group_task.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/reduce.cuh"
#include "backend/cuda/row_decode.cuh"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace {

template <Elem E>
__global__ void __launch_bounds__(kDeqThreads)
    convert_rows_kernel(const float* __restrict__ x, int64_t ldx, int64_t rows, int64_t cols, void* __restrict__ y,
                        int64_t ldy) {
    const int64_t p = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (p >= rows * cols) return;
    const int64_t r = p / cols, i = p % cols;
    store_elem<E>(y, r * ldy + i, x[r * ldx + i]);
}

// fp16's largest finite value is 65504, and 65520 or more rounds to inf: one large activation
// would make a token's every output inf or NaN. A token row whose largest |x| is 65504 or more is
// multiplied by 2^-k first, k the least that brings it under 2^15 (k = ilogb(amax) - 14, 1 to
// 113). The multiplication is exact, so every value keeps fp16's 11 significant bits; only values
// below 2^(k-14) fall into fp16's subnormals, as values below 2^-14 do in a row in range. k = 0
// for a row in range and for a row holding inf (NaNs are skipped by the max): those convert as
// convert_rows converts them, bit for bit.
__device__ __forceinline__ int f16_range_shift(float amax) {
    if (!(amax >= 65504.0f && amax < INFINITY)) return 0;
    return int((__float_as_uint(amax) >> 23) & 0xffu) - 141;
}
// 2^k for |k| <= 126, from its exponent bits.
__device__ __forceinline__ float pow2f(int k) { return __uint_as_float(uint32_t(127 + k) << 23); }

// The tokens of one GEMM's output whose scale may not be 1: y[t * ldy + r] for t < n, r < rows.
struct UnscaleTask {
    float* y = nullptr;
    const float* scale = nullptr;   // n of them
    int64_t ldy = 0, rows = 0, n = 0;
};
// Up to kMatvecGroupMax of them in one launch's parameters, a block per token (group_task.cuh).
using UnscaleGroup = TaskGroup<UnscaleTask>;
static_assert(sizeof(UnscaleGroup) <= 4096, "a launch takes at most 4 KiB of parameters");

// One block per token row: the row's largest finite |x| picks the power of two (f16_range_shift's
// rule above), then the row is converted as convert_rows would convert x * 2^-k (x itself when
// k = 0: a GPU's multiply would turn a -NaN into its canonical +NaN).
__global__ void __launch_bounds__(kDeqThreads)
    convert_rows_f16_scaled_kernel(const float* __restrict__ x, int64_t ldx, int64_t cols, void* __restrict__ y,
                                   int64_t ldy, float* __restrict__ scale) {
    const float* xr = x + int64_t(blockIdx.x) * ldx;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) amax = fmaxf(amax, fabsf(xr[i]));
    amax = block_max(amax);
    const int k = f16_range_shift(amax);
    const float down = pow2f(-k);
    if (threadIdx.x == 0) scale[blockIdx.x] = pow2f(k);
    for (int64_t i = threadIdx.x; i < cols; i += blockDim.x)
        store_elem<Elem::F16>(y, int64_t(blockIdx.x) * ldy + i, k ? xr[i] * down : xr[i]);
}

// One block per token of a task: a token whose scale is not 1 has its outputs multiplied by it
// (exact, unless the fp32 result itself overflows: a power of two on an fp32 sum).
__global__ void __launch_bounds__(kDeqThreads) unscale_tokens_kernel(UnscaleGroup g) {
    const int ti = group_task(g, blockIdx.x);
    const UnscaleTask& t = g.task[ti];
    const int64_t tok = int64_t(blockIdx.x) - g.first[ti];
    const float s = t.scale[tok];
    if (s == 1.0f) return;
    float* yt = t.y + tok * t.ldy;
    for (int64_t r = threadIdx.x; r < t.rows; r += blockDim.x) yt[r] *= s;
}

template <class D>
void deq_type(const void* W, size_t row_bytes, int64_t rows, int64_t cols, Elem out, void* y, int64_t ldy, void* stream) {
    if (!D::kUnblocked && cols % D::kElems != 0)
        throw std::invalid_argument("cuda dequant_rows: " + std::to_string(cols) + " columns are not whole blocks of " +
                                    std::to_string(D::kElems));
    const auto* w = static_cast<const uint8_t*>(W);
    auto* o = static_cast<uint8_t*>(y);
    switch (out) {
        case Elem::F32: return deq_launch<D, Elem::F32>(w, row_bytes, rows, cols, o, ldy, RowsInOrder{}, stream);
        case Elem::F16: return deq_launch<D, Elem::F16>(w, row_bytes, rows, cols, o, ldy, RowsInOrder{}, stream);
        case Elem::BF16: return deq_launch<D, Elem::BF16>(w, row_bytes, rows, cols, o, ldy, RowsInOrder{}, stream);
    }
}

// The tasks' outputs multiplied back by their tokens' scales, up to kMatvecGroupMax tasks a launch.
void unscale_tokens(const UnscaleTask* tasks, size_t count, void* stream) {
    for (size_t i0 = 0; i0 < count; i0 += kMatvecGroupMax) {
        UnscaleGroup in, g;
        in.n_tasks = int(std::min(count - i0, size_t(kMatvecGroupMax)));
        std::copy(tasks + i0, tasks + i0 + in.n_tasks, in.task);
        const int64_t blocks = compact_group(in, g, [](const UnscaleTask& t) { return t.n; });   // a block per token
        if (blocks == 0) continue;
        auto* kernel = &unscale_tokens_kernel;
        KINFER_LAUNCH(kernel, dim3(unsigned(blocks)), dim3(kDeqThreads), 0, as_stream(stream), g);
    }
}

// fp16 activations go through convert_rows_f16_scaled and unscale_tokens (fp32 and bf16 have
// fp32's range).
constexpr bool scaled_elem(Elem e) { return e == Elem::F16; }

constexpr size_t gemm_align(size_t b) { return (b + 255) / 256 * 256; }

// How gemm_matmul splits a call: tokens per chunk (one activation copy), weight rows per tile,
// and where the tile buffer starts in the workspace.
struct GemmPlan {
    Elem elem = Elem::F16;
    bool in_place = false;      // the weight rows are already GEMM operands (F32, F16, BF16)
    int64_t tokens = 0;         // per chunk
    size_t x_bytes = 0;         // the chunk's converted activations and scales (0 when F32)
    size_t scale_at = 0;        // where the scales start (scaled_elem(elem))
    int64_t tile_rows = 0;
};

GemmPlan gemm_plan(quant::Type type, int64_t rows, int64_t cols, int64_t n) {
    GemmPlan p;
    p.elem = gemm_elem(type);
    p.in_place = type == quant::Type::F32 || type == quant::Type::F16 || type == quant::Type::BF16;
    p.tokens = std::min(n, kGemmMaxTokens);
    const GemmActBytes a = gemm_act_layout(p.elem, cols, p.tokens);
    p.x_bytes = a.total;
    p.scale_at = a.values;
    if (p.in_place) {
        p.tile_rows = rows;
    } else {
        // Rows of a tile of at most kGemmTileBytes, a multiple of 64 when there are that many.
        const int64_t fit = std::max<int64_t>(1, int64_t(kGemmTileBytes / (size_t(cols) * size_t(elem_bytes(p.elem)))));
        p.tile_rows = std::min(rows, fit >= 64 ? fit / 64 * 64 : fit);
    }
    return p;
}

}  // namespace

GemmActBytes gemm_act_layout(Elem e, int64_t cols, int64_t n) {
    GemmActBytes b;
    if (e == Elem::F32) return b;
    b.values = gemm_align(size_t(n * cols) * size_t(elem_bytes(e)));
    b.total = b.values + (scaled_elem(e) ? gemm_align(size_t(n) * sizeof(float)) : 0);
    return b;
}

Elem gemm_elem(quant::Type t) {
    switch (t) {
        case quant::Type::F32: return Elem::F32;
        case quant::Type::BF16: return Elem::BF16;
        default: return Elem::F16;
    }
}

void dequant_rows(quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols, Elem out, void* y,
                  int64_t ldy, void* stream) {
    if (rows <= 0 || cols <= 0) return;
    if (ldy == 0) ldy = cols;
    with_dec(type, "dequant_rows", [&](auto dec) { deq_type<decltype(dec)>(W, row_bytes, rows, cols, out, y, ldy, stream); });
}

void convert_rows(const float* x, int64_t ldx, int64_t rows, int64_t cols, Elem out, void* y, int64_t ldy,
                  void* stream) {
    if (rows <= 0 || cols <= 0) return;
    if (ldx == 0) ldx = cols;
    if (ldy == 0) ldy = cols;
    const dim3 grid = deq_grid(rows * cols);
    switch (out) {
        case Elem::F32: {
            auto* kernel = &convert_rows_kernel<Elem::F32>;
            KINFER_LAUNCH(kernel, grid, dim3(kDeqThreads), 0, as_stream(stream), x, ldx, rows, cols, y, ldy);
            break;
        }
        case Elem::F16: {
            auto* kernel = &convert_rows_kernel<Elem::F16>;
            KINFER_LAUNCH(kernel, grid, dim3(kDeqThreads), 0, as_stream(stream), x, ldx, rows, cols, y, ldy);
            break;
        }
        case Elem::BF16: {
            auto* kernel = &convert_rows_kernel<Elem::BF16>;
            KINFER_LAUNCH(kernel, grid, dim3(kDeqThreads), 0, as_stream(stream), x, ldx, rows, cols, y, ldy);
            break;
        }
    }
}

void convert_rows_f16_scaled(const float* x, int64_t ldx, int64_t rows, int64_t cols, void* y, int64_t ldy,
                             float* scale, void* stream) {
    if (rows <= 0 || cols <= 0) return;
    if (rows > kGemmMaxTokens)
        throw std::invalid_argument("cuda convert_rows_f16_scaled: " + std::to_string(rows) + " rows, at most " +
                                    std::to_string(kGemmMaxTokens));
    if (ldx == 0) ldx = cols;
    if (ldy == 0) ldy = cols;
    auto* kernel = &convert_rows_f16_scaled_kernel;
    KINFER_LAUNCH(kernel, dim3(unsigned(rows)), dim3(kDeqThreads), 0, as_stream(stream), x, ldx, cols, y, ldy, scale);
}

size_t gemm_act_bytes(quant::Type type, int64_t cols, int64_t n) {
    return gemm_act_layout(gemm_elem(type), cols, std::min(n, kGemmMaxTokens)).total;
}

size_t gemm_workspace_bytes(quant::Type type, int64_t rows, int64_t cols, int64_t n) {
    if (rows <= 0 || cols <= 0 || n <= 0) return 0;
    const GemmPlan p = gemm_plan(type, rows, cols, n);
    return p.x_bytes + (p.in_place ? 0 : size_t(p.tile_rows * cols) * size_t(elem_bytes(p.elem)));
}

void gemm_matmul(Blas* blas, quant::Type type, const void* W, size_t row_bytes, int64_t rows, int64_t cols,
                 const float* x, int64_t ldx, int64_t n, float* y, int64_t ldy, void* workspace, size_t ws_bytes,
                 void* stream) {
    if (rows <= 0 || n <= 0) return;
    if (!matvec_supported(type)) {
        const char* name = quant::type_facts(type).name;
        throw std::invalid_argument(std::string("cuda gemm_matmul: no kernel for weight type ") + (name ? name : "?"));
    }
    if (ldx == 0) ldx = cols;
    if (ldy == 0) ldy = rows;
    GemmPlan p = gemm_plan(type, rows, cols, n);
    const size_t eb = size_t(elem_bytes(p.elem));
    if (p.in_place && row_bytes % eb != 0)
        throw std::invalid_argument("cuda gemm_matmul: weight rows " + std::to_string(row_bytes) + " bytes apart are not whole elements");
    const size_t need = p.x_bytes + (p.in_place ? 0 : size_t(cols) * eb);
    if (ws_bytes < need)
        throw std::invalid_argument("cuda gemm_matmul: workspace of " + std::to_string(ws_bytes) + " bytes, " +
                                    std::to_string(need) + " needed at least");
    // A smaller workspace than gemm_workspace_bytes() asks for just means smaller tiles.
    if (!p.in_place) p.tile_rows = std::min(p.tile_rows, int64_t((ws_bytes - p.x_bytes) / (size_t(cols) * eb)));
    if (p.elem == Elem::F32) {   // fp32 weights and activations, used where they are
        gemm(blas, Elem::F32, rows, n, cols, W, int64_t(row_bytes / 4), x, ldx, y, ldy);
        return;
    }
    auto* ws = static_cast<uint8_t*>(workspace);
    uint8_t* tile = ws + p.x_bytes;
    auto* scale = reinterpret_cast<float*>(ws + p.scale_at);
    for (int64_t t0 = 0; t0 < n; t0 += p.tokens) {
        const int64_t nt = std::min(n - t0, p.tokens);
        if (scaled_elem(p.elem)) convert_rows_f16_scaled(x + t0 * ldx, ldx, nt, cols, ws, cols, scale, stream);
        else convert_rows(x + t0 * ldx, ldx, nt, cols, p.elem, ws, cols, stream);
        if (p.in_place) {
            gemm(blas, p.elem, rows, nt, cols, W, int64_t(row_bytes / eb), ws, cols, y + t0 * ldy, ldy);
        } else {
            for (int64_t r0 = 0; r0 < rows; r0 += p.tile_rows) {
                const int64_t nr = std::min(rows - r0, p.tile_rows);
                dequant_rows(type, static_cast<const uint8_t*>(W) + size_t(r0) * row_bytes, row_bytes, nr, cols, p.elem,
                             tile, cols, stream);
                gemm(blas, p.elem, nr, nt, cols, tile, cols, ws, cols, y + t0 * ldy + r0, ldy);
            }
        }
        if (scaled_elem(p.elem)) {
            const UnscaleTask task{y + t0 * ldy, scale, ldy, rows, nt};
            unscale_tokens(&task, 1, stream);
        }
    }
}

namespace {

// What one task of gemm_matmul_grouped takes from the workspace: its converted activations and
// their scales (gemm_act_layout), and its dequantized weights (none for F32 / F16 / BF16, used where
// they are).
struct GroupedTaskBytes {
    GemmActBytes x;
    size_t w = 0;
    size_t total() const { return x.total + w; }
};
GroupedTaskBytes grouped_task_bytes(const GemmPlan& p, int64_t rows, int64_t cols, int64_t n) {
    GroupedTaskBytes b;
    b.x = gemm_act_layout(p.elem, cols, n);
    b.w = p.in_place ? 0 : gemm_align(size_t(rows * cols) * size_t(elem_bytes(p.elem)));
    return b;
}

}  // namespace

size_t gemm_grouped_workspace_bytes(quant::Type type, int64_t cols, const GemmTask* tasks, int64_t count) {
    size_t sum = 0, alone = 0;
    for (int64_t i = 0; i < count; ++i) {
        const GemmTask& t = tasks[i];
        if (t.rows <= 0 || t.n <= 0) continue;
        sum += grouped_task_bytes(gemm_plan(type, t.rows, cols, t.n), t.rows, cols, t.n).total();
        alone = std::max(alone, gemm_workspace_bytes(type, t.rows, cols, t.n));
    }
    return std::max(std::min(sum, kGemmGroupBytes), alone);
}

void gemm_matmul_grouped(Blas* blas, quant::Type type, size_t row_bytes, int64_t cols, const GemmTask* tasks,
                         int64_t count, void* workspace, size_t ws_bytes, void* stream) {
    if (!matvec_supported(type)) {
        const char* name = quant::type_facts(type).name;
        throw std::invalid_argument(std::string("cuda gemm_matmul_grouped: no kernel for weight type ") + (name ? name : "?"));
    }
    // The element type and whether the weights are used where they are do not depend on the shape.
    const GemmPlan shape_free = gemm_plan(type, 1, cols, 1);
    const Elem elem = shape_free.elem;
    const bool in_place = shape_free.in_place;
    const size_t eb = size_t(elem_bytes(elem));
    if (in_place && row_bytes % eb != 0)
        throw std::invalid_argument("cuda gemm_matmul_grouped: weight rows " + std::to_string(row_bytes) +
                                    " bytes apart are not whole elements");
    auto* ws = static_cast<uint8_t*>(workspace);
    std::vector<GemmProblem> batch;
    std::vector<UnscaleTask> unscale;   // the batch's tasks, when their activations are scaled
    size_t used = 0;
    auto flush = [&] {
        gemm_grouped(blas, elem, batch.data(), int64_t(batch.size()));
        unscale_tokens(unscale.data(), unscale.size(), stream);
        batch.clear();
        unscale.clear();
        used = 0;
    };
    for (int64_t i = 0; i < count; ++i) {
        const GemmTask& t = tasks[i];
        if (t.rows <= 0 || t.n <= 0) continue;
        const int64_t ldx = t.ldx ? t.ldx : cols, ldy = t.ldy ? t.ldy : t.rows;
        const GroupedTaskBytes tb = grouped_task_bytes(gemm_plan(type, t.rows, cols, t.n), t.rows, cols, t.n);
        if (tb.total() > ws_bytes || t.n > kGemmMaxTokens) {
            // On its own, in gemm_matmul's tiles; queued after the batch so far, which is
            // multiplied first (the tiles reuse the workspace, in stream order).
            if (!batch.empty()) flush();
            gemm_matmul(blas, type, t.W, row_bytes, t.rows, cols, t.x, ldx, t.n, t.y, ldy, workspace, ws_bytes, stream);
            continue;
        }
        if (used + tb.total() > ws_bytes) flush();
        GemmProblem p;
        p.m = t.rows, p.n = t.n, p.k = cols, p.C = t.y, p.ldc = ldy;
        if (elem == Elem::F32) {
            p.B = t.x, p.ldb = ldx;
        } else if (scaled_elem(elem)) {
            auto* scale = reinterpret_cast<float*>(ws + used + tb.x.values);
            convert_rows_f16_scaled(t.x, ldx, t.n, cols, ws + used, cols, scale, stream);
            unscale.push_back(UnscaleTask{t.y, scale, ldy, t.rows, t.n});
            p.B = ws + used, p.ldb = cols;
        } else {
            convert_rows(t.x, ldx, t.n, cols, elem, ws + used, cols, stream);
            p.B = ws + used, p.ldb = cols;
        }
        if (in_place) {
            p.A = t.W, p.lda = int64_t(row_bytes / eb);
        } else {
            dequant_rows(type, t.W, row_bytes, t.rows, cols, elem, ws + used + tb.x.total, cols, stream);
            p.A = ws + used + tb.x.total, p.lda = cols;
        }
        batch.push_back(p);
        used += tb.total();
    }
    if (!batch.empty()) flush();
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
