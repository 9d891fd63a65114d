#include "model/tensor_list.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace kinfer::model {

namespace {

struct Lister {
    const HParams& hp;
    const HasTensor& has;
    const std::function<void(const TensorSpec&)>& fn;
    int layer = -1;
    TensorRole role = TensorRole::norm;   // of the tensors listed next

    std::string blk(const char* base) const { return fmt::format("blk.{}.{}", layer, base); }

    void mat(const std::string& name, std::vector<int64_t> shape, TensorRef LayerWeights::* slot, bool req = true) {
        TensorSpec s{name, std::move(shape), req, layer, role};
        s.layer_mat = slot;
        fn(s);
    }
    void vec(const std::string& name, std::vector<int64_t> shape, const float* LayerWeights::* slot, bool req = true) {
        TensorSpec s{name, std::move(shape), req, layer, role};
        s.layer_vec = slot;
        fn(s);
    }
};

std::vector<int64_t> squeeze(const int64_t* ne, int n) {
    std::vector<int64_t> s;
    for (int i = 0; i < n; ++i)
        if (ne[i] != 1) s.push_back(ne[i]);
    return s;
}

}  // namespace

const char* role_name(TensorRole r) {
    switch (r) {
        case TensorRole::embeddings_output: return "embeddings_output";
        case TensorRole::norm: return "norm";
        case TensorRole::attn_res: return "attn_res";
        case TensorRole::attention_kda: return "attention_kda";
        case TensorRole::attention_mla: return "attention_mla";
        case TensorRole::dense_ffn: return "dense_ffn";
        case TensorRole::router: return "router";
        case TensorRole::routed_experts: return "routed_experts";
        case TensorRole::latent_moe: return "latent_moe";
        case TensorRole::shared_experts: return "shared_experts";
    }
    return "other";
}

runtime::ExpertTensorNames expert_tensor_names(const HParams& hp) {
    runtime::ExpertTensorNames names(size_t(hp.n_layer));
    auto any = [](const std::string&) { return true; };   // the expert stacks have no variants
    for_each_tensor(hp, any, [&](const TensorSpec& s) {
        if (s.role != TensorRole::routed_experts) return;
        auto& l = names[size_t(s.layer)];
        const int part = s.layer_mat == &LayerWeights::ffn_gate_exps ? 0 : s.layer_mat == &LayerWeights::ffn_up_exps ? 1 : 2;
        l[size_t(part)] = s.name;
    });
    return names;
}

bool shape_matches(const TensorSpec& s, const int64_t* ne, int n_dims) {
    return squeeze(s.shape.data(), int(s.shape.size())) == squeeze(ne, n_dims);
}

std::string shape_str(const std::vector<int64_t>& shape) { return fmt::format("{{{}}}", fmt::join(shape, ", ")); }

void for_each_tensor(const HParams& hp, const HasTensor& has, const std::function<void(const TensorSpec&)>& fn) {
    const int64_t d = hp.n_embd;
    {
        TensorSpec s{"token_embd.weight", {d, hp.n_vocab}, true, -1};
        s.global_mat = &Weights::token_embd;
        fn(s);
        s = TensorSpec{"output_norm.weight", {d}, true, -1};
        s.global_vec = &Weights::output_norm;
        fn(s);
        s = TensorSpec{"output.weight", {d, hp.n_vocab}, true, -1};
        s.global_mat = &Weights::output;
        fn(s);
        if (hp.attn_res_block_size > 0) {
            s = TensorSpec{"output_res_score.weight", {d}, true, -1, TensorRole::attn_res};
            s.global_vec = &Weights::output_res_score;
            fn(s);
        }
    }

    using L = LayerWeights;
    for (int il = 0; il < hp.n_layer; ++il) {
        Lister ls{hp, has, fn, il};
        auto b = [&](const char* base) { return ls.blk(base); };
        ls.role = TensorRole::norm;
        ls.vec(b("attn_norm.weight"), {d}, &L::attn_norm);
        ls.vec(b("ffn_norm.weight"), {d}, &L::ffn_norm);
        if (hp.attn_res_block_size > 0) {
            ls.role = TensorRole::attn_res;
            ls.vec(b("attn_res_score.weight"), {d}, &L::attn_res_score);
            ls.vec(b("ffn_res_score.weight"), {d}, &L::ffn_res_score);
        }

        if (hp.is_kda(il)) {
            const int64_t hd = hp.kda_head_dim, di = hp.d_inner(), W = hp.conv_kernel;
            ls.role = TensorRole::attention_kda;
            ls.mat(b("attn_q.weight"), {d, di}, &L::attn_q);
            ls.mat(b("attn_k.weight"), {d, di}, &L::attn_k);
            ls.mat(b("attn_v.weight"), {d, di}, &L::attn_v);
            // {W, 1, d_inner, 1} or {W, 1, d_inner}: size-1 dims are ignored anyway.
            ls.vec(b("ssm_conv1d_q.weight"), {W, 1, di}, &L::conv_q);
            ls.vec(b("ssm_conv1d_k.weight"), {W, 1, di}, &L::conv_k);
            ls.vec(b("ssm_conv1d_v.weight"), {W, 1, di}, &L::conv_v);
            ls.mat(b("ssm_f_a.weight"), {d, hd}, &L::ssm_f_a);
            ls.mat(b("ssm_f_b.weight"), {hd, di}, &L::ssm_f_b);
            ls.mat(b("ssm_beta.weight"), {d, hp.n_head}, &L::ssm_beta);
            // {n_head} (K3), {1, n_head, 1, 1} (kimi-linear F32), {1, n_head} (quantized files).
            ls.vec(b("ssm_a"), {hp.n_head}, &L::ssm_a);
            ls.vec(b("ssm_dt.bias"), {di}, &L::ssm_dt_b);
            if (has(b("ssm_g.weight")) || !has(b("ssm_g_a.weight"))) {
                ls.mat(b("ssm_g.weight"), {d, di}, &L::ssm_g);
            } else {
                ls.mat(b("ssm_g_a.weight"), {d, hd}, &L::ssm_g_a);
                ls.mat(b("ssm_g_b.weight"), {hd, di}, &L::ssm_g_b);
            }
            ls.vec(b("ssm_norm.weight"), {hd}, &L::ssm_norm);
            ls.mat(b("attn_output.weight"), {di, d}, &L::attn_output);
        } else {
            const int64_t H = hp.n_head, dk = hp.key_length_mla, dv = hp.value_length_mla;
            const int64_t r = hp.kv_lora_rank;
            ls.role = TensorRole::attention_mla;
            if (hp.q_lora_rank > 0) {
                ls.mat(b("attn_q_a.weight"), {d, hp.q_lora_rank}, &L::attn_q_a);
                ls.vec(b("attn_q_a_norm.weight"), {hp.q_lora_rank}, &L::attn_q_a_norm);
                ls.mat(b("attn_q_b.weight"), {hp.q_lora_rank, H * dk}, &L::attn_q_b);
            } else {
                ls.mat(b("attn_q.weight"), {d, H * dk}, &L::attn_q);
            }
            ls.mat(b("attn_kv_a_mqa.weight"), {d, r + hp.rope_dim}, &L::attn_kv_a_mqa);
            ls.vec(b("attn_kv_a_norm.weight"), {r}, &L::attn_kv_a_norm);
            ls.mat(b("attn_k_b.weight"), {hp.dk_nope(), r, H}, &L::attn_k_b);
            ls.mat(b("attn_v_b.weight"), {r, dv, H}, &L::attn_v_b);
            ls.mat(b("attn_gate.weight"), {d, H * dv}, &L::attn_gate, false);
            ls.mat(b("attn_output.weight"), {H * dv, d}, &L::attn_output);
        }

        if (hp.is_dense(il)) {
            ls.role = TensorRole::dense_ffn;
            ls.mat(b("ffn_gate.weight"), {d, hp.n_ff}, &L::ffn_gate);
            ls.mat(b("ffn_up.weight"), {d, hp.n_ff}, &L::ffn_up);
            ls.mat(b("ffn_down.weight"), {hp.n_ff, d}, &L::ffn_down);
        } else {
            const int64_t E = hp.n_expert, ff = hp.n_ff_exp, lat = hp.latent_dim();
            ls.role = TensorRole::router;
            ls.mat(b("ffn_gate_inp.weight"), {d, E}, &L::ffn_gate_inp);
            ls.vec(b("exp_probs_b.bias"), {E}, &L::exp_probs_b);
            ls.role = TensorRole::routed_experts;
            ls.mat(b("ffn_gate_exps.weight"), {lat, ff, E}, &L::ffn_gate_exps);
            ls.mat(b("ffn_up_exps.weight"), {lat, ff, E}, &L::ffn_up_exps);
            ls.mat(b("ffn_down_exps.weight"), {ff, lat, E}, &L::ffn_down_exps);
            if (hp.expert_latent > 0) {
                ls.role = TensorRole::latent_moe;
                ls.mat(b("ffn_routed_down.weight"), {d, lat}, &L::ffn_routed_down);
                ls.mat(b("ffn_routed_up.weight"), {lat, d}, &L::ffn_routed_up);
                ls.vec(b("ffn_routed_norm.weight"), {lat}, &L::ffn_routed_norm, false);
            }
            ls.role = TensorRole::shared_experts;
            const bool shared = hp.n_expert_shared > 0;
            const int64_t fs = hp.n_ff_shexp();
            ls.mat(b("ffn_gate_shexp.weight"), {d, fs}, &L::ffn_gate_shexp, shared);
            ls.mat(b("ffn_up_shexp.weight"), {d, fs}, &L::ffn_up_shexp, shared);
            ls.mat(b("ffn_down_shexp.weight"), {fs, d}, &L::ffn_down_shexp, shared);
        }
    }
}

}  // namespace kinfer::model
