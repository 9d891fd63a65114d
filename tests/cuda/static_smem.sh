#!/usr/bin/env bash
# Every CUDA kernel's static shared memory within compat.h's kStaticSharedBudget.
#
#   tests/cuda/static_smem.sh NVCC [REPO [CUBINS]]   (env: KINFER_STATIC_SMEM_BUDGET overrides the budget;
#                                                     NVCC is not run when CUBINS is given)
#
# The CPU execution mode cannot see a kernel's static __shared__ bytes, and a GPU counts them with
# the dynamic ones against 48 KiB (227 KiB opted in). The launchers and the CPU mode leave
# kStaticSharedBudget bytes for them, so this test holds every kernel to that: it compiles each
# .cu to an sm_90 cubin (an ELF file) and reads the size of each kernel's .nv.shared.<kernel>
# section, which is what the kernel's window holds before its dynamic bytes (nvcc puts 1 KiB
# there even for a kernel that declares none). With CUBINS (the build's nvcc --keep directory,
# as ctest passes it) it reads the cubins the build made instead of compiling again: like every
# ctest, it checks the build as it was built (a header edited since is seen after the next build;
# a .cu newer than its cubin is refused). Exit 77 (ctest's skip) without readelf.
set -euo pipefail
nvcc="${1:?usage: static_smem.sh NVCC [REPO]}"
repo="${2:-$(cd "$(dirname "$0")/../.." && pwd)}"
command -v readelf >/dev/null || { echo "static_smem: no readelf (binutils): skipped"; exit 77; }
budget="${KINFER_STATIC_SMEM_BUDGET:-}"
if [ -z "$budget" ]; then
  kib="$(sed -n 's/.*kStaticSharedBudget = \([0-9]*\) \* 1024;.*/\1/p' "$repo/src/backend/cuda/compat.h")"
  [ -n "$kib" ] || { echo "static_smem: kStaticSharedBudget not found in compat.h" >&2; exit 1; }
  budget=$((kib * 1024))
fi
srcs=("$repo"/src/backend/cuda/*.cu "$repo"/cuda/*.cu)
# One keep directory (and one output directory below) for both source folders: a name in both
# would give one cubin for two sources.
dup="$(printf '%s\n' "${srcs[@]##*/}" | sort | uniq -d)"
[ -z "$dup" ] || { echo "static_smem: .cu names in both source folders: $dup (their cubins would clash)" >&2; exit 1; }
cubin_files=()
if [ -n "${3:-}" ]; then
  # The build's own: nvcc names each <source>.sm_90.cubin in its keep directory, and rewrites it
  # whenever it compiles that source, so after a build each one is current.
  for src in "${srcs[@]}"; do
    c="$3/$(basename "$src" .cu).sm_90.cubin"
    [ -f "$c" ] || { echo "static_smem: $c is missing (build kinfer_cuda first; nvcc keeps it there)" >&2; exit 1; }
    if [ "$src" -nt "$c" ]; then echo "static_smem: $c is older than $src (rebuild kinfer_cuda)" >&2; exit 1; fi
    cubin_files+=("$c")
  done
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
  # One nvcc per file, as many at once as there are cores (each is single-threaded).
  # (The path goes in as an argument of its own, never pasted into the command's text.)
  printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -I{} bash -c \
    '"$1" -cubin -arch=sm_90 -std=c++17 -I"$2" -I"$2/src" "$4" -o "$3/$(basename "$4" .cu).cubin"' _ "$nvcc" "$repo" "$out" {}
  cubin_files=("$out"/*.cubin)
fi
kernels=0 over=0
cubins=0
for c in "${cubin_files[@]}"; do
  cubins=$((cubins + 1))
  src_name="$(basename "$c" .cubin)"
  src_name="${src_name%.sm_90}"
  # (readelf warns about an nvcc section flag on stderr; a cubin it cannot read fails the test.)
  sections="$(readelf -SW "$c" 2>/dev/null)" || { echo "static_smem: readelf cannot read $c" >&2; exit 1; }
  # "[Nr] .nv.shared.<mangled name>  NOBITS  <address> <offset> <size> ..." (the reserved.0 one is not a kernel)
  while read -r name size; do
    bytes=$((16#$size))
    kernels=$((kernels + 1))
    pretty="$(printf '%s' "$name" | c++filt 2>/dev/null || printf '%s' "$name")"
    if [ "$bytes" -gt "$budget" ]; then
      over=$((over + 1))
      echo "OVER  $bytes bytes  ${src_name}: ${pretty:0:160}"
    else
      echo "ok    $bytes bytes  ${src_name}: ${pretty:0:160}"
    fi
  done < <(printf '%s\n' "$sections" |
           sed -n 's/.*\] \.nv\.shared\.\([^ ]*\) *NOBITS *[0-9a-f]* *[0-9a-f]* *\([0-9a-f]*\) .*/\1 \2/p' | grep -v '^reserved\.')
done
[ "$cubins" -eq "${#srcs[@]}" ] || { echo "static_smem: $cubins cubins from ${#srcs[@]} sources" >&2; exit 1; }
echo "static_smem: $kernels kernels with shared memory, $over over the budget of $budget bytes (compat.h kStaticSharedBudget)"
[ "$kernels" -gt 0 ] || { echo "static_smem: no kernel's shared memory found in the cubins" >&2; exit 1; }
[ "$over" -eq 0 ]
