#!/usr/bin/env bash
# End-to-end speed with the model on a device (tests/gpu/run.sh's last table): kinfer bench (pp512 /
# tg128) on the CPU and with every layer on DEVICE (prefill again on the int8 and the fused GEMMs),
# on k3-bench (Q4_K_M, made here from its recipe) and on a Kimi-Linear-48B-shaped random model
# (make_wide_model.py's kl-wide: every width of the real model, 4 layers, 32 experts top-8 (fewer,
# for the time it takes to make); MXFP4_MOE), then decode with the routed experts through a device
# cache of 10 / 25 / 50 / 100 % of them (the store pages the misses from pinned host memory), and
# decode with the routed experts grouped on the host (--moe grouped) against the default by slot,
# and decode as CUDA graphs (--cuda-graphs) against the launches one by one. The recipes are read
# from ${KINFER_GOLDEN:-../shared/golden}; without it the step says so and is skipped (the GPU
# machine may not have ../shared: copy shared/golden/llama.cpp/{bench,models} there, or point
# KINFER_GOLDEN at a copy).
#   tests/gpu/speed_on_device.sh BIN DEVICE [WORKDIR]     e.g. build-gpu/bin/kinfer cuda0
# WORKDIR (default a temporary folder) keeps the generated models between runs.
# Runs without a GPU on the simulated device too (sim:4GiB), which checks the script itself.
set -euo pipefail
cd "$(dirname "$0")/../.."
export KINFER_REQUIRE_DEVICE=1   # no quiet fall-back to the CPU when DEVICE cannot be opened
bin=${1:?usage: speed_on_device.sh BIN DEVICE [WORKDIR]}
dev=${2:?usage: speed_on_device.sh BIN DEVICE [WORKDIR]}
work=${3:-$(mktemp -d)}
golden=${KINFER_GOLDEN:-../shared/golden}
P=${KINFER_SPEED_P:-512} N=${KINFER_SPEED_N:-128}
if [ ! -f "$golden/llama.cpp/bench/k3-bench.model.json" ]; then
    echo "(no $golden/llama.cpp/bench here: the end-to-end speed table is skipped)"
    exit 77   # ctest's and run.sh's "skipped": nothing was measured
fi
mkdir -p "$work"
py=python3
python3 -c 'import numpy' 2>/dev/null || py=/usr/bin/python3
make() {   # name, quant type, generator command...
    local name=$1 type=$2
    shift 2
    [ -f "$work/$name-$type.gguf" ] && return
    # (Written under another name first: a run cut off by its time limit leaves no half a model
    # that a rerun would take for whole. kinfer quantize writes its output the same way.)
    [ -f "$work/$name-F32.gguf" ] || { "$@" -o "$work/$name-F32.gguf.part" --golden "$golden/llama.cpp" > "$work/$name.gen.log" &&
        mv "$work/$name-F32.gguf.part" "$work/$name-F32.gguf"; }
    "$bin" quantize "$work/$name-F32.gguf" "$work/$name-$type.gguf" "$type" > "$work/$name.quant.log" 2>&1
    rm -f "$work/$name-F32.gguf"
}
# The generators copy the tokenizer arrays from the tiny F32 models; a copy of the golden data
# without them (tests/gpu/pack_kit.sh's, whose size is capped) has the tiny Q4_K_M models of
# tests/data, which hold the same arrays (the generated files' sha256 is the same).
k3_tok=() kl_tok=()
[ -f "$golden/llama.cpp/models/k3-tiny-a-F32.gguf" ] || k3_tok=(--tokenizer-from tests/data/models/k3-tiny-a-Q4_K_M.gguf)
[ -f "$golden/llama.cpp/models/kl-tiny-a-F32.gguf" ] || kl_tok=(--tokenizer-from tests/data/models/kl-tiny-a-Q4_K_M.gguf)
make k3-bench Q4_K_M $py tools/bench/make_bench_model.py "${k3_tok[@]}"
make kl-wide MXFP4_MOE $py tools/bench/make_wide_model.py --model kl-wide --set n_layer=4 --set n_expert=32 "${kl_tok[@]}"
threads=$(nproc)
for m in "$work/k3-bench-Q4_K_M.gguf" "$work/kl-wide-MXFP4_MOE.gguf"; do
    echo "-- $(basename "$m"): CPU ($threads threads), then every layer on $dev"
    "$bin" bench -m "$m" -p "$P" -n "$N" -t "$threads" -r 2
    "$bin" bench -m "$m" -p "$P" -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99
    echo "-- $(basename "$m"): prefill on $dev with the GEMMs of the quantized types on the int8 tensor cores"
    echo "   (KINFER_CUDA_GEMM=int8, mmq.cu) instead of dequantized fp16 tiles and cuBLAS (the line above)"
    KINFER_CUDA_GEMM=int8 "$bin" bench -m "$m" -p "$P" -n 0 -t "$threads" -r 2 --device "$dev" -ngl 99 | tail -n 1
    echo "-- $(basename "$m"): prefill on $dev with them on the fp16 tensor cores, the weights decoded inside the"
    echo "   GEMM (KINFER_CUDA_GEMM=fused, gemm_fused.cu): no dequantized copy"
    KINFER_CUDA_GEMM=fused "$bin" bench -m "$m" -p "$P" -n 0 -t "$threads" -r 2 --device "$dev" -ngl 99 | tail -n 1
    echo "-- $(basename "$m"): prefill and decode on $dev with the chunked KDA's and the grouped MLA kernel's"
    echo "   products on the TF32 tensor cores (KINFER_CUDA_KDA / KINFER_CUDA_MLA=tf32x3) instead of fp32 FMAs"
    KINFER_CUDA_KDA=tf32x3 KINFER_CUDA_MLA=tf32x3 "$bin" bench -m "$m" -p "$P" -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 | tail -n 2
    echo "-- $(basename "$m"): prefill on $dev with them on the fp16 tensor cores instead (KINFER_CUDA_KDA=f16x3:"
    echo "   both operands split; KINFER_CUDA_MLA=f16x2: over the f16 cache, from 1024 keys on)"
    KINFER_CUDA_KDA=f16x3 KINFER_CUDA_MLA=f16x2 "$bin" bench -m "$m" -p "$P" -n 0 -t "$threads" -r 2 --device "$dev" -ngl 99 | tail -n 1
    echo "-- $(basename "$m"): decode on $dev with the routed experts grouped on the host (the router's choices"
    echo "   read back every MoE layer) instead of by slot (--moe auto above: the choices stay on the device)"
    "$bin" bench -m "$m" -p 0 -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 --moe grouped | tail -n 2
    echo "-- $(basename "$m"): decode on $dev, the kernels launched one by one, then as CUDA graphs (--cuda-graphs);"
    echo "   the experts with their layers (no store: the model fits), the slot form: no read-back to split a graph"
    "$bin" bench -m "$m" -p 0 -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 | tail -n 1
    "$bin" bench -m "$m" -p 0 -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 --cuda-graphs | tail -n 1
    echo "-- $(basename "$m"): the same through an expert store holding every expert (--expert-cache 100%, and"
    echo "   --expert-sync, which --cuda-graphs implies: the store loads its misses on the step's thread)"
    "$bin" bench -m "$m" -p 0 -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 --expert-cache 100% --expert-sync | tail -n 1
    "$bin" bench -m "$m" -p 0 -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 --expert-cache 100% --cuda-graphs | tail -n 1
    echo "-- $(basename "$m"): decode with the routed experts through a device cache of 10 / 25 / 50 / 100 %"
    for c in 10 25 50 100; do
        echo "expert cache $c %:"
        "$bin" bench -m "$m" -p 0 -n "$N" -t "$threads" -r 2 --device "$dev" -ngl 99 --expert-cache "$c%" | tail -n 2
    done
done
