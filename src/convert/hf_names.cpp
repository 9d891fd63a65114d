// See hf_names.h.
#include "convert/hf_names.h"

#include <cctype>
#include <cstring>
#include <map>

namespace kinfer::convert {

namespace {

struct Entry {
    const char* hf;     // name after "model.layers.N." (layer) or the whole name (global)
    const char* gguf;   // after "blk.N." (layer) or whole
    bool k3, kl;        // present in MODEL_TENSORS for kimi-k3 / kimi-linear
};

constexpr Entry kGlobal[] = {
    {"model.embed_tokens", "token_embd", true, true},
    {"model.norm", "output_norm", true, true},
    {"lm_head", "output", true, true},
};

constexpr Entry kLayer[] = {
    {"input_layernorm", "attn_norm", true, true},
    {"post_attention_layernorm", "ffn_norm", true, true},
    {"self_attn.q_proj", "attn_q", true, true},
    {"self_attn.k_proj", "attn_k", true, true},
    {"self_attn.v_proj", "attn_v", true, true},
    {"self_attn.o_proj", "attn_output", true, true},
    {"self_attn.q_a_proj", "attn_q_a", true, true},
    {"self_attn.q_b_proj", "attn_q_b", true, true},
    {"self_attn.q_a_layernorm", "attn_q_a_norm", true, true},
    {"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa", true, true},
    {"self_attn.kv_a_layernorm", "attn_kv_a_norm", true, true},
    {"self_attn.k_b_proj", "attn_k_b", true, true},
    {"self_attn.v_b_proj", "attn_v_b", true, true},
    {"self_attn.q_conv1d", "ssm_conv1d_q", true, true},
    {"self_attn.k_conv1d", "ssm_conv1d_k", true, true},
    {"self_attn.v_conv1d", "ssm_conv1d_v", true, true},
    {"self_attn.f_a_proj", "ssm_f_a", true, true},
    {"self_attn.f_b_proj", "ssm_f_b", true, true},
    {"self_attn.b_proj", "ssm_beta", true, true},
    {"self_attn.A_log", "ssm_a", true, true},
    {"self_attn.g_a_proj", "ssm_g_a", false, true},
    {"self_attn.g_b_proj", "ssm_g_b", false, true},
    {"self_attn.dt_proj", "ssm_dt", true, true},
    {"self_attn.o_norm", "ssm_norm", true, true},
    {"mlp.gate_proj", "ffn_gate", true, true},
    {"mlp.up_proj", "ffn_up", true, true},
    {"mlp.down_proj", "ffn_down", true, true},
    {"block_sparse_moe.gate", "ffn_gate_inp", true, true},
    {"block_sparse_moe.gate.e_score_correction", "exp_probs_b", true, true},
    {"block_sparse_moe.shared_experts.gate_proj", "ffn_gate_shexp", true, true},
    {"block_sparse_moe.shared_experts.up_proj", "ffn_up_shexp", true, true},
    {"block_sparse_moe.shared_experts.down_proj", "ffn_down_shexp", true, true},
    {"block_sparse_moe.routed_expert_down_proj", "ffn_routed_down", true, false},
    {"block_sparse_moe.routed_expert_up_proj", "ffn_routed_up", true, false},
    {"block_sparse_moe.routed_expert_norm", "ffn_routed_norm", true, false},
};

std::optional<std::string> lookup(const std::string& base, ModelArch arch) {
    const bool k3 = arch == ModelArch::KimiK3;
    for (const auto& e : kGlobal)
        if (base == e.hf && (k3 ? e.k3 : e.kl)) return std::string(e.gguf);
    const std::string pre = "model.layers.";
    if (base.compare(0, pre.size(), pre) != 0) return std::nullopt;
    size_t i = pre.size(), j = i;
    while (j < base.size() && std::isdigit(static_cast<unsigned char>(base[j]))) ++j;
    if (j == i || j >= base.size() || base[j] != '.') return std::nullopt;
    const std::string bid = base.substr(i, j - i), rest = base.substr(j + 1);
    for (const auto& e : kLayer)
        if (rest == e.hf && (k3 ? e.k3 : e.kl)) return "blk." + bid + "." + e.gguf;
    return std::nullopt;
}

bool ends_with(const std::string& s, const char* suf) {
    const size_t n = std::strlen(suf);
    return s.size() >= n && s.compare(s.size() - n, n, suf) == 0;
}

}  // namespace

std::optional<std::string> map_hf_name(const std::string& name, ModelArch arch) {
    if (auto g = lookup(name, arch)) return g;
    for (const char* suf : {".weight", ".bias"})
        if (ends_with(name, suf))
            if (auto g = lookup(name.substr(0, name.size() - std::strlen(suf)), arch)) return *g + suf;
    return std::nullopt;
}

std::string hf_source_hint(const std::string& g) {
    for (const auto& e : kGlobal)
        if (g == std::string(e.gguf) + ".weight") return std::string(e.hf) + ".weight";
    if (g == "output_res_score.weight") return "model.output_attn_res_norm.weight";
    const int bid = first_number(g);
    const std::string pre = "blk." + std::to_string(bid) + ".";
    if (bid < 0 || g.compare(0, pre.size(), pre) != 0) return g;
    const std::string L = "model.layers." + std::to_string(bid) + ".";
    const std::string r = g.substr(pre.size());
    static const std::pair<const char*, const char*> kSpecial[] = {
        {"ssm_dt.bias", "self_attn.dt_bias"}, {"ssm_a", "self_attn.A_log"},
        {"attn_k_b.weight", "self_attn.kv_b_proj.weight"}, {"attn_v_b.weight", "self_attn.kv_b_proj.weight"},
        {"ssm_g.weight", "self_attn.g_proj.weight"}, {"attn_gate.weight", "self_attn.g_proj.weight"},
        {"attn_res_score.weight", "self_attention_res_norm.weight"}, {"ffn_res_score.weight", "mlp_res_norm.weight"},
        {"exp_probs_b.bias", "block_sparse_moe.gate.e_score_correction_bias"},
        {"ffn_gate_exps.weight", "block_sparse_moe.experts.*.w1.weight"},
        {"ffn_down_exps.weight", "block_sparse_moe.experts.*.w2.weight"},
        {"ffn_up_exps.weight", "block_sparse_moe.experts.*.w3.weight"}};
    for (const auto& [gg, hf] : kSpecial)
        if (r == gg) return L + hf;
    for (const auto& e : kLayer)
        if (r == std::string(e.gguf) + ".weight") return L + e.hf + ".weight";
    return g;
}

int first_number(const std::string& name) {
    size_t start = 0;
    while (start <= name.size()) {
        size_t end = name.find('.', start);
        if (end == std::string::npos) end = name.size();
        if (end > start && end - start < 9) {
            bool digits = true;
            for (size_t k = start; k < end; ++k) digits &= std::isdigit(static_cast<unsigned char>(name[k])) != 0;
            if (digits) return std::stoi(name.substr(start, end - start));
        }
        start = end + 1;
    }
    return -1;
}

std::optional<std::vector<int64_t>> expected_shape(const std::string& name, const HfConfig& c) {
    using V = std::vector<int64_t>;
    const int64_t H = c.n_embd, V_ = c.n_vocab;
    if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return V{V_, H};
    if (name == "model.norm.weight" || name == "model.output_attn_res_norm.weight") return V{H};
    if (name == "model.output_attn_res_proj.weight") return V{1, H};
    const int bid = first_number(name);
    const std::string pre = "model.layers." + std::to_string(bid) + ".";
    if (bid < 0 || name.compare(0, pre.size(), pre) != 0) return std::nullopt;
    if (bid >= c.n_layer) return std::nullopt;   // reported by the caller as an unknown layer
    const std::string r = name.substr(pre.size());
    const bool mla = c.is_mla(bid);
    const int64_t DI = c.kda_heads * c.kda_head_dim, KD = c.kda_head_dim, NH = c.n_head;
    const int64_t QK = c.qk_nope + c.qk_rope, L = c.latent ? c.latent : H, SH = c.n_shared * c.moe_ff;
    static const std::map<std::string, int> kinds = {
        {"input_layernorm.weight", 0}, {"post_attention_layernorm.weight", 0},
        {"self_attention_res_norm.weight", 0}, {"mlp_res_norm.weight", 0},
        {"self_attention_res_proj.weight", 1}, {"mlp_res_proj.weight", 1},
    };
    if (auto k = kinds.find(r); k != kinds.end()) return k->second == 0 ? V{H} : V{1, H};
    if (!mla) {
        if (r == "self_attn.q_proj.weight" || r == "self_attn.k_proj.weight" || r == "self_attn.v_proj.weight" ||
            r == "self_attn.g_proj.weight")
            return V{DI, H};
        if (r == "self_attn.f_a_proj.weight" || r == "self_attn.g_a_proj.weight") return V{KD, H};
        if (r == "self_attn.f_b_proj.weight" || r == "self_attn.g_b_proj.weight") return V{DI, KD};
        if (r == "self_attn.b_proj.weight") return V{c.kda_heads, H};
        if (r == "self_attn.dt_bias") return V{DI};
        if (r == "self_attn.o_norm.weight") return V{KD};
        if (r == "self_attn.o_proj.weight") return V{H, DI};
    } else {
        if (r == "self_attn.q_proj.weight") return V{NH * QK, H};
        if (r == "self_attn.q_a_proj.weight") return V{c.q_lora_rank, H};
        if (r == "self_attn.q_a_layernorm.weight") return V{c.q_lora_rank};
        if (r == "self_attn.q_b_proj.weight") return V{NH * QK, c.q_lora_rank};
        if (r == "self_attn.kv_a_proj_with_mqa.weight") return V{c.kv_lora_rank + c.qk_rope, H};
        if (r == "self_attn.kv_a_layernorm.weight") return V{c.kv_lora_rank};
        if (r == "self_attn.kv_b_proj.weight") return V{c.n_head_kv * (c.qk_nope + c.v_head), c.kv_lora_rank};
        if (r == "self_attn.o_proj.weight") return V{H, NH * c.v_head};
        if (r == "self_attn.g_proj.weight") return V{NH * c.v_head, H};
    }
    if (r == "mlp.gate_proj.weight" || r == "mlp.up_proj.weight") return V{c.n_ff, H};
    if (r == "mlp.down_proj.weight") return V{H, c.n_ff};
    if (r == "block_sparse_moe.gate.weight") return V{c.n_expert, H};
    if (r == "block_sparse_moe.gate.e_score_correction.bias") return V{c.n_expert};
    if (r == "block_sparse_moe.shared_experts.gate_proj.weight" || r == "block_sparse_moe.shared_experts.up_proj.weight")
        return V{SH, H};
    if (r == "block_sparse_moe.shared_experts.down_proj.weight") return V{H, SH};
    if (r == "block_sparse_moe.routed_expert_down_proj.weight") return V{L, H};
    if (r == "block_sparse_moe.routed_expert_up_proj.weight") return V{H, L};
    if (r == "block_sparse_moe.routed_expert_norm.weight") return V{L};
    const std::string ex = "block_sparse_moe.experts.";
    if (r.compare(0, ex.size(), ex) == 0) {
        const size_t dot = r.find('.', ex.size());
        if (dot == std::string::npos) return std::nullopt;
        const std::string w = r.substr(dot + 1);
        const bool down = w.compare(0, 2, "w2") == 0;
        const int64_t rows = down ? L : c.moe_ff, cols = down ? c.moe_ff : L;
        if (w == "w1.weight" || w == "w2.weight" || w == "w3.weight") return V{rows, cols};
        if (w == "w1.weight_packed" || w == "w2.weight_packed" || w == "w3.weight_packed") return V{rows, cols / 2};
        if (w == "w1.weight_scale" || w == "w2.weight_scale" || w == "w3.weight_scale") return V{rows, cols / 32};
    }
    return std::nullopt;
}

bool is_multimodal_tensor(const std::string& n) {
    static const char* const kPrefixes[] = {"mlp", "vit.", "vpm.", "siglip2.", "conformer.", "merger.", "resampler.",
                                            "sound_encoder.", "sound_projection.", "speech_embeddings."};
    for (const char* p : kPrefixes)
        if (n.compare(0, std::strlen(p), p) == 0) return true;
    static const char* const kInfixes[] = {"visual.", "vision.", "audio.", "talker.", "vision_", "audio_",
                                           "token2wav.", "code2wav.", "projector.", "pre_mm_projector_norm",
                                           "image_newline", "view_seperator", "patch_embed", "patch_embedding",
                                           "patch_merger.", "patch_merge_mlp.", "model.connector."};
    for (const char* p : kInfixes)
        if (n.find(p) != std::string::npos) return true;
    return false;
}

}  // namespace kinfer::convert
