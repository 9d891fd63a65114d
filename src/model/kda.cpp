// KDA (Kimi Delta Attention) mixer, DESIGN.md section 3.2: causal short conv on q/k/v, per-key
// decay gate, delta-rule state update. Decode runs the recurrence token by token; prefill can run
// the chunked (WY / UT-transform) form, which computes the same function chunk by chunk.
#include "model/forward_ctx.h"

namespace kinfer::model {

void kda_layer(FwdCtx& c, int il, const float* xn, float* out) {
    const HParams& hp = c.hp;
    backend::Backend& be = c.be;
    const LayerWeights& L = c.w.layers[size_t(il)];
    const Session::LayerState& st = c.states[size_t(il)];
    const int64_t n = c.n, D = hp.kda_head_dim, H = hp.n_head, di = hp.d_inner(), W = hp.conv_kernel;
    ScratchScope s(c.ws);

    float* q = s.get(size_t(n * di));
    float* k = s.get(size_t(n * di));
    float* v = s.get(size_t(n * di));
    float* fa = s.get(size_t(n * D));
    float* beta = s.get(size_t(n * H));
    float* gate = s.get(size_t(n * di));       // output gate: full rank (K3) or its low-rank input (Kimi Linear)
    float* ga = L.ssm_g ? nullptr : s.get(size_t(n * D));
    // Every projection of xn in one batch: one activation conversion, one pool wake-up.
    be.matmul_many({{mat_of(L.attn_q), q}, {mat_of(L.attn_k), k}, {mat_of(L.attn_v), v}, {mat_of(L.ssm_f_a), fa},
                    {mat_of(L.ssm_beta), beta}, L.ssm_g ? std::pair{mat_of(L.ssm_g), gate} : std::pair{mat_of(L.ssm_g_a), ga}},
                   xn, n);
    const int64_t S = W - 1;
    float* conv = st.conv_f();
    be.conv_silu(q, n, di, W, L.conv_q, conv);
    be.conv_silu(k, n, di, W, L.conv_k, conv + di * S);
    be.conv_silu(v, n, di, W, L.conv_v, conv + 2 * di * S);

    // Decay gate (log space, per key channel), beta, per-head L2 norms of q and k.
    float* g = s.get(size_t(n * di));
    be.matmul(mat_of(L.ssm_f_b), fa, n, g);
    be.kda_decay(g, L.ssm_dt_b, L.ssm_a, n, H, D, backend::KdaGate{hp.has_gate_lower_bound, hp.gate_lower_bound});
    be.sigmoid(beta, n * H);
    be.l2_norm(q, n * H, D, hp.rms_eps);
    be.l2_norm(k, n * H, D, hp.rms_eps);

    float* o = s.get(size_t(n * di));
    be.kda_scan(backend::KdaScan{q, k, v, g, beta, st.kda_f(), o, n, H, D, n > 1 && c.opt.kda_chunked});

    // Output gate: full rank (K3) or low rank (Kimi Linear); per-head RMSNorm, sigmoid gate.
    if (!L.ssm_g) be.matmul(mat_of(L.ssm_g_b), ga, n, gate);
    be.rms_norm(o, L.ssm_norm, o, n * H, D, hp.rms_eps);
    be.mul_sigmoid(o, gate, n * di);
    be.matmul(mat_of(L.attn_output), o, n, out);
}

}  // namespace kinfer::model
