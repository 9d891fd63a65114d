#!/usr/bin/env python3
"""Parity of the PyTorch reference against llama.cpp's exact F32 logits, plus the two internal
property checks (chunked KDA == recurrent KDA, absorbed MLA == MHA MLA).

  /usr/bin/python3 tools/reference/check_llama.py [--golden ../shared/golden] [--tol 1e-3] [--quick]

Exit 0 when every check passes. Prints one line per check with the max abs difference.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gguf_load import load_gguf_model  # noqa: E402

MODELS = ["k3-tiny-a", "kl-tiny-a"]


def read_ids(path: str) -> list[int]:
    with open(path) as f:
        return [int(t) for t in f.read().split()]


def main() -> int:
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--golden", default=os.path.normpath(os.path.join(here, "../../../shared/golden")))
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--quick", action="store_true", help="p64 only")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    gl = os.path.join(args.golden, "llama.cpp")
    ok = True
    t0 = time.time()
    for name in MODELS:
        model = load_gguf_model(os.path.join(gl, "models", f"{name}-F32.gguf"))
        V = model.cfg.vocab
        prompts = ["p64"] if args.quick else ["p64", "p700"]
        for pr in prompts:
            n = 64 if pr == "p64" else 700
            ids = read_ids(os.path.join(gl, "prompts", f"prompt{n}.ids.txt"))[:n]
            meta = json.load(open(os.path.join(gl, "logits", f"{name}-F32", "exact", f"{pr}.json")))
            pos = meta.get("batch_positions") or list(range(n))
            ref = np.fromfile(os.path.join(gl, "logits", f"{name}-F32", "exact", f"{pr}.batch.f32"),
                              dtype="<f4").reshape(-1, V)
            assert ref.shape[0] == len(pos), (ref.shape, len(pos))
            with torch.no_grad():
                logits = model(torch.tensor([ids]), kda_mode="chunk", chunk=16)[0].numpy()
            d = np.abs(logits[pos] - ref)
            worst = int(pos[int(d.max(1).argmax())])
            am = int((logits[pos].argmax(1) != ref.argmax(1)).sum())
            good = d.max() <= args.tol
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}: {name}-F32 {pr} vs llama.cpp exact: max|d| {d.max():.3e} "
                  f"(mean {d.mean():.2e}, worst pos {worst}, argmax mismatches {am}/{len(pos)})")
        # property checks on p64 prefix
        ids = torch.tensor([read_ids(os.path.join(gl, "prompts", "prompt64.ids.txt"))[:64]])
        m64 = model.double()
        with torch.no_grad():
            a = m64(ids, kda_mode="chunk", chunk=16)
            b = m64(ids, kda_mode="recurrent")
            c = m64(ids, kda_mode="chunk", chunk=16, mla_absorbed=True)
            e = m64(ids[:, :45], kda_mode="chunk", chunk=16)    # partial chunk, causality
            f = m64(ids, kda_mode="chunk", chunk=16, kda_factorized=True)
        d1 = (a - b).abs().max().item()
        d2 = (a - c).abs().max().item()
        d3 = (a[:, :45] - e).abs().max().item()
        d4 = (a - f).abs().max().item()
        for label, dv in (("chunked KDA vs recurrent (f64)", d1), ("absorbed MLA vs MHA (f64)", d2),
                          ("prefix 45 vs full 64 (f64)", d3), ("factorized chunked KDA (K3 gate only) (f64)", d4)):
            good = dv <= 1e-9
            ok &= good
            print(f"{'PASS' if good else 'FAIL'}: {name} {label}: max|d| {dv:.3e}")
    print(f"done in {time.time() - t0:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
