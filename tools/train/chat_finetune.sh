#!/usr/bin/env bash
# Teach the shipped demo model to chat: dialogues from the corpora (chat_data.py), a bounded
# fine-tune of the current models/kinfer-demo.gguf (finetune_chat.py), then back to a Q8_0 GGUF
# and the figures the model card reports (plain-text perplexity before / after, samples).
#
#   KINFER=build/bin/kinfer tools/train/chat_finetune.sh [OUT_DIR]     (default OUT_DIR = build-chat)
#   then: cp OUT_DIR/kinfer-demo.gguf models/   (after looking at OUT_DIR/samples.txt)
#
# Environment: STEPS (400), BUDGET_MIN (45), THREADS (2), LR (1e-3), PLAIN_ROWS (2), CHAT_ROWS (6),
# SEQ (256), SEED (1234: the batches; a round that continues the previous one needs another),
# PACK (1: several dialogues per row), SWEEP (1: dialogues drawn in shuffled epochs),
# DATA_ARGS (extra chat_data.py options, e.g. "--devil-all --devil-copies 8"), HELDOUT_N (160 held-out
# dialogues scored), NICE (10), PY, KINFER,
# START (the GGUF to start from, and the "before" of the perplexity figures; a later round starts
# from the shipped Q8_0), START_F32 (the same weights unquantized, e.g. the previous round's
# OUT/model-f32.gguf, to train from instead of the dequantized START).
# Re-running with the same OUT_DIR skips the fine-tune when OUT/run/finetune.json exists and the
# "before" perplexity when OUT/ppl-start.json does.
# Shipping a round: cp OUT_DIR/kinfer-demo.gguf models/ and
# OUT_DIR/reference.json tests/data/demo/, then tools/train/chat_card.py ROUND_DIRS for the card.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${1:-$root/build-chat}"
py="${PY:-/usr/bin/python3}"
kinfer="${KINFER:-$root/build/bin/kinfer}"
start="${START:-$root/models/kinfer-demo.gguf}"
THREADS="${THREADS:-2}"
corp="$root/../shared/corpora"
export OMP_NUM_THREADS="$THREADS"
ob=/usr/lib/x86_64-linux-gnu/openblas-pthread
if [ -f "$ob/libblas.so.3" ]; then
    export LD_LIBRARY_PATH="$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OPENBLAS_NUM_THREADS="$THREADS"
else
    # Debian's torch then calls the reference BLAS: ~5 GFLOPS, a step 8x slower (rounds 3 and 4 ran so)
    echo "chat_finetune: warning: $ob/libblas.so.3 not found; apt-get install libopenblas0-pthread (8x faster)" >&2
fi
mkdir -p "$out"
echo "== 1/5 the starting model as F32"
# START_F32: the starting weights unquantized (the previous round's OUT/model-f32.gguf); START is
# still the model whose perplexity is reported as "before" (the shipped Q8_0).
[ -f "$out/start-f32.gguf" ] || [ -z "${START_F32:-}" ] || cp "$START_F32" "$out/start-f32.gguf"
[ -f "$out/start-f32.gguf" ] || "$kinfer" quantize "$start" "$out/start-f32.gguf" F32 --allow-requantize "$THREADS" >"$out/dequant.log" 2>&1
echo "== 2/5 dialogues"
"$py" "$here/chat_data.py" --corpora "$corp" --out "$out/data" ${DATA_ARGS:-}
echo "== 3/5 fine-tune (${STEPS:-400} steps at most, ${BUDGET_MIN:-45} min)"
[ -f "$out/run/finetune.json" ] || nice -n "${NICE:-10}" "$py" "$here/finetune_chat.py" --gguf "$out/start-f32.gguf" --chat "$out/data/chat.jsonl" --corpora "$corp" \
    --kinfer "$kinfer" --out "$out/run" --steps "${STEPS:-400}" --time-budget-min "${BUDGET_MIN:-45}" --threads "$THREADS" \
    --lr "${LR:-1e-3}" --seed "${SEED:-1234}" --plain-rows "${PLAIN_ROWS:-2}" --chat-rows "${CHAT_ROWS:-6}" --seq "${SEQ:-256}" --heldout-n "${HELDOUT_N:-160}" ${PACK:+--pack} ${SWEEP:+--sweep}
echo "== 4/5 GGUF (F32, then the shipped Q8_0)"
"$kinfer" convert "$out/run/kinfer-demo" -o "$out/model-f32.gguf" --outtype f32 2>/dev/null
"$kinfer" quantize "$out/model-f32.gguf" "$out/kinfer-demo.gguf" Q8_0 "$THREADS" >"$out/quantize.log" 2>&1
ls -l "$out/kinfer-demo.gguf"
echo "== 5/5 plain-text perplexity before / after (held-out 5 %, -c 512) and samples"
"$py" -c "
import sys; sys.path.insert(0, '$here')
from prepare_data import split_text
c = '$corp'
t = ''.join(split_text(open(f'{c}/{f}', encoding='utf-8', errors='replace').read(), 0.05)[1]
            for f in ('kjv_bible.txt', 'fortunes_all.txt', 'dict-devil.txt'))
open('$out/heldout.txt', 'w', encoding='utf-8').write(t)"
for m in start:"$start" after:"$out/kinfer-demo.gguf"; do
    [ "${m%%:*}" = start ] && [ -s "$out/ppl-start.json" ] && continue
    "$kinfer" perplexity -m "${m#*:}" -f "$out/heldout.txt" --no-escape -c 512 -t "$THREADS" --json 2>/dev/null >"$out/ppl-${m%%:*}.json"
done
{
    for q in "What is a cynic?" "What does John 3:16 say?" "Hello" "What is love?"; do
        echo "> $q"
        "$kinfer" run -m "$out/kinfer-demo.gguf" --chat -p "$q" -n 200 --seed 1 -t "$THREADS" 2>/dev/null
        echo
        echo "(greedy) $("$kinfer" run -m "$out/kinfer-demo.gguf" --chat -p "$q" -n 200 --temp 0 -t "$THREADS" 2>/dev/null)"
    done
} | tee "$out/samples.txt"
echo "== the test's reference: PyTorch perplexity of the exported checkpoint on tests/data/demo/heldout-head.txt"
"$py" "$here/eval_ppl.py" --hf "$out/run/kinfer-demo" --text "$root/tests/data/demo/heldout-head.txt" -c 256 --max-chunks 4 \
    --threads "$THREADS" --json "$out/reference.json" | tail -1
echo "done: $out/kinfer-demo.gguf, figures in $out/run/finetune.json and $out/ppl-*.json"
