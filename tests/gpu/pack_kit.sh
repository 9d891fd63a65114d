#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a lent GPU machine into .gpu-kit/ (git ignores it; the
# device tool carries it). Run it here, on the machine with nvcc, before the session's one device
# call; it costs no device time.
#
# Why: the lent machine starts bare from an image with the CUDA toolkit, CMake and Python, but
# not Debian's fmt, CLI11, nlohmann-json, doctest or stb, and nothing can be installed there; the
# ../shared beside the checkout does not travel; and a session has 15 minutes of device time, all
# tries together. So the kit holds:
#   kit.tar.xz   bin/    kinfer, kinfer_cuda_selftest, kinfer_gpu_check, built here for sm_90
#                        (Release, no MPI, no libedit), stripped
#                lib/    the shared libraries they need beyond glibc and libstdc++: libfmt, and
#                        libcudart (the driver there is CUDA 13's, as is this nvcc)
#                deps/   the header-only dependencies and fmt, for a build there when these
#                        binaries cannot run or the sources changed since the kit was packed
#                SOURCES the sha256 of every file the binaries are built from (kit_sources.sh):
#                        run.sh uses the binaries only when the tree there has the same files
#   golden/llama.cpp     what golden_on_device.sh and speed_on_device.sh read of ../shared: the
#                        tiny models (Q4_K_M as links into tests/data, MXFP4_MOE copied; the Q8_0
#                        and F32 ones stay behind, for the 64 MiB the tool carries), their p64
#                        logits, noise_floor.tsv, the bench recipes and the metadata templates.
# The device call (the tool's run), one command; run.sh finds the kit by itself:
#   command: tests/gpu/run.sh     carry: [".gpu-kit"]     timeout_s: 600
# and its log comes back as $OUT/gpu-run.log.
#
#   tests/gpu/pack_kit.sh [BUILD_DIR]      (default build-kit; env KINFER_GOLDEN as elsewhere)
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build-kit}
golden=${KINFER_GOLDEN:-../shared/golden}
kit=.gpu-kit
limit=$((64 << 20))   # what the device tool carries: the working tree and the kit together

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)   # where CMakeLists.txt looks
[ -x "$nvcc" ] || { echo "pack_kit: no nvcc here: the kit's binaries need the CUDA backend" >&2; exit 1; }
git diff --quiet HEAD -- . ':!tests/gpu' 2>/dev/null ||
    echo "pack_kit: note: the tree has uncommitted changes; the kit is built from them as they are"

echo "== building $build (Release, CUDA, no MPI, no libedit, no tests)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKINFER_MPI=OFF -DKINFER_TESTS=OFF \
    -DKINFER_LIBEDIT=OFF >/dev/null
cmake --build "$build" -j"$(nproc)" --target kinfer kinfer_cuda_selftest kinfer_gpu_check
# (grep without -q: -q stops reading early, and ldd's failed write would fail the pipeline)
ldd "$build/bin/kinfer" | grep libcudart >/dev/null ||
    { echo "pack_kit: $build/bin/kinfer has no CUDA backend (was nvcc found?)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,lib,deps}
for b in kinfer kinfer_cuda_selftest kinfer_gpu_check; do
    strip -o "$stage/bin/$b" "$build/bin/$b"
done
# The libraries the binaries load beyond the C library, libstdc++ and libgcc (the image's serve
# when new enough: the versions needed are checked below and written in the MANIFEST), copied by
# their sonames.
ldd "$stage/bin/kinfer" "$stage/bin/kinfer_gpu_check" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u |
    while read -r soname path; do
        case "$soname" in
            libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libstdc++.so*|libgcc_s.so*) ;;
            *) cp -L "$path" "$stage/lib/$soname" ;;
        esac
    done
# glibc: the binaries must not need a newer one than an older image might have (Ubuntu 22.04: 2.35).
need=$(objdump -T "$stage"/bin/* "$stage"/lib/* | grep -o 'GLIBC_2\.[0-9]*' | sort -uV | tail -n 1)
need+=", $(objdump -T "$stage"/bin/* "$stage"/lib/* | grep -o 'GLIBCXX_3\.[0-9.]*' | sort -uV | tail -n 1)"
echo "the binaries need $need at most"

# Dependencies for a build there: Debian's headers and CMake package files, laid out under one
# prefix (their files locate the prefix themselves), and cmake.args, the flags that find them
# (@DEPS@ for where the kit is unpacked), which run.sh passes to cmake.
d=$stage/deps
mkdir -p "$d/include/stb" "$d/lib/x86_64-linux-gnu/cmake" "$d/lib/cmake" "$d/share/cmake"
cp -r /usr/include/CLI /usr/include/nlohmann /usr/include/doctest /usr/include/fmt "$d/include/"
cp /usr/include/stb/stb_image.h "$d/include/stb/"
cp -r /usr/lib/x86_64-linux-gnu/cmake/fmt "$d/lib/x86_64-linux-gnu/cmake/"
cp -a /usr/lib/x86_64-linux-gnu/libfmt.so* "$d/lib/x86_64-linux-gnu/"
cp -r /usr/lib/cmake/doctest "$d/lib/cmake/"
cp -r /usr/share/cmake/CLI11 /usr/share/cmake/nlohmann_json "$d/share/cmake/"
cat > "$d/cmake.args" <<'ARGS'
-DCMAKE_PREFIX_PATH=@DEPS@
-Dfmt_DIR=@DEPS@/lib/x86_64-linux-gnu/cmake/fmt
-DCLI11_DIR=@DEPS@/share/cmake/CLI11
-Dnlohmann_json_DIR=@DEPS@/share/cmake/nlohmann_json
-Ddoctest_DIR=@DEPS@/lib/cmake/doctest
ARGS

# What the binaries are built from (tests/gpu/kit_sources.sh says which files).
. tests/gpu/kit_sources.sh
kit_source_files | xargs -d '\n' sha256sum > "$stage/SOURCES"
{
    echo "packed $(date -u +%FT%TZ) from $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with uncommitted changes)')"
    echo "nvcc: $("$nvcc" --version | tail -n 1)"
    echo "host: $(. /etc/os-release && echo "$PRETTY_NAME"), $(g++ --version | head -n 1), needs $need"
} > "$stage/MANIFEST"

rm -rf "$kit"
mkdir -p "$kit"
tar -C "$stage" -cJf "$kit/kit.tar.xz" bin lib deps SOURCES MANIFEST

# The golden subset.
if [ -d "$golden/llama.cpp/models" ]; then
    g=$kit/golden/llama.cpp
    mkdir -p "$g/models" "$g/logits" "$g/bench"
    cp "$golden/llama.cpp/logits/noise_floor.tsv" "$g/logits/"
    cp "$golden/llama.cpp/bench/k3-bench.model.json" "$golden/llama.cpp/bench/k3-bench-F32.gguf-kv.json" "$g/bench/"
    cp "$golden/llama.cpp/models/"*-F32.gguf-kv.json "$g/models/"
    for name in k3-tiny-a-Q4_K_M kl-tiny-a-Q4_K_M k3-tiny-a-MXFP4_MOE kl-tiny-a-MXFP4_MOE; do
        mkdir -p "$g/logits/$name/exact"
        if [ -f "tests/data/models/$name.gguf" ] && cmp -s "tests/data/models/$name.gguf" "$golden/llama.cpp/models/$name.gguf" &&
            cmp -s "tests/data/logits/$name/p64.batch.f32" "$golden/llama.cpp/logits/$name/exact/p64.batch.f32"; then
            # Links within the checkout travel as links and resolve there.
            ln -s "../../../../tests/data/models/$name.gguf" "$g/models/$name.gguf"
            ln -s "../../../../../../tests/data/logits/$name/p64.batch.f32" "$g/logits/$name/exact/p64.batch.f32"
        else
            cp "$golden/llama.cpp/models/$name.gguf" "$g/models/"
            cp "$golden/llama.cpp/logits/$name/exact/p64.batch.f32" "$g/logits/$name/exact/"
        fi
    done
else
    echo "pack_kit: no $golden here: the kit has no golden data (run.sh then checks tests/data's models only)"
fi

# The tool carries the working tree (tracked and untracked files git does not ignore) and the kit.
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -L -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
kb=$(find "$kit" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')   # links travel as links
echo "kit: $((kb >> 10)) KiB ($kit), working tree $((tree >> 10)) KiB: $(((kb + tree) >> 20)) MiB of the 64 MiB carried"
[ $((kb + tree)) -le "$limit" ] || { echo "pack_kit: over the 64 MiB the device tool carries" >&2; exit 1; }
cat "$stage/MANIFEST"
echo "device call: command 'tests/gpu/run.sh', carry ['.gpu-kit'], timeout_s 600 (the log: \$OUT/gpu-run.log)"
