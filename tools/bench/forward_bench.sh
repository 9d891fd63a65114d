#!/usr/bin/env bash
# Forward-pass speed: kinfer bench, and llama-bench on the same GGUF with the same threads when
# LLAMA_BENCH points at a llama-bench binary. The two run alternately (-r repetitions each, one
# round after the other) so that a busy machine slows both alike; the last table gives the ratio.
#
#   tools/bench/forward_bench.sh [MODEL.gguf] [THREADS]        (env: P=512 N=128 R=3 ROUNDS=2 LLAMA_BENCH=...)
#
# KINFER_BASE=/path/to/older/kinfer adds a third contestant (before / after a change, e.g. a build
# of an earlier commit), run in the same rounds, with its own ratio column.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:-/work/bench-models/k3-bench-Q4_K_M.gguf}"
threads="${2:-$(nproc)}"
P="${P:-512}"; N="${N:-128}"; R="${R:-3}"; ROUNDS="${ROUNDS:-2}"
source "$here/tools/bench/common.sh"
need_kinfer
need_file "$model"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "model $model, $threads threads, pp$P / tg$N, $R repetitions x $ROUNDS rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# The machine's memory copy bandwidth, the yardstick for decode's GB/s (kinfer bench prints those on stderr).
if c++ -O2 -pthread "$here/tools/bench/membw.cpp" -o "$out/membw" 2>/dev/null; then "$out/membw" "$threads"; fi
for round in $(seq "$ROUNDS"); do
  "$kinfer" bench -m "$model" -t "$threads" -p "$P" -n "$N" -r "$R" 2> >(grep "GB/s" >&2) | tee -a "$out/kinfer.md"
  if [ -n "${KINFER_BASE:-}" ]; then
    "$KINFER_BASE" bench -m "$model" -t "$threads" -p "$P" -n "$N" -r "$R" 2>/dev/null | tee -a "$out/base.md"
  fi
  if [ -n "${LLAMA_BENCH:-}" ]; then
    "$LLAMA_BENCH" -m "$model" -t "$threads" -p "$P" -n "$N" -r "$R" 2>/dev/null | tee -a "$out/llama.md"
  fi
done

# Mean t/s per test over the rounds, and kinfer / llama.cpp.
summ() { awk -F'|' '/^\| [a-z]/ && $7 ~ /[pt][pg][0-9]/ { gsub(/ /,"",$7); split($8,a," "); s[$7]+=a[1]; c[$7]++ }
                     END { for (k in s) printf "%s %.2f\n", k, s[k]/c[k] }' "$1" | sort; }
echo
echo "| test | kinfer t/s | llama.cpp t/s | ratio |${KINFER_BASE:+ base t/s | kinfer / base | base / llama.cpp |}"
echo "| ---: | ---: | ---: | ---: |${KINFER_BASE:+ ---: | ---: | ---: |}"
summ "$out/kinfer.md" > "$out/k.txt"
if [ -s "$out/llama.md" ]; then summ "$out/llama.md" > "$out/l.txt"; else : > "$out/l.txt"; fi
if [ -s "$out/base.md" ]; then summ "$out/base.md" > "$out/b.txt"; else : > "$out/b.txt"; fi
ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; else echo "-"; fi; }
while read -r test k; do
  l="$(awk -v t="$test" '$1==t {print $2}' "$out/l.txt")"
  line="| $test | $k | ${l:--} | $(ratio "$k" "$l") |"
  if [ -n "${KINFER_BASE:-}" ]; then
    b="$(awk -v t="$test" '$1==t {print $2}' "$out/b.txt")"
    line="$line ${b:--} | $(ratio "$k" "$b") | $(ratio "$b" "$l") |"
  fi
  echo "$line"
done < "$out/k.txt"
