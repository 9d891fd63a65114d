#!/usr/bin/env python3
"""Held-out perplexity with llama-perplexity's windows: the token stream (no BOS) is cut into
floor(n_tokens / c) chunks of c tokens, each evaluated from an empty state; the logits of positions
c/2 .. c-2 score tokens c/2+1 .. c-1 (c/2 - 1 tokens per chunk); PPL = exp(mean NLL) with a
double-precision log-softmax; +- = PPL * sqrt(var(NLL) / (N - 1)).

  /usr/bin/python3 tools/train/eval_ppl.py --hf RUN/hf --text DATA/heldout.txt [-c 512]
  /usr/bin/python3 tools/train/eval_ppl.py --gguf model-F32.gguf --ids ids.txt -c 128

Compare with `kinfer perplexity -m <gguf converted from RUN/hf> -f DATA/heldout.txt -c 512`
(mind that llama-perplexity -f strips one trailing newline and processes backslash escapes).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, HERE)


def perplexity(model, tokens: list[int], n_ctx: int, batch: int = 4, chunk: int = 16, log=print):
    n_chunk = len(tokens) // n_ctx
    if n_chunk == 0:
        raise ValueError(f"need at least {n_ctx} tokens, have {len(tokens)}")
    first = n_ctx // 2
    nll = []
    t0 = time.time()
    with torch.no_grad():
        for c0 in range(0, n_chunk, batch):
            cs = range(c0, min(n_chunk, c0 + batch))
            x = torch.tensor([tokens[c * n_ctx:(c + 1) * n_ctx] for c in cs])
            logits = model(x, kda_mode="chunk", chunk=chunk).double()
            lp = torch.log_softmax(logits[:, first:n_ctx - 1], dim=-1)
            tgt = x[:, first + 1:n_ctx]
            nll.append(-lp.gather(-1, tgt.unsqueeze(-1)).squeeze(-1).reshape(-1))
            done = min(n_chunk, c0 + batch)
            cur = torch.cat(nll)
            log(f"[{done}/{n_chunk}] ppl so far {math.exp(cur.mean().item()):.4f} ({time.time() - t0:.0f} s)")
    v = torch.cat(nll).numpy()
    ppl = math.exp(v.mean())
    err = ppl * math.sqrt(v.var() / (len(v) - 1)) if len(v) > 1 else float("nan")
    return ppl, err, len(v), n_chunk


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", help="HF checkpoint folder (tools/reference/hf_writer.py layout)")
    src.add_argument("--gguf", help="F32/F16/BF16 GGUF")
    txt = ap.add_mutually_exclusive_group(required=True)
    txt.add_argument("--text", help="raw text, tokenized with --tokenizer (default: the checkpoint's tiktoken.model)")
    txt.add_argument("--ids", help="token ids (whitespace/comma separated text, or .npy)")
    ap.add_argument("--tokenizer", help="folder with tiktoken.model")
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-chunks", type=int, default=0)
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.hf:
        from hf_load import load_hf_model
        model = load_hf_model(args.hf)
    else:
        from gguf_load import load_gguf_model
        model = load_gguf_model(args.gguf)
    if args.text:
        import kimi_tokenizer as kt
        tdir = args.tokenizer or args.hf
        if not tdir:
            raise SystemExit("--text needs --tokenizer with a GGUF model")
        enc = kt.Encoder(kt.load_tiktoken(os.path.join(tdir, "tiktoken.model")))
        tokens = enc.encode(open(args.text, encoding="utf-8").read())
    elif args.ids.endswith(".npy"):
        tokens = [int(t) for t in np.load(args.ids)]
    else:
        tokens = [int(t) for t in re.findall(r"-?\d+", open(args.ids).read())]
    if args.max_chunks:
        tokens = tokens[:args.max_chunks * args.ctx]
    ppl, err, n, n_chunk = perplexity(model, tokens, args.ctx, args.batch)
    print(f"Final estimate: PPL = {ppl:.4f} +/- {err:.5f}  ({n_chunk} chunks of {args.ctx}, {n} scored tokens)")
    if args.json:
        json.dump({"ppl": ppl, "err": err, "n_scored": n, "n_chunk": n_chunk, "ctx": args.ctx,
                   "n_tokens": len(tokens)}, open(args.json, "w"), indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
