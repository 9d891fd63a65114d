// Hyper-parameters of a kimi-k3 / kimi-linear model, read from the GGUF keys of DESIGN.md
// section 4 and checked for consistency before any weight is touched.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::gguf { class File; }

namespace kinfer::model {

enum class Arch { KimiK3, KimiLinear };

struct HParams {
    Arch arch = Arch::KimiK3;
    std::string arch_name;          // "kimi-k3" / "kimi-linear"
    int n_layer = 0;
    int64_t n_ctx_train = 0;
    int64_t n_embd = 0;
    int64_t n_vocab = 0;
    int64_t n_ff = 0;               // dense FFN width (leading dense layers)
    int n_head = 0;                 // KDA heads and MLA heads
    std::vector<int> n_head_kv;     // per layer; 0 = KDA layer
    float rms_eps = 1e-5f;

    // KDA
    int64_t kda_head_dim = 0;
    int64_t conv_kernel = 0;
    float gate_lower_bound = 0;     // K3 (-5): g = lb * sigmoid(-a * f); else softplus form
    bool has_gate_lower_bound = false;

    // MLA
    int64_t q_lora_rank = 0;        // 0 = no q-LoRA
    int64_t kv_lora_rank = 0;
    int64_t key_length_mla = 0;     // dk_nope + d_rope
    int64_t value_length_mla = 0;   // dv per head
    int64_t rope_dim = 0;           // d_rope

    // FFN / MoE
    int64_t n_expert = 0;
    int64_t n_expert_used = 0;
    int64_t n_ff_exp = 0;
    int64_t n_expert_shared = 0;
    int n_layer_dense_lead = 0;
    float expert_weights_scale = 1.0f;
    bool expert_weights_norm = true;
    int expert_gating_func = 2;     // 2 = sigmoid (the only one these models use)
    int64_t expert_latent = 0;      // 0 = experts run at n_embd

    // AttnRes / SiTU (K3)
    int attn_res_block_size = 0;
    float situ_beta = 0;
    float situ_linear_beta = 0;

    // Derived.
    bool is_kda(int il) const { return n_head_kv[il] == 0; }
    bool is_dense(int il) const { return il < n_layer_dense_lead; }
    bool use_situ() const { return arch == Arch::KimiK3; }
    int64_t d_inner() const { return int64_t(n_head) * kda_head_dim; }
    // Floats of a KDA layer's state: its recurrent state (a D x D matrix per head) and the causal
    // conv's last kernel - 1 inputs of q, k and v.
    int64_t kda_state_floats() const { return int64_t(n_head) * kda_head_dim * kda_head_dim; }
    int64_t conv_state_floats() const { return 3 * d_inner() * std::max<int64_t>(conv_kernel - 1, 0); }
    int64_t dk_nope() const { return key_length_mla - rope_dim; }
    int64_t mla_cache_dim() const { return kv_lora_rank + rope_dim; }   // [c | k_pe]
    int64_t latent_dim() const { return expert_latent > 0 ? expert_latent : n_embd; }
    int64_t n_ff_shexp() const { return n_ff_exp * (n_expert_shared > 0 ? n_expert_shared : 1); }
    int n_kda_layers() const;
    int n_mla_layers() const;
};

// Throws kinfer::Error naming the file and key when a key is missing, has the wrong type or an
// impossible value. Unknown keys are ignored.
HParams load_hparams(const gguf::File& f);

}  // namespace kinfer::model
