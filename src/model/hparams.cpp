#include "model/hparams.h"

#include "common/error.h"
#include "gguf/reader.h"

#include <cmath>

namespace kinfer::model {

int HParams::n_kda_layers() const {
    int n = 0;
    for (int il = 0; il < n_layer; ++il) n += is_kda(il);
    return n;
}
int HParams::n_mla_layers() const { return n_layer - n_kda_layers(); }

namespace {

struct Keys {
    const gguf::File& f;
    std::string prefix;

    std::string k(const char* name) const { return prefix + name; }
    bool has(const char* name) const { return f.find(k(name)) != nullptr; }
    int64_t req_int(const char* name) const {
        if (!has(name)) fail("{}: metadata key '{}' missing", f.path(), k(name));
        return f.get_int(k(name));
    }
    int64_t opt_int(const char* name, int64_t def) const { return f.get_int_or(k(name), def); }
    float opt_float(const char* name, float def) const { return float(f.get_float_or(k(name), def)); }
    void positive(const char* name, int64_t v, int64_t max = int64_t(1) << 32) const {
        if (v <= 0 || v > max) fail("{}: metadata key '{}' = {} is out of range", f.path(), k(name), v);
    }
};

}  // namespace

HParams load_hparams(const gguf::File& f) {
    HParams hp;
    hp.arch_name = f.architecture();
    if (hp.arch_name == "kimi-k3") hp.arch = Arch::KimiK3;
    else if (hp.arch_name == "kimi-linear") hp.arch = Arch::KimiLinear;
    else fail("{}: general.architecture '{}' is not supported (kimi-k3, kimi-linear)", f.path(), hp.arch_name);
    Keys K{f, hp.arch_name + "."};

    hp.n_layer = int(K.req_int("block_count"));
    K.positive("block_count", hp.n_layer, 4096);
    hp.n_ctx_train = K.opt_int("context_length", 0);
    hp.n_embd = K.req_int("embedding_length");
    K.positive("embedding_length", hp.n_embd, 1 << 20);
    hp.n_ff = K.opt_int("feed_forward_length", 0);
    hp.n_head = int(K.req_int("attention.head_count"));
    K.positive("attention.head_count", hp.n_head, 1 << 16);
    hp.rms_eps = float(f.get_float(K.k("attention.layer_norm_rms_epsilon")));
    if (!(hp.rms_eps > 0 && hp.rms_eps < 1))
        fail("{}: {} = {} is not a valid epsilon", f.path(), K.k("attention.layer_norm_rms_epsilon"), hp.rms_eps);

    // head_count_kv: a per-layer array (0 = KDA) or, for a pure-MLA file, one scalar.
    const gguf::Value& kv = f.get(K.k("attention.head_count_kv"));
    if (kv.is_array()) {
        if (int64_t(kv.size()) != hp.n_layer)
            fail("{}: {} has {} entries, block_count is {}", f.path(), K.k("attention.head_count_kv"), kv.size(), hp.n_layer);
        for (size_t i = 0; i < kv.size(); ++i) hp.n_head_kv.push_back(int(kv.int_at(i)));
    } else {
        hp.n_head_kv.assign(hp.n_layer, int(kv.as_int()));
    }
    for (int v : hp.n_head_kv)
        if (v < 0) fail("{}: {} has a negative entry", f.path(), K.k("attention.head_count_kv"));

    hp.n_vocab = K.opt_int("vocab_size", 0);
    if (hp.n_vocab == 0) {
        if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens")) hp.n_vocab = int64_t(toks->size());
    }

    const int n_kda = hp.n_kda_layers();
    if (n_kda > 0) {
        hp.kda_head_dim = K.req_int("kda.head_dim");
        K.positive("kda.head_dim", hp.kda_head_dim, 4096);
        hp.conv_kernel = K.req_int("ssm.conv_kernel");
        K.positive("ssm.conv_kernel", hp.conv_kernel, 64);
    }
    if (K.has("kda.gate_lower_bound")) {
        hp.has_gate_lower_bound = true;
        hp.gate_lower_bound = float(f.get_float(K.k("kda.gate_lower_bound")));
        if (!std::isfinite(hp.gate_lower_bound)) hp.has_gate_lower_bound = false;
    }

    if (hp.n_layer - n_kda > 0) {
        hp.q_lora_rank = K.opt_int("attention.q_lora_rank", 0);
        hp.kv_lora_rank = K.req_int("attention.kv_lora_rank");
        K.positive("attention.kv_lora_rank", hp.kv_lora_rank, 1 << 16);
        hp.key_length_mla = K.req_int("attention.key_length_mla");
        hp.value_length_mla = K.req_int("attention.value_length_mla");
        hp.rope_dim = K.opt_int("rope.dimension_count", 0);
        K.positive("attention.key_length_mla", hp.key_length_mla, 1 << 16);
        K.positive("attention.value_length_mla", hp.value_length_mla, 1 << 16);
        if (hp.rope_dim < 0 || hp.rope_dim >= hp.key_length_mla)
            fail("{}: rope.dimension_count {} must be below key_length_mla {}", f.path(), hp.rope_dim, hp.key_length_mla);
    }

    hp.n_layer_dense_lead = int(K.opt_int("leading_dense_block_count", 0));
    if (hp.n_layer_dense_lead < 0 || hp.n_layer_dense_lead > hp.n_layer)
        fail("{}: leading_dense_block_count {} out of range", f.path(), hp.n_layer_dense_lead);
    if (hp.n_layer_dense_lead > 0) K.positive("feed_forward_length", hp.n_ff, 1 << 24);
    if (hp.n_layer_dense_lead < hp.n_layer) {
        hp.n_expert = K.req_int("expert_count");
        hp.n_expert_used = K.req_int("expert_used_count");
        K.positive("expert_count", hp.n_expert, 1 << 16);
        K.positive("expert_used_count", hp.n_expert_used, hp.n_expert);
        hp.n_ff_exp = K.req_int("expert_feed_forward_length");
        K.positive("expert_feed_forward_length", hp.n_ff_exp, 1 << 24);
        hp.n_expert_shared = K.opt_int("expert_shared_count", 0);
        hp.expert_weights_scale = K.opt_float("expert_weights_scale", 1.0f);
        if (hp.expert_weights_scale == 0.0f) hp.expert_weights_scale = 1.0f;  // llama.cpp: 0 = unset
        // kimi-linear always renormalises (its GGUF has no key); kimi-k3 follows the key.
        hp.expert_weights_norm = hp.arch == Arch::KimiLinear ? true
                                 : f.get_bool_or(K.k("expert_weights_norm"), false);
        hp.expert_gating_func = int(K.opt_int("expert_gating_func", 2));
        if (hp.expert_gating_func != 2)
            fail("{}: expert_gating_func {} is not supported (2 = sigmoid)", f.path(), hp.expert_gating_func);
        hp.expert_latent = K.opt_int("expert_latent_length", 0);
        if (hp.expert_latent < 0) fail("{}: expert_latent_length is negative", f.path());
    }

    if (hp.arch == Arch::KimiK3) {
        hp.attn_res_block_size = int(K.opt_int("attn_res.block_size", 0));
        if (hp.attn_res_block_size < 0) fail("{}: attn_res.block_size is negative", f.path());
        hp.situ_beta = K.opt_float("activation.situ_beta", 0.0f);
        hp.situ_linear_beta = K.opt_float("activation.situ_linear_beta", 0.0f);
        if (!(hp.situ_beta > 0))
            fail("{}: {} must be > 0 for SiTU", f.path(), K.k("activation.situ_beta"));
    }
    return hp;
}

}  // namespace kinfer::model
