#!/usr/bin/env bash
# GPU checks, for a session that has an NVIDIA device (the lent H100 or H200, 16 cores). Nothing
# here runs in CI and nothing here has been run on a GPU yet: it was written and compile-checked on
# a machine without one, and its steps 5-9 were run on the emulated device (below). Budget: under
# 5 minutes on one H200 for steps 1-10; step 11 (the sanitizers) gets what the deadline leaves.
#
# On the lent machine (bare: the CUDA toolkit, CMake and Python, none of Debian's fmt / CLI11 /
# nlohmann-json / doctest / stb, no ../shared, 15 minutes of device time a session), first pack
# the kit here, at no device time:
#   tests/gpu/pack_kit.sh         -> .gpu-kit/: the binaries built here, the dependencies for a
#                                    build there, and the golden data the steps read
# then make one device call: command `tests/gpu/run.sh`, carry [".gpu-kit"], timeout_s 600. The
# script uses the kit's binaries when the tree there has the bytes they were built from and they
# run there (else it builds, with the kit's dependencies), the kit's golden data when ../shared is
# absent, and writes its whole output to $OUT/gpu-run.log too when the tool's $OUT is set.
# KINFER_GPU_STEPS="KEY ..." runs only the steps of those keys (a second call on the still warm
# machine for a failed or unfinished step; the summary names each step's key):
#   selftest check smem tier split two list golden speed sanitize
# (and cpumode: step 2, in the run without a GPU)
#
#  1. builds the CUDA backend (nvcc, sm_90, warnings as errors) and the GPU checks, and holds
#     every kernel's static shared memory to the room the launch bounds leave for it
#     (tests/cuda/static_smem.sh, from the cubins this machine's nvcc makes; with the kit's
#     binaries neither: their build machine's ctest checked that);
#  2. the CPU-mode kernel cases of test_cuda (CI runs the whole of it; here only in the run
#     without a GPU below, where they come with the build it is given);
#  3. the first kernel's self-test (Q8_0 dequant, bit-exact against the CPU);
#  4. kinfer_gpu_check: every CUDA op against the CPU backend's op on Kimi Linear 48B / K3 shapes
#     with random weights, each within its stated bound, and the speed table: decode matvec GB/s
#     per quant type against the device's own HBM peak (Q4_K, Q6_K, Q8_0, Q4_0, IQ4_NL, MXFP4: the int8-activation form and the fp32
#     one side by side); int8 mma.sync against its plain form and a host product (mma.cuh's
#     fragment layout on the hardware); the prefill GEMM (dequantized fp16 / bf16
#     tiles + cuBLAS, and for the quantized types the int8 tensor-core GEMM and the fused one,
#     weights decoded in the kernel, beside it) against the CPU and its TFLOP/s per type at
#     7168 x 3584 x 512 tokens, and Q4_K by token count around the matvec / GEMM threshold, all
#     three GEMMs; KDA recurrent and chunked (C 16 / 32 / 64,
#     checked against the CPU on 256 tokens) tokens/s on a 96 x 128 layer at 8K tokens,
#     MLA absorbed decode time at 4K / 64K / 1M cached positions (the per-head and the grouped
#     pass-1 kernels side by side); the paged latent cache (store
#     bytes equal to the CPU's, loads equal, MLA decode through the pages at 4K / 64K per type);
#     the decompressed (MHA) MLA prefill form against the CPU at 4K, timed against the absorbed
#     form on a 512-token chunk at 4K / 32K; the grouped expert matvec (16 K3 experts' gate + up)
#     equal to one launch per task, and both timed (at 64 tokens also on the int8 and fused GEMMs); the
#     embedding gather bit for bit the CPU's;
#     MoE decode by slot (choices on the device) against grouped on the host, equal and timed;
#  5. the GPU expert tier end to end (k3-tiny-a, experts paged through a 25 % cache), logits
#     against the CPU's;
#  6. --split pipeline / experts over 2 ranks with every layer on the GPU, against one process
#     (NCCL between the ranks with 2+ GPUs; over MPI on one, since NCCL takes one rank per GPU;
#     skipped with the kit's binaries, built without MPI, and where there is no mpirun);
#  7. two devices in one process (cuda0,cuda1, or cuda0 twice on one GPU), --split-mode layer
#     and experts, against one GPU;
#  8. `kinfer --list-devices` (each GPU with its free memory);
#  9. golden logits of every tiny model (with the kit's golden data: the Q4_K_M and MXFP4_MOE
#     ones, 4 of the 8) with every layer on the GPU, with the experts through a
#     25 % device cache, by slot with the embedding table on the GPU too, with the int8 and the
#     fused prefill GEMMs (KINFER_CUDA_GEMM=int8 / fused), with the chunked KDA and the grouped MLA kernel on TF32
#     tensor cores (KINFER_CUDA_KDA / KINFER_CUDA_MLA=tf32x3), the absorbed decode over an f16
#     cache and the chunked KDA on fp16 ones (KINFER_CUDA_MLA=f16x2, KINFER_CUDA_KDA=f16x3), and
#     in the tiled and the decompressed (MHA) MLA forms
#     (tests/gpu/golden_on_device.sh: the bounds are written there);
# 10. end-to-end tokens/s, CPU against GPU, on k3-bench and a Kimi-Linear-48B-shaped model made
#     here, decode with the routed experts grouped on the host against by slot, and decode with
#     the device expert cache at 10 / 25 / 50 / 100 % of the experts
#     (tests/gpu/speed_on_device.sh; needs the recipes of ../shared/golden or the kit's, skipped
#     without; at most 300 s);
# 11. compute-sanitizer's memcheck, racecheck and synccheck over one k3-tiny-a eval on the device,
#     the default forms and the tensor-core ones (the int8 prefill GEMM with the TF32 chunked KDA
#     and grouped MLA; the fused GEMM with the tiled MLA over an f16 cache on fp16 ones; racecheck sees the
#     shared-memory hazards the CPU mode cannot).
#
# Every step after the build runs on its own, under a time limit: a failing or hanging step is
# reported and the next one runs (a lent GPU's minutes are few), and the summary at the end lists
# them, with the steps that were skipped (nothing checked) or not selected; the exit status is
# non-zero when any failed or did not run. All of it stops at KINFER_GPU_DEADLINE seconds
# from the start (default 570: the device tool runs one command for at most 600): each step's limit
# is cut to what is left, and the steps past it are listed as not run.
#
# The script itself, without a GPU (step 2, and steps 5-9 on the emulated device: CudaBackend's host
# code and its kernels in CPU mode; steps 1, 3, 4 and 11 need nvcc and a GPU and are not run;
# about 7 minutes):
#   KINFER_GPU_DEVICE=emu-cuda KINFER_GPU_BUILD=build \
#     KINFER_GPU_STEPS="cpumode tier split two list golden" tests/gpu/run.sh
# Step 10 does not finish there (the kernels in CPU mode decode k3-bench at about 1 token/s, even
# at KINFER_SPEED_P=32 KINFER_SPEED_N=8); its script checks itself on the simulated device (it
# reads the recipes in ../shared/golden, or KINFER_GOLDEN's):
#   KINFER_SPEED_P=32 KINFER_SPEED_N=8 \
#     tests/gpu/speed_on_device.sh build/bin/kinfer sim:4GiB build/speed-models
set -uo pipefail
cd "$(dirname "$0")/../.."
# The device tool brings back what is under $OUT: the whole log goes there too.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ -w "$OUT" ]; then
    exec > >(tee -a "$OUT/gpu-run.log") 2>&1
fi
start=$(date +%s)
kit=.gpu-kit
dev=${KINFER_GPU_DEVICE:-cuda0}
build=${KINFER_GPU_BUILD:-build-gpu}
deadline=$(( start + ${KINFER_GPU_DEADLINE:-570} ))
case "$dev" in cuda*) real=1 ;; *) real=0 ;; esac
failed=() not_run=() skipped=() unselected=() kit_used=0
# A device check must not fall back to the CPU when the GPU cannot be opened (it would compare the
# CPU with itself and pass): kinfer then fails instead (src/backend/registry.cpp).
export KINFER_REQUIRE_DEVICE=1
step_pid=
# Killed from outside (the device tool's limit, ^C): the running step goes too, not left holding
# the GPU.
trap '[ -n "$step_pid" ] && kill -TERM "$step_pid" 2>/dev/null; exit 130' INT TERM

# step KEY NAME SECONDS COMMAND...: COMMAND (a program, or a function of this script) under a time
# limit; a failure is recorded and the script goes on. KEY is what KINFER_GPU_STEPS names it by.
# Exit status 77: the step checked nothing here (no mpirun, no golden data...), and said why.
step() {
    local key=$1 name="$2 [$1]" limit=$3 t0 rc left
    shift 3
    if [ -n "${KINFER_GPU_STEPS:-}" ] && [[ " $KINFER_GPU_STEPS " != *" $key "* ]]; then
        unselected+=("$key")
        return 0
    fi
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 5 ]; then
        echo "== $name: not run (the run's deadline has passed)"
        not_run+=("$name")
        return 0
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name"
    t0=$(date +%s)
    # The script's step functions are exported (export -f), as are the variables they read.
    timeout --kill-after=10 "$limit" bash -c 'set -eo pipefail; "$@"' step "$@" </dev/null &
    step_pid=$!
    wait "$step_pid"
    rc=$?
    step_pid=
    if [ "$rc" -eq 0 ]; then
        echo "-- $name: ok, $(( $(date +%s) - t0 )) s"
    elif [ "$rc" -eq 77 ]; then
        echo "-- $name: SKIPPED (nothing checked; the reason is above)"
        skipped+=("$name")
    else
        [ "$rc" -eq 124 ] && echo "-- $name: over its $limit s"
        echo "-- $name: FAILED (exit $rc), $(( $(date +%s) - t0 )) s"
        failed+=("$name")
    fi
}

# The kit's binaries (tests/gpu/pack_kit.sh), unpacked to $kit/x: echoes why not when they cannot
# serve here, and returns non-zero then.
use_kit() {
    rm -rf "$kit/x" && mkdir -p "$kit/x" || return 1
    tar -C "$kit/x" -xJf "$kit/kit.tar.xz" 2>/dev/null ||
        python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$kit/kit.tar.xz" "$kit/x" ||
        { echo "the kit cannot be unpacked"; return 1; }
    sed 's/^/kit: /' "$kit/x/MANIFEST"
    # The same files (one added since would be built by a CMake glob) with the same bytes.
    (. tests/gpu/kit_sources.sh && kit_source_files) > "$kit/x/files.here"
    cut -c 67- "$kit/x/SOURCES" | cmp -s - "$kit/x/files.here" && sha256sum -c --quiet "$kit/x/SOURCES" >/dev/null 2>&1 ||
        { echo "the kit's binaries were built from other sources than this tree's"; return 1; }
    LD_LIBRARY_PATH="$PWD/$kit/x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$kit/x/bin/kinfer" --version >/dev/null 2>"$kit/x/version.err" ||
        { echo "the kit's kinfer does not run here: $(head -c 400 "$kit/x/version.err")"; return 1; }
    # Only now: a build made here instead must load this machine's libraries, not the kit's.
    export LD_LIBRARY_PATH="$PWD/$kit/x/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# cuBLAS and NCCL are opened with dlopen by soname (then in the build machine's CUDA folder): where
# the loader does not know them, the folders that hold them go on LD_LIBRARY_PATH (the toolkit's,
# or the NVIDIA wheels' of the image's Python).
find_cuda_libs() {
    local so dir dirs
    dirs="/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib"
    dirs+=" $(python3 -c 'import nvidia, os; print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in os.listdir(p)))' 2>/dev/null)"
    for so in libcublas.so.13 libcublasLt.so.13 libnccl.so.2; do
        ldconfig -p 2>/dev/null | grep -F "$so (" >/dev/null && continue
        for dir in $dirs; do
            if [ -e "$dir/$so" ]; then
                case ":${LD_LIBRARY_PATH:-}:" in *":$dir:"*) ;; *) export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;; esac
                echo "$so: $dir"
                break
            fi
        done
    done
}

if [ -z "${KINFER_GOLDEN:-}" ] && [ ! -d ../shared/golden ] && [ -d "$kit/golden" ]; then
    export KINFER_GOLDEN=$PWD/$kit/golden
    echo "golden data: the kit's ($KINFER_GOLDEN)"
fi
if [ "$real" = 1 ]; then
    nvidia-smi --query-gpu=name,memory.total,memory.free,driver_version --format=csv,noheader || true
    ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)   # (-L would count MIG slices too)
    find_cuda_libs
else
    ngpu=1
fi
# The kit serves the emulated device's run too (that is how its binaries are checked here).
if [ -z "${KINFER_GPU_BUILD:-}" ] && [ -f "$kit/kit.tar.xz" ] && use_kit; then
    build=$kit/x
    kit_used=1
    echo "-- the kit's binaries: $(( $(date +%s) - start )) s"
elif [ "$real" = 1 ]; then
    echo "== build (nvcc, sm_90)"
    deps=()
    # The kit's copies of Debian's packages (the image has none), and the flags that find them.
    [ -f "$kit/x/deps/cmake.args" ] && mapfile -t deps < <(sed "s|@DEPS@|$PWD/$kit/x/deps|" "$kit/x/deps/cmake.args")
    timeout $(( deadline - $(date +%s) )) cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKINFER_TESTS=OFF "${deps[@]}" >/dev/null &&
        timeout $(( deadline - $(date +%s) )) cmake --build "$build" -j"$(nproc)" --target kinfer kinfer_cuda_selftest kinfer_gpu_check ||
        { echo "the build failed (or ran past the deadline): nothing to check"; exit 1; }
    echo "-- build: $(( $(date +%s) - start )) s"
else
    [ -x "$build/bin/kinfer" ] || { echo "no $build/bin/kinfer: build it first"; exit 1; }
fi
if [ "$real" = 1 ]; then
    # Without the GPU every --device run below would say so in one line and go on on the CPU,
    # comparing the CPU with itself: nothing is checked then.
    case "$dev" in cuda[0-9]*) want=$dev ;; *) want=cuda0 ;; esac   # cuda:local and the like: GPU 0 here
    if ! "$build/bin/kinfer" --list-devices | grep "^$want: " | grep -vq "cannot be queried"; then
        "$build/bin/kinfer" --list-devices
        echo "kinfer does not see $want (above): nothing to check"
        exit 1
    fi
fi
bin=$build/bin/kinfer
m=tests/data/models/k3-tiny-a-Q4_K_M.gguf
ids=tests/data/prompt64.ids.txt
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export bin m ids out dev ngpu

if [ "$real" = 0 ] && [ -x "$build/tests/test_cuda" ]; then
    step cpumode "CPU-mode kernel tests" 120 "$build/tests/test_cuda" --force-colors=0 "--test-case=*(cpu mode)*,cuda cpu mode*"
fi
if [ "$real" = 1 ]; then
    step selftest "Q8_0 dequant self-test" 60 "$build/bin/kinfer_cuda_selftest"
    step check "CUDA ops against the CPU backend, and the speed table" 240 "$build/bin/kinfer_gpu_check"
    # The kit's binaries were built by the packing machine's nvcc, whose cubins its own ctest
    # (cuda_static_smem) checks: this step is for a build made here, and reads the cubins nvcc
    # kept while building it (compiling every .cu again takes minutes).
    [ "$kit_used" = 1 ] ||
    step smem "every kernel's static shared memory within kStaticSharedBudget (cubins)" 60 tests/cuda/static_smem.sh \
        "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)" . "$build/src/backend/cuda/cubins"
fi

# Every layer on the CPU but the experts' matmuls on the device through the store's slots
# (copies on the copy stream, the compute stream waiting for them), then every layer on the
# device; both against the CPU alone. The device's activations are rounded otherwise than the
# CPU's in some of its matmuls (fp16 in the prefill GEMMs: golden_on_device.sh says where), so the
# logits agree to that rounding, not bit for bit: held to golden_on_device.sh's bound for the
# shipped models, 0.5 (on the emulated device: 0.285 with the tier, 0.186 all on the device; the
# greedy ids equal).
expert_tier() {
    "$bin" eval -m "$m" --tokens "$ids" --logits "$out/cpu.f32" --greedy 8 > "$out/cpu.txt"
    "$bin" eval -m "$m" --tokens "$ids" --logits "$out/tier.f32" --greedy 8 --device "$dev" --expert-cache 25% > "$out/tier.txt"
    "$bin" eval -m "$m" --tokens "$ids" --logits "$out/all.f32" --greedy 8 --device "$dev" -ngl 99 --expert-cache 25% > "$out/all.txt"
    python3 - "$out" <<'PY'
import struct, sys
d = sys.argv[1]
def load(n):
    b = open(f"{d}/{n}.f32", "rb").read()
    return struct.unpack(f"{len(b) // 4}f", b)
cpu = load("cpu")
bad = 0
for n in ("tier", "all"):
    x = load(n)
    # A NaN compares false: max() would pass over it.
    finite = len(x) == len(cpu) and all(v == v for v in x)
    worst = max(abs(a - b) for a, b in zip(x, cpu)) if finite else float("inf")
    same = open(f"{d}/{n}.txt").read() == open(f"{d}/cpu.txt").read()
    print(f"{n}: max |d| vs CPU {worst:.3g}, greedy ids {'equal' if same else 'DIFFER'}")
    bad += not (worst <= 0.5) or not same
sys.exit(1 if bad else 0)
PY
}
export -f expert_tier
step tier "the expert tier: k3-tiny-a Q4_K_M, routed experts paged through a device cache of 25 %" 180 expert_tier

# same_as_one NAME WHAT: $out/NAME.f32 / .txt against the one-device run's, byte for byte; says
# so (WHAT names the run) and fails when they differ. Exported: the steps run in child shells.
same_as_one() {
    if cmp -s "$out/one.f32" "$out/$1.f32" && cmp -s "$out/one.txt" "$out/$1.txt"; then
        echo "$2: logits bit-identical to one device"
    else
        echo "$2: logits DIFFER from one device"
        return 1
    fi
}
export -f same_as_one

# The one-device run both comparisons need, made once.
one_device() {
    [ -s "$out/one.f32" ] ||
        "$bin" eval -m "$m" --tokens "$ids" --logits "$out/one.f32" --greedy 8 --device "$dev" -ngl 99 > "$out/one.txt"
}
export -f one_device

# One GPU: NCCL takes one rank per GPU, so --dist-link auto moves the bytes over MPI (and nccl
# would stop with a message); two or more: each rank its own GPU (cuda:local) and NCCL between
# them. Same kernels on every rank, so the logits must be the same bytes as one process.
split_ranks() {
    if ! command -v mpirun >/dev/null; then
        echo "(mpirun not installed: skipped)"
        return 77
    fi
    local link=auto rank_dev=$dev bad=0
    [ "$ngpu" -ge 2 ] && link=nccl rank_dev=cuda:local
    one_device
    for split in pipeline experts; do
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 "$bin" eval -m "$m" --tokens "$ids" \
            --logits "$out/$split.f32" --greedy 8 --device "$rank_dev" -ngl 99 --split $split --dist-link $link \
            --dist-timeout 120 --dist-stats > "$out/$split.txt" 2> "$out/$split.err" </dev/null ||
            { cat "$out/$split.err"; echo "split $split: the run FAILED"; bad=1; continue; }
        # A kinfer built without MPI (the kit's: the image has no MPI to link) runs each rank alone,
        # which would compare one process with itself.
        if grep -q "built without MPI" "$out/$split.err"; then
            echo "(this kinfer was built without MPI: the split steps are not checked)"
            return 77
        fi
        same_as_one "$split" "split $split over 2 ranks, $ngpu GPU(s), --dist-link $link" || bad=1
    done
    return $bad
}
export -f split_ranks
step split "--split on the device: 2 ranks against one process, every layer on the device" 240 split_ranks

# With one GPU both backends are cuda0 (two streams and arenas on it): the same kernels, the
# peer copies then within the GPU. Same bytes as one device expected.
two_devices() {
    local two=$dev,$dev bad=0
    [ "$ngpu" -ge 2 ] && two=cuda0,cuda1
    one_device
    for mode in layer experts; do
        "$bin" eval -m "$m" --tokens "$ids" --logits "$out/sm-$mode.f32" --greedy 8 --device "$two" -ngl 99 \
            --split-mode $mode > "$out/sm-$mode.txt" || { echo "--split-mode $mode: the run FAILED"; bad=1; continue; }
        same_as_one "sm-$mode" "--device $two --split-mode $mode" || bad=1
    done
    return $bad
}
export -f two_devices
step two "two devices in one process: --split-mode layer and experts against one" 180 two_devices

step list "kinfer --list-devices" 30 "$bin" run --device "$dev" --list-devices
step golden "golden logits on the device" 600 tests/gpu/golden_on_device.sh "$bin" "$dev"
# compute-sanitizer over one eval with every layer on the device (64-token prefill: the GEMMs; 2
# decode steps: the matvecs), both prefill GEMM and chunked KDA forms: memcheck (out-of-bounds and misaligned
# accesses), racecheck (shared-memory hazards between a block's threads, which the CPU mode's
# fibers, running in a fixed order, cannot show) and synccheck (barriers). Last: it is slow, and
# what the deadline leaves it is what it gets.
sanitize() {
    local cs tool gemm kda bad=0
    cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
    [ -x "$cs" ] || { echo "(no compute-sanitizer here: skipped)"; return 77; }
    local form gemm kda mla cache what
    for tool in memcheck racecheck synccheck; do
        # The default forms, then the tensor-core ones: the int8 GEMM with the TF32 chunked KDA and
        # MLA; then the fp16 ones: the fused GEMM (weights decoded in the kernel), the chunked KDA
        # (KINFER_CUDA_KDA=f16x3) and the tiled MLA over an f16 cache (KINFER_CUDA_MLA=f16x2): the
        # prefill in the decompressed form (its key expansion and its flash kernel on fp16 tensor
        # cores), the decode's absorbed kernel on them too.
        for form in "fp16 fp32 fp32 f32" "int8 tf32x3 tf32x3 f32" "fused f16x3 f16x2 f16"; do
            read -r gemm kda mla cache <<<"$form"
            what="$tool, $gemm prefill GEMM, $kda KDA, $mla MLA, $cache cache"
            if KINFER_CUDA_GEMM=$gemm KINFER_CUDA_KDA=$kda KINFER_CUDA_MLA=$mla "$cs" --tool "$tool" --error-exitcode 9 --print-limit 20 "$bin" eval -m "$m" \
                --tokens "$ids" --greedy 2 --device "$dev" -ngl 99 --cache-type-k "$cache" $([ "$cache" = f16 ] && echo --mla-tiled-from 0 --mla-tiled-form decompressed) > "$out/san.txt" 2>&1; then
                echo "$what: $(grep -m 1 -E '(ERROR|RACECHECK) SUMMARY' "$out/san.txt" || echo 'no summary')"
            else
                tail -n 60 "$out/san.txt"
                echo "$what: FAILED"
                bad=1
            fi
        done
    done
    return $bad
}
export -f sanitize
# The generated models are kept for a later call on the same machine in build-gpu/ (ignored, so
# not replaced by the next call's copy of the tree, as a carried .gpu-kit is). Capped, so that the
# sanitizers after it get some of the run.
step speed "end-to-end speed on the device" 300 tests/gpu/speed_on_device.sh "$bin" "$dev" "${KINFER_GPU_BUILD:-build-gpu}/speed-models"
[ "$real" = 1 ] && step sanitize "compute-sanitizer: memcheck, racecheck, synccheck over a k3-tiny-a eval on the device" 240 sanitize

echo
[ ${#unselected[@]} -gt 0 ] && echo "gpu: not selected (KINFER_GPU_STEPS): ${unselected[*]}"
[ ${#skipped[@]} -gt 0 ] && { echo "gpu: ${#skipped[@]} step(s) SKIPPED, nothing checked there:"; printf '  %s\n' "${skipped[@]}"; }
[ ${#not_run[@]} -gt 0 ] && { echo "gpu: ${#not_run[@]} step(s) not run (past the deadline):"; printf '  %s\n' "${not_run[@]}"; }
if [ ${#failed[@]} -eq 0 ] && [ ${#not_run[@]} -eq 0 ]; then
    echo "gpu: every step run passed in $(( $(date +%s) - start )) s ($(( ${#skipped[@]} + ${#unselected[@]} )) skipped or not selected)"
else
    [ ${#failed[@]} -gt 0 ] && { echo "gpu: ${#failed[@]} step(s) FAILED in $(( $(date +%s) - start )) s:"; printf '  %s\n' "${failed[@]}"; }
    exit 1
fi
