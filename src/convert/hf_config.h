// config.json of a Kimi K3 or Kimi Linear checkpoint, read the way llama.cpp's converter reads
// it: K3 nests the text model under `text_config`, which is merged over the top level (text keys
// win); the architecture is routed on the top-level `architectures[0]`. The typed fields are
// what the tensor plan and the shape checks need; `hp` keeps everything for the metadata writer.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kinfer::convert {

enum class ModelArch { KimiK3, KimiLinear };

struct HfConfig {
    std::string path;            // config.json, for error messages
    nlohmann::json hp;           // merged hyper-parameters
    std::string hf_arch;         // routing architecture name
    ModelArch arch = ModelArch::KimiLinear;
    std::string gguf_arch;       // "kimi-k3" / "kimi-linear"

    int64_t n_layer = 0, n_embd = 0, n_vocab = 0, n_head = 0, n_head_kv = 0;
    std::vector<int64_t> full_attn_layers;   // 1-based, as in linear_attn_config
    // KDA
    int64_t kda_heads = 0, kda_head_dim = 0, conv_kernel = 0;
    // MLA
    int64_t q_lora_rank = 0;     // 0: no q-LoRA
    int64_t kv_lora_rank = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
    // FFN / MoE
    int64_t n_ff = 0, n_expert = 0, moe_ff = 0, n_shared = 0, latent = 0;   // latent 0: none
    bool mxfp4_packed = false;   // compressed-tensors mxfp4-pack-quantized experts

    bool is_mla(int64_t il) const;   // 0-based layer index

    // Typed lookups with the config file named in errors. find_*: the first key present
    // (llama.cpp's find_hparam: a key present with null counts as present and yields nullopt).
    std::optional<nlohmann::json> find(std::initializer_list<const char*> keys) const;
    int64_t get_int(const char* key) const;
};

// Reads and validates <dir>/config.json; throws kinfer::Error naming the file and the key.
HfConfig load_hf_config(const std::string& dir);

}  // namespace kinfer::convert
