#!/usr/bin/env bash
# Long-context prefill, kinfer next to llama.cpp, in one run: for each length N, kinfer reads the
# first N tokens of real text (a corpus from /work/shared/corpora, tokenized with the model's own
# vocabulary) with `kinfer run -n 0`, and llama-bench runs `-p N -n 0 -fa 1` on the same GGUF with
# the same threads. Prints prompt tokens/s of both, the ratio, and the peak RSS of both (GNU time),
# with the RSS kinfer's plan predicts (weights + latent cache at N tokens + KDA state).
#
#   tools/bench/long_context.sh [MODEL.gguf] [THREADS] [LLAMA_BENCH]
#   env: LENGTHS="4096 16384 65536 262144"  CTK=f16  CORPUS=/work/shared/corpora/kjv_bible.txt
#        LLAMA_BENCH=path/to/llama-bench (or the third argument; without one, kinfer alone)
#
# The corpus is repeated as often as the longest length needs. llama-bench takes no text (it
# times random tokens); a prefill's cost does not depend on which tokens they are.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:-$here/../shared/golden/llama.cpp/models/k3-tiny-a-F32.gguf}"
threads="${2:-$(nproc)}"
llama_bench="${3:-${LLAMA_BENCH:-}}"
LENGTHS="${LENGTHS:-4096 16384 65536 262144}"
CTK="${CTK:-f16}"
CORPUS="${CORPUS:-/work/shared/corpora/kjv_bible.txt}"
source "$here/tools/bench/common.sh"
need_kinfer
need_file "$model"
need_file "$CORPUS"
[ -x /usr/bin/time ] || { echo "/usr/bin/time (GNU time) is needed for the peak RSS" >&2; exit 1; }
if [ -n "$llama_bench" ] && [ ! -x "$llama_bench" ]; then echo "llama-bench not found at $llama_bench" >&2; exit 1; fi

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
max=0
for n in $LENGTHS; do [ "$n" -gt "$max" ] && max="$n"; done

# Token ids of the corpus, repeated until there are enough for the longest length.
"$kinfer" tokenize -m "$model" -f "$CORPUS" --ids | tr -d '[],' | tr -s ' \n' '\n' | grep -v '^$' > "$out/corpus.ids"
have="$(wc -l < "$out/corpus.ids")"
[ "$have" -gt 0 ] || { echo "no tokens from $CORPUS" >&2; exit 1; }
: > "$out/all.ids"
while [ "$(wc -l < "$out/all.ids")" -lt "$max" ]; do cat "$out/corpus.ids" >> "$out/all.ids"; done

echo "model $model, $threads threads, -ctk $CTK, text $(basename "$CORPUS") ($have tokens); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| prompt | kinfer t/s | llama.cpp t/s | ratio | kinfer peak RSS | planned | llama.cpp peak RSS |"
echo "| -----: | ---------: | ------------: | ----: | --------------: | ------: | -----------------: |"
mib() { awk -v k="$1" 'BEGIN { printf "%.1f MiB", k / 1024 }'; }
for n in $LENGTHS; do
  head -n "$n" "$out/all.ids" | tr '\n' ' ' > "$out/p.ids"
  /usr/bin/time -f "%M" -o "$out/k.rss" "$kinfer" run -m "$model" --prompt-ids "$out/p.ids" -n 0 -c "$((n + 16))" \
    -t "$threads" -ctk "$CTK" --json > "$out/k.json" 2> "$out/k.err" || { cat "$out/k.err" >&2; exit 1; }
  k_tps="$(grep -o '"prompt_tps":[0-9.e+-]*' "$out/k.json" | cut -d: -f2)"
  k_rss="$(tail -n1 "$out/k.rss")"
  plan="$("$kinfer" info "$model" --plan -c "$n" -ctk "$CTK" --json 2>/dev/null | grep -o '"planned_rss_bytes": *[0-9]*' | grep -o '[0-9]*$' || true)"
  plan_s="-"; [ -n "$plan" ] && plan_s="$(mib "$((plan / 1024))")"
  l_tps="-"; l_rss_s="-"; ratio="-"
  if [ -n "$llama_bench" ]; then
    /usr/bin/time -f "%M" -o "$out/l.rss" "$llama_bench" -m "$model" -t "$threads" -p "$n" -n 0 -fa 1 -r 1 -ctk "$CTK" \
      -o csv > "$out/l.csv" 2> "$out/l.err" || { cat "$out/l.err" >&2; exit 1; }
    # llama-bench's csv: the avg_ts column of the one test row.
    l_tps="$(awk -F, 'NR==1 { for (i = 1; i <= NF; i++) if ($i ~ /avg_ts/) c = i } NR==2 { gsub(/"/, "", $c); printf "%.1f", $c }' "$out/l.csv")"
    l_rss_s="$(mib "$(tail -n1 "$out/l.rss")")"
    ratio="$(awk -v a="$k_tps" -v b="$l_tps" 'BEGIN { printf "%.2fx", a / b }')"
  fi
  printf "| %6d | %10.1f | %13s | %5s | %15s | %7s | %18s |\n" "$n" "$k_tps" "$l_tps" "$ratio" "$(mib "$k_rss")" "$plan_s" "$l_rss_s"
done
