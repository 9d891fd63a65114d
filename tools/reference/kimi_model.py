"""PyTorch reference of the Kimi K3 / Kimi Linear text model, written from DESIGN.md section 3
(exact math) and section 6 (numerics). No code from other projects.

One module serves two purposes:
  * a readable, exact forward pass for parity checks against llama.cpp (tools/reference/check_llama.py);
  * a trainable model (autograd everywhere, chunked KDA) for tools/train/.

Parameter shapes follow numpy order of the GGUF tensors (= reversed ggml ne), i.e. linear weights
are [out, in] exactly like torch.nn.Linear. The few exceptions are noted where they occur
(conv weights are [d_inner, W], the KDA decay parameter is stored as A_log = log(-ssm_a)).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F

MOE_WEIGHT_SUM_MIN = 6.103515625e-5   # DESIGN 6: renormalisation divides by max(sum, this)


@dataclass
class KimiConfig:
    arch: str = "kimi-k3"              # "kimi-k3" or "kimi-linear"
    vocab: int = 4352
    n_embd: int = 256
    n_layer: int = 8
    n_head: int = 2                    # KDA heads == MLA heads (as llama.cpp requires)
    mla_layers: list = field(default_factory=lambda: [3, 7])   # 0-based; all others are KDA
    eps: float = 1e-5                  # the single rms eps of DESIGN 6 (also the KDA L2-norm eps)
    # KDA
    kda_head_dim: int = 32
    conv_kernel: int = 4
    f_rank: int = 32                   # ssm_f_a output size
    gate_lower_bound: float | None = -5.0   # K3 "safe gate"; None = Kimi Linear softplus gate
    kda_gate_rank: int = 0             # 0 = full-rank ssm_g (K3); >0 = low-rank ssm_g_a/ssm_g_b (KL)
    # MLA
    q_lora_rank: int = 64              # 0 = plain attn_q
    kv_lora_rank: int = 64
    qk_nope: int = 32
    qk_rope: int = 32
    v_head: int = 32
    mla_gate: bool = True              # K3 output gate attn_gate
    # FFN / MoE
    n_dense: int = 1                   # leading dense layers
    n_ff: int = 64                     # dense FFN width
    n_expert: int = 32
    n_expert_used: int = 4
    n_ff_exp: int = 32
    latent: int = 32                   # 0 = experts at n_embd (KL)
    n_shared: int = 2
    shared_ff: int = 64                # total width of the shared expert(s)
    act: str = "situ"                  # "situ" (K3) or "silu" (SwiGLU, KL)
    situ_beta: float = 4.0
    situ_linear_beta: float = 25.0
    expert_weights_norm: bool = True
    expert_weights_scale: float = 1.0
    attn_res_block: int = 0            # 0 = plain residual (KL)

    @property
    def d_inner(self) -> int:
        return self.n_head * self.kda_head_dim

    def is_mla(self, il: int) -> bool:
        return il in self.mla_layers

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- basic ops

def rms_norm(x: torch.Tensor, w: torch.Tensor | None, eps: float) -> torch.Tensor:
    """w * x / sqrt(mean(x^2) + eps) (ggml: scale first, then multiply by the weight)."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y * w if w is not None else y


def l2_norm(x: torch.Tensor, eps: float) -> torch.Tensor:
    """ggml's L2 norm: x / max(sqrt(sum x^2), eps) (DESIGN 6)."""
    return x / torch.clamp(x.pow(2).sum(-1, keepdim=True).sqrt(), min=eps)


def glu_act(cfg: KimiConfig, g: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    if cfg.act == "silu":
        return F.silu(g) * u
    # SiTU-GLU: [b*tanh(g/b)*sigmoid(g)] * [bl*tanh(u/bl)]  (bl <= 0 disables the up clamp)
    b, bl = cfg.situ_beta, cfg.situ_linear_beta
    a = torch.tanh(g / b) * b * torch.sigmoid(g)
    up = torch.tanh(u / bl) * bl if bl > 0 else u
    return a * up


def causal_depthwise_conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """x [B,T,C], w [C,W]: y_t = sum_j w[:,j] x_{t-(W-1)+j} (tap W-1 = current token), zero history."""
    W = w.shape[1]
    T = x.shape[1]
    xp = F.pad(x, (0, 0, W - 1, 0))
    y = xp[:, W - 1:W - 1 + T] * w[:, W - 1]
    for j in range(W - 1):
        y = y + xp[:, j:j + T] * w[:, j]
    return y


# ----------------------------------------------------------------------------- KDA core

def kda_recurrent(q, k, v, g, beta, S=None):
    """Exact recurrence of DESIGN 3.2. q,k,g [B,H,T,D], v [B,H,T,Dv], beta [B,H,T].
    Per step: S = diag(exp(g_t)) S; u = beta_t (v_t - S^T k_t); S += k_t u^T; o_t = S^T q_t."""
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    outs = []
    for t in range(T):
        S = torch.exp(g[:, :, t]).unsqueeze(-1) * S
        kt = k[:, :, t]
        u = beta[:, :, t].unsqueeze(-1) * (v[:, :, t] - torch.einsum("bhd,bhdv->bhv", kt, S))
        S = S + kt.unsqueeze(-1) * u.unsqueeze(-2)
        outs.append(torch.einsum("bhd,bhdv->bhv", q[:, :, t], S))
    return torch.stack(outs, dim=2), S


def kda_chunked(q, k, v, g, beta, chunk: int = 16, S=None, factorized: bool = False):
    """Chunked (WY / UT-transform) form of the same recurrence; equal up to rounding.

    Inside a chunk with cumulative log-decay G_t (inclusive) and incoming state S0:
      u_t + sum_{i<t} A_ti u_i = beta_t (v_t - S0^T (e^{G_t} k_t)),  A_ti = beta_t sum_d k_t k_i e^{G_t-G_i}
      => U = (I+A)^{-1} diag(beta) V - (I+A)^{-1} diag(beta) (e^G k) S0            (lower-triangular solve)
      o_t = S0^T (e^{G_t} q_t) + sum_{i<=t} M_ti u_i,  M_ti = sum_d q_t k_i e^{G_t-G_i}
      S_C = diag(e^{G_C}) S0 + sum_i (k_i e^{G_C-G_i}) u_i^T
    All exponents are differences G_t-G_i <= 0 (masked before exp), so nothing overflows.

    factorized=True (training speed): e^{G_t-G_i} = e^{G_t-R} e^{R-G_i} with R the chunk's middle
    cumulative decay, so the [t,i] products become matmuls. Safe only when |G_t-R| stays well inside
    float range, i.e. for a bounded gate (K3: g >= -5, so |G_t-R| <= 5*C/2 = 40 for C = 16).
    """
    B, H, T, D = q.shape
    Dv = v.shape[-1]
    C = chunk
    pad = (-T) % C
    if pad:  # padded steps: k=0, beta=0, g=0 -> no output used, state unchanged
        q, k, v, g = (F.pad(t_, (0, 0, 0, pad)) for t_ in (q, k, v, g))
        beta = F.pad(beta, (0, pad))
    n = (T + pad) // C
    q, k, v, g = (t_.reshape(B, H, n, C, -1) for t_ in (q, k, v, g))
    beta = beta.reshape(B, H, n, C)
    G = g.cumsum(-2)                                                  # [B,H,n,C,D]
    incl = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
    if factorized:
        R = G[..., C // 2:C // 2 + 1, :]
        kp, km, qp = k * torch.exp(G - R), k * torch.exp(R - G), q * torch.exp(G - R)
        kk = kp @ km.transpose(-1, -2)                                # [B,H,n,t,i]
        M = (qp @ km.transpose(-1, -2)).masked_fill(~incl, 0.0)
    else:
        diff = G.unsqueeze(-2) - G.unsqueeze(-3)                      # [B,H,n,t,i,D] = G_t - G_i
        dec = torch.exp(diff.masked_fill(~incl[..., None], float("-inf")))
        kk = (k.unsqueeze(-2) * dec * k.unsqueeze(-3)).sum(-1)      # [B,H,n,t,i]
        M = (q.unsqueeze(-2) * dec * k.unsqueeze(-3)).sum(-1)       # inclusive lower (dec is 0 above)
    A = (kk * beta.unsqueeze(-1)).masked_fill(~incl.tril(-1), 0.0)
    eG = torch.exp(G)
    Qt = eG * q
    Kt = eG * k
    Kh = k * torch.exp(G[..., -1:, :] - G)
    # (I+A)^{-1} for strictly lower-triangular (nilpotent) A: sum_j (-A)^j
    #   = (I - A)(I + A^2)(I + A^4)...  (A^C = 0), i.e. log2(C) batched matmuls instead of a solve.
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    Tinv = eye - A
    P = A @ A
    span = 2
    while span < C:
        Tinv = Tinv @ (eye + P)
        P = P @ P
        span *= 2
    bv = beta.unsqueeze(-1)
    Wv = Tinv @ (bv * v)
    Wk = Tinv @ (bv * Kt)
    if S is None:
        S = q.new_zeros(B, H, D, Dv)
    outs = []
    # unbind once: indexing chunk c inside the loop would make autograd zero-fill a full-size
    # gradient per chunk (quadratic in the number of chunks)
    per_chunk = zip(Wv.unbind(2), Wk.unbind(2), Qt.unbind(2), M.unbind(2), eG[..., -1, :].unbind(2),
                    Kh.transpose(-1, -2).unbind(2))
    for wv, wk, qt, m, eg_last, kh_t in per_chunk:
        U = wv - wk @ S
        outs.append(qt @ S + m @ U)
        S = eg_last.unsqueeze(-1) * S + kh_t @ U
    o = torch.stack(outs, dim=2).reshape(B, H, n * C, Dv)[:, :, :T]
    return o, S


# ----------------------------------------------------------------------------- layers

def _lin(out_f: int, in_f: int) -> nn.Parameter:
    return nn.Parameter(torch.randn(out_f, in_f) / math.sqrt(in_f))


class KDA(nn.Module):
    def __init__(self, cfg: KimiConfig):
        super().__init__()
        self.cfg = cfg
        d, di, H, D, W = cfg.n_embd, cfg.d_inner, cfg.n_head, cfg.kda_head_dim, cfg.conv_kernel
        self.attn_q, self.attn_k, self.attn_v = _lin(di, d), _lin(di, d), _lin(di, d)
        self.conv_q = nn.Parameter(torch.randn(di, W) * 0.5)
        self.conv_k = nn.Parameter(torch.randn(di, W) * 0.5)
        self.conv_v = nn.Parameter(torch.randn(di, W) * 0.5)
        self.ssm_f_a, self.ssm_f_b = _lin(cfg.f_rank, d), _lin(di, cfg.f_rank)
        self.ssm_dt_bias = nn.Parameter(torch.empty(di).uniform_(-5, -2))
        self.ssm_beta = _lin(H, d)
        self.A_log = nn.Parameter(torch.empty(H).uniform_(-0.5, 0.5))   # ssm_a = -exp(A_log)
        if cfg.kda_gate_rank > 0:
            self.ssm_g_a, self.ssm_g_b = _lin(cfg.kda_gate_rank, d), _lin(di, cfg.kda_gate_rank)
        else:
            self.ssm_g = _lin(di, d)
        self.ssm_norm = nn.Parameter(torch.ones(D))
        self.attn_output = nn.Parameter(torch.randn(d, di) / math.sqrt(di) * 0.1)

    def forward(self, x, mode: str = "chunk", chunk: int = 16, factorized: bool = False):
        cfg = self.cfg
        B, T, _ = x.shape
        H, D = cfg.n_head, cfg.kda_head_dim
        q = F.silu(causal_depthwise_conv(x @ self.attn_q.T, self.conv_q))
        k = F.silu(causal_depthwise_conv(x @ self.attn_k.T, self.conv_k))
        v = F.silu(causal_depthwise_conv(x @ self.attn_v.T, self.conv_v))
        f = (x @ self.ssm_f_a.T) @ self.ssm_f_b.T + self.ssm_dt_bias          # [B,T,d_inner]
        f = f.view(B, T, H, D)
        a = torch.exp(self.A_log).view(1, 1, H, 1)                              # = -ssm_a
        if cfg.gate_lower_bound is not None:
            g = cfg.gate_lower_bound * torch.sigmoid(a * f)                     # K3
        else:
            g = -a * F.softplus(f)                                               # Kimi Linear
        beta = torch.sigmoid(x @ self.ssm_beta.T)                               # [B,T,H]
        q = l2_norm(q.view(B, T, H, D), cfg.eps) * (1.0 / math.sqrt(D))
        k = l2_norm(k.view(B, T, H, D), cfg.eps)
        v = v.view(B, T, H, D)
        tr = lambda t_: t_.transpose(1, 2)
        if mode == "recurrent":
            o, _ = kda_recurrent(tr(q), tr(k), tr(v), tr(g), beta.transpose(1, 2))
        else:
            o, _ = kda_chunked(tr(q), tr(k), tr(v), tr(g), beta.transpose(1, 2), chunk=chunk,
                               factorized=factorized and cfg.gate_lower_bound is not None)
        o = o.transpose(1, 2)                                                    # [B,T,H,D]
        if cfg.kda_gate_rank > 0:
            gate = (x @ self.ssm_g_a.T) @ self.ssm_g_b.T
        else:
            gate = x @ self.ssm_g.T
        o = rms_norm(o, self.ssm_norm, cfg.eps) * torch.sigmoid(gate.view(B, T, H, D))
        return o.reshape(B, T, H * D) @ self.attn_output.T


class MLA(nn.Module):
    def __init__(self, cfg: KimiConfig):
        super().__init__()
        self.cfg = cfg
        d, H = cfg.n_embd, cfg.n_head
        dq = cfg.qk_nope + cfg.qk_rope
        if cfg.q_lora_rank > 0:
            self.attn_q_a = _lin(cfg.q_lora_rank, d)
            self.attn_q_a_norm = nn.Parameter(torch.ones(cfg.q_lora_rank))
            self.attn_q_b = _lin(H * dq, cfg.q_lora_rank)
        else:
            self.attn_q = _lin(H * dq, d)
        self.attn_kv_a_mqa = _lin(cfg.kv_lora_rank + cfg.qk_rope, d)
        self.attn_kv_a_norm = nn.Parameter(torch.ones(cfg.kv_lora_rank))
        # attn_k_b [H, kv_lora, nope] (k_nope_h = k_b[h]^T c), attn_v_b [H, v, kv_lora] (v_h = v_b[h] c)
        self.attn_k_b = nn.Parameter(torch.randn(H, cfg.kv_lora_rank, cfg.qk_nope) / math.sqrt(cfg.kv_lora_rank))
        self.attn_v_b = nn.Parameter(torch.randn(H, cfg.v_head, cfg.kv_lora_rank) / math.sqrt(cfg.kv_lora_rank))
        if cfg.mla_gate:
            self.attn_gate = _lin(H * cfg.v_head, d)
        self.attn_output = nn.Parameter(torch.randn(d, H * cfg.v_head) / math.sqrt(H * cfg.v_head) * 0.1)

    def forward(self, x, absorbed: bool = False):
        cfg = self.cfg
        B, T, _ = x.shape
        H, dn, dr = cfg.n_head, cfg.qk_nope, cfg.qk_rope
        if cfg.q_lora_rank > 0:
            q = rms_norm(x @ self.attn_q_a.T, self.attn_q_a_norm, cfg.eps) @ self.attn_q_b.T
        else:
            q = x @ self.attn_q.T
        q = q.view(B, T, H, dn + dr)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        kv = x @ self.attn_kv_a_mqa.T
        c = rms_norm(kv[..., :cfg.kv_lora_rank], self.attn_kv_a_norm, cfg.eps)   # [B,T,r]
        k_pe = kv[..., cfg.kv_lora_rank:]                                         # [B,T,dr] (NoPE: never rotated)
        scale = 1.0 / math.sqrt(dn + dr)                                          # 1/sqrt(key_length_mla)
        if absorbed:   # decode form: q_abs_h = k_b[h] q_nope_h, scores against the latent cache
            q_abs = torch.einsum("bthn,hrn->bthr", q_nope, self.attn_k_b)
            s = torch.einsum("bthr,bsr->bhts", q_abs, c) + torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        else:          # MHA form: decompress K/V per head
            k_nope = torch.einsum("bsr,hrn->bshn", c, self.attn_k_b)
            s = torch.einsum("bthn,bshn->bhts", q_nope, k_nope) + torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        s = s * scale
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        p = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1)         # [B,H,T,S]
        if absorbed:
            lat = torch.einsum("bhts,bsr->bthr", p, c)
            o = torch.einsum("bthr,hvr->bthv", lat, self.attn_v_b)
        else:
            v = torch.einsum("bsr,hvr->bshv", c, self.attn_v_b)
            o = torch.einsum("bhts,bshv->bthv", p, v)
        o = o.reshape(B, T, H * cfg.v_head)
        if cfg.mla_gate:
            o = o * torch.sigmoid(x @ self.attn_gate.T)
        return o @ self.attn_output.T


class DenseFFN(nn.Module):
    def __init__(self, cfg: KimiConfig, n_ff: int, down_gain: float = 0.1):
        super().__init__()
        self.cfg = cfg
        self.ffn_gate, self.ffn_up = _lin(n_ff, cfg.n_embd), _lin(n_ff, cfg.n_embd)
        self.ffn_down = nn.Parameter(torch.randn(cfg.n_embd, n_ff) / math.sqrt(n_ff) * down_gain)

    def forward(self, x):
        return glu_act(self.cfg, x @ self.ffn_gate.T, x @ self.ffn_up.T) @ self.ffn_down.T


class MoE(nn.Module):
    """Sigmoid router, correction bias used for selection only, renormalise + scale, optional
    latent space (K3) with RMSNorm before the up projection, shared experts at full width."""

    def __init__(self, cfg: KimiConfig):
        super().__init__()
        self.cfg = cfg
        d, E, ff = cfg.n_embd, cfg.n_expert, cfg.n_ff_exp
        di = cfg.latent if cfg.latent > 0 else d
        self.ffn_gate_inp = nn.Parameter(torch.randn(E, d) / math.sqrt(d))
        # exp_probs_b: a buffer, never trained through the gradient (Quantile-Balancing style update)
        self.register_buffer("exp_probs_b", torch.zeros(E))
        if cfg.latent > 0:
            self.ffn_routed_down = _lin(cfg.latent, d)
            self.ffn_routed_norm = nn.Parameter(torch.ones(cfg.latent))
            self.ffn_routed_up = nn.Parameter(torch.randn(d, cfg.latent) / math.sqrt(cfg.latent) * 0.1)
        self.ffn_gate_exps = nn.Parameter(torch.randn(E, ff, di) / math.sqrt(di))
        self.ffn_up_exps = nn.Parameter(torch.randn(E, ff, di) / math.sqrt(di))
        self.ffn_down_exps = nn.Parameter(torch.randn(E, di, ff) / math.sqrt(ff) * (1.0 if cfg.latent > 0 else 0.1))
        if cfg.n_shared > 0:
            self.shexp = DenseFFN(cfg, cfg.shared_ff)
        self.last_route = None   # (scores s [N,E], top-k ids [N,k]) of the last forward, for the bias update

    def forward(self, x):
        cfg = self.cfg
        shp = x.shape
        x = x.reshape(-1, shp[-1])
        N = x.shape[0]
        s = torch.sigmoid(x @ self.ffn_gate_inp.T)                               # [N,E]
        sel = torch.topk(s + self.exp_probs_b, cfg.n_expert_used, dim=-1).indices  # bias picks only
        w = s.gather(1, sel)
        if cfg.arch == "kimi-linear" or cfg.expert_weights_norm:
            w = w / torch.clamp(w.sum(-1, keepdim=True), min=MOE_WEIGHT_SUM_MIN)
        w = w * cfg.expert_weights_scale
        self.last_route = (s.detach(), sel.detach())
        z = x @ self.ffn_routed_down.T if cfg.latent > 0 else x
        # Group the N*k (token, slot) pairs by expert into a padded [E, cap] table, run all experts
        # with three batched matmuls, and scatter-add the weighted outputs back to their tokens.
        E, k = cfg.n_expert, cfg.n_expert_used
        flat_e = sel.reshape(-1)
        order = torch.argsort(flat_e, stable=True)
        se = flat_e[order]
        counts = torch.bincount(se, minlength=E)
        starts = torch.cumsum(counts, 0) - counts
        pos = torch.arange(se.numel(), device=x.device) - starts[se]
        cap = int(counts.max().item())
        tok = torch.arange(N, device=x.device).repeat_interleave(k)[order]
        slot_tok = torch.full((E, cap), N, dtype=torch.long, device=x.device)   # N = padding row
        slot_tok[se, pos] = tok
        slot_w = z.new_zeros(E, cap).index_put((se, pos), w.reshape(-1)[order])
        zp = torch.cat([z, z.new_zeros(1, z.shape[1])], 0)
        ze = zp[slot_tok]                                                          # [E, cap, d_in]
        h = glu_act(cfg, ze @ self.ffn_gate_exps.transpose(1, 2), ze @ self.ffn_up_exps.transpose(1, 2))
        out = (h @ self.ffn_down_exps.transpose(1, 2)) * slot_w.unsqueeze(-1)     # [E, cap, d_in]
        y = z.new_zeros(N + 1, z.shape[1]).index_add(0, slot_tok.reshape(-1), out.reshape(-1, z.shape[1]))[:N]
        if cfg.latent > 0:
            y = rms_norm(y, self.ffn_routed_norm, cfg.eps) @ self.ffn_routed_up.T
        if cfg.n_shared > 0:
            y = y + self.shexp(x)
        return y.reshape(shp)


class Block(nn.Module):
    def __init__(self, cfg: KimiConfig, il: int):
        super().__init__()
        self.il = il
        self.attn_norm = nn.Parameter(torch.ones(cfg.n_embd))
        self.ffn_norm = nn.Parameter(torch.ones(cfg.n_embd))
        if cfg.attn_res_block > 0:
            self.attn_res_score = nn.Parameter(torch.randn(cfg.n_embd) * 0.6 / math.sqrt(cfg.n_embd))
            self.ffn_res_score = nn.Parameter(torch.randn(cfg.n_embd) * 0.6 / math.sqrt(cfg.n_embd))
        self.mixer = MLA(cfg) if cfg.is_mla(il) else KDA(cfg)
        self.ffn = DenseFFN(cfg, cfg.n_ff) if il < cfg.n_dense else MoE(cfg)


def attn_res_mix(stack: list, p: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """mix(stack, p, w): V = stack + [p]; s_j = <RMSNorm_noweight(V_j), w>; a = softmax_j(s); sum_j a_j V_j."""
    V = torch.stack(stack + [p], dim=0)                                            # [J,...,d]
    s = (rms_norm(V, None, eps) * w).sum(-1)                                       # [J,...]
    a = torch.softmax(s, dim=0)
    return (a.unsqueeze(-1) * V).sum(0)


class KimiModel(nn.Module):
    def __init__(self, cfg: KimiConfig):
        super().__init__()
        self.cfg = cfg
        self.token_embd = nn.Parameter(torch.randn(cfg.vocab, cfg.n_embd))
        self.blocks = nn.ModuleList([Block(cfg, il) for il in range(cfg.n_layer)])
        self.output_norm = nn.Parameter(torch.ones(cfg.n_embd))
        if cfg.attn_res_block > 0:
            self.output_res_score = nn.Parameter(torch.randn(cfg.n_embd) * 0.6 / math.sqrt(cfg.n_embd))
        self.output = nn.Parameter(torch.randn(cfg.vocab, cfg.n_embd) / math.sqrt(cfg.n_embd))

    def moe_layers(self):
        return [b.ffn for b in self.blocks if isinstance(b.ffn, MoE)]

    def forward(self, tokens: torch.Tensor, kda_mode: str = "chunk", chunk: int = 16,
                mla_absorbed: bool = False, return_hidden: bool = False, kda_factorized: bool = False):
        cfg = self.cfg
        eps = cfg.eps

        def mixer(blk, h):
            if isinstance(blk.mixer, KDA):
                return blk.mixer(h, mode=kda_mode, chunk=chunk, factorized=kda_factorized)
            return blk.mixer(h, absorbed=mla_absorbed)

        x = self.token_embd[tokens]                                                # [B,T,d]
        if cfg.attn_res_block > 0:
            bs = cfg.attn_res_block
            stack: list = []
            p = x
            for il, blk in enumerate(self.blocks):
                h = attn_res_mix(stack, p, blk.attn_res_score, eps) if stack else p
                if il % bs == 0:
                    stack.append(p)        # bank the raw layer input
                    p = None
                a = mixer(blk, rms_norm(h, blk.attn_norm, eps))
                p = a if p is None else p + a
                h = attn_res_mix(stack, p, blk.ffn_res_score, eps)
                p = p + blk.ffn(rms_norm(h, blk.ffn_norm, eps))
            x = attn_res_mix(stack, p, self.output_res_score, eps)
        else:
            for blk in self.blocks:
                x = x + mixer(blk, rms_norm(x, blk.attn_norm, eps))
                x = x + blk.ffn(rms_norm(x, blk.ffn_norm, eps))
        h = rms_norm(x, self.output_norm, eps)
        if return_hidden:
            return h
        return h @ self.output.T


def count_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
