#!/usr/bin/env bash
# Forward-pass speed: kinfer bench, and llama-bench on the same GGUF with the same threads when
# LLAMA_BENCH points at a llama-bench binary. The two run alternately (-r repetitions each, one
# round after the other) so that a busy machine slows both alike; the last table gives the ratio.
#
#   tools/bench/forward_bench.sh [MODEL.gguf ...] [THREADS]   (env: P=512 N=128 R=3 ROUNDS=2 LLAMA_BENCH=...)
#
# Without a model it runs the default set from $MODELS (default /work/bench-models): k3-bench at
# Q4_K_M, then the real-width models k3-wide and kl-wide (tools/bench/make_wide_model.py) at Q4_K_M
# and MXFP4_MOE; files that are not there are listed with the command that makes them.
#
# Decode is judged against the machine's best read bandwidth (tools/bench/membw.cpp, the fastest of
# its 1 / 4 / 8-stream reads with and without prefetch, on default and on 2 MiB pages, not memcpy),
# measured right before each round's kinfer run: "of read" = the weight bytes a token reads x that
# run's tokens/s / that read rate, averaged over the rounds (the smallest and largest in brackets).
#
# KINFER_BASE=/path/to/older/kinfer adds a third contestant (before / after a change, e.g. a build
# of an earlier commit), run in the same rounds, with its own ratio column.
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
P="${P:-512}"; N="${N:-128}"; R="${R:-3}"; ROUNDS="${ROUNDS:-2}"
# One generation length: each round's decode GB/s is read from kinfer's "tgN:" line.
[[ "$N" =~ ^[0-9]+$ ]] || { echo "N=$N: one generation length (a number), e.g. N=128" >&2; exit 2; }
MODELS="${MODELS:-/work/bench-models}"
source "$here/tools/bench/common.sh"
need_kinfer

models=()
threads="$(nproc)"
for a in "$@"; do
  if [[ "$a" =~ ^[0-9]+$ ]]; then threads="$a"; else models+=("$a"); fi
done
if [ ${#models[@]} -eq 0 ]; then
  for pair in k3-bench:Q4_K_M k3-wide:Q4_K_M k3-wide:MXFP4_MOE kl-wide:Q4_K_M kl-wide:MXFP4_MOE; do
    base="${pair%:*}"; type="${pair#*:}"
    f="$MODELS/$base-$type.gguf"
    if [ -f "$f" ]; then models+=("$f"); continue; fi
    if [ "$base" = k3-bench ]; then how="tools/bench/make_bench_model.py"; else how="tools/bench/make_wide_model.py --model $base"; fi
    echo "skipping $f: not there (make it: $how && kinfer quantize $MODELS/$base-F32.gguf $f $type)" >&2
  done
  [ ${#models[@]} -gt 0 ] || { echo "no model to run" >&2; exit 1; }
fi
for m in "${models[@]}"; do need_file "$m"; done

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
echo "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $threads threads, pp$P / tg$N, $R repetitions x $ROUNDS rounds; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# The machine's read bandwidth, the yardstick for decode's GB/s (kinfer bench prints those on stderr).
# It drifts with the neighbours on a shared machine (19.6 to 41.6 GB/s in one day, and 10-15 %
# between runs a minute apart), so it is measured again right before each kinfer run, and each
# run is judged against its own: with one measurement before a model's rounds, a Xeon VM's
# k3-wide MXFP4_MOE decode came out at 0.78 of read in one invocation and 0.89-0.92 in three
# kinfer / membw pairs run right after it.
best_read=""
c++ -O2 -pthread "$here/tools/bench/membw.cpp" -o "$out/membw" 2>/dev/null || echo "membw did not build: no read bandwidth, no \"of read\"" >&2
measure_read() {
  [ -x "$out/membw" ] || return 0
  "$out/membw" "$threads" | tee "$out/membw.txt"
  best_read="$(grep -o '[0-9.]* GB/s from' "$out/membw.txt" | awk '{ if ($1 > b) b = $1 } END { print b }' || true)"
}

# Mean t/s per test over the rounds.
summ() { awk -F'|' '/^\| [a-z]/ && $7 ~ /[pt][pg][0-9]/ { gsub(/ /,"",$7); split($8,a," "); s[$7]+=a[1]; c[$7]++ }
                     END { for (k in s) printf "%s %.2f\n", k, s[k]/c[k] }' "$1" | sort; }
ratio() { if [ -n "$1" ] && [ -n "$2" ]; then awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; else echo "-"; fi; }

for model in "${models[@]}"; do
  name="$(basename "$model" .gguf)"
  d="$out/$name"; mkdir -p "$d"
  echo; echo "## $name"
  for round in $(seq "$ROUNDS"); do
    measure_read
    [ -n "$best_read" ] && echo "best read bandwidth right before this round (membw, $threads threads): $best_read GB/s"
    "$kinfer" bench -m "$model" -t "$threads" -p "$P" -n "$N" -r "$R" 2> "$d/stderr.txt" | tee -a "$d/kinfer.md"
    grep "GB/s" "$d/stderr.txt" | tee -a "$d/gbs.txt" >&2 || true
    # This round's decode GB/s (kinfer's "tgN: ... -> X GB/s" line) against this round's read.
    round_gbs="$(grep -o "^tg$N: .* -> [0-9.]* GB/s" "$d/stderr.txt" | tail -1 | sed 's/.* -> \([0-9.]*\) GB\/s/\1/' || true)"
    [ -n "$best_read" ] && [ -n "$round_gbs" ] && echo "$best_read $round_gbs" >> "$d/pairs.txt"
    if [ -n "${KINFER_BASE:-}" ]; then
      "$KINFER_BASE" bench -m "$model" -t "$threads" -p "$P" -n "$N" -r "$R" 2>/dev/null | tee -a "$d/base.md"
    fi
    if [ -n "${LLAMA_BENCH:-}" ]; then
      "$LLAMA_BENCH" -m "$model" -t "$threads" -p "$P" -n "$N" -r "$R" 2>/dev/null | tee -a "$d/llama.md"
    fi
  done
  mb="$(grep -o '[0-9.]* MB of weights per token' "$d/gbs.txt" 2>/dev/null | head -1 | cut -d' ' -f1 || true)"
  summ "$d/kinfer.md" > "$d/k.txt"
  if [ -s "$d/llama.md" ]; then summ "$d/llama.md" > "$d/l.txt"; else : > "$d/l.txt"; fi
  if [ -s "$d/base.md" ]; then summ "$d/base.md" > "$d/b.txt"; else : > "$d/b.txt"; fi
  {
    echo
    echo "| model | test | kinfer t/s | llama.cpp t/s | ratio | decode GB/s | membw read GB/s | of read |${KINFER_BASE:+ base t/s | kinfer / base |}"
    echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |${KINFER_BASE:+ ---: | ---: |}"
    while read -r test k; do
      l="$(awk -v t="$test" '$1==t {print $2}' "$d/l.txt")"
      gbs="-"; frac="-"
      rd="-"
      if [[ "$test" == tg* ]] && [ -n "$mb" ]; then
        gbs="$(awk -v m="$mb" -v t="$k" 'BEGIN{printf "%.1f", m * t / 1000}')"
        if [ -s "$d/pairs.txt" ]; then
          rd="$(awk '{ s += $1 } END { printf "%.1f", s / NR }' "$d/pairs.txt")"
          frac="$(awk '{ f = $2 / $1; s += f; if (NR == 1 || f < lo) lo = f; if (f > hi) hi = f }
                       END { printf "%.2f (%.2f-%.2f)", s / NR, lo, hi }' "$d/pairs.txt")"
        fi
      fi
      line="| $name | $test | $k | ${l:--} | $(ratio "$k" "$l") | $gbs | $rd | $frac |"
      if [ -n "${KINFER_BASE:-}" ]; then
        b="$(awk -v t="$test" '$1==t {print $2}' "$d/b.txt")"
        line="$line ${b:--} | $(ratio "$k" "$b") |"
      fi
      echo "$line"
    done < "$d/k.txt"
  } >> "$out/summary.md"
done
echo
echo "(\"of read\": each round's decode GB/s over the best membw read measured right before it, the mean over the rounds and, in brackets, the lowest and highest; \"membw read\": those reads' mean)"
cat "$out/summary.md"
