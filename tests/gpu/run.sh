#!/usr/bin/env bash
# GPU checks, run on a machine with an NVIDIA device (the lent H200): builds the CUDA backend and
# runs every CUDA self-test, each of which compares a CUDA op with the CPU computation and prints
# its figures. Exits non-zero on any mismatch.
set -euo pipefail
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DKINFER_TESTS=OFF >/dev/null
cmake --build build-gpu -j"$(nproc)" --target kinfer_cuda_selftest
./build-gpu/bin/kinfer_cuda_selftest
echo "gpu: all checks passed"
