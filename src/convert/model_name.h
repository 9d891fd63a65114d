// gguf-py's naming heuristics (gguf/metadata.py, the directory-name fallback, and
// gguf/utility.py's size_label): general.name is the checkpoint directory name in title form
// ("hf-k3-tiny" -> "Hf K3 Tiny"); basename / finetune / version / size label are recognised in
// its dash-separated parts; without a size label in the name it is computed from the parameter
// counts ("32x4.1M"). A model card (README.md) is not read.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace kinfer::convert {

struct ModelName {
    std::string name;
    std::optional<std::string> basename, finetune, version, size_label;
};

ModelName model_name_from_dir(const std::string& dir_name, int64_t total_params);

// gguf.size_label(): "<n>x<per-expert size>" for MoE models, else the total size.
std::string size_label(int64_t total_params, int64_t shared_params, int64_t expert_params, int64_t expert_count);

}  // namespace kinfer::convert
