#!/usr/bin/env bash
# Golden logits with the model on a device: every tiny model llama.cpp produced logits for, with
# every layer on DEVICE (-ngl 99), on the 64-token prompt plus 8 greedy tokens:
#   all     every layer on the device (decode matvecs, prefill GEMMs, the untiled absorbed MLA)
#           against llama.cpp's exact-mode logits;
#   tier    the same with the routed experts paged through a device cache of 25 % of them,
#           against llama.cpp's;
#   slots   --moe slots: the routed experts by slot with the choices left on the device (what
#           "all" runs for decode; here the prefill too), and the embedding table on the device
#           too (-ot token_embd=DEVICE): nothing of a step on the host; against llama.cpp's;
#   tiled   --mla-tiled-from 0: the tiled MLA kernels over the cache pages (prefill chunks in the
#           decompressed (MHA) form where it costs fewer operations, decode absorbed), against
#           the CPU running the same form;
#   mha     --mla decompressed: the untiled decompressed (MHA) form, against the CPU's;
#   graphs  "all" with --cuda-graphs: the greedy decode steps launched as CUDA graphs.
# (The MHA forms keep q_nope in fp32 where llama.cpp's absorbed form rounds it to the vec_dot
# format, so they are held to the CPU's same form, not to llama.cpp's logits.) The greedy ids
# must equal the CPU's of the same form. The logits bound per model: twice llama.cpp's own spread
# between its default and exact settings on this prompt (noise_floor.tsv: its activation and cache
# roundings), at least 1e-3. A device keeps fp32 activations in its matvecs and fp16 in its GEMMs
# where the CPU rounds them to the vec_dot format, which moves the logits by as much as llama.cpp's
# settings do: the bound is llama.cpp's spread, not the CPU's exact agreement.
# Models and logits come from ${KINFER_GOLDEN:-../shared/golden}/llama.cpp, or tests/data when
# that is absent (the two Q4_K_M models a clone ships; bound 0.5 there, without the table).
#   tests/gpu/golden_on_device.sh BIN DEVICE      e.g. build-gpu/bin/kinfer cuda0
# Exits non-zero when any model is outside its bound or any greedy continuation differs. Runs
# without a GPU on the simulated device (sim:1GiB: the CPU kernels), which checks the script, and
# on the emulated one (emu-cuda: CudaBackend and its kernels in CPU mode, a few minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:?usage: golden_on_device.sh BIN DEVICE}
dev=${2:?usage: golden_on_device.sh BIN DEVICE}
case "$dev" in sim:*) dev_name=sim0 ;; emu-cuda*) dev_name=emu-cuda0 ;; *) dev_name=$dev ;; esac   # the name -ot knows it by
gold=${KINFER_GOLDEN:-../shared/golden}/llama.cpp
ids=tests/data/prompt64.ids.txt
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
if [ -d "$gold/models" ]; then
    models=("$gold"/models/*.gguf)
    logits=$gold/logits
    floor=$gold/logits/noise_floor.tsv
else
    echo "($gold not here: the Q4_K_M models of tests/data only)"
    models=(tests/data/models/*.gguf)
    logits=tests/data/logits
    floor=
fi
bad=0
for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    want=$logits/$name/exact/p64.batch.f32
    [ -f "$want" ] || want=$logits/$name/p64.batch.f32
    [ -f "$want" ] || { echo "no logits for $name: skipped"; continue; }
    run() {   # form, extra flags...
        local form=$1
        shift
        "$bin" eval -m "$m" --tokens "$ids" --logits "$out/$name.$form.f32" --greedy 8 "$@" > "$out/$name.$form.txt" 2>"$out/$name.$form.err" ||
            { echo "FAIL $name $form: kinfer eval failed:"; cat "$out/$name.$form.err"; return 1; }
    }
    run cpu
    run cpu-tiled --mla-tiled-from 0
    run cpu-mha --mla decompressed
    run all --device "$dev" -ngl 99
    run tier --device "$dev" -ngl 99 --expert-cache 25%
    run slots --device "$dev" -ngl 99 --moe slots -ot "token_embd=$dev_name"
    run tiled --device "$dev" -ngl 99 --mla-tiled-from 0
    run mha --device "$dev" -ngl 99 --mla decompressed
    run graphs --device "$dev" -ngl 99 --cuda-graphs
    python3 - "$out" "$name" "$want" "$floor" <<'PY' || bad=1
import struct, sys
out, name, want_path, floor = sys.argv[1:5]
def load(path, n=None):
    b = open(path, "rb").read()
    v = struct.unpack(f"{len(b) // 4}f", b)
    return v if n is None else v[:n]
want = load(want_path)
bound = 1e-3 if floor else 0.5
if floor:
    for line in open(floor):
        f = line.rstrip("\n").split("\t")
        if f[0] == name and f[1] == "default" and f[2] == "p64":
            bound = max(bound, 2 * float(f[3]))
bad = 0
# form: (its reference logits, the CPU run whose greedy ids it must repeat)
for form, ref, twin in (("cpu", "llama.cpp", "cpu"), ("all", "llama.cpp", "cpu"), ("tier", "llama.cpp", "cpu"),
                        ("slots", "llama.cpp", "cpu"), ("graphs", "llama.cpp", "cpu"),
                        ("tiled", "cpu-tiled", "cpu-tiled"), ("mha", "cpu-mha", "cpu-mha")):
    ref_logits = want if ref == "llama.cpp" else load(f"{out}/{name}.{ref}.f32", len(want))
    got = load(f"{out}/{name}.{form}.f32", len(want))
    if len(got) != len(want) or len(ref_logits) != len(want):
        print(f"FAIL {name} {form}: {len(got)} logits, {len(want)} expected"); bad += 1; continue
    worst = max(abs(a - b) for a, b in zip(got, ref_logits))
    same = open(f"{out}/{name}.{form}.txt").read() == open(f"{out}/{name}.{twin}.txt").read()
    ok = worst <= bound and same
    bad += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {name:22s} {form:6s} max |d logit| vs {ref:9s} {worst:.3g} (bound {bound:.3g}), "
          f"greedy ids {'equal' if same else 'DIFFER'} ({twin})")
sys.exit(1 if bad else 0)
PY
done
[ "$bad" = 0 ] || { echo "golden logits on $dev: some model outside its bound"; exit 1; }
echo "golden logits on $dev: every model within its bound"
