// Model weights as zero-copy views into the mmap'ed GGUF. Matrices stay in their file type and
// are read through quant/ kernels; small vectors used element-wise (norms, biases, AttnRes scores,
// conv taps, ssm_a) are exposed as float pointers (F32 in place, other types converted once).
#pragma once
#include "backend/mat.h"
#include "gguf/reader.h"
#include "model/hparams.h"

#include <deque>
#include <vector>

namespace kinfer::model {

using TensorRef = const gguf::TensorInfo*;

struct LayerWeights {
    // Every layer.
    const float* attn_norm = nullptr;
    const float* ffn_norm = nullptr;
    const float* attn_res_score = nullptr;   // K3 AttnRes
    const float* ffn_res_score = nullptr;

    // KDA mixer.
    TensorRef attn_q = nullptr;              // also MLA's q without q-LoRA
    TensorRef attn_k = nullptr;
    TensorRef attn_v = nullptr;
    const float* conv_q = nullptr;           // [d_inner][W] taps, tap W-1 = current token
    const float* conv_k = nullptr;
    const float* conv_v = nullptr;
    TensorRef ssm_f_a = nullptr;
    TensorRef ssm_f_b = nullptr;
    TensorRef ssm_beta = nullptr;
    const float* ssm_a = nullptr;            // [n_head], -exp(A_log)
    const float* ssm_dt_b = nullptr;         // [d_inner]
    TensorRef ssm_g = nullptr;               // K3 full-rank output gate
    TensorRef ssm_g_a = nullptr;             // Kimi Linear low-rank output gate
    TensorRef ssm_g_b = nullptr;
    const float* ssm_norm = nullptr;         // [head_dim]
    TensorRef attn_output = nullptr;         // KDA and MLA

    // MLA mixer.
    TensorRef attn_q_a = nullptr;
    const float* attn_q_a_norm = nullptr;
    TensorRef attn_q_b = nullptr;
    TensorRef attn_kv_a_mqa = nullptr;
    const float* attn_kv_a_norm = nullptr;
    TensorRef attn_k_b = nullptr;            // {dk_nope, kv_lora, n_head}
    TensorRef attn_v_b = nullptr;            // {kv_lora, dv, n_head}
    TensorRef attn_gate = nullptr;           // K3 output gate

    // Dense FFN.
    TensorRef ffn_gate = nullptr;
    TensorRef ffn_up = nullptr;
    TensorRef ffn_down = nullptr;

    // MoE.
    TensorRef ffn_gate_inp = nullptr;
    const float* exp_probs_b = nullptr;      // [n_expert] selection bias
    TensorRef ffn_gate_exps = nullptr;       // {in, n_ff_exp, n_expert}
    TensorRef ffn_up_exps = nullptr;
    TensorRef ffn_down_exps = nullptr;
    TensorRef ffn_routed_down = nullptr;     // K3 latent MoE
    TensorRef ffn_routed_up = nullptr;
    const float* ffn_routed_norm = nullptr;
    TensorRef ffn_gate_shexp = nullptr;
    TensorRef ffn_up_shexp = nullptr;
    TensorRef ffn_down_shexp = nullptr;
};

struct Weights {
    TensorRef token_embd = nullptr;
    const float* output_norm = nullptr;
    TensorRef output = nullptr;
    const float* output_res_score = nullptr;
    std::vector<LayerWeights> layers;

    size_t n_params = 0;      // elements of every tensor the model uses
    size_t n_bytes = 0;       // their bytes in the file

    std::deque<std::vector<float>> converted;   // storage for non-F32 vectors
};

// The matrix view a backend op takes: all rows (ne1 * ne2 * ne3) of t, slice(i) for one slice
// of a 3-D tensor (expert e, head h).
backend::Mat mat_of(TensorRef t);

// Binds every tensor of the tensor list (model/tensor_list.h), checking presence, shape and type.
// Throws kinfer::Error naming the tensor on any mismatch.
Weights load_weights(const gguf::File& f, const HParams& hp);

}  // namespace kinfer::model
