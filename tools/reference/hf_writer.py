"""Write a KimiModel as a Hugging Face checkpoint in the layout of shared/golden/hf/hf-k3-tiny (K3:
nested text_config, `language_model.` prefix) or hf-kl-tiny (Kimi Linear: flat config), so that
`kinfer convert <dir> -o out.gguf` can read it.

Safetensors are written by hand: u64 LE header length, compact JSON header padded with spaces to a
multiple of 8, `__metadata__` first, data ordered by dtype size (descending) then name.
Dtypes: BF16 (round to nearest even) for weights and norms, F32 for A_log, dt_bias and the
router correction bias (as in the real releases). Routed experts are written unquantized
(`experts.E.wK.weight`, BF16), not in the compressed-tensors MXFP4 form.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import struct

import numpy as np
import torch

from kimi_model import KimiModel, KDA, MoE

F32_NAMES = ("A_log", "dt_bias", "e_score_correction_bias")


def to_bf16_bits(a: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return u.astype(np.uint16)


def write_safetensors(path: str, tensors: list[tuple[str, np.ndarray, str]]) -> int:
    """tensors: (name, float32 array, "BF16"|"F32"). Returns the data size in bytes."""
    blobs = []
    for name, a, dt in tensors:
        raw = (to_bf16_bits(a) if dt == "BF16" else np.ascontiguousarray(a, dtype="<f4")).tobytes()
        blobs.append((name, dt, list(a.shape), raw))
    size = {"F32": 4, "BF16": 2}
    blobs.sort(key=lambda b: (-size[b[1]], b[0]))
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, dt, shape, raw in blobs:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * ((8 - len(hj) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b[3])
    return off


def hf_tensors(model: KimiModel) -> list[tuple[str, np.ndarray, str]]:
    """(HF name without prefix, array, dtype) in module registration order."""
    cfg = model.cfg
    k3 = cfg.arch == "kimi-k3"
    npy = lambda t: t.detach().float().cpu().numpy()
    out = []
    add = lambda n, a: out.append((n, np.asarray(a, dtype=np.float32), "F32" if n.endswith(F32_NAMES) else "BF16"))
    add("model.embed_tokens.weight", npy(model.token_embd))
    for il, b in enumerate(model.blocks):
        p = f"model.layers.{il}."
        m = b.mixer
        if isinstance(m, KDA):
            add(p + "self_attn.q_proj.weight", npy(m.attn_q))
            add(p + "self_attn.k_proj.weight", npy(m.attn_k))
            add(p + "self_attn.v_proj.weight", npy(m.attn_v))
            for c in "qkv":
                w = npy(getattr(m, f"conv_{c}"))
                add(p + f"self_attn.{c}_conv1d.weight", w.reshape(w.shape[0], 1, w.shape[1]))
            A = npy(m.A_log)
            add(p + "self_attn.A_log", A if k3 else A.reshape(1, 1, -1, 1))
            add(p + "self_attn.f_a_proj.weight", npy(m.ssm_f_a))
            add(p + "self_attn.f_b_proj.weight", npy(m.ssm_f_b))
            add(p + "self_attn.dt_bias", npy(m.ssm_dt_bias))
            add(p + "self_attn.b_proj.weight", npy(m.ssm_beta))
            if cfg.kda_gate_rank > 0:
                add(p + "self_attn.g_a_proj.weight", npy(m.ssm_g_a))
                add(p + "self_attn.g_b_proj.weight", npy(m.ssm_g_b))
            else:
                add(p + "self_attn.g_proj.weight", npy(m.ssm_g))
            add(p + "self_attn.o_norm.weight", npy(m.ssm_norm))
            add(p + "self_attn.o_proj.weight", npy(m.attn_output))
        else:
            if cfg.q_lora_rank > 0:
                add(p + "self_attn.q_a_proj.weight", npy(m.attn_q_a))
                add(p + "self_attn.q_a_layernorm.weight", npy(m.attn_q_a_norm))
                add(p + "self_attn.q_b_proj.weight", npy(m.attn_q_b))
            else:
                add(p + "self_attn.q_proj.weight", npy(m.attn_q))
            add(p + "self_attn.kv_a_proj_with_mqa.weight", npy(m.attn_kv_a_mqa))
            add(p + "self_attn.kv_a_layernorm.weight", npy(m.attn_kv_a_norm))
            kb = npy(m.attn_k_b).transpose(0, 2, 1)          # [H, nope, kv_lora]
            vb = npy(m.attn_v_b)                             # [H, v, kv_lora]
            kvb = np.concatenate([kb, vb], axis=1).reshape(-1, kb.shape[-1])
            add(p + "self_attn.kv_b_proj.weight", kvb)
            if cfg.mla_gate:
                add(p + "self_attn.g_proj.weight", npy(m.attn_gate))
            add(p + "self_attn.o_proj.weight", npy(m.attn_output))
        f = b.ffn
        if isinstance(f, MoE):
            q = p + "block_sparse_moe."
            add(q + "gate.weight", npy(f.ffn_gate_inp))
            add(q + "gate.e_score_correction_bias", npy(f.exp_probs_b))
            for e in range(cfg.n_expert):
                add(q + f"experts.{e}.w1.weight", npy(f.ffn_gate_exps[e]))
                add(q + f"experts.{e}.w2.weight", npy(f.ffn_down_exps[e]))
                add(q + f"experts.{e}.w3.weight", npy(f.ffn_up_exps[e]))
            if cfg.latent > 0:
                add(q + "routed_expert_down_proj.weight", npy(f.ffn_routed_down))
                add(q + "routed_expert_norm.weight", npy(f.ffn_routed_norm))
                add(q + "routed_expert_up_proj.weight", npy(f.ffn_routed_up))
            if cfg.n_shared > 0:
                for n in ("gate", "up", "down"):
                    add(q + f"shared_experts.{n}_proj.weight", npy(getattr(f.shexp, f"ffn_{n}")))
        else:
            for n in ("gate", "up", "down"):
                add(p + f"mlp.{n}_proj.weight", npy(getattr(f, f"ffn_{n}")))
        add(p + "input_layernorm.weight", npy(b.attn_norm))
        add(p + "post_attention_layernorm.weight", npy(b.ffn_norm))
        if cfg.attn_res_block > 0:
            # the score vector is stored as res_norm = 1 and res_proj = score ([1, H]); the converter
            # fuses norm * proj back into the score exactly.
            for hfn, t in (("self_attention_res", b.attn_res_score), ("mlp_res", b.ffn_res_score)):
                add(p + f"{hfn}_norm.weight", np.ones(cfg.n_embd, np.float32))
                add(p + f"{hfn}_proj.weight", npy(t).reshape(1, -1))
    add("model.norm.weight", npy(model.output_norm))
    if cfg.attn_res_block > 0:
        add("model.output_attn_res_norm.weight", np.ones(cfg.n_embd, np.float32))
        add("model.output_attn_res_proj.weight", npy(model.output_res_score).reshape(1, -1))
    add("lm_head.weight", npy(model.output))
    return out


def text_config(model: KimiModel, bos: int) -> dict:
    cfg = model.cfg
    k3 = cfg.arch == "kimi-k3"
    mla1 = [i + 1 for i in cfg.mla_layers]
    kda1 = [i + 1 for i in range(cfg.n_layer) if i not in cfg.mla_layers]
    if cfg.f_rank != cfg.kda_head_dim or (cfg.kda_gate_rank not in (0, cfg.kda_head_dim)):
        raise ValueError("HF Kimi configs tie f_a/g_a ranks to the KDA head_dim")
    if cfg.n_shared and cfg.shared_ff != cfg.n_shared * cfg.n_ff_exp:
        raise ValueError("HF Kimi configs set the shared expert width to n_shared * moe_intermediate_size")
    lac = {"full_attn_layers": mla1, "head_dim": cfg.kda_head_dim, "kda_layers": kda1,
           "num_heads": cfg.n_head, "short_conv_kernel_size": cfg.conv_kernel}
    if cfg.gate_lower_bound is not None:
        lac["gate_lower_bound"] = cfg.gate_lower_bound
    if k3:
        lac["use_full_rank_gate"] = cfg.kda_gate_rank == 0
    c = {
        "architectures": ["KimiLinearForCausalLM"],
        "bos_token_id": bos, "eos_token_id": bos + 2, "pad_token_id": bos + 255,
        "dtype": "bfloat16",
        "first_k_dense_replace": cfg.n_dense,
        "hidden_act": "situ" if cfg.act == "situ" else "silu",
        "hidden_size": cfg.n_embd,
        "initializer_range": 0.02,
        "intermediate_size": cfg.n_ff,
        "kv_lora_rank": cfg.kv_lora_rank,
        "linear_attn_config": lac,
        "mla_use_nope": True,
        "model_type": "kimi_linear",
        "moe_intermediate_size": cfg.n_ff_exp,
        "moe_layer_freq": 1,
        "moe_renormalize": bool(cfg.expert_weights_norm),
        "moe_router_activation_func": "sigmoid",
        "num_attention_heads": cfg.n_head,
        "num_expert_group": 1,
        "num_experts": cfg.n_expert,
        "num_experts_per_token": cfg.n_expert_used,
        "num_hidden_layers": cfg.n_layer,
        "num_key_value_heads": cfg.n_head,
        "num_nextn_predict_layers": 0,
        "num_shared_experts": cfg.n_shared,
        "q_lora_rank": cfg.q_lora_rank if cfg.q_lora_rank > 0 else None,
        "qk_nope_head_dim": cfg.qk_nope,
        "qk_rope_head_dim": cfg.qk_rope,
        "rms_norm_eps": cfg.eps,
        "routed_scaling_factor": cfg.expert_weights_scale,
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "use_cache": True,
        "use_grouped_topk": True,
        "v_head_dim": cfg.v_head,
        "vocab_size": cfg.vocab,
    }
    if k3:
        c.update({"activation_situ_beta": cfg.situ_beta, "activation_situ_linear_beta": cfg.situ_linear_beta,
                  "attn_res_block_size": cfg.attn_res_block, "latent_moe_use_norm": True,
                  "max_position_embeddings": 1048576, "mla_use_output_gate": cfg.mla_gate,
                  "routed_expert_hidden_size": cfg.latent})
    else:
        c.update({"head_dim": cfg.n_embd // cfg.n_head, "model_max_length": 1048576,
                  "rope_scaling": None, "rope_theta": 10000.0})
    return dict(sorted(c.items()))


def export_hf(model: KimiModel, out_dir: str, tiktoken_path: str, tokenizer_config_path: str,
              max_shard_bytes: int = 2 << 30) -> None:
    cfg = model.cfg
    k3 = cfg.arch == "kimi-k3"
    os.makedirs(out_dir, exist_ok=True)
    bos = cfg.vocab - 256
    prefix = "language_model." if k3 else ""
    tensors = [(prefix + n, a, dt) for n, a, dt in hf_tensors(model)]
    # greedy shards in registration order
    shards, cur, cur_bytes = [], [], 0
    for t in tensors:
        nb = t[1].size * (4 if t[2] == "F32" else 2)
        if cur and cur_bytes + nb > max_shard_bytes:
            shards.append(cur)
            cur, cur_bytes = [], 0
        cur.append(t)
        cur_bytes += nb
    shards.append(cur)
    weight_map, total = {}, 0
    for i, sh in enumerate(shards):
        fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        total += write_safetensors(os.path.join(out_dir, fn), sh)
        for n, _, _ in sh:
            weight_map[n] = fn
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)
    tc = text_config(model, bos)
    if k3:
        tc["auto_map"] = {"AutoConfig": "configuration_kimi_k3.KimiLinearConfig",
                          "AutoModel": "modeling_kimi_linear.KimiLinearModel",
                          "AutoModelForCausalLM": "modeling_kimi_linear.KimiLinearForCausalLM"}
        top = {"architectures": ["KimiK3ForConditionalGeneration"],
               "auto_map": {"AutoConfig": "configuration_kimi_k3.KimiK3Config",
                            "AutoModel": "modeling_kimi_k3.KimiK3ForConditionalGeneration",
                            "AutoModelForCausalLM": "modeling_kimi_k3.KimiK3ForConditionalGeneration"},
               "bos_token_id": bos, "dtype": "bfloat16", "eos_token_id": bos + 2,
               "image_placeholder": "<|kimi_image_placeholder|>", "media_placeholder_token_id": bos + 21,
               "model_type": "kimi_k3", "pad_token_id": bos + 255, "text_config": dict(sorted(tc.items())),
               "tie_word_embeddings": False, "transformers_version": "4.57.1"}
    else:
        tc["auto_map"] = {"AutoConfig": "configuration_kimi.KimiLinearConfig",
                          "AutoModel": "modeling_kimi.KimiLinearModel",
                          "AutoModelForCausalLM": "modeling_kimi.KimiLinearForCausalLM"}
        tc["transformers_version"] = "4.57.1"
        top = dict(sorted(tc.items()))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(top, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": bos + 2}, f, indent=2)
        f.write("\n")
    shutil.copyfile(tiktoken_path, os.path.join(out_dir, "tiktoken.model"))
    shutil.copyfile(tokenizer_config_path, os.path.join(out_dir, "tokenizer_config.json"))


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    """Tiny reader (F32/BF16) used by the round-trip test."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        hdr = json.loads(f.read(n))
        base = 8 + n
        buf = f.read()
    out = {}
    for k, v in hdr.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        raw = buf[a:b]
        if v["dtype"] == "F32":
            arr = np.frombuffer(raw, "<f4")
        elif v["dtype"] == "BF16":
            arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(v["dtype"])
        out[k] = arr.reshape(v["shape"]).copy()
    return out
