// The metadata writer; each block below mirrors one llama.cpp function, in call order:
// Metadata.set_gguf_meta_model, TextModel.set_gguf_parameters, the Kimi set_gguf_parameters,
// the quantization version, then set_vocab (KimiLinearModel.set_vocab, K3's additions).
#include "convert/gguf_metadata.h"

#include "common/error.h"
#include "convert/k3_chat_template.h"
#include "convert/model_name.h"
#include "text/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace kinfer::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::optional<json> read_json_if_exists(const fs::path& p) {
    if (!fs::is_regular_file(p)) return std::nullopt;
    std::ifstream in(p, std::ios::binary);
    try {
        return json::parse(in);
    } catch (const json::exception& e) {
        fail("{}: not valid JSON: {}", p.string(), e.what());
    }
}

std::string read_text(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

uint32_t as_u32(const HfConfig& c, const json& v, const char* what) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > int64_t(UINT32_MAX))
        fail("{}: '{}' = {} is not a non-negative integer", c.path, what, v.dump());
    return uint32_t(v.get<int64_t>());
}
float as_f32(const HfConfig& c, const json& v, const char* what) {
    if (!v.is_number()) fail("{}: '{}' = {} is not a number", c.path, what, v.dump());
    return float(v.get<double>());
}
std::optional<json> get(const HfConfig& c, const char* key) {   // hparams.get(key): None when null
    if (!c.hp.contains(key) || c.hp[key].is_null()) return std::nullopt;
    return c.hp[key];
}
json require(const HfConfig& c, const char* key) {
    if (auto v = get(c, key)) return *v;
    fail("{}: key '{}' is missing", c.path, key);
}

// gguf_writer.get_total_parameter_count over the planned tensors.
void count_params(const Plan& plan, int64_t& total, int64_t& shared, int64_t& expert, int64_t& n_expert) {
    total = shared = expert = 0;
    int64_t expert_sum = 0, n_exp_tensors = 0;
    for (const auto& t : plan.tensors) {
        const int64_t size = t.nelements();
        if (t.name.find("_exps.") != std::string::npos && t.n_dims >= 3) {
            // numpy shape[-3] (or [-2] for biases) = ggml ne[2] (ne[1])
            const int64_t count = t.name.find(".bias") != std::string::npos ? t.ne[1] : t.ne[2];
            expert += size / count;
            expert_sum += count;
            ++n_exp_tensors;
        } else {
            shared += size;
        }
        total += size;
    }
    n_expert = n_exp_tensors ? expert_sum / n_exp_tensors : 0;
}

void general_keys(KvList& kv, const HfConfig& cfg, const Plan& plan, const std::string& dir) {
    kv.set_string("general.architecture", cfg.gguf_arch);
    kv.set_string("general.type", "model");
    if (auto g = read_json_if_exists(fs::path(dir) / "generation_config.json"); g && g->is_object()) {
        if (g->contains("top_k") && (*g)["top_k"].is_number_integer()) kv.set_i32("general.sampling.top_k", (*g)["top_k"].get<int32_t>());
        if (g->contains("top_p") && (*g)["top_p"].is_number()) kv.set_f32("general.sampling.top_p", (*g)["top_p"].get<float>());
        if (g->contains("min_p") && (*g)["min_p"].is_number()) kv.set_f32("general.sampling.min_p", (*g)["min_p"].get<float>());
        if (g->contains("temperature") && (*g)["temperature"].is_number())
            kv.set_f32("general.sampling.temp", (*g)["temperature"].get<float>());
    }
    int64_t total, shared, expert, n_expert;
    count_params(plan, total, shared, expert, n_expert);
    fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    const ModelName mn = model_name_from_dir(p.filename().string(), total);
    kv.set_string("general.name", mn.name);
    if (mn.version) kv.set_string("general.version", *mn.version);
    if (mn.finetune) kv.set_string("general.finetune", *mn.finetune);
    if (mn.basename) kv.set_string("general.basename", *mn.basename);
    kv.set_string("general.size_label", mn.size_label ? *mn.size_label : size_label(total, shared, expert, n_expert));
}

void text_model_keys(KvList& kv, const HfConfig& c, const Plan& plan) {
    const std::string A = c.gguf_arch + ".";
    kv.set_u32(A + "block_count", uint32_t(c.n_layer));
    if (auto v = c.find({"max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length", "model_max_length"}))
        kv.set_u32(A + "context_length", as_u32(c, *v, "context length"));
    if (auto v = c.find({"hidden_size", "n_embd", "dim"})) kv.set_u32(A + "embedding_length", as_u32(c, *v, "hidden_size"));
    if (auto v = c.find({"prefix_dense_intermediate_size", "dense_intermediate_size", "intermediate_size", "n_inner", "hidden_dim"}))
        kv.set_u32(A + "feed_forward_length", as_u32(c, *v, "intermediate_size"));
    if (auto v = c.find({"num_attention_heads", "n_head", "n_heads"})) kv.set_u32(A + "attention.head_count", as_u32(c, *v, "num_attention_heads"));
    // The Kimi converters set num_key_value_heads = 1 (MLA served as MQA) before this runs.
    kv.set_u32(A + "attention.head_count_kv", 1);
    // Rope: only the base frequency applies to these NoPE models.
    json rope_params = c.hp.contains("rope_parameters") ? c.hp["rope_parameters"]
                       : (c.hp.contains("rope_scaling") ? c.hp["rope_scaling"] : json());
    std::optional<json> theta;
    if (rope_params.is_object() && rope_params.contains("full_attention")) rope_params = rope_params["full_attention"];
    if (rope_params.is_object() && rope_params.contains("rope_theta") && !rope_params["rope_theta"].is_null())
        theta = rope_params["rope_theta"];
    else
        theta = c.find({"global_rope_theta", "rope_global_theta", "rope_theta_global", "rope_theta", "rotary_emb_base"});
    if (theta) kv.set_f32(A + "rope.freq_base", as_f32(c, *theta, "rope_theta"));
    if (auto v = c.find({"rms_norm_eps", "norm_eps"})) kv.set_f32(A + "attention.layer_norm_rms_epsilon", as_f32(c, *v, "rms_norm_eps"));
    if (auto v = c.find({"layer_norm_eps", "layer_norm_epsilon", "norm_epsilon"}))
        kv.set_f32(A + "attention.layer_norm_epsilon", as_f32(c, *v, "layer_norm_eps"));
    if (auto v = c.find({"num_local_experts", "num_experts", "n_routed_experts"})) kv.set_u32(A + "expert_count", as_u32(c, *v, "num_experts"));
    if (auto v = c.find({"num_experts_per_tok", "num_experts_per_token", "top_k_experts"}))
        kv.set_u32(A + "expert_used_count", as_u32(c, *v, "num_experts_per_token"));
    if (auto v = get(c, "n_group")) kv.set_u32(A + "expert_group_count", as_u32(c, *v, "n_group"));
    if (auto v = get(c, "topk_group")) kv.set_u32(A + "expert_group_used_count", as_u32(c, *v, "topk_group"));
    if (auto v = c.find({"score_function", "scoring_func", "score_func", "moe_router_activation", "moe_router_activation_func", "expert_selection_fn"})) {
        const std::string f = v->is_string() ? v->get<std::string>() : v->dump();
        if (f == "sigmoid") kv.set_u32(A + "expert_gating_func", 2);
        else if (f == "softmax") kv.set_u32(A + "expert_gating_func", 1);
        else if (f == "sqrtsoftplus") kv.set_u32(A + "expert_gating_func", 4);
        else fail("{}: unsupported expert score gating function '{}'", c.path, f);
    }
    if (auto v = get(c, "head_dim")) {
        kv.set_u32(A + "attention.key_length", as_u32(c, *v, "head_dim"));
        kv.set_u32(A + "attention.value_length", as_u32(c, *v, "head_dim"));
    }
    kv.set_u32("general.file_type", plan.file_type);
}

std::vector<int32_t> head_count_kv(const HfConfig& c) {
    std::vector<int32_t> v;
    for (int64_t il = 0; il < c.n_layer; ++il) v.push_back(c.is_mla(il) ? 1 : 0);
    return v;
}

void kimi_linear_keys(KvList& kv, const HfConfig& c) {
    const std::string A = c.gguf_arch + ".";
    kv.set_u32(A + "vocab_size", uint32_t(c.n_vocab));
    kv.set_i32_array(A + "attention.head_count_kv", head_count_kv(c));
    const json& la = c.hp["linear_attn_config"];
    if (la.contains("short_conv_kernel_size") && !la["short_conv_kernel_size"].is_null())
        kv.set_u32(A + "ssm.conv_kernel", as_u32(c, la["short_conv_kernel_size"], "short_conv_kernel_size"));
    if (la.contains("head_dim") && !la["head_dim"].is_null()) kv.set_u32(A + "kda.head_dim", as_u32(c, la["head_dim"], "head_dim"));
    if (auto v = c.find({"q_lora_rank", "n_lora_q"})) kv.set_u32(A + "attention.q_lora_rank", as_u32(c, *v, "q_lora_rank"));
    const auto kv_lora = c.find({"kv_lora_rank", "n_lora_kv"});
    if (!kv_lora) fail("{}: key 'kv_lora_rank' is missing", c.path);
    kv.set_u32(A + "attention.kv_lora_rank", as_u32(c, *kv_lora, "kv_lora_rank"));
    const auto nope = get(c, "qk_nope_head_dim");
    const auto rope = c.find({"qk_rope_head_dim", "n_rot"});
    if (!rope) fail("{}: key 'qk_rope_head_dim' is missing", c.path);
    const uint32_t r = as_u32(c, *rope, "qk_rope_head_dim");
    kv.set_u32(A + "rope.dimension_count", r);
    kv.set_u32(A + "attention.key_length", as_u32(c, *kv_lora, "kv_lora_rank") + r);
    const auto vdim = get(c, "v_head_dim");
    if (auto k = get(c, "n_embd_head_k_mla")) kv.set_u32(A + "attention.key_length_mla", as_u32(c, *k, "n_embd_head_k_mla"));
    else if (nope) kv.set_u32(A + "attention.key_length_mla", as_u32(c, *nope, "qk_nope_head_dim") + r);
    if (auto v = get(c, "n_embd_head_v_mla")) kv.set_u32(A + "attention.value_length_mla", as_u32(c, *v, "n_embd_head_v_mla"));
    else if (vdim) kv.set_u32(A + "attention.value_length_mla", as_u32(c, *vdim, "v_head_dim"));
    kv.set_u32(A + "expert_feed_forward_length", as_u32(c, require(c, "moe_intermediate_size"), "moe_intermediate_size"));
    kv.set_u32(A + "expert_shared_count", as_u32(c, require(c, "num_shared_experts"), "num_shared_experts"));
    kv.set_u32(A + "leading_dense_block_count", as_u32(c, require(c, "first_k_dense_replace"), "first_k_dense_replace"));
    kv.set_f32(A + "expert_weights_scale", as_f32(c, require(c, "routed_scaling_factor"), "routed_scaling_factor"));
}

void kimi_k3_keys(KvList& kv, const HfConfig& c) {
    const std::string A = c.gguf_arch + ".";
    kv.set_u32(A + "vocab_size", uint32_t(c.n_vocab));
    kv.set_i32_array(A + "attention.head_count_kv", head_count_kv(c));
    const json& la = c.hp["linear_attn_config"];
    kv.set_u32(A + "ssm.conv_kernel", uint32_t(c.conv_kernel));
    kv.set_u32(A + "kda.head_dim", uint32_t(c.kda_head_dim));
    if (la.contains("gate_lower_bound") && !la["gate_lower_bound"].is_null())
        kv.set_f32(A + "kda.gate_lower_bound", as_f32(c, la["gate_lower_bound"], "gate_lower_bound"));
    if (c.q_lora_rank) kv.set_u32(A + "attention.q_lora_rank", uint32_t(c.q_lora_rank));
    kv.set_u32(A + "attention.kv_lora_rank", uint32_t(c.kv_lora_rank));
    if (!get(c, "mla_use_nope") || !c.hp["mla_use_nope"].is_boolean() || !c.hp["mla_use_nope"].get<bool>())
        fail("{}: K3 MLA is expected to be nope-only (mla_use_nope: true)", c.path);
    kv.set_u32(A + "rope.dimension_count", uint32_t(c.qk_rope));
    kv.set_u32(A + "attention.key_length", uint32_t(c.kv_lora_rank + c.qk_rope));
    kv.set_u32(A + "attention.value_length", uint32_t(c.kv_lora_rank));
    kv.set_u32(A + "attention.key_length_mla", uint32_t(c.qk_nope + c.qk_rope));
    kv.set_u32(A + "attention.value_length_mla", uint32_t(c.v_head));
    kv.set_u32(A + "expert_feed_forward_length", uint32_t(c.moe_ff));
    kv.set_u32(A + "expert_shared_count", as_u32(c, require(c, "num_shared_experts"), "num_shared_experts"));
    kv.set_u32(A + "leading_dense_block_count", as_u32(c, require(c, "first_k_dense_replace"), "first_k_dense_replace"));
    kv.set_f32(A + "expert_weights_scale", as_f32(c, require(c, "routed_scaling_factor"), "routed_scaling_factor"));
    const json norm = require(c, "moe_renormalize");
    if (!norm.is_boolean()) fail("{}: 'moe_renormalize' is not a boolean", c.path);
    kv.set_bool(A + "expert_weights_norm", norm.get<bool>());
    if (require(c, "moe_router_activation_func") != "sigmoid")
        fail("{}: moe_router_activation_func must be 'sigmoid' for K3", c.path);
    kv.set_u32(A + "expert_gating_func", 2);
    if (c.latent) kv.set_u32(A + "expert_latent_length", uint32_t(c.latent));
    if (require(c, "hidden_act") != "situ") fail("{}: unexpected hidden_act {} (K3 uses 'situ')", c.path, c.hp["hidden_act"].dump());
    kv.set_f32(A + "activation.situ_beta", as_f32(c, require(c, "activation_situ_beta"), "activation_situ_beta"));
    kv.set_f32(A + "activation.situ_linear_beta", as_f32(c, require(c, "activation_situ_linear_beta"), "activation_situ_linear_beta"));
    kv.set_u32(A + "attn_res.block_size", as_u32(c, require(c, "attn_res_block_size"), "attn_res_block_size"));
}

std::optional<std::string> token_content(const json& tc, const char* key) {
    if (!tc.contains(key)) return std::nullopt;
    const json& e = tc[key];
    if (e.is_string()) return e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string()) return e["content"].get<std::string>();
    return std::nullopt;
}

void vocab_keys(KvList& kv, const HfConfig& c, const std::string& dir) {
    const fs::path tok_path = fs::path(dir) / "tiktoken.model";
    const fs::path tc_path = fs::path(dir) / "tokenizer_config.json";
    if (!fs::is_regular_file(tok_path)) fail("{}: missing (kinfer converts tiktoken vocabularies)", tok_path.string());
    const text::TiktokenRanks ranks = text::load_tiktoken(tok_path.string());
    const json tc = read_json_if_exists(tc_path).value_or(json::object());
    if (!tc.is_object()) fail("{}: not a JSON object", tc_path.string());

    // tokenization_kimi.py: the 256 ids after the BPE ranks are special, named by
    // added_tokens_decoder or <|reserved_token_{id}|>.
    const int64_t n_base = int64_t(ranks.count);
    std::map<text::Token, std::string> specials;
    std::map<std::string, int64_t> special_id;
    const json dec = tc.contains("added_tokens_decoder") && tc["added_tokens_decoder"].is_object() ? tc["added_tokens_decoder"] : json::object();
    for (int64_t i = n_base; i < n_base + 256; ++i) {
        std::string s = "<|reserved_token_" + std::to_string(i) + "|>";
        const std::string k = std::to_string(i);
        if (dec.contains(k) && dec[k].is_object() && dec[k].contains("content") && dec[k]["content"].is_string())
            s = dec[k]["content"].get<std::string>();
        special_id[s] = i;   // a dict keyed by text: a repeated text keeps its last id
        specials[text::Token(i)] = s;
    }
    const text::VocabData v = text::vocab_from_tiktoken(ranks, specials, size_t(c.n_vocab), "kimi-k2");

    kv.set_string("tokenizer.ggml.model", "gpt2");
    kv.set_string("tokenizer.ggml.pre", "kimi-k2");
    kv.set_string_array("tokenizer.ggml.tokens", v.tokens);
    kv.set_i32_array("tokenizer.ggml.token_type", v.types);
    kv.set_string_array("tokenizer.ggml.merges", v.merges);

    // gguf.SpecialVocab without tokenizer.json: ids from config.json (root, then text_config).
    const json top = read_json_if_exists(fs::path(dir) / "config.json").value_or(json::object());
    static const std::pair<const char*, const char*> kTypes[] = {
        {"bos", "tokenizer.ggml.bos_token_id"}, {"eos", "tokenizer.ggml.eos_token_id"},
        {"unk", "tokenizer.ggml.unknown_token_id"}, {"sep", "tokenizer.ggml.seperator_token_id"},
        {"pad", "tokenizer.ggml.padding_token_id"}, {"cls", nullptr}, {"mask", "tokenizer.ggml.mask_token_id"}};
    for (const auto& [typ, key] : kTypes) {
        const std::string k = std::string(typ) + "_token_id";
        json id = top.contains(k) ? top[k] : json();
        if (id.is_null() && top.contains("text_config") && top["text_config"].is_object() && top["text_config"].contains(k))
            id = top["text_config"][k];
        if (!id.is_number_integer() || !key) continue;
        if (id.get<int64_t>() < 0) fail("{}: invalid value for special token type {}: {}", c.path, typ, id.get<int64_t>());
        kv.set_u32(key, uint32_t(id.get<int64_t>()));
    }
    for (const auto& [typ, key] : {std::pair{"bos", "tokenizer.ggml.add_bos_token"}, std::pair{"eos", "tokenizer.ggml.add_eos_token"},
                                   std::pair{"sep", "tokenizer.ggml.add_sep_token"}}) {
        const std::string k = std::string("add_") + typ + "_token";
        if (tc.contains(k) && tc[k].is_boolean()) kv.set_bool(key, tc[k].get<bool>());
    }
    std::optional<std::string> tmpl;
    if (tc.contains("chat_template") && tc["chat_template"].is_string()) tmpl = tc["chat_template"].get<std::string>();
    else if (fs::is_regular_file(fs::path(dir) / "chat_template.jinja")) tmpl = read_text(fs::path(dir) / "chat_template.jinja");
    else if (auto j = read_json_if_exists(fs::path(dir) / "chat_template.json"); j && j->contains("chat_template") && (*j)["chat_template"].is_string())
        tmpl = (*j)["chat_template"].get<std::string>();
    if (tmpl) kv.set_string("tokenizer.chat_template", *tmpl);

    // KimiLinearModel.set_vocab: the eos id becomes the tokenizer's (its eos_token, [EOS])...
    if (auto eos = token_content(tc, "eos_token"))
        if (auto it = special_id.find(*eos); it != special_id.end()) kv.set_u32("tokenizer.ggml.eos_token_id", uint32_t(it->second));
    if (c.arch == ModelArch::KimiK3) {
        // ...which K3 undoes: its configured eos is <|end_of_msg|>, the end of a turn.
        if (auto e = get(c, "eos_token_id"); e && e->is_number_integer())
            kv.set_u32("tokenizer.ggml.eos_token_id", as_u32(c, *e, "eos_token_id"));
        if (!tmpl) kv.set_string("tokenizer.chat_template", std::string(k3_chat_template()));
    }
}

}  // namespace

KvList build_metadata(const HfConfig& cfg, const Plan& plan, const std::string& dir) {
    KvList kv;
    general_keys(kv, cfg, plan, dir);
    text_model_keys(kv, cfg, plan);
    if (cfg.arch == ModelArch::KimiK3) kimi_k3_keys(kv, cfg);
    else kimi_linear_keys(kv, cfg);
    kv.set_u32("general.quantization_version", 2);
    vocab_keys(kv, cfg, dir);
    return kv;
}

}  // namespace kinfer::convert
