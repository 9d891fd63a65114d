#!/usr/bin/env bash
# Expert-store paging: decode tokens/s and expert hit rate of `kinfer bench` (tg only) at host
# cache budgets of 10, 25, 50 and 100 % of the routed experts, for LRU, LFU-decay and a
# profile-seeded LFU cache, with and without --prefetch-next; then the same sweep against a
# simulated device at PCIe-like bandwidth (--device sim:...,GBPS). The first row is the plain
# mapping (no store) and the second the zero-copy store, which shows the store's own overhead
# (with --verbose-experts that includes mincore on every expert used, to count the bytes the
# mapping faults in; the zero-copy store has no cache, so its hit % reads "-").
# Host rows read experts with pread on an O_DIRECT descriptor (IO=direct), so a miss really
# costs a read: with mmap the page cache would hold everything and hide the policy.
#
# A random model routes almost uniformly; TRACE=FILE replays a recorded routing trace instead
# (--routing-replay: every row routes by it), e.g. the trained demo model's routing over held-out
# text, recorded with  kinfer eval -m models/kinfer-demo.gguf --tokens IDS --routing-record FILE.
# Under a trace, --prefetch-next still guesses with the bench model's own router, so its rows
# show the cost of wrong guesses, not what prefetch gains on a trained model.
#
#   tools/bench/expert_store_bench.sh [MODEL.gguf] [THREADS]
#       env: N=64 (tokens per run) R=2 IO=direct GBPS=25 BUDGETS="10 25 50 100" TRACE= KINFER=...
set -euo pipefail
here="$(cd "$(dirname "$0")/../.." && pwd)"
model="${1:-/work/bench-models/k3-bench-Q4_K_M.gguf}"
threads="${2:-$(nproc)}"
N="${N:-64}"; R="${R:-2}"; IO="${IO:-direct}"; GBPS="${GBPS:-25}"
BUDGETS="${BUDGETS:-10 25 50 100}"
source "$here/tools/bench/common.sh"
need_kinfer
need_file "$model"

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
prof="$out/profile.txt"

# One measurement: prints "tokens/s hit%" of a tg$N run with the given extra flags.
replay=()
[ -n "${TRACE:-}" ] && replay=(--routing-replay "$TRACE")
measure() {
  "$kinfer" bench -m "$model" -t "$threads" -p 0 -n "$N" -r "$R" "${replay[@]}" "$@" >"$out/o.txt" 2>"$out/e.txt" ||
    { cat "$out/e.txt" >&2; echo "- -"; return; }
  local tps hit
  tps="$(awk -F'|' '$7 ~ /tg[0-9]/ { split($8,a," "); print a[1] }' "$out/o.txt" | tail -1)"
  hit="$(sed -n 's/.*hit rate \([0-9.]*\)%.*/\1/p' "$out/e.txt" | tail -1)"
  echo "${tps:--} ${hit:--}"
}
row() {   # label, flags...
  local label="$1"; shift
  read -r tps hit < <(measure "$@")
  printf "| %-34s | %10s | %7s |\n" "$label" "$tps" "$hit"
}

echo "model $model, $threads threads, tg$N x $R, io $IO, sim device $GBPS GB/s, routing ${TRACE:-by its own router}; load: $(cut -d' ' -f1-3 /proc/loadavg)"
# The profile the seeded rows use: one run's routing with the store in zero-copy mode.
"$kinfer" bench -m "$model" -t "$threads" -p 0 -n "$N" -r 1 "${replay[@]}" --expert-profile "$prof" >/dev/null 2>&1
"$kinfer" experts "$prof" --top 5 | awk 'NR == 1'

echo
echo "| configuration                      | tokens/s   | hit %   |"
echo "| ---------------------------------- | ---------: | ------: |"
row "mapping (no store)"
row "zero-copy store" --verbose-experts
for b in $BUDGETS; do
  for pol in lru lfu-decay seeded; do
    for pf in "" "--prefetch-next"; do
      flags=(--verbose-experts --expert-io "$IO" --expert-cache-ram "$b%")
      if [ "$pol" = seeded ]; then flags+=(--expert-policy lfu-decay --expert-profile "$prof"); cp "$prof" "$out/p.keep"
      else flags+=(--expert-policy "$pol"); fi
      [ -n "$pf" ] && flags+=("$pf")
      row "host $b% $pol${pf:+ +prefetch}" "${flags[@]}"
      [ "$pol" = seeded ] && cp "$out/p.keep" "$prof"   # keep the seed the same for every row
    done
  done
done
for b in $BUDGETS; do
  for pol in lru lfu-decay; do
    for pf in "" "--prefetch-next"; do
      flags=(--verbose-experts --device "sim:2GiB,$GBPS" --expert-cache "$b%" --expert-policy "$pol")
      [ -n "$pf" ] && flags+=("$pf")
      row "sim $b% $pol${pf:+ +prefetch}" "${flags[@]}"
    done
  done
done
