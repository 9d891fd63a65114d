// y = W x for every weight type, the way ggml's CPU backend computes it: activations are first
// converted to the weight type's vec_dot_type (Q8_K for K-quants, Q8_0 for Q8_0 / Q4_0 / Q5_0 /
// MXFP4 / IQ4, Q8_1 for Q4_1 / Q5_1, F16 for F16, F32 for F32), then each output is one vec_dot
// of a weight row with an activation row. Reproducing that conversion is what lets quantized
// models agree with llama.cpp bit for bit until the first rounding event (DESIGN.md section 6).
#pragma once
#include "backend/mat.h"
#include "quant/types.h"
#include "runtime/thread_pool.h"

#include <cstddef>
#include <cstdint>
#include <utility>
#include <string>
#include <vector>

namespace kinfer::backend::cpu {

using backend::Mat;

// Activations converted to a vec_dot_type, row by row.
struct QuantActs {
    quant::Type type = quant::Type::F32;
    int64_t cols = 0;
    size_t row_bytes = 0;
    std::vector<uint8_t> buf;
    const float* f32 = nullptr;             // F32: points at the caller's rows (ld = ld_f32)
    int64_t ld_f32 = 0;
    const uint8_t* q = nullptr;             // quantized rows: buf.data(), or another QuantActs' rows (a view)
    const void* row(int64_t t) const {
        return f32 ? static_cast<const void*>(f32 + t * ld_f32) : static_cast<const void*>(q + size_t(t) * row_bytes);
    }
    // Rows [t0, ...) of this one, sharing its storage (valid while this one is).
    QuantActs view(int64_t t0) const {
        QuantActs v;
        v.type = type, v.cols = cols, v.row_bytes = row_bytes, v.ld_f32 = ld_f32;
        if (f32) v.f32 = f32 + t0 * ld_f32;
        else v.q = q + size_t(t0) * row_bytes;
        return v;
    }
};

// Converts n rows of x (row stride ldx) for multiplication with weights of type wtype.
void quantize_acts(runtime::ThreadPool* pool, quant::Type wtype, const float* x, int64_t n, int64_t cols,
                   int64_t ldx, QuantActs& out);

// y[t][r] = W.row(r) . x[t] for t < n; x rows have W.cols floats (stride ldx, default cols),
// y rows have stride ldy (default W.rows).
void matmul(runtime::ThreadPool& pool, const Mat& W, const float* x, int64_t n, float* y,
            int64_t ldx = 0, int64_t ldy = 0);
// Same, with activations already converted by quantize_acts (several weights, one input).
void matmul_q(runtime::ThreadPool& pool, const Mat& W, const QuantActs& xq, int64_t n, float* y, int64_t ldy = 0);
// One product of a batch: y[t][r] = W.row(r) . xq.row(t), t < n.
struct MatJob {
    Mat W;
    const QuantActs* xq = nullptr;
    int64_t n = 0;
    float* y = nullptr;
    int64_t ldy = 0;        // 0: W.rows
};
// Runs every job in one pass of the pool: one wake-up instead of one per matrix, which is what
// decode's many small matrices need. Each thread takes one region of the rows, the jobs end to end,
// and the threads that finish first take the ends of the others' (row_split.h).
void matmul_jobs(runtime::ThreadPool& pool, const MatJob* jobs, size_t count);
// ys[i][n x Ws[i].rows] = Ws[i] . x for weights that share one input: x is converted once per
// vec_dot type, then all products run as one batch.
void matmul_many(runtime::ThreadPool& pool, const Mat* Ws, float* const* ys, size_t count, const float* x, int64_t n);
// Single-threaded variant for callers that already run inside the pool.
void matmul_q_rows(const Mat& W, const QuantActs& xq, int64_t n, float* y, int64_t ldy, int64_t r0, int64_t r1);

// Plain fp32 dot product (AVX2/FMA when the CPU has it).
float dot_f32(const float* a, const float* b, int64_t n);
// out[k] = dot_f32(a, b[k], n) for k < 4, bit for bit, faster than four calls when n % 64 != 0.
void dot4_f32(const float* a, const float* const* b, int64_t n, float* out);
// y[i] += a * x[i], multiply and add rounded separately (AVX2 when the CPU has it).
void mad_f32(float* y, const float* x, float a, int64_t n);
// y[i] = fma(a[i], b[i], y[i]), one rounding per element, the same bits at every ISA level (the
// KDA conv: GCC contracts ggml_ssm_conv's `sumf += s * c` into fused multiply-adds).
void fma_f32(float* y, const float* a, const float* b, int64_t n);

// Decode's stream layout (quant::set_decode_streams) chosen for this machine: a Q4_K, a Q6_K and a
// Q8_0 product, whose weights together are twice the last-level cache (32-512 MiB), run on all of pool's
// threads in each of the ISA's layouts (quant::decode_stream_layouts), and the fastest stays (the
// default unless another is > 3 % faster). Then, in the layout kept, each prefetch distance
// (quant::decode_prefetch_distances; the default unless another is > 2 % faster). Up to a second
// or so (the weights read 3 times per layout and per distance, after a warm-up), so `kinfer
// bench` runs it, not every load; `run` and `chat` tune the same two knobs on their own first
// decode steps instead (decode_tuner.h). KINFER_DECODE_PREFETCH=BYTES fixes the distance (the layouts
// are still measured); KINFER_DECODE_STREAMS=N (1, 2, 4, 8) sets the layout and skips the whole
// calibration (the distance is then KINFER_DECODE_PREFETCH's or the default). Results are
// bit-identical whatever it picks; only decode speed differs.
struct DecodeStreams {
    int chosen = 0;                                  // streams per core now in force
    std::vector<std::pair<int, double>> gbps;        // (streams, GB/s read) per layout tried
    std::vector<std::pair<int, double>> prefetch_gbps;   // (bytes, GB/s read) per distance tried, in `chosen` layout
    bool prefetch_from_env = false;                  // KINFER_DECODE_PREFETCH set the distance (quant::decode_prefetch())
    double ms = 0;                                   // time the calibration took
    bool from_env = false;
    std::string products;                            // the weight types it read, "Q4_K + Q6_K + Q8_0"
};
DecodeStreams calibrate_decode_streams(runtime::ThreadPool& pool);
// KINFER_DECODE_STREAMS, when set, put in force (every CPU backend does this when it starts);
// returns it, or 0 when unset (the layout in force stays). Throws on a value other than 1, 2, 4, 8.
int apply_decode_streams_env();
// KINFER_DECODE_PREFETCH (bytes, a multiple of 64 up to 16384), when set, fixes decode's prefetch
// distance the same way (the calibration then keeps it); returns it, or 0 when unset.
int apply_decode_prefetch_env();

// KINFER_K_TILES=dpbusd|maddubs, when set, fixes the instruction form of the AVX-512 K-quant
// prefill tiles (quant::set_k_tile_form) instead of measuring it; returns whether it was set.
// Throws on any other value.
bool apply_k_tile_form_env();

// Dequantized row r of W into out[W.cols].
void dequant_row(const Mat& W, int64_t r, float* out);

}  // namespace kinfer::backend::cpu
