// Hugging Face tensor names of Kimi checkpoints -> GGUF names (llama.cpp's tensor_mapping.py
// entries for these architectures), and the torch shape config.json implies for each.
#pragma once
#include "convert/hf_config.h"

#include <optional>
#include <string>
#include <vector>

namespace kinfer::convert {

// The GGUF name of an (already prefix-stripped) HF tensor name, or nullopt when the
// architecture has no such tensor. Handles ".weight"/".bias" suffixes as llama.cpp does.
std::optional<std::string> map_hf_name(const std::string& name, ModelArch arch);

// Index of the first all-digit component ("model.layers.7.mlp..." -> 7), or -1.
int first_number(const std::string& name);

// The (prefix-stripped) checkpoint tensor a GGUF tensor comes from, for "missing" messages.
std::string hf_source_hint(const std::string& gguf_name);

// The torch shape config.json implies for this (prefix-stripped) name, or nullopt when there is
// no rule (the shape is then checked only by the transforms that need it).
std::optional<std::vector<int64_t>> expected_shape(const std::string& name, const HfConfig& cfg);

// TextModel.filter_tensors: multimodal tensors (vision tower, projector, ...) a text GGUF drops.
bool is_multimodal_tensor(const std::string& raw_name);

}  // namespace kinfer::convert
