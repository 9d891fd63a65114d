// The one list of tensors a kimi-k3 / kimi-linear model has. Loading (weights.cpp), placement
// (placement.cpp), `info` (what each tensor is, what is missing) and convert's check of the file
// it is about to write all walk this table, so names, shapes, roles and "required" rules live in
// exactly one place.
#pragma once
#include "model/hparams.h"
#include "model/weights.h"
#include "runtime/expert_layout.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kinfer::model {

// What a tensor is for: info's per-kind byte totals, placement's reasoning.
enum class TensorRole : uint8_t {
    embeddings_output,   // token_embd, output_norm, output
    norm,                // attn_norm, ffn_norm
    attn_res,            // AttnRes scores (K3)
    attention_kda,
    attention_mla,
    dense_ffn,
    router,              // ffn_gate_inp, exp_probs_b
    routed_experts,      // the *_exps stacks
    latent_moe,          // K3's latent down / up projections around the routed experts
    shared_experts,
};
const char* role_name(TensorRole r);   // "attention_kda", ...

struct TensorSpec {
    std::string name;                   // full GGUF name, e.g. "blk.3.attn_k_b.weight"
    std::vector<int64_t> shape;         // ggml ne; size-1 dims are ignored when comparing
    bool required = true;
    int layer = -1;                     // -1 for global tensors
    TensorRole role = TensorRole::embeddings_output;
    // Exactly one slot is set: a matrix read through quant kernels, or a float vector.
    TensorRef LayerWeights::* layer_mat = nullptr;
    const float* LayerWeights::* layer_vec = nullptr;
    TensorRef Weights::* global_mat = nullptr;
    const float* Weights::* global_vec = nullptr;
    bool is_vector() const { return layer_vec || global_vec; }
};

// `has` tells which optional variants the file carries (full-rank vs low-rank KDA gate, ...).
using HasTensor = std::function<bool(const std::string& name)>;

// Calls fn for every tensor of the model, global ones first, then layer by layer.
void for_each_tensor(const HParams& hp, const HasTensor& has, const std::function<void(const TensorSpec&)>& fn);

// The routed expert stacks of each layer (gate, up, down; empty for dense layers): what the
// expert store pages (runtime/expert_layout.h).
runtime::ExpertTensorNames expert_tensor_names(const HParams& hp);

// True when a tensor of n_dims dims ne has the spec's shape (size-1 dims ignored on both sides).
bool shape_matches(const TensorSpec& s, const int64_t* ne, int n_dims);
std::string shape_str(const std::vector<int64_t>& shape);   // "{256, 64}

}  // namespace kinfer::model
