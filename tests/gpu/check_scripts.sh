#!/usr/bin/env bash
# What of tests/gpu can be checked without a GPU, so that the scripts a lent machine's few
# minutes depend on are not first run there: every script parses, and run.sh's own logic (its
# steps by key, a step that exits 77 reported as SKIPPED and not as passed, the summary) runs
# against the emulated device. ctest's gpu_scripts.
#   tests/gpu/check_scripts.sh BUILD_DIR      (BUILD_DIR/bin/kinfer: any build)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:?usage: check_scripts.sh BUILD_DIR}
for f in tests/gpu/*.sh; do
    bash -n "$f" || { echo "check_scripts: $f does not parse"; exit 1; }
done
# "list" checks kinfer --list-devices; "speed" finds no golden data there and must be SKIPPED.
log=$(KINFER_GPU_DEVICE=emu-cuda KINFER_GPU_BUILD="$build" KINFER_GPU_STEPS="list speed" \
      KINFER_GOLDEN=/nonexistent OUT= tests/gpu/run.sh 2>&1) || { echo "$log"; echo "check_scripts: run.sh failed"; exit 1; }
want=("emu-cuda0: emulated GPU" "kinfer --list-devices [list]: ok"
      "end-to-end speed on the device [speed]: SKIPPED" "gpu: 1 step(s) SKIPPED"
      "gpu: not selected (KINFER_GPU_STEPS): "
      "gpu: every step run passed")
for w in "${want[@]}"; do
    grep -qF -- "$w" <<<"$log" || { echo "$log"; echo "check_scripts: run.sh's output lacks: $w"; exit 1; }
done
grep -F "gpu: not selected" <<<"$log" | grep -qw golden || { echo "$log"; echo "check_scripts: golden was not left out"; exit 1; }
echo "check_scripts: every tests/gpu script parses; run.sh's steps, skip and summary as expected"
