#!/usr/bin/env python3
"""Random-weight Kimi GGUFs (F32) at the real models' widths, with few layers, for benchmarks.

k3-bench (n_embd 1024) has hot weights that half fit in a large L3 cache; real users run K3 and
Kimi Linear 48B, whose matrices are 2-12x wider. These models keep every width of the real ones
and cut only the depth, the vocabulary (the tiny models' 4352 tokens, so the tokenizer is the
tested one) and, for size, the number of routed experts:

  k3-wide  kimi-k3, hidden 7168, 96 KDA heads x 128, MLA q-LoRA 1536 / kv_lora 512 / dk 128+64 /
           dv 128 with the output gate, latent MoE 7168 -> 3584, experts of ff 3072, 2 shared,
           AttnRes block 12, SiTU; 3 layers KDA / MLA / KDA, layer 0 dense (ff 9216),
           16 experts top-4.                                   ~2.66 G params, ~1.5 GiB at Q4_K_M
  kl-wide  kimi-linear, hidden 2304, 32 KDA heads x 128 (low-rank output gate), MLA without
           q-LoRA, kv_lora 512, dk 128+64, dv 128; experts of ff 1024, 1 shared, scale 2.446;
           4 layers KDA / KDA / KDA / MLA, layer 0 dense (ff 9216), 64 experts top-8.

The layout, tensor names, tensor order and metadata follow the recipes of k3-bench and kl-tiny-a
(../shared/golden/llama.cpp), which llama.cpp loads; the init rules are theirs too (std
1/sqrt(fan_in), out_gain on projections back into the residual stream, expert_mix for experts),
so activations stay O(1) at any width and routing is not degenerate. The file is written by
make_bench_model.py's writer; the recipe (model json) can be saved with --save-recipe.

  tools/bench/make_wide_model.py --model k3-wide     # -> /work/bench-models/k3-wide-F32.gguf
  tools/bench/make_wide_model.py --model kl-wide     # -> /work/bench-models/kl-wide-F32.gguf
  kinfer quantize /work/bench-models/k3-wide-F32.gguf /work/bench-models/k3-wide-Q4_K_M.gguf Q4_K_M

Every width can be overridden (--set n_expert=32 --set n_layer=4 ...). Needs python3 + numpy.
"""

import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_bench_model as mbm  # noqa: E402

PRESETS = {
    "k3-wide": {
        "arch": "kimi-k3", "vocab_layout": "k3", "seed": 20261201,
        "n_embd": 7168, "n_layer": 3, "full_attn_layers": [2],
        "n_head": 96, "kda_head_dim": 128, "conv": 4, "gate_lower_bound": -5.0,
        "q_lora": 1536, "kv_lora": 512, "qk_nope": 128, "qk_rope": 64, "v_head": 128,
        "n_ff": 9216, "n_expert": 16, "n_expert_used": 4, "n_ff_exp": 3072, "n_shared": 2,
        "latent": 3584, "routed_scale": 1.0, "weights_norm": True,
        "situ_beta": 4.0, "situ_linear_beta": 25.0, "attn_res_block": 12,
        "rms_eps": 1e-05, "n_ctx_train": 1048576, "dense_lead": 1,
        "expert_dev": 0.2, "out_gain": 0.12, "router_gain": 3.0, "bias_std": 0.3, "res_gain": 0.6,
        "dt_range": [-5.0, -2.0], "alog_range": [-0.5, 0.5],
    },
    "kl-wide": {
        "arch": "kimi-linear", "vocab_layout": "k2", "seed": 20261202,
        "n_embd": 2304, "n_layer": 4, "full_attn_layers": [4],
        "n_head": 32, "kda_head_dim": 128, "conv": 4,
        "kv_lora": 512, "qk_nope": 128, "qk_rope": 64, "v_head": 128,
        "n_ff": 9216, "n_expert": 64, "n_expert_used": 8, "n_ff_exp": 1024, "n_shared": 1,
        "routed_scale": 2.446, "rms_eps": 1e-05, "n_ctx_train": 1048576, "dense_lead": 1,
        "rope_theta": 10000.0, "expert_dev": 0.15, "out_gain": 0.12, "router_gain": 4.0,
        "bias_std": 0.5, "dt_range": [-5.0, -1.0], "alog_range": [-0.5, 0.5],
    },
}

# The recipe whose metadata keys (order, types) each architecture's file copies.
KV_TEMPLATE = {"kimi-k3": ("bench", "k3-bench"), "kimi-linear": ("models", "kl-tiny-a")}
N_VOCAB = 4352


def tensors_for(c):
    """Every tensor of the model in generation order: (name, numpy shape [out, in], init)."""
    k3 = c["arch"] == "kimi-k3"
    E, H, D = c["n_embd"], c["n_head"], c["kda_head_dim"]
    HD = H * D
    nope, rope, vh, kvl = c["qk_nope"], c["qk_rope"], c["v_head"], c["kv_lora"]
    og = c["out_gain"]

    def w(out, inp, gain=1.0):
        return [out, inp], ["normal", gain / math.sqrt(inp)]

    def norm(n):
        return [n], ["normal_mean", 1.0, 0.1]

    out = [("token_embd.weight", [N_VOCAB, E], ["normal", 1.0])]
    for il in range(c["n_layer"]):
        p = f"blk.{il}."
        mla = (il + 1) in c["full_attn_layers"]
        t = [("attn_norm.weight",) + tuple(norm(E))]
        if k3:
            t.append(("attn_res_score.weight", [E], ["normal", c["res_gain"] / math.sqrt(E)]))
        if not mla:
            for x in "qkv":
                t.append((f"attn_{x}.weight",) + tuple(w(HD, E)))
            for x in "qkv":
                t.append((f"ssm_conv1d_{x}.weight", [1, HD, 1, c["conv"]], ["normal", 0.5]))
            t.append(("ssm_f_a.weight",) + tuple(w(D, E)))
            t.append(("ssm_f_b.weight",) + tuple(w(HD, D)))
            t.append(("ssm_beta.weight",) + tuple(w(H, E)))
            t.append(("ssm_a", [H] if k3 else [1, 1, H, 1], ["neg_exp_uniform"] + c["alog_range"]))
            t.append(("ssm_dt.bias", [HD], ["uniform"] + c["dt_range"]))
            if k3:
                t.append(("ssm_g.weight",) + tuple(w(HD, E)))
            else:
                t.append(("ssm_g_a.weight",) + tuple(w(D, E)))
                t.append(("ssm_g_b.weight",) + tuple(w(HD, D)))
            t.append(("ssm_norm.weight",) + tuple(norm(D)))
            t.append(("attn_output.weight",) + tuple(w(E, HD, og)))
        else:
            if k3:
                ql = c["q_lora"]
                t.append(("attn_q_a.weight",) + tuple(w(ql, E)))
                t.append(("attn_q_a_norm.weight",) + tuple(norm(ql)))
                t.append(("attn_q_b.weight",) + tuple(w(H * (nope + rope), ql)))
            else:
                t.append(("attn_q.weight",) + tuple(w(H * (nope + rope), E)))
            t.append(("attn_kv_a_mqa.weight",) + tuple(w(kvl + rope, E)))
            t.append(("attn_kv_a_norm.weight",) + tuple(norm(kvl)))
            t.append(("attn_k_b.weight", [H, kvl, nope], ["normal", 1 / math.sqrt(kvl)]))
            t.append(("attn_v_b.weight", [H, vh, kvl], ["normal", 1 / math.sqrt(kvl)]))
            if k3:
                t.append(("attn_gate.weight",) + tuple(w(H * vh, E)))
            t.append(("attn_output.weight",) + tuple(w(E, H * vh, og)))
        t.append(("ffn_norm.weight",) + tuple(norm(E)))
        if k3:
            t.append(("ffn_res_score.weight", [E], ["normal", c["res_gain"] / math.sqrt(E)]))
        if il < c["dense_lead"]:
            F = c["n_ff"]
            t += [("ffn_gate.weight",) + tuple(w(F, E)), ("ffn_up.weight",) + tuple(w(F, E)),
                  ("ffn_down.weight",) + tuple(w(E, F, og))]
        else:
            NE, FE, dev = c["n_expert"], c["n_ff_exp"], c["expert_dev"]
            L = c["latent"] if k3 else E
            t.append(("ffn_gate_inp.weight",) + tuple(w(NE, E, c["router_gain"])))
            t.append(("exp_probs_b.bias", [NE], ["normal", c["bias_std"]]))
            if k3:
                t.append(("ffn_routed_down.weight",) + tuple(w(L, E)))
            t.append(("ffn_gate_exps.weight", [NE, FE, L], ["expert_mix", 1 / math.sqrt(L), dev]))
            t.append(("ffn_up_exps.weight", [NE, FE, L], ["expert_mix", 1 / math.sqrt(L), dev]))
            # k3: the latent output is normed before ffn_routed_up, so no out_gain here (as k3-bench).
            t.append(("ffn_down_exps.weight", [NE, L, FE],
                      ["expert_mix", (1.0 if k3 else og) / math.sqrt(FE), dev]))
            if k3:
                t.append(("ffn_routed_norm.weight",) + tuple(norm(L)))
                t.append(("ffn_routed_up.weight",) + tuple(w(E, L, og)))
            FS = c["n_shared"] * FE
            t += [("ffn_gate_shexp.weight",) + tuple(w(FS, E)), ("ffn_up_shexp.weight",) + tuple(w(FS, E)),
                  ("ffn_down_shexp.weight",) + tuple(w(E, FS, og))]
        out += [(p + name, shape, init) for name, shape, init in t]
    if k3:
        out.append(("output_res_score.weight", [E], ["normal", c["res_gain"] / math.sqrt(E)]))
    out.append(("output_norm.weight", [E], ["normal_mean", 1.0, 0.1]))
    out.append(("output.weight", [N_VOCAB, E], ["normal", 2 / math.sqrt(E)]))
    return [{"name": n, "numpy_shape": s, "init": i} for n, s, i in out]


def kv_for(c, name, template_kv):
    """The template's metadata, in its order, with this model's widths."""
    a = c["arch"]
    k3 = a == "kimi-k3"
    nope, rope, vh, kvl = c["qk_nope"], c["qk_rope"], c["v_head"], c["kv_lora"]
    per_layer = [1 if (il + 1) in c["full_attn_layers"] else 0 for il in range(c["n_layer"])]
    values = {
        "general.name": name,
        f"{a}.block_count": c["n_layer"],
        f"{a}.embedding_length": c["n_embd"],
        f"{a}.feed_forward_length": c["n_ff"],
        f"{a}.attention.head_count": c["n_head"],
        f"{a}.attention.head_count_kv": per_layer,
        f"{a}.expert_count": c["n_expert"],
        f"{a}.expert_used_count": c["n_expert_used"],
        f"{a}.ssm.conv_kernel": c["conv"],
        f"{a}.kda.head_dim": c["kda_head_dim"],
        f"{a}.attention.kv_lora_rank": kvl,
        f"{a}.rope.dimension_count": rope,
        f"{a}.attention.key_length": kvl + rope,
        f"{a}.attention.value_length": kvl,
        f"{a}.attention.key_length_mla": nope + rope,
        f"{a}.attention.value_length_mla": vh,
        f"{a}.expert_feed_forward_length": c["n_ff_exp"],
        f"{a}.expert_shared_count": c["n_shared"],
        f"{a}.leading_dense_block_count": c["dense_lead"],
        f"{a}.expert_weights_scale": c["routed_scale"],
    }
    if k3:
        values.update({
            f"{a}.attention.q_lora_rank": c["q_lora"],
            f"{a}.expert_latent_length": c["latent"],
            f"{a}.attn_res.block_size": c["attn_res_block"],
            f"{a}.kda.gate_lower_bound": c["gate_lower_bound"],
            f"{a}.activation.situ_beta": c["situ_beta"],
            f"{a}.activation.situ_linear_beta": c["situ_linear_beta"],
            f"{a}.expert_weights_norm": c["weights_norm"],
        })
    kv = {}
    for key, ent in template_kv.items():
        ent = dict(ent)
        if key in values:
            v = values[key]
            if ent["type"] == "ARRAY":
                ent["value"] = {"array_of": ent["value"]["array_of"], "length": len(v), "head": v}
            else:
                ent["value"] = v
        kv[key] = ent
    missing = set(values) - set(template_kv)
    # kl-tiny-a has no value_length key: kimi-linear derives it; the rest must exist.
    missing.discard(f"{a}.attention.value_length")
    if missing:
        raise SystemExit(f"template metadata lacks {sorted(missing)}")
    return kv


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(PRESETS), default="k3-wide")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a width of the preset (json value), e.g. n_expert=32")
    ap.add_argument("--golden", default=mbm.GOLDEN_DEFAULT, help="golden llama.cpp dir (default: %(default)s)")
    ap.add_argument("-o", "--output", help="default /work/bench-models/<model>-F32.gguf")
    ap.add_argument("--save-recipe", metavar="JSON", help="also write the model json (config + tensors)")
    ap.add_argument("--tokenizer-from",
                    help="GGUF holding the full tokenizer arrays (default by vocab_layout: "
                         "<golden>/models/k3-tiny-a-F32.gguf or kl-tiny-a-F32.gguf; a quantized tiny "
                         "model holds the same arrays)")
    args = ap.parse_args()

    c = dict(PRESETS[args.model])
    for s in args.set:
        k, _, v = s.partition("=")
        if k not in c:
            raise SystemExit(f"--set {k}: no such width in {args.model} (known: {', '.join(sorted(c))})")
        c[k] = json.loads(v)
    sub, tname = KV_TEMPLATE[c["arch"]]
    with open(os.path.join(args.golden, sub, f"{tname}-F32.gguf-kv.json")) as f:
        template_kv = json.load(f)
    kv_json = kv_for(c, args.model, template_kv)
    model_json = {"config": c, "tensors": tensors_for(c)}
    if args.save_recipe:
        with open(args.save_recipe, "w") as f:
            json.dump(model_json, f, indent=1)

    tok_path = args.tokenizer_from or os.path.join(
        args.golden, "models", mbm.TOKENIZER_REF_BY_LAYOUT[c["vocab_layout"]])
    if not os.path.exists(tok_path):
        raise SystemExit(f"{tok_path}: the tokenizer source is missing")
    out = args.output or f"/work/bench-models/{args.model}-F32.gguf"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    n = sum(math.prod(t["numpy_shape"]) for t in model_json["tensors"])
    print(f"{args.model}: {len(model_json['tensors'])} tensors, {n / 1e9:.2f} G params, "
          f"{4 * n / 2**30:.1f} GiB F32 -> {out}", file=sys.stderr)
    digest, size, n_params = mbm.generate(model_json, kv_json, mbm.GGUFFile(tok_path), out)
    print(f"{digest}  {out}")
    print(f"bytes {size}, params {n_params}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
