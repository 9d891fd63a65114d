// The one list of tensors a kimi-k3 / kimi-linear model has. Loading (weights.cpp) and `info`
// walk the same table, so names, shapes and "required" rules live in exactly one place.
#pragma once
#include "model/hparams.h"
#include "model/weights.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kinfer::model {

struct TensorSpec {
    std::string name;                   // full GGUF name, e.g. "blk.3.attn_k_b.weight"
    std::vector<int64_t> shape;         // ggml ne; size-1 dims are ignored when comparing
    bool required = true;
    int layer = -1;                     // -1 for global tensors
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

}  // namespace kinfer::model
