#!/usr/bin/env bash
# One command: tokenizer -> training -> HF checkpoint -> held-out perplexity (-> GGUF if kinfer is built).
#
#   tools/train/train.sh [OUT_DIR]            # full run (default OUT_DIR=build-train, git-ignored; ~90 min on 2 cores)
#   SMOKE=1 tools/train/train.sh /tmp/smoke   # 20 steps of the tiny preset on 200 KB per corpus file
#
# Re-running the same command resumes: data preparation is skipped when done, training continues
# from OUT/run/ckpt.pt. Environment overrides: PRESET, STEPS, BUDGET_MIN, BATCH, SEQ, CTX, SEED,
# THREADS, CORPORA, KINFER (path of the kinfer binary for the GGUF step), PY (python with torch).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/build-train}"   # build*/ is git-ignored
py="${PY:-/usr/bin/python3}"
corp="$root/../shared/corpora"
CORPORA="${CORPORA:-$corp/kjv_bible.txt $corp/fortunes_all.txt $corp/dict-devil.txt}"
THREADS="${THREADS:-2}"
SEED="${SEED:-1234}"
if [ "${SMOKE:-0}" = 1 ]; then
    PRESET="${PRESET:-tiny}"; STEPS="${STEPS:-20}"; BUDGET_MIN="${BUDGET_MIN:-10}"
    BATCH="${BATCH:-4}"; SEQ="${SEQ:-64}"; CTX="${CTX:-128}"; MAXB=200000; CKPT=10; MAXCH=4
else
    PRESET="${PRESET:-small}"; STEPS="${STEPS:-2000}"; BUDGET_MIN="${BUDGET_MIN:-80}"
    BATCH="${BATCH:-16}"; SEQ="${SEQ:-256}"; CTX="${CTX:-512}"; MAXB=0; CKPT=25; MAXCH=0
fi
export OMP_NUM_THREADS="$THREADS"
# Debian's torch calls the reference BLAS through libblas.so.3 (~4 GFLOPS); with the
# libopenblas0-pthread package installed, point only this process at OpenBLAS (~7x faster matmuls)
# without changing the system-wide alternative.
ob=/usr/lib/x86_64-linux-gnu/openblas-pthread
if [ -f "$ob/libblas.so.3" ] && [ "${NO_OPENBLAS:-0}" != 1 ]; then
    export LD_LIBRARY_PATH="$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OPENBLAS_NUM_THREADS="${THREADS:-2}"
elif [ "${NO_OPENBLAS:-0}" != 1 ]; then
    echo "train.sh: warning: $ob/libblas.so.3 not found; apt-get install libopenblas0-pthread (7x faster)" >&2
fi
mkdir -p "$out"
echo "== 1/4 data + tokenizer -> $out/data"
nice -n 10 "$py" "$here/prepare_data.py" --corpora $CORPORA --out "$out/data" --max-bytes "$MAXB"
echo "== 2/4 training ($PRESET, $STEPS steps, budget $BUDGET_MIN min) -> $out/run"
nice -n 10 "$py" "$here/train_model.py" --data "$out/data" --out "$out/run" --preset "$PRESET" \
    --steps "$STEPS" --time-budget-min "$BUDGET_MIN" --batch "$BATCH" --seq "$SEQ" \
    --ckpt-every "$CKPT" --seed "$SEED" --threads "$THREADS" --warmup $(( STEPS / 20 + 1 ))
echo "== 3/4 held-out perplexity (-c $CTX, second half of each window scored)"
nice -n 10 "$py" "$here/eval_ppl.py" --hf "$out/run/hf" --ids "$out/data/heldout.ids.npy" -c "$CTX" \
    --threads "$THREADS" --max-chunks "$MAXCH" --json "$out/run/heldout_ppl.json" | tail -1
echo "== 4/4 GGUF"
kinfer="${KINFER:-$root/build/bin/kinfer}"
if [ -x "$kinfer" ]; then
    "$kinfer" convert "$out/run/hf" -o "$out/run/model-bf16.gguf" --outtype bf16 && echo "wrote $out/run/model-bf16.gguf"
else
    echo "kinfer not built ($kinfer): convert later with  kinfer convert $out/run/hf -o model.gguf"
fi
echo "done: HF checkpoint $out/run/hf, log $out/run/train.log.jsonl, perplexity $out/run/heldout_ppl.json"
