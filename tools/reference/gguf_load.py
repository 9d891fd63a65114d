"""Build a KimiModel from a GGUF file (F32/F16/BF16 tensors) with tools/reference/gguf_reader.py."""
from __future__ import annotations

import numpy as np
import torch

from gguf_reader import GGUFFile
from kimi_model import KimiConfig, KimiModel, KDA, MLA, MoE


def config_from_gguf(g: GGUFFile) -> KimiConfig:
    arch = g.arch()
    if arch not in ("kimi-k3", "kimi-linear"):
        raise ValueError(f"unsupported architecture {arch}")
    n_layer = int(g.key("block_count"))
    hkv = g.key("attention.head_count_kv")
    if not isinstance(hkv, list):
        hkv = [hkv] * n_layer
    mla_layers = [i for i, v in enumerate(hkv) if v != 0]
    kda0 = next(i for i in range(n_layer) if i not in mla_layers)
    mla0 = mla_layers[0] if mla_layers else None
    moe0 = int(g.key("leading_dense_block_count", 0))
    shape = lambda n: tuple(reversed(g.tensor_info[n][0]))
    rope = int(g.key("rope.dimension_count", 0))
    cfg = KimiConfig(
        arch=arch,
        vocab=shape("token_embd.weight")[0],
        n_embd=int(g.key("embedding_length")),
        n_layer=n_layer,
        n_head=int(g.key("attention.head_count")),
        mla_layers=mla_layers,
        eps=float(np.float32(g.key("attention.layer_norm_rms_epsilon"))),
        kda_head_dim=int(g.key("kda.head_dim")),
        conv_kernel=int(g.key("ssm.conv_kernel")),
        f_rank=shape(f"blk.{kda0}.ssm_f_a.weight")[0],
        gate_lower_bound=(float(g.key("kda.gate_lower_bound")) if g.key("kda.gate_lower_bound") is not None else None),
        kda_gate_rank=(shape(f"blk.{kda0}.ssm_g_a.weight")[0] if g.has(f"blk.{kda0}.ssm_g_a.weight") else 0),
        q_lora_rank=int(g.key("attention.q_lora_rank", 0) or 0),
        kv_lora_rank=int(g.key("attention.kv_lora_rank")),
        qk_rope=rope,
        qk_nope=int(g.key("attention.key_length_mla")) - rope,
        v_head=int(g.key("attention.value_length_mla")),
        mla_gate=mla0 is not None and g.has(f"blk.{mla0}.attn_gate.weight"),
        n_dense=moe0,
        n_ff=int(g.key("feed_forward_length")),
        n_expert=int(g.key("expert_count", 0)),
        n_expert_used=int(g.key("expert_used_count", 0)),
        n_ff_exp=int(g.key("expert_feed_forward_length", 0)),
        latent=int(g.key("expert_latent_length", 0) or 0),
        n_shared=int(g.key("expert_shared_count", 0)),
        shared_ff=(shape(f"blk.{moe0}.ffn_gate_shexp.weight")[0] if g.has(f"blk.{moe0}.ffn_gate_shexp.weight") else 0),
        act="situ" if g.key("activation.situ_beta") is not None else "silu",
        situ_beta=float(g.key("activation.situ_beta", 0.0) or 0.0),
        situ_linear_beta=float(g.key("activation.situ_linear_beta", 0.0) or 0.0),
        expert_weights_norm=bool(g.key("expert_weights_norm", True)),
        expert_weights_scale=float(np.float32(g.key("expert_weights_scale", 1.0))),
        attn_res_block=int(g.key("attn_res.block_size", 0) or 0),
    )
    if int(g.key("expert_gating_func", 2)) != 2:
        raise ValueError("only sigmoid routing (expert_gating_func 2) is implemented")
    return cfg


def param_map(model: KimiModel):
    """(gguf name, target tensor, loader transform) for every model tensor."""
    cfg = model.cfg
    out = [("token_embd.weight", model.token_embd, None),
           ("output_norm.weight", model.output_norm, None),
           ("output.weight", model.output, None)]
    if cfg.attn_res_block > 0:
        out.append(("output_res_score.weight", model.output_res_score, None))
    for il, b in enumerate(model.blocks):
        p = f"blk.{il}."
        out += [(p + "attn_norm.weight", b.attn_norm, None), (p + "ffn_norm.weight", b.ffn_norm, None)]
        if cfg.attn_res_block > 0:
            out += [(p + "attn_res_score.weight", b.attn_res_score, None),
                    (p + "ffn_res_score.weight", b.ffn_res_score, None)]
        m = b.mixer
        if isinstance(m, KDA):
            for n in ("attn_q", "attn_k", "attn_v", "ssm_f_a", "ssm_f_b", "ssm_beta", "ssm_norm", "attn_output"):
                out.append((p + n + ".weight", getattr(m, n), None))
            for c in "qkv":
                out.append((p + f"ssm_conv1d_{c}.weight", getattr(m, f"conv_{c}"), lambda a: a.reshape(-1, a.shape[-1])))
            out.append((p + "ssm_a", m.A_log, lambda a: np.log(-a.reshape(-1).astype(np.float64)).astype(np.float32)))
            out.append((p + "ssm_dt.bias", m.ssm_dt_bias, None))
            if cfg.kda_gate_rank > 0:
                out += [(p + "ssm_g_a.weight", m.ssm_g_a, None), (p + "ssm_g_b.weight", m.ssm_g_b, None)]
            else:
                out.append((p + "ssm_g.weight", m.ssm_g, None))
        else:
            names = ["attn_kv_a_mqa", "attn_kv_a_norm", "attn_k_b", "attn_v_b", "attn_output"]
            names += ["attn_q_a", "attn_q_a_norm", "attn_q_b"] if cfg.q_lora_rank > 0 else ["attn_q"]
            if cfg.mla_gate:
                names.append("attn_gate")
            for n in names:
                out.append((p + n + ".weight", getattr(m, n), None))
        f = b.ffn
        if isinstance(f, MoE):
            out += [(p + "ffn_gate_inp.weight", f.ffn_gate_inp, None), (p + "exp_probs_b.bias", f.exp_probs_b, None)]
            for n in ("ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"):
                out.append((p + n + ".weight", getattr(f, n), None))
            if cfg.latent > 0:
                for n in ("ffn_routed_down", "ffn_routed_norm", "ffn_routed_up"):
                    out.append((p + n + ".weight", getattr(f, n), None))
            if cfg.n_shared > 0:
                for n in ("gate", "up", "down"):
                    out.append((p + f"ffn_{n}_shexp.weight", getattr(f.shexp, f"ffn_{n}"), None))
        else:
            for n in ("gate", "up", "down"):
                out.append((p + f"ffn_{n}.weight", getattr(f, f"ffn_{n}"), None))
    return out


def load_gguf_model(path: str, dtype=torch.float32) -> KimiModel:
    g = GGUFFile(path)
    cfg = config_from_gguf(g)
    torch.manual_seed(0)
    model = KimiModel(cfg)
    used = set()
    with torch.no_grad():
        for name, t, xf in param_map(model):
            if not g.has(name):
                raise KeyError(f"{path}: tensor {name} missing")
            a = g.tensor(name)
            if xf is not None:
                a = xf(a)
            a = a.reshape(t.shape)
            t.copy_(torch.from_numpy(np.ascontiguousarray(a)))
            used.add(name)
    extra = set(g.names()) - used
    if extra:
        raise KeyError(f"{path}: tensors not used by the reference: {sorted(extra)[:5]}")
    return model.to(dtype).eval()
