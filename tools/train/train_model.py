#!/usr/bin/env python3
"""Step 2 of tools/train/train.sh: train a small K3-architecture model on the prepared token ids.

Every K3 feature is on: KDA (chunked WY form, sigmoid "safe gate", full-rank output gate) +
gated MLA (NoPE, q-LoRA, output gate), AttnRes, latent MoE with routed RMSNorm, SiTU-GLU,
shared experts, sigmoid routing with a correction bias that is *not* trained by the gradient but
updated after every step with a Quantile-Balancing-style rule (see qb_update).

Resumable: a checkpoint (model, optimizer, step, elapsed time) is written atomically every
--ckpt-every steps and at the end; rerunning the same command continues where it stopped.
Batches depend only on (seed, step), so an interrupted-and-resumed run sees the same data as an
uninterrupted one. Stops at --steps or when --time-budget-min of training time is used up, then
exports the HF checkpoint (tools/reference/hf_writer.py).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
from kimi_model import KimiConfig, KimiModel, count_params  # noqa: E402
from hf_writer import export_hf  # noqa: E402

PRESETS = {
    # ~16.6 M parameters (embeddings 2.2 M), 32 experts top-4; the 90-minute 2-core run
    "small": dict(n_embd=256, n_layer=8, n_head=4, mla_layers=[3, 7], kda_head_dim=32, f_rank=32,
                  q_lora_rank=64, kv_lora_rank=64, qk_nope=32, qk_rope=16, v_head=32,
                  n_dense=1, n_ff=512, n_expert=32, n_expert_used=4, n_ff_exp=128, latent=128,
                  n_shared=2, shared_ff=256, attn_res_block=3),
    # smoke test: seconds per step
    "tiny": dict(n_embd=64, n_layer=4, n_head=2, mla_layers=[3], kda_head_dim=16, f_rank=16,
                 q_lora_rank=32, kv_lora_rank=32, qk_nope=16, qk_rope=8, v_head=16,
                 n_dense=1, n_ff=128, n_expert=16, n_expert_used=2, n_ff_exp=32, latent=32,
                 n_shared=2, shared_ff=64, attn_res_block=2),
}


def make_config(preset: str, vocab: int) -> KimiConfig:
    p = dict(PRESETS[preset])
    return KimiConfig(arch="kimi-k3", vocab=vocab, eps=1e-5, conv_kernel=4, gate_lower_bound=-5.0,
                      kda_gate_rank=0, mla_gate=True, act="situ", situ_beta=4.0, situ_linear_beta=25.0,
                      expert_weights_norm=True, expert_weights_scale=1.0, **p)


def init_weights(model: KimiModel, seed: int) -> None:
    """Small-init for training: N(0, 1/fan_in) linears, residual writers scaled by 1/sqrt(2 L),
    embeddings N(0, 1), KDA decay in the long-memory range, zero correction bias."""
    g = torch.Generator().manual_seed(seed)
    L = model.cfg.n_layer
    with torch.no_grad():
        for name, p in model.named_parameters():
            base = name.split(".")[-1]
            if base in ("attn_norm", "ffn_norm", "output_norm", "ssm_norm", "attn_q_a_norm", "attn_kv_a_norm",
                        "ffn_routed_norm"):
                p.fill_(1.0)
            elif base in ("attn_res_score", "ffn_res_score", "output_res_score"):
                p.zero_()          # AttnRes starts as a uniform average over the banked blocks
            elif base == "token_embd":
                p.normal_(0.0, 1.0, generator=g)
            elif base == "A_log":
                p.uniform_(-0.5, 0.5, generator=g)
            elif base == "ssm_dt_bias":
                p.uniform_(-4.0, -1.0, generator=g)
            elif base.startswith("conv_"):
                p.normal_(0.0, 0.5, generator=g)
            elif base == "output":
                p.normal_(0.0, 1.0 / math.sqrt(p.shape[-1]), generator=g)
            else:
                fan_in = p.shape[-1]
                std = 1.0 / math.sqrt(fan_in)
                if base in ("attn_output", "ffn_down", "ffn_routed_up"):
                    std *= 1.0 / math.sqrt(2 * L)
                p.normal_(0.0, std, generator=g)
        for moe in model.moe_layers():
            moe.exp_probs_b.zero_()


def qb_update(model: KimiModel, rate: float) -> list[float]:
    """Quantile-Balancing-style bias update (no gradient). For expert e and token t let tau_{t,e}
    be the k-th largest biased score among the *other* experts; e is picked iff
    s_{t,e} + b_e > tau_{t,e}. The bias that would give e exactly its fair share C = N*k/E of the
    tokens is b_e - q_e, where q_e is the C-th largest margin m_{t,e} = s_{t,e} + b_e - tau_{t,e}.
    Move b_e a fraction `rate` of the way there. Returns the max/mean load ratio per layer."""
    ratios = []
    for moe in model.moe_layers():
        if moe.last_route is None:
            continue
        s, sel = moe.last_route
        E, k = moe.cfg.n_expert, moe.cfg.n_expert_used
        b = moe.exp_probs_b
        biased = s + b
        top = torch.topk(biased, k + 1, dim=-1).values               # [N, k+1]
        chosen = torch.zeros_like(biased, dtype=torch.bool).scatter_(1, sel, True)
        tau = torch.where(chosen, top[:, k:k + 1], top[:, k - 1:k])  # k-th largest among the others
        margin = biased - tau                                         # [N, E]
        N = s.shape[0]
        C = max(1, min(N, int(round(N * k / E))))
        q = torch.topk(margin, C, dim=0).values[-1]                   # C-th largest per expert
        b.sub_(rate * q)
        b.sub_(b.mean())                                              # only differences matter
        load = torch.bincount(sel.reshape(-1), minlength=E).float()
        ratios.append((load.max() / load.mean()).item())
        moe.last_route = None
    return ratios


def lr_at(step: int, total: int, peak: float, warmup: int, time_frac: float = 0.0) -> float:
    """Linear warmup, then cosine from peak to peak/10. Progress is the larger of the step fraction
    and the fraction of the time budget used, so a run stopped by the budget still ends annealed."""
    if step < warmup:
        return peak * (step + 1) / warmup
    t = min(1.0, max((step - warmup) / max(1, total - warmup), time_frac))
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def get_batch(ids: np.ndarray, seed: int, step: int, batch: int, seq: int):
    rng = np.random.default_rng([seed, step])
    starts = rng.integers(0, len(ids) - seq - 1, size=batch)
    x = np.stack([ids[s:s + seq + 1] for s in starts]).astype(np.int64)
    x = torch.from_numpy(x)
    return x[:, :-1], x[:, 1:]


def save_ckpt(path: str, model, opt, step: int, elapsed: float, cfg: KimiConfig, args) -> None:
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": elapsed,
                "config": cfg.to_dict(), "args": vars(args)}, tmp)
    os.replace(tmp, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="folder written by prepare_data.py")
    ap.add_argument("--out", required=True, help="run folder: ckpt.pt, train.log.jsonl, hf/")
    ap.add_argument("--preset", default="small", choices=sorted(PRESETS))
    ap.add_argument("--steps", type=int, default=3000, help="planned steps (sets the LR schedule)")
    ap.add_argument("--time-budget-min", type=float, default=80.0, help="stop training after this much training time")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--chunk", type=int, default=16, help="KDA chunk size")
    ap.add_argument("--qb-rate", type=float, default=0.1, help="Quantile-Balancing bias step (fraction)")
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    meta = json.load(open(os.path.join(args.data, "data.json")))
    ids = np.load(os.path.join(args.data, "train.ids.npy"))
    cfg = make_config(args.preset, meta["vocab"])
    model = KimiModel(cfg)
    init_weights(model, args.seed)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and not n.endswith("token_embd")]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and not n.endswith("token_embd"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    os.makedirs(args.out, exist_ok=True)
    ckpt = os.path.join(args.out, "ckpt.pt")
    step, elapsed = 0, 0.0
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        if st["config"] != cfg.to_dict():
            raise SystemExit(f"{ckpt} was made with another config; remove it or use another --out")
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        step, elapsed = st["step"], st["elapsed"]
        print(f"train: resumed from {ckpt} at step {step} ({elapsed / 60:.1f} min trained)", flush=True)
    n_params = count_params(model)
    print(f"train: {n_params / 1e6:.2f} M parameters, {len(ids)} training tokens, preset {args.preset}, "
          f"{cfg.n_expert} experts top-{cfg.n_expert_used}", flush=True)
    log = open(os.path.join(args.out, "train.log.jsonl"), "a")
    budget = args.time_budget_min * 60
    model.train()
    while step < args.steps and elapsed < budget:
        t0 = time.time()
        lr = lr_at(step, args.steps, args.lr, args.warmup, elapsed / budget)
        for gr in opt.param_groups:
            gr["lr"] = lr
        x, y = get_batch(ids, args.seed, step, args.batch, args.seq)
        logits = model(x, kda_mode="chunk", chunk=args.chunk, kda_factorized=True)
        loss = F.cross_entropy(logits.reshape(-1, cfg.vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        with torch.no_grad():
            ratios = qb_update(model, args.qb_rate)
        step += 1
        dt = time.time() - t0
        elapsed += dt
        if step % args.log_every == 0 or step == 1:
            rec = {"step": step, "loss": round(loss.item(), 4), "lr": lr, "grad_norm": round(gn, 3),
                   "tok_per_s": round(x.numel() / dt), "max_load_ratio": round(max(ratios), 2) if ratios else None,
                   "elapsed_min": round(elapsed / 60, 2)}
            print("train: " + json.dumps(rec), flush=True)
            log.write(json.dumps(rec) + "\n")
            log.flush()
        if step % args.ckpt_every == 0:
            save_ckpt(ckpt, model, opt, step, elapsed, cfg, args)
    save_ckpt(ckpt, model, opt, step, elapsed, cfg, args)
    print(f"train: stopped at step {step} after {elapsed / 60:.1f} min of training", flush=True)
    hf = os.path.join(args.out, "hf")
    tok = os.path.join(args.data, "tokenizer")
    export_hf(model.eval(), hf, os.path.join(tok, "tiktoken.model"), os.path.join(tok, "tokenizer_config.json"))
    json.dump({"step": step, "train_minutes": round(elapsed / 60, 2), "params": n_params, "preset": args.preset,
               "batch": args.batch, "seq": args.seq, "config": cfg.to_dict()}, open(os.path.join(args.out, "run.json"), "w"), indent=2)
    print(f"train: exported HF checkpoint to {hf}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
