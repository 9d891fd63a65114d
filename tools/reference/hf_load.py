"""Load a KimiModel from a Hugging Face checkpoint folder written by hf_writer.py (or any K3 /
Kimi Linear checkpoint with BF16/F32 tensors; MXFP4-packed experts are not supported)."""
from __future__ import annotations

import json
import os

import numpy as np
import torch

from hf_writer import read_safetensors
from kimi_model import KimiConfig, KimiModel, KDA, MoE


def config_from_hf(d: dict) -> tuple[KimiConfig, str]:
    k3 = d.get("model_type") == "kimi_k3"
    c = d["text_config"] if k3 else d
    lac = c["linear_attn_config"]
    hd = lac["head_dim"]
    n_shared = c.get("num_shared_experts", 0) or 0
    cfg = KimiConfig(
        arch="kimi-k3" if k3 else "kimi-linear",
        vocab=c["vocab_size"], n_embd=c["hidden_size"], n_layer=c["num_hidden_layers"],
        n_head=c["num_attention_heads"], mla_layers=[i - 1 for i in lac["full_attn_layers"]],
        eps=float(np.float32(c["rms_norm_eps"])), kda_head_dim=hd, conv_kernel=lac["short_conv_kernel_size"],
        f_rank=hd, gate_lower_bound=lac.get("gate_lower_bound"),
        kda_gate_rank=0 if lac.get("use_full_rank_gate", False) else hd,
        q_lora_rank=c.get("q_lora_rank") or 0, kv_lora_rank=c["kv_lora_rank"], qk_nope=c["qk_nope_head_dim"],
        qk_rope=c["qk_rope_head_dim"], v_head=c["v_head_dim"], mla_gate=bool(c.get("mla_use_output_gate", False)),
        n_dense=c.get("first_k_dense_replace", 0), n_ff=c["intermediate_size"], n_expert=c["num_experts"],
        n_expert_used=c["num_experts_per_token"], n_ff_exp=c["moe_intermediate_size"],
        latent=c.get("routed_expert_hidden_size", 0) or 0, n_shared=n_shared,
        shared_ff=n_shared * c["moe_intermediate_size"],
        act="situ" if c.get("hidden_act") == "situ" else "silu",
        situ_beta=float(c.get("activation_situ_beta", 0.0) or 0.0),
        situ_linear_beta=float(c.get("activation_situ_linear_beta", 0.0) or 0.0),
        expert_weights_norm=bool(c.get("moe_renormalize", True)),
        expert_weights_scale=float(np.float32(c.get("routed_scaling_factor", 1.0))),
        attn_res_block=c.get("attn_res_block_size", 0) or 0)
    return cfg, ("language_model." if k3 else "")


def load_hf_model(path: str) -> KimiModel:
    cfg, prefix = config_from_hf(json.load(open(os.path.join(path, "config.json"))))
    idx = json.load(open(os.path.join(path, "model.safetensors.index.json")))
    T = {}
    for fn in sorted(set(idx["weight_map"].values())):
        T.update(read_safetensors(os.path.join(path, fn)))
    T = {k[len(prefix):]: v for k, v in T.items()}
    used = set()

    def get(n):
        used.add(n)
        return T[n]

    model = KimiModel(cfg)
    def put(t, a):
        t.copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).reshape(t.shape))

    with torch.no_grad():
        put(model.token_embd, get("model.embed_tokens.weight"))
        put(model.output_norm, get("model.norm.weight"))
        put(model.output, get("lm_head.weight"))
        if cfg.attn_res_block > 0:
            put(model.output_res_score, get("model.output_attn_res_norm.weight") * get("model.output_attn_res_proj.weight").reshape(-1))
        for il, b in enumerate(model.blocks):
            p = f"model.layers.{il}."
            put(b.attn_norm, get(p + "input_layernorm.weight"))
            put(b.ffn_norm, get(p + "post_attention_layernorm.weight"))
            if cfg.attn_res_block > 0:
                put(b.attn_res_score, get(p + "self_attention_res_norm.weight") * get(p + "self_attention_res_proj.weight").reshape(-1))
                put(b.ffn_res_score, get(p + "mlp_res_norm.weight") * get(p + "mlp_res_proj.weight").reshape(-1))
            m, a = b.mixer, p + "self_attn."
            if isinstance(m, KDA):
                for hf, t in (("q_proj", m.attn_q), ("k_proj", m.attn_k), ("v_proj", m.attn_v), ("f_a_proj", m.ssm_f_a),
                              ("f_b_proj", m.ssm_f_b), ("b_proj", m.ssm_beta), ("o_norm", m.ssm_norm), ("o_proj", m.attn_output)):
                    put(t, get(a + hf + ".weight"))
                for c in "qkv":
                    put(getattr(m, f"conv_{c}"), get(a + f"{c}_conv1d.weight"))
                put(m.A_log, get(a + "A_log").reshape(-1)[:cfg.n_head])
                put(m.ssm_dt_bias, get(a + "dt_bias"))
                if cfg.kda_gate_rank > 0:
                    put(m.ssm_g_a, get(a + "g_a_proj.weight"))
                    put(m.ssm_g_b, get(a + "g_b_proj.weight"))
                else:
                    put(m.ssm_g, get(a + "g_proj.weight"))
            else:
                if cfg.q_lora_rank > 0:
                    put(m.attn_q_a, get(a + "q_a_proj.weight"))
                    put(m.attn_q_a_norm, get(a + "q_a_layernorm.weight"))
                    put(m.attn_q_b, get(a + "q_b_proj.weight"))
                else:
                    put(m.attn_q, get(a + "q_proj.weight"))
                put(m.attn_kv_a_mqa, get(a + "kv_a_proj_with_mqa.weight"))
                put(m.attn_kv_a_norm, get(a + "kv_a_layernorm.weight"))
                kvb = get(a + "kv_b_proj.weight").reshape(cfg.n_head, cfg.qk_nope + cfg.v_head, cfg.kv_lora_rank)
                put(m.attn_k_b, kvb[:, :cfg.qk_nope].transpose(0, 2, 1))
                put(m.attn_v_b, kvb[:, cfg.qk_nope:])
                if cfg.mla_gate:
                    put(m.attn_gate, get(a + "g_proj.weight"))
                put(m.attn_output, get(a + "o_proj.weight"))
            f = b.ffn
            if isinstance(f, MoE):
                q = p + "block_sparse_moe."
                put(f.ffn_gate_inp, get(q + "gate.weight"))
                put(f.exp_probs_b, get(q + "gate.e_score_correction_bias"))
                put(f.ffn_gate_exps, np.stack([get(q + f"experts.{e}.w1.weight") for e in range(cfg.n_expert)]))
                put(f.ffn_down_exps, np.stack([get(q + f"experts.{e}.w2.weight") for e in range(cfg.n_expert)]))
                put(f.ffn_up_exps, np.stack([get(q + f"experts.{e}.w3.weight") for e in range(cfg.n_expert)]))
                if cfg.latent > 0:
                    put(f.ffn_routed_down, get(q + "routed_expert_down_proj.weight"))
                    put(f.ffn_routed_norm, get(q + "routed_expert_norm.weight"))
                    put(f.ffn_routed_up, get(q + "routed_expert_up_proj.weight"))
                if cfg.n_shared > 0:
                    for n in ("gate", "up", "down"):
                        put(getattr(f.shexp, f"ffn_{n}"), get(q + f"shared_experts.{n}_proj.weight"))
            else:
                for n in ("gate", "up", "down"):
                    put(getattr(f, f"ffn_{n}"), get(p + f"mlp.{n}_proj.weight"))
    extra = set(T) - used
    if extra:
        raise KeyError(f"{path}: unused tensors {sorted(extra)[:5]}")
    return model.eval()
