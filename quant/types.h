// ggml tensor types: ids equal to ggml's (they are the GGUF tensor type field) and the per-type
// trait table every kernel, the GGUF reader and the quantizer consult.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace kinfer::quant {

enum class Type : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ4_NL = 20, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
    BF16 = 30, MXFP4 = 39,
};

// x: n floats (n a multiple of block_size); y: n/block_size blocks.
using FromFloatFn = void (*)(const float* x, void* y, int64_t n);
using ToFloatFn = void (*)(const void* x, float* y, int64_t n);
// Dot product of one quantized row x with one row y of the type's activation (vec_dot) type.
using VecDotFn = float (*)(int64_t n, const void* x, const void* y);

struct Traits {
    Type type;
    const char* name;        // ggml's lower-case name ("q4_K", "mxfp4", ...)
    int64_t block_size;      // elements per block
    size_t type_size;        // bytes per block
    bool quantized;
    ToFloatFn to_float;      // exact dequantization (nullptr for integer types)
    FromFloatFn from_float_ref;  // ggml's reference quantizer, byte-identical (nullptr if none)
    VecDotFn vec_dot;        // best kernel for this CPU (chosen once at start-up)
    VecDotFn vec_dot_ref;    // scalar reference of the same
    Type vec_dot_type;       // what activations are quantized to before vec_dot
};

// nullptr for ids kinfer does not know.
const Traits* traits_or_null(uint32_t id);
const Traits& traits(Type t);
std::optional<Type> type_from_name(std::string_view name);  // case-insensitive, "Q4_K" or "q4_K"

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_size(const Traits& t, int64_t n) { return size_t(n / t.block_size) * t.type_size; }

}  // namespace kinfer::quant
