#!/usr/bin/env bash
# After tools/train/train.sh: turn the trained checkpoint into the shipped demo model and measure
# what its model card reports.
#
#   tools/train/ship_demo.sh [OUT_DIR]        (default OUT_DIR = build-train, as train.sh)
#
# Writes models/kinfer-demo.gguf (Q8_0, via kinfer convert + kinfer quantize), the test sample
# tests/data/demo/heldout-head.txt with its reference perplexity (tests/data/demo/reference.json),
# and OUT/ship/: perplexities (kinfer F32 / Q8_0 and the PyTorch reference, same text and windows),
# the unigram baseline, the routing profile and a routing trace of the held-out text (for
# tools/bench/expert_store_bench.sh TRACE=...), and greedy / sampled generations.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/build-train}"
py="${PY:-/usr/bin/python3}"
kinfer="${KINFER:-$root/build/bin/kinfer}"
THREADS="${THREADS:-2}"
CTX="${CTX:-512}"
run="$out/run"; data="$out/data"; ship="$out/ship"
mkdir -p "$ship" "$root/models" "$root/tests/data/demo"
ob=/usr/lib/x86_64-linux-gnu/openblas-pthread
[ -f "$ob/libblas.so.3" ] && export LD_LIBRARY_PATH="$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== GGUF: F32 and the shipped Q8_0"
"$kinfer" convert "$run/hf" -o "$ship/model-f32.gguf" --outtype f32 2>/dev/null
"$kinfer" quantize "$ship/model-f32.gguf" "$ship/kinfer-demo.gguf" Q8_0 "$THREADS" >"$ship/quantize.log" 2>&1
cp "$ship/kinfer-demo.gguf" "$root/models/kinfer-demo.gguf.tmp" && mv "$root/models/kinfer-demo.gguf.tmp" "$root/models/kinfer-demo.gguf"
ls -l "$root/models/kinfer-demo.gguf"

echo "== held-out perplexity, -c $CTX, all windows (kinfer F32, kinfer Q8_0, PyTorch reference)"
"$kinfer" perplexity -m "$ship/model-f32.gguf" -f "$data/heldout.txt" --no-escape -c "$CTX" -t "$THREADS" --json 2>"$ship/ppl-f32.log" | sed -n '/^{/,$p' >"$ship/ppl-f32.json"
"$kinfer" perplexity -m "$ship/kinfer-demo.gguf" -f "$data/heldout.txt" --no-escape -c "$CTX" -t "$THREADS" --json 2>"$ship/ppl-q8.log" | sed -n '/^{/,$p' >"$ship/ppl-q8.json"
"$py" "$here/eval_ppl.py" --hf "$run/hf" --text "$data/heldout.txt" -c "$CTX" --threads "$THREADS" --json "$ship/ppl-ref.json" | tail -1

echo "== test sample: the first 64 KB of the held-out text, 4 windows of 256"
"$py" - "$data/heldout.txt" "$root/tests/data/demo/heldout-head.txt" <<'PY'
import sys
t = open(sys.argv[1], encoding="utf-8").read()
cut = t.rfind("\n", 0, 65536) + 1
open(sys.argv[2], "w", encoding="utf-8").write(t[:cut])
PY
"$py" "$here/eval_ppl.py" --hf "$run/hf" --text "$root/tests/data/demo/heldout-head.txt" -c 256 --max-chunks 4 \
    --threads "$THREADS" --json "$root/tests/data/demo/reference.json" | tail -1

echo "== unigram baseline (training-token frequencies, add-one) on the same held-out tokens"
"$py" - "$data" "$ship/unigram.json" <<'PY'
import json, math, sys, numpy as np
d = sys.argv[1]
tr = np.load(f"{d}/train.ids.npy").astype(np.int64); ho = np.load(f"{d}/heldout.ids.npy").astype(np.int64)
V = int(max(tr.max(), ho.max())) + 1
p = (np.bincount(tr, minlength=V) + 1.0) / (len(tr) + V)
ppl = math.exp(-np.log(p[ho]).mean())
json.dump({"unigram_ppl": ppl, "heldout_tokens": int(len(ho))}, open(sys.argv[2], "w"), indent=2)
print(f"unigram PPL {ppl:.2f} over {len(ho)} held-out tokens")
PY

echo "== routing: profile and trace over the first 4096 held-out tokens"
"$kinfer" tokenize -m "$ship/kinfer-demo.gguf" -f "$data/heldout.txt" --ids --no-bos >"$ship/heldout.ids"
tr -d '[],' <"$ship/heldout.ids" | tr ' ' '\n' | grep -v '^$' | awk 'NR <= 4096' >"$ship/heldout-4096.ids"
rm -f "$ship/profile.txt"
"$kinfer" eval -m "$ship/kinfer-demo.gguf" --tokens "$ship/heldout-4096.ids" -t "$THREADS" -b 512 \
    --expert-profile "$ship/profile.txt" --routing-record "$ship/routing-trace.txt" >/dev/null
"$kinfer" experts "$ship/profile.txt" --top 8 | tee "$ship/experts.txt"

echo "== generations"
# The prompt opens Genesis, the largest part of the training text.
"$kinfer" run -m "$root/models/kinfer-demo.gguf" -p "In the beginning God" -n 64 --temp 0 --repeat-penalty 1.15 -t "$THREADS" >"$ship/greedy.txt" 2>/dev/null
"$kinfer" run -m "$root/models/kinfer-demo.gguf" -p "In the beginning God" -n 96 --seed 7 -t "$THREADS" >"$ship/sampled.txt" 2>/dev/null
cat "$ship/greedy.txt"; echo; echo ---; cat "$ship/sampled.txt"; echo
"$py" "$here/model_card.py" "$out"
echo "done: figures in $ship, model card models/README.md"
