#!/usr/bin/env python3
"""Fine-tune the shipped demo model to chat: start from a GGUF (the Q8_0 demo model dequantized to
F32 by `kinfer quantize ... F32`), train on the dialogues of chat_data.py (loss on the assistant
replies only) mixed with plain text from the pre-training split (so plain-text perplexity holds),
then export a Hugging Face checkpoint that `kinfer convert` turns back into a GGUF.

Bounded for two shared CPU cores: it stops at --steps or after --time-budget-min minutes of
training, whichever comes first, with the cosine schedule following the further of the two (as
train_model.py does). Tokenization uses kinfer itself (`kinfer tokenize`), so the ids are exactly
those `kinfer chat` feeds the model.

  finetune_chat.py --gguf f32.gguf --chat build-chat/data/chat.jsonl --corpora ../shared/corpora \
      --kinfer build/bin/kinfer --out build-chat/run
Writes OUT/kinfer-demo/ (HF checkpoint; the directory name becomes general.name), OUT/finetune.json
(held-out chat loss before / after, steps, minutes) and OUT/train.log.jsonl.
"""
from __future__ import annotations

import argparse
import base64
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, HERE)
from gguf_load import load_gguf_model  # noqa: E402
from gguf_reader import GGUFFile  # noqa: E402
from hf_writer import export_hf  # noqa: E402
import kimi_tokenizer as kt  # noqa: E402
from prepare_data import split_text  # noqa: E402


def byte_of_unicode() -> dict[str, int]:
    """Inverse of the GPT-2 byte <-> printable-character table that GGUF 'gpt2' vocabularies use:
    printable Latin-1 bytes stand for themselves, the others are shifted to U+0100 upwards."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    table, n = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + n)] = b
            n += 1
    return table


def write_tokenizer(gguf: str, out_dir: str) -> int:
    """tiktoken.model + tokenizer_config.json recovered from the GGUF vocabulary; returns the rank count."""
    g = GGUFFile(gguf)
    toks = g.kv["tokenizer.ggml.tokens"]
    types = g.kv["tokenizer.ggml.token_type"]
    inv = byte_of_unicode()
    n_ranks = sum(1 for t in types if t == 1)   # normal tokens come first, the 256 specials follow
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "tiktoken.model"), "w") as f:
        for r in range(n_ranks):
            f.write(f"{base64.b64encode(bytes(inv[c] for c in toks[r])).decode()} {r}\n")
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(kt.tokenizer_config(n_ranks), f, indent=2)
    return n_ranks


def kinfer_tokenize(kinfer: str, model: str, text: str, path: str, special: bool) -> list[int]:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    cmd = [kinfer, "tokenize", "-m", model, "-f", path, "--ids", "--no-bos"] + ([] if special else ["--no-parse-special"])
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def load_dialogues(kinfer: str, model: str, chat: str, tmp: str, eos: int, max_len: int):
    """[(ids, target mask)] per split. Segments are joined by [EOS] and tokenized in one call; every
    segment boundary touches a special token, so the ids equal those of each rendering alone."""
    rows = [json.loads(l) for l in open(chat, encoding="utf-8")]
    segs = [s for r in rows for s in r["segments"]]
    ids = kinfer_tokenize(kinfer, model, "[EOS]".join(s[0] for s in segs) + "[EOS]", tmp, special=True)
    pieces, cur = [], []
    for t in ids:
        if t == eos:
            pieces.append(cur)
            cur = []
        else:
            cur.append(t)
    if len(pieces) != len(segs):
        raise SystemExit(f"tokenized {len(pieces)} segments, expected {len(segs)}")
    out = {"train": [], "heldout": []}
    k = 0
    for r in rows:
        x, m = [], []
        for text, target in r["segments"]:
            x += pieces[k]
            m += [float(target)] * len(pieces[k])   # true: 1, a number: that weight
            k += 1
        if len(x) <= max_len:
            out[r["split"]].append((np.array(x, dtype=np.int64), np.array(m, dtype=np.float32)))
    return out


class Sweep:
    """Draws the dialogues in epochs: each one once, in a fresh random order, before any repeats (so
    every dictionary entry gets its copies in a short run, where drawing with replacement misses some)."""

    def __init__(self, n, rng):
        self.n, self.rng, self.order, self.i, self.epochs = n, rng, [], 0, 0

    def integers(self, _n):
        if self.i >= len(self.order):
            self.order, self.i = self.rng.permutation(self.n), 0
            self.epochs += 1
        self.i += 1
        return self.order[self.i - 1]


def chat_batch(dialogues, rng, n, seq, pad, pack=False):
    """n rows of seq + 1 tokens. With pack, each row holds as many whole random dialogues as fit
    (most are far shorter than seq, so a row of one dialogue is mostly padding and the step trains
    on few reply tokens); a packed dialogue starts with its own system message, as a new chat does."""
    x = np.full((n, seq + 1), pad, dtype=np.int64)
    w = np.zeros((n, seq), dtype=np.float32)
    for i in range(n):
        pos = 0
        while True:
            ids, m = dialogues[rng.integers(len(dialogues))]
            if pos + len(ids) > seq + 1:
                break
            x[i, pos:pos + len(ids)] = ids
            # position j predicts token j+1: weight by the target's mask
            w[i, pos:pos + len(ids) - 1] = m[1:]
            pos += len(ids)
            if not pack:
                break
    return x, w


def plain_batch(ids, rng, n, seq):
    starts = rng.integers(0, len(ids) - seq - 1, size=n)
    x = np.stack([ids[s:s + seq + 1] for s in starts]).astype(np.int64)
    return x, np.ones((n, seq), dtype=np.float32)


def weighted_loss(model, x, w, chunk):
    logits = model(torch.from_numpy(x[:, :-1]), kda_mode="chunk", chunk=chunk, kda_factorized=True)
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(x[:, 1:]).reshape(-1), reduction="none")
    w = torch.from_numpy(w).reshape(-1)
    return (nll * w).sum() / w.sum().clamp(min=1.0)


def chat_loss(model, dialogues, seq, pad, chunk, n=160, batch=16):
    """Mean NLL per reply token over the first n held-out dialogues."""
    tot, cnt = 0.0, 0.0
    with torch.no_grad():
        for b0 in range(0, min(n, len(dialogues)), batch):
            part = dialogues[b0:min(n, b0 + batch)]
            x = np.full((len(part), seq + 1), pad, dtype=np.int64)
            w = np.zeros((len(part), seq), dtype=np.float32)
            for i, (ids, m) in enumerate(part):
                x[i, :len(ids)] = ids
                w[i, :len(ids) - 1] = m[1:] > 0   # unweighted: comparable across rounds and --copy-weight
            logits = model(torch.from_numpy(x[:, :-1]), kda_mode="chunk", chunk=chunk)
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(x[:, 1:]).reshape(-1),
                                  reduction="none")
            wt = torch.from_numpy(w).reshape(-1)
            tot += float((nll * wt).sum())
            cnt += float(wt.sum())
    return tot / max(cnt, 1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True, help="starting model (F32 GGUF)")
    ap.add_argument("--chat", required=True, help="chat.jsonl from chat_data.py")
    ap.add_argument("--corpora", required=True)
    ap.add_argument("--kinfer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--time-budget-min", type=float, default=45.0)
    ap.add_argument("--chat-rows", type=int, default=6, help="dialogue rows per batch")
    ap.add_argument("--plain-rows", type=int, default=2, help="plain-text rows per batch (keeps perplexity)")
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--chunk", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--pack", action="store_true", help="pack several dialogues into each row")
    ap.add_argument("--heldout-n", type=int, default=160, help="held-out dialogues scored before and after")
    ap.add_argument("--sweep", action="store_true", help="draw dialogues in shuffled epochs instead of with replacement")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    os.makedirs(args.out, exist_ok=True)

    g = GGUFFile(args.gguf)
    toks = g.kv["tokenizer.ggml.tokens"]
    eos, pad = toks.index("[EOS]"), toks.index("[PAD]")
    tmp = os.path.join(args.out, "tokenize.tmp.txt")
    data = load_dialogues(args.kinfer, args.gguf, args.chat, tmp, eos, args.seq)
    print(f"finetune: {len(data['train'])} training and {len(data['heldout'])} held-out dialogues", flush=True)
    train_txt = "".join(split_text(open(os.path.join(args.corpora, f), encoding="utf-8", errors="replace").read(), 0.05)[0]
                        for f in ("kjv_bible.txt", "fortunes_all.txt", "dict-devil.txt"))
    plain = np.array(kinfer_tokenize(args.kinfer, args.gguf, train_txt, tmp, special=False), dtype=np.int64)
    os.remove(tmp)
    print(f"finetune: {len(plain)} plain-text tokens", flush=True)

    model = load_gguf_model(args.gguf)
    before = chat_loss(model, data["heldout"], args.seq, pad, args.chunk, n=args.heldout_n)
    print(f"finetune: held-out chat loss before {before:.4f}", flush=True)
    # The router's selection bias stays as pre-training left it (no Quantile-Balancing updates):
    # padded rows would skew the loads it balances.
    params = [p for n, p in model.named_parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0)
    rng = np.random.default_rng(args.seed)
    crng = Sweep(len(data["train"]), np.random.default_rng(args.seed + 1)) if args.sweep else rng
    log = open(os.path.join(args.out, "train.log.jsonl"), "w")
    model.train()
    step, elapsed, budget = 0, 0.0, args.time_budget_min * 60
    while step < args.steps and elapsed < budget:
        t0 = time.time()
        frac = max(step / args.steps, elapsed / budget)
        lr = args.lr * (step + 1) / args.warmup if step < args.warmup else args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for gr in opt.param_groups:
            gr["lr"] = lr
        xc, wc = chat_batch(data["train"], crng, args.chat_rows, args.seq, pad, args.pack)
        xp, wp = plain_batch(plain, rng, args.plain_rows, args.seq)
        loss_c = weighted_loss(model, xc, wc, args.chunk)
        loss_p = weighted_loss(model, xp, wp, args.chunk)
        loss = loss_c + 0.5 * loss_p
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(params, 1.0).item()
        opt.step()
        for moe in model.moe_layers():
            moe.last_route = None
        step += 1
        elapsed += time.time() - t0
        if step % 10 == 0 or step == 1:
            rec = {"step": step, "chat_loss": round(loss_c.item(), 4), "plain_loss": round(loss_p.item(), 4),
                   "lr": lr, "grad_norm": round(gn, 3), "elapsed_min": round(elapsed / 60, 2)}
            if args.sweep:
                rec["epoch"] = round(crng.epochs - 1 + crng.i / max(1, crng.n), 3)
            print("finetune: " + json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
    model.eval()
    after = chat_loss(model, data["heldout"], args.seq, pad, args.chunk, n=args.heldout_n)
    print(f"finetune: held-out chat loss after {after:.4f} ({step} steps, {elapsed / 60:.1f} min)", flush=True)
    tok_dir = os.path.join(args.out, "tokenizer")
    write_tokenizer(args.gguf, tok_dir)
    hf = os.path.join(args.out, "kinfer-demo")
    export_hf(model, hf, os.path.join(tok_dir, "tiktoken.model"), os.path.join(tok_dir, "tokenizer_config.json"))
    json.dump({"steps": step, "train_minutes": round(elapsed / 60, 2), "chat_rows": args.chat_rows,
               "plain_rows": args.plain_rows, "seq": args.seq, "lr": args.lr, "pack": args.pack,
               "train_dialogues": len(data["train"]), "heldout_dialogues": len(data["heldout"]),
               "heldout_chat_loss_before": round(before, 4), "heldout_chat_loss_after": round(after, 4),
               "heldout_chat_dialogues_scored": min(args.heldout_n, len(data["heldout"])), "sweep": args.sweep,
               "epochs": round(crng.epochs - 1 + crng.i / max(1, crng.n), 3) if args.sweep else None,
               "data": json.load(open(os.path.join(os.path.dirname(args.chat), "chat.json")))
               if os.path.exists(os.path.join(os.path.dirname(args.chat), "chat.json")) else None},
              open(os.path.join(args.out, "finetune.json"), "w"), indent=2)
    print(f"finetune: exported {hf}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
