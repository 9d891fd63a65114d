#!/usr/bin/env bash
# Golden logits with the model on a device: every tiny model llama.cpp produced logits for, with
# every layer on DEVICE (-ngl 99), on the 64-token prompt plus 8 greedy tokens:
#   all     every layer on the device, the routed experts with their layers (no expert store: the
#           models fit), so decode takes the slot form (decode matvecs, prefill GEMMs, the
#           untiled absorbed MLA) against llama.cpp's exact-mode logits;
#   tier    the same with the routed experts paged through a device cache of 25 % of them,
#           against llama.cpp's;
#   slots   --moe slots: the routed experts by slot with the choices left on the device (what
#           "all" runs for decode; here the prefill too), and the embedding table on the device
#           too (-ot token_embd=DEVICE): nothing of a step on the host; against llama.cpp's;
#   tiled   --mla-tiled-from 0: the tiled MLA kernels over the cache pages (prefill chunks in the
#           decompressed (MHA) form where it costs fewer operations, decode absorbed), against
#           the CPU running the same form;
#   mha     --mla decompressed: the untiled decompressed (MHA) form, against the CPU's;
#   graphs  "all" with --cuda-graphs: the greedy decode steps launched as CUDA graphs (one graph
#           a step: the slot form reads nothing back);
#   int8    "all" with KINFER_CUDA_GEMM=int8: the prefill's GEMMs of the quantized types on the int8
#           tensor cores (mmq.cu), on the CPU's int8 activations.
#   fused   "all" with KINFER_CUDA_GEMM=fused: the prefill's GEMMs of the quantized types on the fp16
#           tensor cores with the weights decoded inside the kernel (gemm_fused.cu).
#   tc      "all" with KINFER_CUDA_KDA=tf32x3 and KINFER_CUDA_MLA=tf32x3: the prefill's chunked KDA
#           and the grouped absorbed MLA kernel with their products on the TF32 tensor cores as
#           3xTF32 splits (kda_chunked_mma.cu, mla_mma.cuh);
#   tc-mha  "mha" with the same: the decompressed form's flash kernel on them (mla_mha_mma.cuh)
#           and its keys' expansion (split rows on TF32 GEMMs), against the CPU's decompressed form.
#   tc-f16  "tiled" over an f16 latent cache (-ctk f16) with KINFER_CUDA_MLA=f16x2: the absorbed
#           kernel on fp16 tensor cores, the cache's values exact and q and the probabilities split
#           in two fp16 parts (mla_mma_f16.cuh), for decode and for the prefill (which the
#           operation count gives the absorbed form on these models' 64 tokens); and
#           KINFER_CUDA_KDA=f16x3: the prefill's chunked KDA on them too (both operands split,
#           kda_chunked_mma_f16.cuh); against the CPU's tiled form over the same f16 cache;
#   tc-f16-mha  the same with the prefill in the decompressed form (--mla-tiled-form
#           decompressed): its key expansion on fp16 tensor cores (the weights split; mla_mha.cu),
#           its flash kernel on them too (both operands split, mla_mha_mma_f16.cuh); against the
#           CPU's same form.
# (The MHA forms keep q_nope in fp32 where llama.cpp's absorbed form rounds it to the vec_dot
# format, so they are held to the CPU's same form, not to llama.cpp's logits.) The greedy ids
# must equal the CPU's of the same form. The logits bound per model: twice llama.cpp's own spread
# between its default and exact settings on this prompt (noise_floor.tsv: its activation and cache
# roundings), at least 1e-3. A device keeps fp16 activations in its GEMMs (32 tokens on) and fp32
# in its matvecs of the types without an int8 form, where the CPU rounds them to the vec_dot format, which moves the logits by as much as llama.cpp's
# settings do: the bound is llama.cpp's spread, not the CPU's exact agreement. Those differences
# can also decide a near tie in a random model's router: when a form is outside its bound and its
# expert choices differ from its CPU twin's, it runs again with the twin's choices replayed
# (--routing-replay) and is held to the same bound (kl-tiny-a MXFP4_MOE on emu-cuda: token 39,
# MoE layer 4 takes experts 0 2 where the CPU takes 0 5; 0.195 as chosen, 0.071 replayed).
# Models and logits come from ${KINFER_GOLDEN:-../shared/golden}/llama.cpp, or tests/data when
# that is absent (the two Q4_K_M models a clone ships; bound 0.5 there, without the table).
#   tests/gpu/golden_on_device.sh BIN DEVICE      e.g. build-gpu/bin/kinfer cuda0
# Exits non-zero when any model is outside its bound or any greedy continuation differs. Runs
# without a GPU on the simulated device (sim:1GiB: the CPU kernels), which checks the script, and
# on the emulated one (emu-cuda: CudaBackend and its kernels in CPU mode, a few minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
# No quiet fall-back to the CPU when DEVICE cannot be opened: every form would then be the CPU's.
export KINFER_REQUIRE_DEVICE=1
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
checked=0   # models checked: none is a failure, not a pass (a wrong directory once "passed" that way)
# Each form's flags, and the CPU run it is compared with (its greedy ids; its logits for tiled / mha).
declare -A flags twin envs
flags[cpu]=""; flags[cpu-tiled]="--mla-tiled-from 0"; flags[cpu-mha]="--mla decompressed"
flags[cpu-f16]="--mla-tiled-from 0 --cache-type-k f16"
flags[cpu-f16-mha]="${flags[cpu-f16]} --mla-tiled-form decompressed"
flags[all]="--device $dev -ngl 99"
flags[tier]="--device $dev -ngl 99 --expert-cache 25%"
flags[slots]="--device $dev -ngl 99 --moe slots -ot token_embd=$dev_name"
flags[tiled]="--device $dev -ngl 99 --mla-tiled-from 0"
flags[mha]="--device $dev -ngl 99 --mla decompressed"
flags[graphs]="--device $dev -ngl 99 --cuda-graphs"
flags[int8]="--device $dev -ngl 99"; envs[int8]="KINFER_CUDA_GEMM=int8"
flags[fused]="--device $dev -ngl 99"; envs[fused]="KINFER_CUDA_GEMM=fused"
flags[tc]="--device $dev -ngl 99"; envs[tc]="KINFER_CUDA_KDA=tf32x3 KINFER_CUDA_MLA=tf32x3"
flags[tc-mha]="--device $dev -ngl 99 --mla decompressed"; envs[tc-mha]="${envs[tc]}"
flags[tc-f16]="--device $dev -ngl 99 ${flags[cpu-f16]}"; envs[tc-f16]="KINFER_CUDA_KDA=f16x3 KINFER_CUDA_MLA=f16x2"
flags[tc-f16-mha]="--device $dev -ngl 99 ${flags[cpu-f16-mha]}"; envs[tc-f16-mha]="${envs[tc-f16]}"
for f in all tier slots graphs int8 fused tc; do twin[$f]=cpu; done
twin[tiled]=cpu-tiled; twin[mha]=cpu-mha; twin[tc-mha]=cpu-mha; twin[tc-f16]=cpu-f16; twin[tc-f16-mha]=cpu-f16-mha
for m in "${models[@]}"; do
    name=$(basename "$m" .gguf)
    want=$logits/$name/exact/p64.batch.f32
    [ -f "$want" ] || want=$logits/$name/p64.batch.f32
    [ -f "$want" ] || { echo "no logits for $name: skipped"; continue; }
    checked=$((checked + 1))
    run() {   # form [as NAME] [extra flags...]: the form's flags plus the extra ones, output under NAME
        local form=$1 as=$1
        shift
        if [ "${1:-}" = as ]; then as=$2; shift 2; fi
        # shellcheck disable=SC2086  # the flags are words
        env ${envs[$form]:-} "$bin" eval -m "$m" --tokens "$ids" --logits "$out/$name.$as.f32" --greedy 8 ${flags[$form]} "$@" > "$out/$name.$as.txt" 2>"$out/$name.$as.err" ||
            { echo "FAIL $name $as: kinfer eval failed:"; cat "$out/$name.$as.err"; return 1; }
    }
    # The CPU runs record their expert choices (the same path: recording only reads them).
    for f in cpu cpu-tiled cpu-mha cpu-f16 cpu-f16-mha; do run $f --routing-record "$out/$name.$f.route"; done
    for f in all tier slots tiled mha graphs int8 fused tc tc-mha tc-f16 tc-f16-mha; do run $f; done
    check() {   # form [NAME [TOKEN]]: NAME's logits against the form's reference, its greedy ids against
                # its twin's; with TOKEN, also the form's own rows before TOKEN (untouched by a flip there)
        python3 - "$out" "$name" "$want" "$floor" "$1" "${2:-$1}" "${twin[$1]:-cpu}" "${3:--1}" <<'PY'
import struct, sys
out, name, want_path, floor, form, as_name, twin, flip = sys.argv[1:9]
flip = int(flip)
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
ref = "llama.cpp" if twin == "cpu" else twin
ref_logits = want if ref == "llama.cpp" else load(f"{out}/{name}.{ref}.f32", len(want))
got = load(f"{out}/{name}.{as_name}.f32", len(want))
if len(got) != len(want) or len(ref_logits) != len(want):
    print(f"FAIL {name} {as_name}: {len(got)} logits, {len(want)} expected"); sys.exit(1)
worst = max(abs(a - b) for a, b in zip(got, ref_logits))
same = open(f"{out}/{name}.{as_name}.txt").read() == open(f"{out}/{name}.{twin}.txt").read()
ok = worst <= bound and same
before = ""
if flip >= 0:   # the form as it ran (its own expert choices), rows before the first differing choice
    vocab = len(want) // 64   # the 64 prompt positions' rows
    own = load(f"{out}/{name}.{form}.f32", len(want))
    n = min(flip * vocab, len(want))
    early = max((abs(a - b) for a, b in zip(own[:n], ref_logits[:n])), default=0.0)
    ok = ok and early <= bound
    before = f"; {form} itself before token {flip}: {early:.3g}"
print(f"{'ok  ' if ok else 'off '} {name:22s} {as_name:17s} max |d logit| vs {ref:11s} {worst:.3g} (bound {bound:.3g}), "
      f"greedy ids {'equal' if same else 'DIFFER'} ({twin}){before}")
sys.exit(0 if ok else 1)
PY
    }
    for f in cpu all tier slots graphs int8 fused tc tiled mha tc-mha tc-f16 tc-f16-mha; do
        check $f && continue
        [ $f = cpu ] && { echo "FAIL $name cpu"; bad=1; continue; }
        # A random model's router can hold a near tie that fp32 rounding decides: then one token
        # takes another expert on the device than on the CPU, and every later position differs by
        # as much as llama.cpp's own settings move it. Where the device's choices differ from its
        # CPU twin's, the form is held to its bound again with the twin's choices replayed: the
        # same function as the twin, so what remains is the device's arithmetic. Replaying (and
        # recording) takes the grouped MoE form, also where the form ran by slot; the form's own
        # logits before the first differing choice are held to the bound too, so a fault of its
        # own path cannot hide behind the replay. (The first differing choice is the grouped
        # form's; the slot form makes the same ones while both give the same bits, which holds for
        # the int8 weight types, every quantized type here: the --moe help says when.)
        route="$out/$name.${twin[$f]}.route"
        [ -f "$route" ] || { echo "FAIL $name $f"; bad=1; continue; }
        run $f as $f-routed --routing-record "$out/$name.$f.route" || { bad=1; continue; }
        first=$(python3 - "$route" "$out/$name.$f.route" <<'PY' || true
import sys
a, b = (open(p).read().split("\n")[2:] for p in sys.argv[1:3])
for x, y in zip(a, b):   # lines "token layer expert..."; the order of a token's experts does not matter
    x, y = x.split(), y.split()
    if len(x) < 3 or len(y) < 3:
        break
    if sorted(x[2:]) != sorted(y[2:]):
        print(f"{x[0]} token {x[0]}, MoE layer {x[1]}: experts {' '.join(x[2:])} on the CPU, {' '.join(y[2:])} here"); break
PY
)
        if [ -z "$first" ]; then echo "FAIL $name $f: the same experts as ${twin[$f]}"; bad=1; continue; fi
        echo "     $name $f: the device chose other experts (${first#* }); again with ${twin[$f]}'s choices replayed:"
        run $f as $f-replay --routing-replay "$route" && check $f $f-replay "${first%% *}" || { echo "FAIL $name $f"; bad=1; }
    done
done
[ "$bad" = 0 ] || { echo "golden logits on $dev: some model outside its bound"; exit 1; }
[ "$checked" -gt 0 ] || { echo "golden logits on $dev: no model had its logits (${models[*]}): nothing checked"; exit 1; }
echo "golden logits on $dev: every model within its bound ($checked models)"
