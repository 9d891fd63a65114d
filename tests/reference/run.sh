#!/usr/bin/env bash
# Parity of the PyTorch reference model (tools/reference) against llama.cpp's exact F32 logits
# (k3-tiny-a, kl-tiny-a; prompts p64 and p700; tolerance 1e-3 max abs), plus chunked KDA ==
# recurrent KDA and absorbed MLA == MHA MLA; then tools/train/selftest.py (tokenizer ids vs
# llama.cpp, HF export round trip, Quantile-Balancing bias update). Prints one 'SKIP: ...' line and exits 0 when
# Debian's python3-torch or ../shared/golden is missing (test_reference.cpp reports that as a skip, a failure in CI).
#   tests/reference/run.sh [--quick]
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
golden="${KINFER_GOLDEN_DIR:-$root/../shared/golden}"
py="${KINFER_PYTHON:-/usr/bin/python3}"

if [ ! -x "$py" ] || ! "$py" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "SKIP: python3-torch not installed (apt-get install -y python3-torch python3-numpy)"
    exit 0
fi
if [ ! -f "$golden/llama.cpp/models/k3-tiny-a-F32.gguf" ] || [ ! -f "$golden/llama.cpp/models/kl-tiny-a-F32.gguf" ]; then
    echo "SKIP: ../shared/golden missing"
    exit 0
fi
# Debian's torch calls the reference BLAS through libblas.so.3 (~4 GFLOPS); with the
# libopenblas0-pthread package installed, point only this process at OpenBLAS (~7x faster matmuls)
# without changing the system-wide alternative.
ob=/usr/lib/x86_64-linux-gnu/openblas-pthread
if [ -f "$ob/libblas.so.3" ] && [ "${NO_OPENBLAS:-0}" != 1 ]; then
    export LD_LIBRARY_PATH="$ob${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    export OPENBLAS_NUM_THREADS="${THREADS:-2}"
fi
rc=0
nice -n 10 "$py" "$root/tools/reference/check_llama.py" --golden "$golden" "$@" || rc=1
nice -n 10 "$py" "$root/tools/train/selftest.py" "$golden" || rc=1
exit $rc
