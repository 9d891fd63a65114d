// The prefill GEMM (kernels.h gemm_matmul): a matmul over many tokens dequantizes its weight rows
// in tiles to a 16-bit copy and multiplies each tile with cuBLAS (blas.h), fp32 accumulate.
//  - dequant_rows: one thread per block_dot.cuh piece decodes its elements (row_decode.cuh's
//    kernels, block_decode.cuh's decoders: the CPU's values bit for bit) and stores them in the
//    tile's element type.
//  - convert_rows: the activations to the same element type (quant/fp16.h's rounding).
// Decoding and the GEMM run on the same stream, so one tile buffer serves every tile: tile i + 1
// is written only after the GEMM of tile i has read it. Not measured on a GPU yet.
#include "backend/cuda/blas.h"
#include "backend/cuda/block_decode.cuh"
#include "backend/cuda/row_decode.cuh"
#include "backend/cuda/kernels.h"

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

// How gemm_matmul splits a call: tokens per chunk (one activation copy), weight rows per tile,
// and where the tile buffer starts in the workspace.
struct GemmPlan {
    Elem elem = Elem::F16;
    bool in_place = false;      // the weight rows are already GEMM operands (F32, F16, BF16)
    int64_t tokens = 0;         // per chunk
    size_t x_bytes = 0;         // the chunk's converted activations (0 when F32: used in place)
    int64_t tile_rows = 0;
};

constexpr size_t gemm_align(size_t b) { return (b + 255) / 256 * 256; }

GemmPlan gemm_plan(quant::Type type, int64_t rows, int64_t cols, int64_t n) {
    GemmPlan p;
    p.elem = gemm_elem(type);
    p.in_place = type == quant::Type::F32 || type == quant::Type::F16 || type == quant::Type::BF16;
    p.tokens = std::min(n, kGemmMaxTokens);
    p.x_bytes = p.elem == Elem::F32 ? 0 : gemm_align(size_t(p.tokens * cols) * size_t(elem_bytes(p.elem)));
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
    for (int64_t t0 = 0; t0 < n; t0 += p.tokens) {
        const int64_t nt = std::min(n - t0, p.tokens);
        convert_rows(x + t0 * ldx, ldx, nt, cols, p.elem, ws, cols, stream);
        if (p.in_place) {
            gemm(blas, p.elem, rows, nt, cols, W, int64_t(row_bytes / eb), ws, cols, y + t0 * ldy, ldy);
            continue;
        }
        for (int64_t r0 = 0; r0 < rows; r0 += p.tile_rows) {
            const int64_t nr = std::min(rows - r0, p.tile_rows);
            dequant_rows(type, static_cast<const uint8_t*>(W) + size_t(r0) * row_bytes, row_bytes, nr, cols, p.elem, tile,
                         cols, stream);
            gemm(blas, p.elem, nr, nt, cols, tile, cols, ws, cols, y + t0 * ldy + r0, ldy);
        }
    }
}

namespace {

// What one task of gemm_matmul_grouped takes from the workspace: its converted activations (none
// for F32) and its dequantized weights (none for F32 / F16 / BF16, used where they are).
struct GroupedTaskBytes {
    size_t x = 0, w = 0;
    size_t total() const { return x + w; }
};
GroupedTaskBytes grouped_task_bytes(const GemmPlan& p, int64_t rows, int64_t cols, int64_t n) {
    const size_t eb = size_t(elem_bytes(p.elem));
    GroupedTaskBytes b;
    b.x = p.elem == Elem::F32 ? 0 : gemm_align(size_t(n * cols) * eb);
    b.w = p.in_place ? 0 : gemm_align(size_t(rows * cols) * eb);
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
    size_t used = 0;
    auto flush = [&] {
        gemm_grouped(blas, elem, batch.data(), int64_t(batch.size()));
        batch.clear();
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
        } else {
            convert_rows(t.x, ldx, t.n, cols, elem, ws + used, cols, stream);
            p.B = ws + used, p.ldb = cols;
        }
        if (in_place) {
            p.A = t.W, p.lda = int64_t(row_bytes / eb);
        } else {
            dequant_rows(type, t.W, row_bytes, t.rows, cols, elem, ws + used + tb.x, cols, stream);
            p.A = ws + used + tb.x, p.lda = cols;
        }
        batch.push_back(p);
        used += tb.total();
    }
    if (!batch.empty()) flush();
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
