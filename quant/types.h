// The CPU function tables of the ggml tensor types: which kernel converts, quantizes and dots each
// type, at the instruction-set level chosen at start-up. The format facts they are built on (ids,
// names, block sizes and bytes, vec_dot types) are quant/type_facts.h, which the CUDA backend
// shares; every kernel, the GGUF reader and the quantizer consult this table.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "quant/type_facts.h"

namespace kinfer::quant {

// x: n floats (n a multiple of block_size); y: n/block_size blocks.
using FromFloatFn = void (*)(const float* x, void* y, int64_t n);
using ToFloatFn = void (*)(const void* x, float* y, int64_t n);
// Dot product of one quantized row x with one row y of the type's activation (vec_dot) type.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);
// out[t] = dot(x, activation row t) for t < ny, rows y_stride bytes apart, with each weight block
// decoded once for several rows (prefill). Bit-identical to calling vec_dot per row.
using VecDotMultiFn = void (*)(int64_t n, const void* x, const void* y, size_t y_stride, int ny, float* out);
// out[r] = dot(weight row r, y) for r < nx, weight rows x_stride bytes apart, several rows at a
// time (decode). Bit-identical to calling vec_dot per row.
using VecDotRowsFn = void (*)(int64_t n, const void* x, size_t x_stride, int nx, const void* y, float* out);
// out[t * out_stride + r] = dot(weight row r, activation row t) for r < nx, t < ny: register
// tiles of several weight rows x several activation rows (prefill and decode). Bit-identical to
// calling vec_dot per pair.
using VecDotTileFn = void (*)(int64_t n, const void* x, size_t x_stride, int nx, const void* y, size_t y_stride,
                              int ny, float* out, size_t out_stride);

struct Traits {
    Type type;
    // Copied from type_facts(type), so callers holding a Traits need not look twice.
    const char* name;        // ggml's lower-case name ("q4_K", "mxfp4", ...)
    int64_t block_size;      // elements per block
    size_t type_size;        // bytes per block
    bool quantized;
    ToFloatFn to_float;      // exact dequantization (nullptr for integer types)
    FromFloatFn from_float_ref;  // ggml's reference quantizer, byte-identical (nullptr if none)
    VecDotFn vec_dot;        // best kernel for this CPU (chosen once at start-up)
    VecDotFn vec_dot_ref;    // scalar reference of the same
    Type vec_dot_type;       // what activations are quantized to before vec_dot (type_facts)
    // What ggml_quantize_chunk (llama-quantize without an imatrix) writes: from_float_ref for
    // every type except IQ4_NL, whose chunk path searches 15 scales (ntry = 7) instead of one.
    FromFloatFn quantize;
    // The run-time activation quantizer ggml-cpu uses when this type is a vec_dot_type
    // (Q8_0 / Q8_1: the x86 AVX2 flavour; Q8_K: the reference; F16/BF16/F32: plain conversion).
    FromFloatFn from_float;
    // Several activation rows per weight row (SIMD levels, main types only); nullptr: loop vec_dot.
    VecDotMultiFn vec_dot_multi;
    // Several weight rows per activation row (SIMD levels, Q4_K / Q6_K); nullptr: loop vec_dot.
    VecDotRowsFn vec_dot_rows;
    // Weight-row x activation-row tiles (AVX-512 VNNI: the Q8_0-activation formats, Q4_K, Q6_K);
    // nullptr: the two above. gemm prefers it when present, but for decode when vec_dot_rows is.
    VecDotTileFn vec_dot_tile;
};

// nullptr for ids kinfer does not know.
const Traits* traits_or_null(uint32_t id);
const Traits& traits(Type t);
std::optional<Type> type_from_name(std::string_view name);  // case-insensitive, "Q4_K" or "q4_K"

// Instruction-set level of the vec_dot kernels, chosen once at start-up: the best the CPU has,
// unless KINFER_ISA=scalar|avx2|avx512 asks for a lower (or an unsupported: ignored) one.
enum class Isa { scalar = 0, avx2 = 1, avx512 = 2 };
Isa active_isa();
const char* isa_name(Isa isa);
bool cpu_supports(Isa isa);
// The vec_dot kernel of type t at a given level; nullptr when that level has no kernel of its own
// for t or the CPU lacks it (callers then use vec_dot_ref). For tests and benchmarks.
VecDotFn vec_dot_for(Type t, Isa isa);
VecDotMultiFn vec_dot_multi_for(Type t, Isa isa);  // likewise for the multi-row kernels
VecDotRowsFn vec_dot_rows_for(Type t, Isa isa);    // and the several-weight-row ones
VecDotTileFn vec_dot_tile_for(Type t, Isa isa);    // and the tiled ones

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_size(const Traits& t, int64_t n) { return size_t(n / t.block_size) * t.type_size; }

}  // namespace kinfer::quant
