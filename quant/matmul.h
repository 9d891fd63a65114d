// Row-range matrix-vector / matrix-matrix products over quantized weights, the way ggml does
// them: activations are first quantized to the weight type's vec_dot_type (Q8_0 / Q8_1 / Q8_K,
// or kept fp32 for float weights), then each weight row is dotted with each activation row.
// The caller threads the work by splitting [row_begin, row_end) across threads.
//
//   std::vector<uint8_t> xq(act_row_size(type, n) * m);
//   quantize_acts(type, x, m, n, xq.data());              // once per input, shared by threads
//   gemm(type, W, row_bytes, n, xq.data(), m, y, ldy, r0, r1);   // per thread
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "quant/types.h"

namespace kinfer::quant {

// Bytes of one activation row of n elements prepared for weights of type w.
size_t act_row_size(Type w, int64_t n);

// Quantize m fp32 rows of n elements (contiguous, stride n) for weights of type w, exactly as
// ggml-cpu does before the matmul. out holds m rows of act_row_size(w, n) bytes.
void quantize_acts(Type w, const float* x, int64_t m, int64_t n, void* out);

// y[t * ldy + r] = dot(W row r, activation row t) for r in [row_begin, row_end), t in [0, m).
// W rows are w_row_bytes apart (row_size(traits(w), n) for a dense tensor). Each weight row is
// read once and dotted with all m activation rows while it is in cache.
void gemm(Type w, const void* W, size_t w_row_bytes, int64_t n, const void* acts, int64_t m, float* y,
          int64_t ldy, int64_t row_begin, int64_t row_end);

// Decode's stream layout: how many places of its row range one core reads at once. The rows a
// kernel computes together (2 on AVX2, 4 on AVX-512) come from that many segments of the range
// (rows i, i + K, i + 2K, ...); 1 takes them side by side. The AVX-512 tiles of the formats dotted
// against Q8_0 compute 8 rows (IQ4_NL and MXFP4: 4): from 8 (4) segments at the default layout
// (0 or 4), from S segments at S = 1, 2 and 8 (vec_dot_tiles_avx512.cpp, decode_tiles). Which is fastest depends on the machine
// (how many reads one core keeps in flight), so it is measured, not fixed (see
// backend::cpu::calibrate_decode_streams). Every value gives the same bits: each row's arithmetic is
// that of the one-row kernel. 0 (the start) = the ISA's default, the rows of one group.
void set_decode_streams(int streams);
int decode_streams();
// The layouts that differ on an ISA's kernels: 1, then multiples of the rows one group computes
// (2 on AVX2, 4 on AVX-512) up to 8; the group itself first after 1 is the default. Empty for the
// scalar kernels, which compute one row at a time.
std::vector<int> decode_stream_layouts(Isa isa);
int default_decode_streams(Isa isa);

// Decode's prefetch distance: each row of a decode kernel asks for its bytes this far ahead of the
// super-block it is about to use (vec_dot_simd_prims.inc). The best distance depends on the
// machine's memory latency, so it is measured with the stream layout; timing only, the same bits
// at any distance. 0 restores the default, kDefaultDecodePrefetch. Set it only while no kernel
// runs (it is read in the kernels' inner loops as a plain int).
inline constexpr int kDefaultDecodePrefetch = 768;
void set_decode_prefetch(int bytes);
int decode_prefetch();
// The distances calibration tries, the default first.
std::vector<int> decode_prefetch_distances();

// Prefill's K-quant tiles on AVX-512 (Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights against 4-16
// activation rows) do their integer work in one of two instruction forms
// (vec_dot_k_tiles_asm_avx512.inc): dpbusd (fewer multiplies, which Zen 4's two multiply pipes
// favour) or maddubs (fewer instructions and no single-port shifts: Sapphire Rapids). The
// integers, so the bits, are the same; only speed differs, so the faster form is measured on the
// machine the first time k_tile_form() is asked in a process (a CPU backend with its own pool asks
// when it starts, the tiles otherwise at first use): both forms on a small tile of each type in
// cache, about 3 ms. A product reads the form once when it starts, so a change while one runs
// only splits it between the two forms, with the same bits.
enum class KTileForm { automatic, dpbusd, maddubs };
void set_k_tile_form(KTileForm form);   // automatic: measure again when next asked
// The form in force, measured now if it is automatic; automatic on ISAs without these tiles.
KTileForm k_tile_form();
// The last measurement: ns per 256 weights and activation row, the five types' tiles added, for
// each form (zeros when the form was set, not measured).
struct KTileTimes {
    double dpbusd_ns = 0, maddubs_ns = 0;
};
KTileTimes k_tile_times();
const char* k_tile_form_name(KTileForm form);   // "auto", "dpbusd" or "maddubs"

// The decode case (one activation row): y[r] = dot(W row r, acts).
inline void gemv(Type w, const void* W, size_t w_row_bytes, int64_t n, const void* acts, float* y,
                 int64_t row_begin, int64_t row_end) {
    gemm(w, W, w_row_bytes, n, acts, 1, y, 0, row_begin, row_end);
}

}  // namespace kinfer::quant
