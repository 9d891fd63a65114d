#!/usr/bin/env bash
# Perplexity speed side by side: kinfer perplexity and llama-perplexity on the same GGUF, text,
# window size, chunk count and threads, run alternately (ROUNDS rounds) so a busy machine slows
# both alike. Prints each run's tokens/s (kinfer: its JSON summary; llama.cpp: the tokens of its
# first pass over its "seconds per pass"; a pass holds min(n_seq, chunks) windows), wall time, the
# final PPL of both, and the ratio.
#
#   tools/bench/perplexity_bench.sh [MODEL.gguf] [TEXT] [THREADS]
#       env: C=512 CHUNKS=4 ROUNDS=2 LLAMA_PERPLEXITY=/path/to/llama-perplexity KINFER=...
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:-/work/bench-models/k3-bench-Q4_K_M.gguf}"
text="${2:-$here/../shared/corpora/gpl-3.txt}"
threads="${3:-$(nproc)}"
C="${C:-512}"; CHUNKS="${CHUNKS:-4}"; ROUNDS="${ROUNDS:-2}"
source "$here/tools/bench/common.sh"
need_kinfer
need_file "$model"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "model $model, text $(basename "$text"), -c $C --chunks $CHUNKS, $threads threads; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| run | tokens/s | wall s | PPL |"
echo "| --- | ---: | ---: | ---: |"
for round in $(seq "$ROUNDS"); do
  t0=$(date +%s.%N)
  "$kinfer" perplexity -m "$model" -f "$text" -c "$C" --chunks "$CHUNKS" -t "$threads" --json 2>/dev/null | sed -n '/^{/,$p' >"$out/k.json"
  t1=$(date +%s.%N)
  read -r ktps kppl < <(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(j['tokens_per_second'], j['ppl'])" "$out/k.json")
  printf "| kinfer %d | %.1f | %.2f | %.4f |\n" "$round" "$ktps" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "$kppl"
  echo "$ktps" >>"$out/k.tps"
  if [ -n "${LLAMA_PERPLEXITY:-}" ]; then
    t0=$(date +%s.%N)
    "$LLAMA_PERPLEXITY" -m "$model" -f "$text" -c "$C" --chunks "$CHUNKS" -t "$threads" >"$out/l.txt" 2>&1
    t1=$(date +%s.%N)
    # llama-perplexity times its first window: "N seconds per pass" (a pass = one window of C tokens).
    spp="$(sed -n 's/.* \([0-9.]*\) seconds per pass.*/\1/p' "$out/l.txt" | tail -1)"
    # One pass evaluates min(n_seq, chunks) windows together (n_seq = batch size / C).
    nseq="$(sed -n 's/.*n_seq=\([0-9]*\).*/\1/p' "$out/l.txt" | head -1)"
    ltps="$([ -n "$spp" ] && awk -v c="$C" -v s="$spp" -v q="${nseq:-1}" -v k="$CHUNKS" 'BEGIN{if (k < q) q = k; printf "%.1f", c*q/s}')"
    lppl="$(sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p' "$out/l.txt" | tail -1)"
    printf "| llama.cpp %d | %s | %.2f | %s |\n" "$round" "${ltps:--}" "$(awk -v a="$t0" -v b="$t1" 'BEGIN{print b-a}')" "${lppl:--}"
    [ -n "$ltps" ] && echo "$ltps" >>"$out/l.tps"
  fi
done
if [ -s "$out/l.tps" ]; then
  k=$(awk '{s+=$1} END {print s/NR}' "$out/k.tps"); l=$(awk '{s+=$1} END {print s/NR}' "$out/l.tps")
  echo; echo "mean tokens/s: kinfer $k, llama.cpp $l, ratio $(awk -v a="$k" -v b="$l" 'BEGIN{printf "%.2f", a/b}')"
fi
