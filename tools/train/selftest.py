#!/usr/bin/env python3
"""Fast checks of the training tools (run by tests/reference/run.sh):
  1. the tokenizer's pre-tokenizer + rank BPE reproduce llama.cpp's ids (golden cases, gpl-3.txt);
  2. HF export -> reload round trip of a random tiny K3 model is exact (weights pre-rounded to BF16);
  3. the Quantile-Balancing bias update evens out the expert load on a fixed batch;
  4. gradients through the training path (factorized chunked KDA) equal those of the recurrence (f64);
  5. chat_data's --headword / --reference as-asked: every question form and reply pre-tokenize the word
     (the verse reference) alike.
"""
from __future__ import annotations

import os
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, HERE)
import kimi_tokenizer as kt  # noqa: E402
import train_model as tm  # noqa: E402
from hf_load import load_hf_model  # noqa: E402
from hf_writer import export_hf, to_bf16_bits  # noqa: E402


def main() -> int:
    golden = sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "../../../shared/golden")
    torch.set_num_threads(2)
    ok = True
    if os.path.isdir(golden):
        ok &= kt.selftest(golden) == 0
    cfg = tm.make_config("tiny", 4352)
    model = tm.KimiModel(cfg)
    tm.init_weights(model, 7)
    with torch.no_grad():
        for p in list(model.parameters()) + [m.exp_probs_b for m in model.moe_layers()]:
            p.copy_(torch.randn_like(p) * 0.3 + (p if p.ndim else 0))
            bits = to_bf16_bits(p.numpy()).astype(np.uint32) << 16
            p.copy_(torch.from_numpy(bits.view(np.float32)))
    with tempfile.TemporaryDirectory() as d:
        tok = os.path.join(d, "tok")
        os.makedirs(tok)
        kt.save_tiktoken(os.path.join(tok, "tiktoken.model"), [bytes([i]) for i in range(256)] + [b"ab"] * 3840)
        import json
        json.dump(kt.tokenizer_config(4096), open(os.path.join(tok, "tokenizer_config.json"), "w"))
        export_hf(model, os.path.join(d, "hf"), os.path.join(tok, "tiktoken.model"), os.path.join(tok, "tokenizer_config.json"))
        back = load_hf_model(os.path.join(d, "hf"))
    ids = torch.randint(0, 4096, (1, 40))
    with torch.no_grad():
        diff = (model.eval()(ids) - back(ids)).abs().max().item()
    good = diff == 0.0
    ok &= good
    print(f"{'PASS' if good else 'FAIL'}: HF export round trip (tiny K3): max|d| {diff:.3e}")
    # QB update evens out the load on a fixed batch
    model = tm.KimiModel(cfg)
    tm.init_weights(model, 3)
    moe = model.moe_layers()[0]
    with torch.no_grad():
        moe.exp_probs_b.copy_(torch.linspace(-0.3, 0.3, cfg.n_expert))   # deliberately unbalanced
        x = torch.randn(512, cfg.n_embd)
        moe(x)
        r0 = tm.qb_update(model, 0.0)[0]
        for _ in range(30):
            moe(x)
            r1 = tm.qb_update(model, 0.5)[0]
    good = r1 < r0 and r1 < 1.6
    ok &= good
    print(f"{'PASS' if good else 'FAIL'}: QB bias update: max/mean expert load {r0:.2f} -> {r1:.2f}")
    # gradients: factorized chunked KDA (training path) vs the plain recurrence, float64
    model = tm.KimiModel(cfg).double()
    tm.init_weights(model, 5)
    ids = torch.randint(0, 4096, (2, 37))
    grads = []
    for kw in ({"kda_mode": "recurrent"}, {"kda_mode": "chunk", "chunk": 16, "kda_factorized": True}):
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(ids, **kw).reshape(-1, cfg.vocab), ids.reshape(-1)).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters() if p.grad is not None]))
    gd = ((grads[0] - grads[1]).abs().max() / grads[0].abs().max()).item()
    good = gd < 1e-9
    ok &= good
    print(f"{'PASS' if good else 'FAIL'}: gradients chunked-factorized vs recurrent KDA (f64): rel max|d| {gd:.3e}")
    # chat_data --headword as-asked: the reply (and the think block) must carry the word as the same
    # pre-tokens as the question, else the reply cannot copy the question's tokens
    import random
    import chat_data as cd
    cd.HEADWORD = "as-asked"
    bad, spans = [], []
    rng = random.Random(3)
    for w in ("CYNIC", "ABSENT-MINDED", "LAWYER", "LOVE"):
        for _ in range(40):
            q, t, a, c = cd.make_turn("devil", (w, "n.", "A definition."), rng)
            spans.append((a, c))
            lw = " " + w.lower()
            need = kt.pretokenize(lw)
            for text in (q, t, a):
                pieces = kt.pretokenize(text)
                if not any(pieces[i:i + len(need)] == need for i in range(len(pieces))):
                    bad.append(text)
    cd.REFERENCE = "as-asked"
    for r in ("John 3:16", "1 Corinthians 13:4", "Song of Solomon 2:1"):
        for _ in range(20):
            q, t, a, c = cd.make_turn("bible", (r, "A verse."), rng)
            spans.append((a, c))
            need = kt.pretokenize(" " + r)
            for text in (q, t, a):
                pieces = kt.pretokenize(text)
                if not any(pieces[i:i + len(need)] == need for i in range(len(pieces))):
                    bad.append(text)
    # --copy-weight cuts the reply around the copied span: the pieces must pre-tokenize as the whole does
    for a, c in spans:
        cut = cd.cut_copied(a, c)
        if not cut or kt.pretokenize(a) != sum((kt.pretokenize(p) for p in cut), []):
            bad.append(f"cut at {c!r}: {a}")
    # --drill-share: a drill's segments, pre-tokenized one by one, must give the pieces of the whole
    # rendering (the reply's last segment is the copy), and the copy must be the question's pieces
    cd.COPY_WEIGHT = 5.0
    for w in ("cynic", "inspection", "a", "absent-minded"):
        for _ in range(10):
            segs = cd.drill_segments(w, rng)
            text = "".join(s[0] for s in segs)
            if kt.pretokenize(segs[-1][0]) != kt.pretokenize(" " + w) or segs[-1][1] != 5.0:
                bad.append(f"drill copy {segs[-1]!r}")
            reply = segs[-2][0] + segs[-1][0]
            if kt.pretokenize(reply) != kt.pretokenize(segs[-2][0]) + kt.pretokenize(segs[-1][0]):
                bad.append(f"drill cut: {reply!r}")
            if kt.pretokenize(" " + w)[0] not in kt.pretokenize(segs[-3][0]):
                bad.append(f"drill question without the word: {text!r}")
    good = not bad
    ok &= good
    print(f"{'PASS' if good else 'FAIL'}: chat_data as-asked headwords, references and drills pre-tokenize as in the question"
          + (f" (not in: {bad[0]!r})" if bad else ""))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
