#!/usr/bin/env python3
"""Step 1 of tools/train/train.sh: split the corpora (last 5 % of each file held out, cut at a line
break), train the byte-level BPE tokenizer on the training part only, and tokenize both parts.

Outputs in --out:
  tokenizer/tiktoken.model, tokenizer/tokenizer_config.json
  train.txt, heldout.txt        the raw text of each split (files concatenated in argument order)
  train.ids.npy, heldout.ids.npy  uint16 token ids (no BOS, plain concatenation)
  data.json                     what was done (files, byte counts, token counts)
Idempotent: skips the work when data.json exists with the same arguments.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kimi_tokenizer as kt  # noqa: E402


def split_text(text: str, frac: float) -> tuple[str, str]:
    cut = int(len(text) * (1.0 - frac))
    nl = text.find("\n", cut)
    cut = nl + 1 if nl >= 0 else cut
    return text[:cut], text[cut:]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpora", nargs="+", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ranks", type=int, default=4096)
    ap.add_argument("--heldout", type=float, default=0.05)
    ap.add_argument("--max-bytes", type=int, default=0, help="use only the first N bytes of each file (smoke tests)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    key = {"corpora": [os.path.abspath(p) for p in args.corpora], "ranks": args.ranks,
           "heldout": args.heldout, "max_bytes": args.max_bytes}
    meta_path = os.path.join(args.out, "data.json")
    if os.path.exists(meta_path) and json.load(open(meta_path)).get("args") == key:
        print(f"prepare: {meta_path} is up to date, nothing to do")
        return 0
    t0 = time.time()
    trains, helds, files = [], [], []
    for p in args.corpora:
        text = open(p, encoding="utf-8", errors="replace").read()
        if args.max_bytes:
            text = text[:args.max_bytes]
        tr, ho = split_text(text, args.heldout)
        trains.append(tr)
        helds.append(ho)
        files.append({"file": p, "chars": len(text), "train_chars": len(tr), "heldout_chars": len(ho)})
    vocab = kt.train_bpe(trains, args.ranks, log=lambda m: print(m, flush=True))
    tdir = os.path.join(args.out, "tokenizer")
    os.makedirs(tdir, exist_ok=True)
    kt.save_tiktoken(os.path.join(tdir, "tiktoken.model"), vocab)
    with open(os.path.join(tdir, "tokenizer_config.json"), "w") as f:
        json.dump(kt.tokenizer_config(len(vocab)), f, indent=2)
    print(f"prepare: tokenizer with {len(vocab)} ranks in {time.time() - t0:.0f} s", flush=True)
    enc = kt.Encoder({b: i for i, b in enumerate(vocab)})
    train_txt, held_txt = "".join(trains), "".join(helds)
    for name, txt in (("train", train_txt), ("heldout", held_txt)):
        with open(os.path.join(args.out, f"{name}.txt"), "w", encoding="utf-8") as f:
            f.write(txt)
        ids = np.array(enc.encode(txt), dtype=np.uint16)
        np.save(os.path.join(args.out, f"{name}.ids.npy"), ids)
        print(f"prepare: {name}: {len(txt)} chars -> {len(ids)} tokens", flush=True)
    meta = {"args": key, "files": files, "n_ranks": len(vocab), "vocab": len(vocab) + 256,
            "train_tokens": int(np.load(os.path.join(args.out, "train.ids.npy")).size),
            "heldout_tokens": int(np.load(os.path.join(args.out, "heldout.ids.npy")).size),
            "seconds": round(time.time() - t0, 1)}
    json.dump(meta, open(meta_path, "w"), indent=2)
    print(f"prepare: done in {meta['seconds']} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
