#!/usr/bin/env bash
# Image encode time, kinfer against llama.cpp's mtmd, on the same mmproj, text model and images
# (the golden vision set by default), the same thread count, the engines alternating per rep so
# that load from other jobs falls on both alike. Prints every run's ms, then per image the
# median of each engine and kinfer's speed as a ratio (mtmd ms / kinfer ms: > 1 means kinfer is
# faster), taken two ways: kinfer's whole encode, and kinfer's encode without its preprocessing
# (what mtmd's figure covers).
#   tools/bench/vision_bench.sh [llama-mtmd-cli] [image ...]
# Environment: MTMD_CLI (the mtmd binary, if not the first argument; never built here),
# KINFER (kinfer binary), VISION_DIR (golden vision folder), THREADS (2), REPS (5),
# MTMD_FA (mtmd's --flash-attn: off, as in the golden run and as kinfer computes; on / auto too).
#
# What each engine's number covers: mtmd-cli's "mtmd batch encoding done in N ms"
# (mtmd_batch_encode: graph build + tower + projector, whole milliseconds; older trees print
# "image slice encoded in N ms"), after its warm-up encode; kinfer's "encoded in N ms
# (preprocessing P ms)": canvas + normalisation + tower + projector + download, the first and
# only encode of the process, and P the canvas + normalisation part. mtmd resizes in
# mtmd_tokenize, outside its figure, so "tower" (N - P) is the like-for-like column and "all" (N)
# leans against kinfer. --jinja: mtmd-cli refuses the GGUF's K3 template otherwise (the prompt is
# not timed). On a machine busy with other jobs, llama.cpp's OpenMP threads spin and lose whole
# time slices (seconds for a 5 ms encode): THREADS=1, or OMP_WAIT_POLICY=passive, keeps its
# figures meaningful.
set -euo pipefail
source "$(dirname "$0")/common.sh"
need_kinfer
mtmd=${1:-${MTMD_CLI:-}}
[ $# -gt 0 ] && shift
[ -n "$mtmd" ] && [ -x "$mtmd" ] || { echo "usage: $0 PATH/TO/llama-mtmd-cli [image ...] (or MTMD_CLI=...)" >&2; exit 1; }
vdir=${VISION_DIR:-$bench_root/../shared/golden/vision}
text=$vdir/gguf/k3v-tiny-f32.gguf
mmproj=$vdir/gguf/mmproj-k3v-tiny-f32.gguf
need_file "$text"
need_file "$mmproj"
threads=${THREADS:-2}
reps=${REPS:-5}
fa=${MTMD_FA:-off}
images=("$@")
if [ ${#images[@]} -eq 0 ]; then
  for f in photo_150x97.png tall_61x203.jpg gray_110x115.png rgba_24x20.png wide_560x380.png; do images+=("$vdir/images/$f"); done
fi
for f in "${images[@]}"; do need_file "$f"; done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# One encode each; prints the milliseconds, or fails with the engine's output.
kinfer_ms() {
  "$kinfer" run -m "$text" --mmproj "$mmproj" --image "$1" -p "Describe this image." -n 1 -t "$threads" --temp 0 \
    >"$tmp/k.out" 2>&1 || { cat "$tmp/k.out" >&2; return 1; }
  # "N P": the whole encode and its preprocessing
  sed -n 's/.*encoded in \([0-9.]*\) ms (preprocessing \([0-9.]*\) ms).*/\1 \2/p' "$tmp/k.out" | head -n 1
}
mtmd_ms() {
  "$mtmd" -m "$text" --mmproj "$mmproj" --image "$1" -p "Describe this image." -n 1 -t "$threads" --temp 0 \
    -fa "$fa" -c 1024 --no-mmproj-offload --jinja >"$tmp/m.out" 2>&1 || { cat "$tmp/m.out" >&2; return 1; }
  sed -n -e 's/.*mtmd batch encoding done in \([0-9]*\) ms.*/\1/p' -e 's/.*image slice encoded in \([0-9]*\) ms.*/\1/p' \
    "$tmp/m.out" | head -n 1
}

echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') | threads $threads | reps $reps | mtmd flash-attn $fa"
echo "load before: $(uptime | sed 's/.*load average: //')"
echo "kinfer: $kinfer"
echo "mtmd:   $mtmd"
printf '%-22s %4s %10s %10s %10s\n' image rep kinfer_all kinfer_twr mtmd_ms
declare -A ks kt ms
for img in "${images[@]}"; do
  name=$(basename "$img")
  for r in $(seq 1 "$reps"); do
    # Alternate which engine goes first, so neither always meets the other's cache leftovers.
    if (( r % 2 )); then k=$(kinfer_ms "$img"); m=$(mtmd_ms "$img"); else m=$(mtmd_ms "$img"); k=$(kinfer_ms "$img"); fi
    [ -n "$k" ] && [ -n "$m" ] || { echo "no encode time in an engine's output for $name" >&2; exit 1; }
    read -r kall kpre <<<"$k"
    ktwr=$(awk -v a="$kall" -v p="$kpre" 'BEGIN {printf "%.1f", a - p}')
    printf '%-22s %4d %10s %10s %10s\n' "$name" "$r" "$kall" "$ktwr" "$m"
    ks[$name]+="$kall "; kt[$name]+="$ktwr "; ms[$name]+="$m "
  done
done
echo "load after: $(uptime | sed 's/.*load average: //')"
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }
printf '\nmedians (ms); ratio = mtmd / kinfer, > 1: kinfer faster\n'
printf '%-22s %10s %10s %10s %11s %11s\n' image kinfer_all kinfer_twr mtmd "ratio_all" "ratio_twr"
for img in "${images[@]}"; do
  name=$(basename "$img")
  k=$(echo "${ks[$name]}" | median); t=$(echo "${kt[$name]}" | median); m=$(echo "${ms[$name]}" | median)
  printf '%-22s %10s %10s %10s %11s %11s\n' "$name" "$k" "$t" "$m" "$(awk -v k="$k" -v m="$m" 'BEGIN {printf "%.2fx", m / k}')" \
    "$(awk -v k="$t" -v m="$m" 'BEGIN {printf "%.2fx", m / k}')"
done
