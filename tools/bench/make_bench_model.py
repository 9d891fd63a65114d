#!/usr/bin/env python3
"""Regenerate a random-weight Kimi GGUF (F32) from its recipe, bit for bit.

The recipe is a pair of golden files:

  <model>.model.json       config, generator rules and every tensor in generation
                           order (name, numpy shape, init rule)
  <model>-F32.gguf-kv.json every GGUF metadata key, in file order, with its type;
                           long arrays are abbreviated to their first elements

The abbreviated arrays (tokenizer.ggml.tokens / token_type / merges) are read from
a reference GGUF that carries the same tokenizer: the tiny model with the same
config.vocab_layout (k3-tiny-a for "k3", kl-tiny-a for "k2": the two differ only in
18 special-token strings, so the layout matters for bit identity).

The GGUF v3 writer below is self-contained (no gguf-py). It lays the file out the
way llama.cpp's gguf-py GGUFWriter does: KV pairs in the given order, tensor infos
in insertion (= generation) order, 32-byte alignment, every tensor's data padded
to a multiple of the alignment (the last one included).

Default: the kimi-k3 "bench" model (1.5 GB) from ../shared/golden/llama.cpp/bench,
written to /work/bench-models/k3-bench-F32.gguf and checked against the sha256 in
the model json.

Examples
  tools/bench/make_bench_model.py
  tools/bench/make_bench_model.py --model k3-tiny-a -o /tmp/k3-tiny-a-F32.gguf
  tools/bench/make_bench_model.py --model kl-tiny-a -o /tmp/kl-tiny-a-F32.gguf

Requires python3 with numpy (Debian: apt-get install python3-numpy).
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys

import numpy as np

ALIGNMENT = 32
GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
GGML_TYPE_F32 = 0

# GGUF metadata value types
T_UINT8, T_INT8, T_UINT16, T_INT16, T_UINT32, T_INT32, T_FLOAT32, T_BOOL, \
    T_STRING, T_ARRAY, T_UINT64, T_INT64, T_FLOAT64 = range(13)

TYPE_BY_NAME = {
    "UINT8": T_UINT8, "INT8": T_INT8, "UINT16": T_UINT16, "INT16": T_INT16,
    "UINT32": T_UINT32, "INT32": T_INT32, "FLOAT32": T_FLOAT32, "BOOL": T_BOOL,
    "STRING": T_STRING, "ARRAY": T_ARRAY, "UINT64": T_UINT64, "INT64": T_INT64,
    "FLOAT64": T_FLOAT64,
}
SCALAR_FMT = {
    T_UINT8: "<B", T_INT8: "<b", T_UINT16: "<H", T_INT16: "<h", T_UINT32: "<I",
    T_INT32: "<i", T_FLOAT32: "<f", T_BOOL: "<?", T_UINT64: "<Q", T_INT64: "<q",
    T_FLOAT64: "<d",
}

# reference GGUF carrying the full tokenizer arrays, by model.json config.vocab_layout
TOKENIZER_REF_BY_LAYOUT = {"k3": "k3-tiny-a-F32.gguf", "k2": "kl-tiny-a-F32.gguf"}

GOLDEN_DEFAULT = os.path.normpath(os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "shared", "golden", "llama.cpp"))


# --------------------------------------------------------------------------- reader

# The reference GGUF is read with tools/reference/gguf_reader.py (values and their types).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from gguf_reader import GGUFFile  # noqa: E402


# --------------------------------------------------------------------------- writer

def _pad(n, align=ALIGNMENT):
    return (n + align - 1) // align * align


def _enc_str(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _enc_value(vtype, value):
    if vtype == T_STRING:
        return _enc_str(value)
    if vtype == T_ARRAY:
        etype, items = value
        out = [struct.pack("<IQ", etype, len(items))]
        if etype in SCALAR_FMT:
            fmt = "<%d%s" % (len(items), SCALAR_FMT[etype][1])
            out.append(struct.pack(fmt, *items))
        else:
            out.extend(_enc_value(etype, v) for v in items)
        return b"".join(out)
    return struct.pack(SCALAR_FMT[vtype], value)


def encode_header(kv, tensor_infos):
    """kv: list of (key, type, value); tensor_infos: list of (name, numpy shape).
    All tensors are F32. Returns (header bytes incl. padding, list of data sizes)."""
    out = [GGUF_MAGIC, struct.pack("<IQQ", GGUF_VERSION, len(tensor_infos), len(kv))]
    for key, vtype, value in kv:
        out.append(_enc_str(key))
        out.append(struct.pack("<I", vtype))
        out.append(_enc_value(vtype, value))
    offset = 0
    sizes = []
    for name, shape in tensor_infos:
        ne = list(reversed(shape))
        nbytes = 4 * math.prod(shape)
        out.append(_enc_str(name))
        out.append(struct.pack("<I", len(ne)))
        out.append(struct.pack("<%dq" % len(ne), *ne))
        out.append(struct.pack("<IQ", GGML_TYPE_F32, offset))
        offset += _pad(nbytes)
        sizes.append(nbytes)
    header = b"".join(out)
    header += b"\0" * (_pad(len(header)) - len(header))
    return header, sizes


# --------------------------------------------------------------------------- recipe

def build_kv(kv_json, tokenizer_ref):
    """Metadata in kv-json order. Arrays abbreviated in the json come from tokenizer_ref."""
    kv = []
    for key, ent in kv_json.items():
        vtype = TYPE_BY_NAME[ent["type"]]
        value = ent["value"]
        if vtype == T_ARRAY:
            etype = TYPE_BY_NAME[value["array_of"]]
            length = value["length"]
            items = value["head"]
            if len(items) != length:
                if tokenizer_ref is None:
                    raise SystemExit(f"{key}: abbreviated in the kv json and no reference GGUF given")
                if key not in tokenizer_ref.kv:
                    raise SystemExit(f"{key}: not in the reference GGUF")
                rtype, rval = tokenizer_ref.kv_types[key], tokenizer_ref.kv[key]
                if rtype != (T_ARRAY, etype) or len(rval) != length or rval[:len(items)] != items:
                    raise SystemExit(f"{key}: reference GGUF disagrees with the kv json")
                items = rval
            value = (etype, items)
        elif vtype == T_FLOAT32:
            value = float(value)
        kv.append((key, vtype, value))
    return kv


def make_tensor(rng, shape, init):
    f32 = np.float32
    rule = init[0]
    if rule == "normal":
        std = init[1]
        return rng.standard_normal(shape, dtype=f32) * f32(std)
    if rule == "normal_mean":
        mean, std = init[1], init[2]
        return f32(mean) + rng.standard_normal(shape, dtype=f32) * f32(std)
    if rule == "uniform":
        lo, hi = init[1], init[2]
        return rng.uniform(lo, hi, shape).astype(f32)
    if rule == "neg_exp_uniform":
        lo, hi = init[1], init[2]
        a_log = rng.uniform(lo, hi, shape).astype(f32)
        return -np.exp(a_log)
    if rule == "expert_mix":
        std, r = init[1], init[2]
        base = rng.standard_normal(shape[1:], dtype=f32)
        dev = rng.standard_normal(shape, dtype=f32)
        return (base[None] + f32(r) * dev) * (f32(std) / f32(math.sqrt(1 + r * r)))
    raise SystemExit(f"unknown init rule {rule!r}")


def generate(model_json, kv_json, tokenizer_ref, out_path, verbose=True):
    seed = model_json["config"]["seed"]
    tensors = model_json["tensors"]
    kv = build_kv(kv_json, tokenizer_ref)
    infos = [(t["name"], tuple(t["numpy_shape"])) for t in tensors]
    header, sizes = encode_header(kv, infos)

    rng = np.random.default_rng(seed)
    sha = hashlib.sha256()
    total = len(header)
    n_params = 0
    tmp_path = out_path + ".tmp"
    with open(tmp_path, "wb") as f:
        f.write(header)
        sha.update(header)
        for i, t in enumerate(tensors):
            shape = tuple(t["numpy_shape"])
            a = make_tensor(rng, shape, t["init"])
            assert a.dtype == np.float32 and a.shape == shape, t["name"]
            data = np.ascontiguousarray(a).astype("<f4", copy=False).tobytes()
            assert len(data) == sizes[i]
            pad = b"\0" * (_pad(len(data)) - len(data))
            f.write(data)
            f.write(pad)
            sha.update(data)
            sha.update(pad)
            total += len(data) + len(pad)
            n_params += a.size
            if verbose and (i + 1) % 50 == 0:
                print(f"  {i + 1}/{len(tensors)} tensors, {total / 2**20:.1f} MiB", file=sys.stderr)
    os.replace(tmp_path, out_path)
    return sha.hexdigest(), total, n_params


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golden", default=GOLDEN_DEFAULT,
                    help="golden llama.cpp data dir (default: %(default)s)")
    ap.add_argument("--model", default="k3-bench",
                    help="k3-bench (default), k3-tiny-a or kl-tiny-a; picks the recipe files")
    ap.add_argument("--model-json", help="override: <model>.model.json")
    ap.add_argument("--kv-json", help="override: <model>-F32.gguf-kv.json")
    ap.add_argument("--tokenizer-from",
                    help="GGUF holding the full tokenizer arrays "
                         "(default by vocab_layout: k3 -> <golden>/models/k3-tiny-a-F32.gguf, "
                         "k2 -> kl-tiny-a-F32.gguf)")
    ap.add_argument("-o", "--output", help="output GGUF (default for k3-bench: "
                                           "/work/bench-models/k3-bench-F32.gguf)")
    ap.add_argument("--expect-sha256", help="sha256 to check (default: from the model json "
                                            "'files' entry or models/SHA256SUMS)")
    args = ap.parse_args()

    g = args.golden
    sub = "bench" if args.model == "k3-bench" else "models"
    model_json_path = args.model_json or os.path.join(g, sub, f"{args.model}.model.json")
    kv_json_path = args.kv_json or os.path.join(g, sub, f"{args.model}-F32.gguf-kv.json")
    out = args.output
    if out is None:
        out = "/work/bench-models/k3-bench-F32.gguf" if args.model == "k3-bench" \
            else f"{args.model}-F32.gguf"
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    with open(model_json_path) as f:
        model_json = json.load(f)
    with open(kv_json_path) as f:
        kv_json = json.load(f)
    # The special tokens differ by vocab layout: "k3" (kimi-k3) vs "k2" (kimi-linear);
    # tokens, token_type and merges are otherwise those of the tiny models.
    layout = model_json["config"].get("vocab_layout", "k3")
    tok_path = args.tokenizer_from or os.path.join(
        g, "models", TOKENIZER_REF_BY_LAYOUT.get(layout, "k3-tiny-a-F32.gguf"))
    tokenizer_ref = GGUFFile(tok_path) if os.path.exists(tok_path) else None

    fname = f"{args.model}-F32.gguf"
    expect = args.expect_sha256
    expect_bytes = None
    if expect is None:
        ent = model_json.get("files", {}).get(fname)
        if ent:
            expect, expect_bytes = ent["sha256"], ent.get("bytes")
        else:
            sums = os.path.join(g, "models", "SHA256SUMS")
            if os.path.exists(sums):
                for line in open(sums):
                    parts = line.split()
                    if len(parts) == 2 and parts[1] == fname:
                        expect = parts[0]

    print(f"recipe  {model_json_path}\nkv      {kv_json_path}\n"
          f"tokens  {tok_path if tokenizer_ref else '(none)'}\nout     {out}", file=sys.stderr)
    digest, size, n_params = generate(model_json, kv_json, tokenizer_ref, out)
    print(f"{digest}  {out}")
    print(f"bytes {size}, tensors {len(model_json['tensors'])}, params {n_params}", file=sys.stderr)
    ok = True
    if "n_params" in model_json and model_json["n_params"] != n_params:
        print(f"MISMATCH n_params: expected {model_json['n_params']}", file=sys.stderr)
        ok = False
    if expect_bytes is not None and expect_bytes != size:
        print(f"MISMATCH size: expected {expect_bytes}", file=sys.stderr)
        ok = False
    if expect:
        if digest == expect:
            print("sha256 OK (matches the golden file)", file=sys.stderr)
        else:
            print(f"sha256 MISMATCH: expected {expect}", file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
