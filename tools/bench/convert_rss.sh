#!/usr/bin/env bash
# Peak memory of `kinfer convert` on a synthetic Kimi Linear checkpoint of >= 2 GB (BF16
# experts, 3 shards): generates the checkpoint (python3 stdlib only), converts it to bf16 under
# /usr/bin/time -v and checks that the peak RSS stays below 25 % of the checkpoint size.
# The converter streams one expert at a time and drops consumed mmap pages, so the peak should
# be a small constant, far from the size of the model. Not part of the test suite (it writes
# ~5 GB to disk and takes a minute).
#
#   tools/bench/convert_rss.sh [WORKDIR]      (default: a temp dir, removed afterwards)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
KINFER=${KINFER:-$ROOT/build/bin/kinfer}
GOLDEN=${KINFER_GOLDEN:-$ROOT/../shared/golden/hf/hf-kl-tiny}
WORK=${1:-$(mktemp -d)}
[ -x "$KINFER" ] || { echo "no kinfer binary at $KINFER (set KINFER=...)"; exit 1; }
[ -f "$GOLDEN/tiktoken.model" ] || { echo "needs $GOLDEN (tiktoken.model, tokenizer_config.json)"; exit 1; }
CKPT="$WORK/kl-synthetic-2g"
mkdir -p "$CKPT"
cp "$GOLDEN/tiktoken.model" "$GOLDEN/tokenizer_config.json" "$CKPT/"

python3 - "$CKPT" <<'PY'
import json, os, random, struct, sys
out = sys.argv[1]
H, V, L, E, MFF, FF = 1024, 4352, 7, 64, 1024, 4096   # 6 MoE layers x 64 experts x 6 MiB = 2.4 GB
KH, KD, W, NH, NOPE, ROPE, VD, KVL = 8, 128, 4, 8, 128, 64, 128, 512
cfg = {
    "architectures": ["KimiLinearForCausalLM"], "model_type": "kimi_linear", "bos_token_id": 4096,
    "eos_token_id": 4098, "pad_token_id": 4351, "first_k_dense_replace": 1, "head_dim": H // NH,
    "hidden_act": "silu", "hidden_size": H, "intermediate_size": FF, "kv_lora_rank": KVL,
    "linear_attn_config": {"full_attn_layers": [4, 7], "head_dim": KD, "kda_layers": [1, 2, 3, 5, 6],
                           "num_heads": KH, "short_conv_kernel_size": W},
    "mla_use_nope": True, "model_max_length": 1048576, "moe_intermediate_size": MFF, "moe_renormalize": True,
    "moe_router_activation_func": "sigmoid", "num_attention_heads": NH, "num_expert_group": 1,
    "num_experts": E, "num_experts_per_token": 8, "num_hidden_layers": L, "num_key_value_heads": NH,
    "num_shared_experts": 1, "q_lora_rank": None, "qk_nope_head_dim": NOPE, "qk_rope_head_dim": ROPE,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "routed_scaling_factor": 2.446, "tie_word_embeddings": False,
    "topk_group": 1, "v_head_dim": VD, "vocab_size": V,
}
json.dump(cfg, open(os.path.join(out, "config.json"), "w"), indent=2)
json.dump({"bos_token_id": 4096, "eos_token_id": 4098}, open(os.path.join(out, "generation_config.json"), "w"))

T = []   # (name, dtype, shape)
def w(n, *s, dt="BF16"): T.append((n, dt, list(s)))
w("model.embed_tokens.weight", V, H)
for l in range(L):
    p = f"model.layers.{l}."
    w(p + "input_layernorm.weight", H); w(p + "post_attention_layernorm.weight", H)
    a = p + "self_attn."
    if (l + 1) in cfg["linear_attn_config"]["full_attn_layers"]:
        w(a + "q_proj.weight", NH * (NOPE + ROPE), H); w(a + "kv_a_proj_with_mqa.weight", KVL + ROPE, H)
        w(a + "kv_a_layernorm.weight", KVL); w(a + "kv_b_proj.weight", NH * (NOPE + VD), KVL)
        w(a + "o_proj.weight", H, NH * VD)
    else:
        DI = KH * KD
        for x in "qkv":
            w(a + f"{x}_proj.weight", DI, H); w(a + f"{x}_conv1d.weight", DI, 1, W)
        w(a + "f_a_proj.weight", KD, H); w(a + "f_b_proj.weight", DI, KD); w(a + "b_proj.weight", KH, H)
        w(a + "A_log", 1, 1, KH, 1, dt="F32"); w(a + "dt_bias", DI, dt="F32")
        w(a + "g_a_proj.weight", KD, H); w(a + "g_b_proj.weight", DI, KD); w(a + "o_norm.weight", KD)
        w(a + "o_proj.weight", H, DI)
    if l == 0:
        w(p + "mlp.gate_proj.weight", FF, H); w(p + "mlp.up_proj.weight", FF, H); w(p + "mlp.down_proj.weight", H, FF)
    else:
        m = p + "block_sparse_moe."
        w(m + "gate.weight", E, H); w(m + "gate.e_score_correction_bias", E, dt="F32")
        for e in range(E):
            w(m + f"experts.{e}.w1.weight", MFF, H); w(m + f"experts.{e}.w2.weight", H, MFF)
            w(m + f"experts.{e}.w3.weight", MFF, H)
        w(m + "shared_experts.gate_proj.weight", MFF, H); w(m + "shared_experts.up_proj.weight", MFF, H)
        w(m + "shared_experts.down_proj.weight", H, MFF)
w("model.norm.weight", H)
w("lm_head.weight", V, H)

# One random MiB of small bf16 values, tiled; F32 tensors get small positive floats.
rnd = random.Random(1)
bf = b"".join(struct.pack("<f", rnd.gauss(0, 0.02))[2:] for _ in range(1 << 19))
f32 = b"".join(struct.pack("<f", 0.5 + rnd.random()) for _ in range(1 << 18))
size = lambda dt, s: (4 if dt == "F32" else 2) * eval("*".join(map(str, s)) or "1")
shards, cur, cur_bytes = [], [], 0
for t in T:
    cur.append(t); cur_bytes += size(t[1], t[2])
    if cur_bytes > 900 << 20: shards.append(cur); cur, cur_bytes = [], 0
if cur: shards.append(cur)
weight_map, total = {}, 0
for i, sh in enumerate(shards):
    fn = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    hdr, off = {"__metadata__": {"format": "pt"}}, 0
    for n, dt, s in sh:
        hdr[n] = {"dtype": dt, "shape": s, "data_offsets": [off, off + size(dt, s)]}; off += size(dt, s)
        weight_map[n] = fn
    total += off
    h = json.dumps(hdr, separators=(",", ":")).encode(); h += b" " * (-len(h) % 8)
    with open(os.path.join(out, fn), "wb") as f:
        f.write(struct.pack("<Q", len(h))); f.write(h)
        for n, dt, s in sh:
            left, src = size(dt, s), (f32 if dt == "F32" else bf)
            while left: k = min(left, len(src)); f.write(src[:k]); left -= k
json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
          open(os.path.join(out, "model.safetensors.index.json"), "w"), indent=2)
print(f"synthetic checkpoint: {len(T)} tensors, {total / 1e9:.2f} GB in {len(shards)} shards")
PY

CK_BYTES=$(du -cb "$CKPT"/*.safetensors | tail -1 | cut -f1)
sync
/usr/bin/time -v "$KINFER" convert "$CKPT" -o "$WORK/out-bf16.gguf" --outtype bf16 --no-progress 2> "$WORK/time.txt"
RSS_KB=$(grep "Maximum resident set size" "$WORK/time.txt" | awk '{print $NF}')
WALL=$(grep "Elapsed (wall clock)" "$WORK/time.txt" | awk '{print $NF}')
PCT=$(python3 -c "print(f'{$RSS_KB * 1024 * 100 / $CK_BYTES:.2f}')")
echo "checkpoint $(python3 -c "print(f'{$CK_BYTES/1e9:.2f}')") GB, peak RSS $((RSS_KB / 1024)) MiB = $PCT % of it, wall $WALL"
[ -z "${1:-}" ] && rm -rf "$WORK"
python3 -c "import sys; sys.exit(0 if $PCT < 25 else 1)" && echo "PASS (< 25 %)" || { echo "FAIL (>= 25 %)"; exit 1; }
