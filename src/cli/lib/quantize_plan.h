// Per-tensor type choices for `kinfer quantize`: the same decisions llama-quantize makes
// (llama.cpp src/llama-quant.cpp) for the kimi-k3 and kimi-linear architectures, so that a
// kinfer-quantized file has llama-quantize's tensor order, types and shapes. Pure logic over a
// description of the input file; no I/O, so the rules are testable without a model.
#pragma once
#include "quant/types.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::gguf {
class File;
}

namespace kinfer::cli {

// llama.cpp's llama_ftype ids: written to general.file_type, so they must stay these numbers.
enum class Ftype : uint32_t {
    ALL_F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q8_0 = 7, Q5_0 = 8, Q5_1 = 9,
    Q2_K = 10, Q3_K_S = 11, Q3_K_M = 12, Q3_K_L = 13, Q4_K_S = 14, Q4_K_M = 15,
    Q5_K_S = 16, Q5_K_M = 17, Q6_K = 18, IQ4_NL = 25, IQ4_XS = 30, BF16 = 32, MXFP4_MOE = 38,
};

// Accepts llama-quantize's names, case-insensitively, including its aliases
// (Q3_K = Q3_K_M, Q4_K = Q4_K_M, Q5_K = Q5_K_M) and MXFP4 = MXFP4_MOE (llama.cpp has no
// all-MXFP4 file type; `--pure` gives one). nullopt for anything else.
std::optional<Ftype> ftype_from_name(std::string_view name);
const char* ftype_name(Ftype f);          // canonical name, "Q4_K_M"
quant::Type ftype_default_type(Ftype f);  // the base type of the mixture
std::string ftype_list();                 // "F32, F16, ..." for help and errors

struct QuantizeOptions {
    Ftype ftype = Ftype::Q8_0;
    bool pure = false;                       // every quantizable tensor gets the base type
    bool quantize_output_tensor = true;      // false: --leave-output-tensor
    std::optional<quant::Type> output_tensor_type;
    std::optional<quant::Type> token_embedding_type;
};

// What the planner needs to know about the input.
struct TensorDesc {
    std::string name;
    quant::Type type = quant::Type::F32;
    int64_t ne[4] = {1, 1, 1, 1};
    size_t nbytes = 0;
};

struct ModelDesc {
    std::string arch;           // general.architecture
    int n_layer = 0;            // {arch}.block_count
    int n_expert = 0;           // {arch}.expert_count (0 when absent)
    int n_gqa = 0;              // head_count / head_count_kv at layer 0; 0 when head_count_kv is 0
    std::vector<TensorDesc> tensors;   // in file order
};

ModelDesc describe(const gguf::File& f);

struct PlannedTensor {
    size_t src = 0;             // index into ModelDesc::tensors
    std::string name;
    quant::Type from = quant::Type::F32;
    quant::Type to = quant::Type::F32;
    int n_dims = 1;             // as ggml_n_dims: trailing size-1 dims dropped
    int64_t ne[4] = {1, 1, 1, 1};
    size_t from_bytes = 0;
    size_t to_bytes = 0;
    bool fallback = false;      // a k-quant / IQ4_XS that did not fit ne[0]
    std::string warning;        // llama-quantize's fallback warning line, when fallback
};

struct QuantizePlan {
    std::vector<PlannedTensor> tensors;   // output order (llama.cpp's weights_map order)
    size_t total_from = 0;
    size_t total_to = 0;
    int64_t n_elements = 0;
    int n_fallback = 0;
};

// Throws kinfer::Error for an ftype/shape combination llama-quantize also rejects (e.g. a row
// length that no fallback type fits) or an unparsable layer number.
QuantizePlan make_quantize_plan(const ModelDesc& model, const QuantizeOptions& opt);

// llama.cpp's tensor order for quantized output: tensors outside `blk.N.` first, then by layer
// number, each group sorted by name (bytewise).
bool tensor_order_less(const std::string& a, const std::string& b);

bool is_block_quantized(quant::Type t);   // ggml_is_quantized: not F32 / F16 / BF16 / integer

}  // namespace kinfer::cli
