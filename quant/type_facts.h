// The facts of each ggml tensor type that do not depend on a CPU: its id (the GGUF tensor type
// field), name, block size, block bytes and the activation type its dot product pairs it with
// (ggml's vec_dot_type). nvcc compiles this header too, so the CUDA backend sizes rows and picks
// activation formats from the same table as the CPU; the CPU function tables (which kernel runs a
// type at which ISA) are quant/types.h, built on these facts.
#pragma once
#include <cstddef>
#include <cstdint>

#include "quant/blocks.h"
#include "quant/hd.h"

namespace kinfer::quant {

enum class Type : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ4_NL = 20, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
    BF16 = 30, MXFP4 = 39,
};

struct TypeFacts {
    const char* name = nullptr;   // ggml's lower-case name ("q4_K", "mxfp4", ...); nullptr: unknown id
    int64_t block_size = 0;       // elements per block
    size_t type_size = 0;         // bytes per block
    bool quantized = false;
    Type vec_dot_type = Type::F32;  // what activations are quantized to before the dot product
};

// The facts of type id t; a TypeFacts with name == nullptr for ids kinfer does not know.
KINFER_HD constexpr TypeFacts type_facts(Type t) {
    switch (t) {
        case Type::F32: return {"f32", 1, 4, false, Type::F32};
        case Type::F16: return {"f16", 1, 2, false, Type::F32};
        case Type::BF16: return {"bf16", 1, 2, false, Type::F32};
        case Type::Q4_0: return {"q4_0", QK4_0, sizeof(block_q4_0), true, Type::Q8_0};
        case Type::Q4_1: return {"q4_1", QK4_1, sizeof(block_q4_1), true, Type::Q8_1};
        case Type::Q5_0: return {"q5_0", QK5_0, sizeof(block_q5_0), true, Type::Q8_0};
        case Type::Q5_1: return {"q5_1", QK5_1, sizeof(block_q5_1), true, Type::Q8_1};
        case Type::Q8_0: return {"q8_0", QK8_0, sizeof(block_q8_0), true, Type::Q8_0};
        case Type::Q8_1: return {"q8_1", QK8_1, sizeof(block_q8_1), true, Type::Q8_1};
        case Type::Q2_K: return {"q2_K", QK_K, sizeof(block_q2_K), true, Type::Q8_K};
        case Type::Q3_K: return {"q3_K", QK_K, sizeof(block_q3_K), true, Type::Q8_K};
        case Type::Q4_K: return {"q4_K", QK_K, sizeof(block_q4_K), true, Type::Q8_K};
        case Type::Q5_K: return {"q5_K", QK_K, sizeof(block_q5_K), true, Type::Q8_K};
        case Type::Q6_K: return {"q6_K", QK_K, sizeof(block_q6_K), true, Type::Q8_K};
        case Type::Q8_K: return {"q8_K", QK_K, sizeof(block_q8_K), true, Type::Q8_K};
        case Type::IQ4_NL: return {"iq4_nl", QK4_NL, sizeof(block_iq4_nl), true, Type::Q8_0};
        case Type::IQ4_XS: return {"iq4_xs", QK_K, sizeof(block_iq4_xs), true, Type::Q8_K};
        case Type::MXFP4: return {"mxfp4", QK_MXFP4, sizeof(block_mxfp4), true, Type::Q8_0};
        // Integer / f64 tensors: sizes only (GGUF may carry them; no kernels).
        case Type::I8: return {"i8", 1, 1, false, Type::I8};
        case Type::I16: return {"i16", 1, 2, false, Type::I16};
        case Type::I32: return {"i32", 1, 4, false, Type::I32};
        case Type::I64: return {"i64", 1, 8, false, Type::I64};
        case Type::F64: return {"f64", 1, 8, false, Type::F64};
    }
    return {};
}

// Bytes of a row of n elements of type t; n must be a multiple of the block size.
KINFER_HD constexpr size_t row_bytes(Type t, int64_t n) {
    const TypeFacts f = type_facts(t);
    return f.block_size ? size_t(n / f.block_size) * f.type_size : 0;
}

}  // namespace kinfer::quant
