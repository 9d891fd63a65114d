#!/usr/bin/env python3
"""Writes models/README.md (the demo model's card) from what train.sh and ship_demo.sh measured:
OUT/run/run.json and train.log.jsonl, OUT/data/data.json, OUT/ship/*.json, experts.txt and the
generations. Every figure in the card comes from those files.

  python3 tools/train/model_card.py [OUT_DIR] [-o models/README.md]
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", ".."))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", nargs="?", default=os.path.join(root, "build-train"))
    ap.add_argument("-o", "--output", default=os.path.join(root, "models", "README.md"))
    a = ap.parse_args()
    run, data, ship = (os.path.join(a.out, d) for d in ("run", "data", "ship"))
    rj, dj = load(os.path.join(run, "run.json")), load(os.path.join(data, "data.json"))
    cfg = rj["config"]
    log = [json.loads(l) for l in open(os.path.join(run, "train.log.jsonl")) if l.strip()]
    ref, f32, q8 = (load(os.path.join(ship, f)) for f in ("ppl-ref.json", "ppl-f32.json", "ppl-q8.json"))
    uni = load(os.path.join(ship, "unigram.json"))
    experts = open(os.path.join(ship, "experts.txt")).read().strip()
    greedy = open(os.path.join(ship, "greedy.txt")).read().rstrip()
    sampled = open(os.path.join(ship, "sampled.txt")).read().rstrip()
    size = os.path.getsize(os.path.join(root, "models", "kinfer-demo.gguf"))
    train_tokens = rj["step"] * rj.get("batch", 16) * rj.get("seq", 256)
    n_train = sum(f["train_chars"] for f in dj["files"])
    n_held = sum(f["heldout_chars"] for f in dj["files"])

    def rel(a, b):
        return f"{100.0 * (a / b - 1.0):+.4f} %"

    # Loss curve: every logged point, at most ~30 rows.
    stride = max(1, len(log) // 30)
    curve = [p for i, p in enumerate(log) if i % stride == 0 or i == len(log) - 1]
    mixers = ", ".join(f"{i}" for i in cfg["mla_layers"])
    lines = []
    w = lines.append
    w("# kinfer-demo: a small trained Kimi-K3-architecture model")
    w("")
    w("`kinfer-demo.gguf` is what `kinfer run` and `kinfer chat` use when no `-m` is given. It exists so that a")
    w("new user sees kinfer produce text seconds after the build, and so the tests and benchmarks have a model")
    w("whose routing is that of a *trained* MoE. It is tiny and was trained for about an hour on two CPU")
    w("cores: expect King-James or fortune-file flavoured English, not answers.")
    w("")
    w("Rebuild it from scratch (seed 1234, same bytes up to floating-point thread scheduling):")
    w("")
    w("```sh")
    w("tools/train/train.sh build-train        # tokenizer, training (resumable), HF checkpoint")
    w("tools/train/ship_demo.sh build-train    # kinfer convert + kinfer quantize Q8_0, measurements")
    w("/usr/bin/python3 tools/train/model_card.py build-train   # this file")
    w("```")
    w("")
    w("## Data")
    w("")
    w("| file | licence | training chars | held-out chars |")
    w("|---|---|---:|---:|")
    lic = {"kjv_bible.txt": "public domain (King James Version)", "fortunes_all.txt": "fortune-mod data, freely redistributable",
           "dict-devil.txt": "public domain (Ambrose Bierce)"}
    for f in dj["files"]:
        name = os.path.basename(f["file"])
        w(f"| {name} | {lic.get(name, 'see ../shared/corpora/README.md')} | {f['train_chars']:,} | {f['heldout_chars']:,} |")
    w("")
    w(f"The last 5 % of each file (cut at a line break) is held out: {n_held:,} characters, {uni['heldout_tokens']:,} tokens;")
    w(f"training uses the other {n_train:,} characters. The model weights are derived from this text only.")
    w("")
    w("## Tokenizer")
    w("")
    w(f"Byte-level BPE with {cfg['vocab'] - 256} ranks trained on the training split (`tools/train/kimi_tokenizer.py`),")
    w("Kimi's pre-tokenizer regex, and K3's 256 special tokens after the ranks (vocab "
      f"{cfg['vocab']}). Stored in the GGUF as a `tiktoken` vocabulary, like the real K3 files.")
    w("")
    w("## Architecture")
    w("")
    w("| | |")
    w("|---|---|")
    w(f"| parameters | {rj['params'] / 1e6:.2f} M |")
    w(f"| layers | {cfg['n_layer']}, n_embd {cfg['n_embd']}, {cfg['n_head']} heads |")
    w(f"| mixers | gated MLA (NoPE, q-LoRA {cfg['q_lora_rank']}, kv-LoRA {cfg['kv_lora_rank']}, sigmoid output gate) on layers {mixers}; "
      f"KDA (head dim {cfg['kda_head_dim']}, conv {cfg['conv_kernel']}, gate lower bound {cfg['gate_lower_bound']}) on the others |")
    w(f"| FFN | layer 0 dense SiTU-GLU ({cfg['n_ff']}); latent MoE elsewhere: {cfg['n_expert']} experts, top-{cfg['n_expert_used']}, "
      f"width {cfg['n_ff_exp']} in a latent space of {cfg['latent']}, {cfg['n_shared']} shared experts |")
    w(f"| routing | sigmoid scores + a per-expert selection bias set by a Quantile-Balancing-style update (no gradient) |")
    w(f"| AttnRes | block size {cfg['attn_res_block']} |")
    w(f"| file | Q8_0 (`kinfer quantize`), {size / 2**20:.1f} MiB |")
    w("")
    w("## Training")
    w("")
    w(f"AdamW, batch {rj.get('batch', 16)} x {rj.get('seq', 256)} tokens, {rj['step']} steps "
      f"({train_tokens / 1e6:.2f} M tokens) in {rj['train_minutes']:.1f} minutes on 2 CPU cores "
      "(the machine was shared with other work, so fewer steps fitted than on an idle one).")
    w("")
    w("| step | loss | tokens/s | max / mean expert load |")
    w("|---:|---:|---:|---:|")
    for p in curve:
        w(f"| {p['step']} | {p['loss']:.3f} | {p['tok_per_s']} | {p['max_load_ratio']:.2f} |")
    w("")
    w("## Held-out perplexity (`-c 512`, second half of each window scored, llama-perplexity's method)")
    w("")
    w("| evaluator | model file | PPL | vs reference |")
    w("|---|---|---:|---:|")
    w(f"| PyTorch reference (`tools/train/eval_ppl.py`) | HF checkpoint (fp32) | {ref['ppl']:.4f} +/- {ref['err']:.4f} | |")
    w(f"| `kinfer perplexity` | F32 GGUF (`kinfer convert`) | {f32['ppl']:.4f} | {rel(f32['ppl'], ref['ppl'])} |")
    w(f"| `kinfer perplexity` | kinfer-demo.gguf (Q8_0) | {q8['ppl']:.4f} | {rel(q8['ppl'], ref['ppl'])} |")
    w(f"| unigram baseline (training-token frequencies) | | {uni['unigram_ppl']:.2f} | |")
    w("")
    w(f"{ref['n_chunk']} windows, {ref['n_scored']:,} scored tokens. `tests/cli/test_demo.cpp` checks the shipped file against the")
    w("reference on a 4-window sample (`tests/data/demo/`).")
    w("")
    w("## Routing")
    w("")
    w("`kinfer eval --expert-profile` over the first 4096 held-out tokens, summarised by `kinfer experts`:")
    w("")
    w("```")
    w(experts)
    w("```")
    w("")
    w("The selection bias (Quantile-Balancing-style, updated every step) does what it is for: over a")
    w("long stretch of text the load is close to even (a uniform router would give the top 10 % of the")
    w("experts exactly 10 %). What an expert cache can exploit is the short-range locality of a trained")
    w("router, which a random model lacks: the same run's routing trace (`--routing-record`) drives")
    w("`tools/bench/expert_store_bench.sh TRACE=...`.")
    w("")
    w("## Samples")
    w("")
    w("`kinfer run -p \"In the beginning God\" -n 64 --temp 0 --repeat-penalty 1.15` (greedy):")
    w("")
    w("```")
    w("In the beginning God" + greedy)
    w("```")
    w("")
    w("`kinfer run -p \"In the beginning God\" -n 96 --seed 7` (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05):")
    w("")
    w("```")
    w("In the beginning God" + sampled)
    w("```")
    w("")
    w("## Licence")
    w("")
    w("The weights are derived only from the public-domain / freely redistributable texts above and are")
    w("distributed with kinfer under the same terms as the rest of this repository.")
    with open(a.output, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
