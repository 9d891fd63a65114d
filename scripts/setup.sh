#!/usr/bin/env bash
# Installs kinfer's build dependencies (Debian packages only), builds the Release binary and
# runs it once on the model the project ships. Safe to run again: installed packages are skipped
# and the build is incremental.
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(build-essential cmake ninja-build pkg-config libcli11-dev libfmt-dev doctest-dev libstb-dev
      nlohmann-json3-dev clang libclang-rt-14-dev python3 python3-jinja2 tmux libedit-dev
      python3-torch python3-numpy openmpi-bin libopenmpi-dev)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"

# The main job on the shipped model: generation with the trained demo model, models/kinfer-demo.gguf
# (a 17 M-parameter Kimi-K3-architecture model trained on the English corpora; kinfer run uses it
# when no -m is given, see models/README.md).
if [ "${KINFER_SETUP_NO_RUN:-0}" != 1 ]; then
    ./build/bin/kinfer run -p "In the beginning God" -n 48 --temp 0 --repeat-penalty 1.15
    echo
fi
