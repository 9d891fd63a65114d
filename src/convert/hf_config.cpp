// Reading config.json; see hf_config.h.
#include "convert/hf_config.h"

#include "common/error.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace kinfer::convert {

using json = nlohmann::json;

bool HfConfig::is_mla(int64_t il) const {
    return std::find(full_attn_layers.begin(), full_attn_layers.end(), il + 1) != full_attn_layers.end();
}

std::optional<json> HfConfig::find(std::initializer_list<const char*> keys) const {
    for (const char* k : keys)
        if (hp.contains(k)) return hp[k].is_null() ? std::nullopt : std::optional<json>(hp[k]);
    return std::nullopt;
}

int64_t HfConfig::get_int(const char* key) const {
    if (!hp.contains(key) || hp[key].is_null()) fail("{}: key '{}' is missing", path, key);
    if (!hp[key].is_number_integer()) fail("{}: key '{}' is not an integer", path, key);
    const int64_t v = hp[key].get<int64_t>();
    if (v < 0 || v > (int64_t(1) << 40)) fail("{}: key '{}' = {} is out of range", path, key, v);
    return v;
}

HfConfig load_hf_config(const std::string& dir) {
    HfConfig c;
    c.path = (std::filesystem::path(dir) / "config.json").string();
    std::ifstream in(c.path, std::ios::binary);
    if (!in) fail("{}: cannot open (not a Hugging Face checkpoint directory?)", c.path);
    json top;
    try {
        top = json::parse(in);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", c.path, e.what());
    }
    if (!top.is_object()) fail("{}: not a JSON object", c.path);

    // Route on the top-level architecture (K3's text_config says KimiLinearForCausalLM, the older
    // model, which cannot describe K3).
    std::string arch;
    if (top.contains("architectures") && top["architectures"].is_array() && !top["architectures"].empty() &&
        top["architectures"][0].is_string())
        arch = top["architectures"][0].get<std::string>();
    if (arch != "KimiK3ForConditionalGeneration" && top.contains("text_config") && top["text_config"].is_object()) {
        const json& tc = top["text_config"];
        if (tc.contains("architectures") && tc["architectures"].is_array() && !tc["architectures"].empty() &&
            tc["architectures"][0].is_string())
            arch = tc["architectures"][0].get<std::string>();
    }
    c.hf_arch = arch;
    if (arch == "KimiK3ForConditionalGeneration") {
        c.arch = ModelArch::KimiK3;
        c.gguf_arch = "kimi-k3";
    } else if (arch == "KimiLinearForCausalLM" || arch == "KimiLinearModel") {
        c.arch = ModelArch::KimiLinear;
        c.gguf_arch = "kimi-linear";
    } else {
        fail("{}: architecture '{}' is not supported (kinfer converts KimiK3ForConditionalGeneration and "
             "KimiLinearForCausalLM)", c.path, arch.empty() ? "<none>" : arch);
    }

    c.hp = top;
    if (top.contains("text_config") && top["text_config"].is_object())
        for (auto it = top["text_config"].begin(); it != top["text_config"].end(); ++it) c.hp[it.key()] = it.value();

    c.n_layer = c.get_int("num_hidden_layers");
    c.n_embd = c.get_int("hidden_size");
    c.n_vocab = c.get_int("vocab_size");
    c.n_head = c.get_int("num_attention_heads");
    c.n_head_kv = c.hp.contains("num_key_value_heads") && !c.hp["num_key_value_heads"].is_null()
                      ? c.get_int("num_key_value_heads") : c.n_head;
    if (c.n_layer == 0 || c.n_embd == 0 || c.n_vocab == 0 || c.n_head == 0)
        fail("{}: num_hidden_layers, hidden_size, vocab_size and num_attention_heads must be positive", c.path);

    if (!c.hp.contains("linear_attn_config") || !c.hp["linear_attn_config"].is_object())
        fail("{}: key 'linear_attn_config' is missing", c.path);
    const json& la = c.hp["linear_attn_config"];
    if (!la.contains("full_attn_layers") || !la["full_attn_layers"].is_array())
        fail("{}: key 'linear_attn_config.full_attn_layers' is missing", c.path);
    for (const json& v : la["full_attn_layers"]) {
        if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > c.n_layer)
            fail("{}: linear_attn_config.full_attn_layers holds {}, expected 1-based layer numbers 1..{}", c.path,
                 v.dump(), c.n_layer);
        c.full_attn_layers.push_back(v.get<int64_t>());
    }
    auto la_int = [&](const char* k, int64_t def) -> int64_t {
        if (!la.contains(k) || la[k].is_null()) return def;
        if (!la[k].is_number_integer() || la[k].get<int64_t>() <= 0)
            fail("{}: linear_attn_config.{} must be a positive integer", c.path, k);
        return la[k].get<int64_t>();
    };
    c.kda_heads = la_int("num_heads", c.n_head);
    c.kda_head_dim = la_int("head_dim", 0);
    c.conv_kernel = la_int("short_conv_kernel_size", 0);
    if (c.kda_head_dim == 0 || c.conv_kernel == 0)
        fail("{}: linear_attn_config.head_dim and short_conv_kernel_size are required", c.path);

    c.q_lora_rank = c.hp.contains("q_lora_rank") && !c.hp["q_lora_rank"].is_null() ? c.get_int("q_lora_rank") : 0;
    c.kv_lora_rank = c.get_int("kv_lora_rank");
    c.qk_nope = c.get_int("qk_nope_head_dim");
    c.qk_rope = c.get_int("qk_rope_head_dim");
    c.v_head = c.get_int("v_head_dim");
    c.n_ff = c.get_int("intermediate_size");
    c.n_expert = c.get_int("num_experts");
    c.moe_ff = c.get_int("moe_intermediate_size");
    c.n_shared = c.hp.contains("num_shared_experts") ? c.get_int("num_shared_experts") : 0;
    c.latent = c.hp.contains("routed_expert_hidden_size") && !c.hp["routed_expert_hidden_size"].is_null()
                   ? c.get_int("routed_expert_hidden_size") : 0;

    if (c.hp.contains("quantization_config") && c.hp["quantization_config"].is_object()) {
        const json& q = c.hp["quantization_config"];
        c.mxfp4_packed = q.value("quant_method", json()).is_string() && q["quant_method"] == "compressed-tensors" &&
                         q.value("format", json()).is_string() && q["format"] == "mxfp4-pack-quantized";
    }
    return c;
}

}  // namespace kinfer::convert
