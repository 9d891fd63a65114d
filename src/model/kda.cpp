// KDA (Kimi Delta Attention) mixer, DESIGN.md section 3.2: causal short conv on q/k/v, per-key
// decay gate, delta-rule state update. Decode runs the recurrence token by token; prefill can run
// the chunked (WY / UT-transform) form, which computes the same function chunk by chunk.
#include "model/forward_ctx.h"
#include "model/ops.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>

namespace kinfer::model {

// ---- the recurrence (what llama.cpp's fused GATED_DELTA_NET op computes) ----

void kda_rows_step_avx2(float* M, int64_t nrows, const float* eg, const float* k, const float* q, int64_t D,
                        const float* v, float beta, float* o);

namespace {
// For rows j < nrows of M (M[j] = column j of S):
// S = diag(exp g) S;  u_j = beta (v_j - (S^T k)_j);  S[:, j] += k u_j;  o_j = (S^T q)_j (unscaled).
void kda_rows_step(float* M, int64_t nrows, const float* eg, const float* k, const float* q, int64_t D,
                   const float* v, float beta, float* o) {
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2) return kda_rows_step_avx2(M, nrows, eg, k, q, D, v, beta, o);
    for (int64_t j = 0; j < nrows; ++j) {
        float* Mj = M + j * D;
        for (int64_t i = 0; i < D; ++i) Mj[i] *= eg[i];
        const float d = (v[j] - dot_f32(Mj, k, D)) * beta;
        for (int64_t i = 0; i < D; ++i) Mj[i] = std::fma(k[i], d, Mj[i]);
        o[j] = dot_f32(Mj, q, D);
    }
}
}  // namespace

void kda_recurrent_head(int64_t D, int64_t n, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, int64_t ld, int64_t ldb, float* M, float* o, int64_t ldo) {
    // M[j][i] = S[i][j]: state transposed so that S^T x is a row-contiguous dot per j.
    const float scale = 1.0f / std::sqrt(float(D));
    std::vector<float> eg(static_cast<size_t>(D));
    for (int64_t t = 0; t < n; ++t) {
        const float* qt = q + t * ld;
        const float* kt = k + t * ld;
        const float* vt = v + t * ld;
        const float* gt = g + t * ld;
        const float bt = beta[t * ldb];
        for (int64_t i = 0; i < D; ++i) eg[size_t(i)] = std::exp(gt[i]);
        float* ot = o + t * ldo;
        // Row j of M only ever needs row j: decay, u_j, update and o_j in one sweep over the state.
        kda_rows_step(M, D, eg.data(), kt, qt, D, vt, bt, ot);
        for (int64_t j = 0; j < D; ++j) ot[j] *= scale;
    }
}

// ---- the chunked form ----
//
// Within a chunk of C tokens let G_t = g_0 + ... + g_t (cumulative log-decay, per key index) and
// S0 the state before the chunk. Unrolling the recurrence gives, for s <= t, decay factors
// exp(G_t - G_s) <= 1 (computed pairwise, never as exp(G_t) * exp(-G_s), so nothing overflows):
//   u_t + sum_{s<t} A[t][s] u_s = beta_t (v_t - S0^T (exp(G_t) k_t)),  A[t][s] = beta_t k_t.(exp(G_t-G_s) k_s)
//   o_t = S0^T (exp(G_t) q_t) + sum_{s<=t} (q_t.(exp(G_t-G_s) k_s)) u_s
//   S   = diag(exp(G_C)) S0 + sum_s (exp(G_C-G_s) k_s) u_s^T
// The first line is the strictly lower-triangular (I + A) solve of the WY representation.

size_t kda_chunk_scratch_floats(int64_t D) {
    const size_t C = size_t(kKdaChunk), d = size_t(D);
    return 4 * C * d + 2 * C * C + 2 * d;
}

void kda_chunked_head(int64_t D, int64_t n, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, int64_t ld, int64_t ldb, float* M, float* o, int64_t ldo, float* scratch) {
    const float scale = 1.0f / std::sqrt(float(D));
    const int64_t C = kKdaChunk;
    float* G = scratch;              // [C][D] cumulative log-decay
    float* U = G + C * D;            // [C][D] the solved u_t
    float* X = U + C * D;            // [C][D] exp(G_t) (.) k_t, then exp(G_t) (.) q_t
    float* KD = X + C * D;           // [C][D] exp(G_last - G_s) (.) k_s
    float* A = KD + C * D;           // [C][C]
    float* Aqk = A + C * C;          // [C][C]
    float* eG = Aqk + C * C;         // [D]
    float* tmp = eG + D;             // [D]

    for (int64_t c0 = 0; c0 < n; c0 += C) {
        const int64_t nc = std::min(C, n - c0);
        const float* qc = q + c0 * ld;
        const float* kc = k + c0 * ld;
        const float* vc = v + c0 * ld;
        const float* gc = g + c0 * ld;

        for (int64_t i = 0; i < D; ++i) G[i] = gc[i];
        for (int64_t t = 1; t < nc; ++t)
            for (int64_t i = 0; i < D; ++i) G[t * D + i] = G[(t - 1) * D + i] + gc[t * ld + i];

        // Pairwise decayed products k_t.k_s and q_t.k_s (s <= t).
        for (int64_t t = 0; t < nc; ++t) {
            const float* kt = kc + t * ld;
            const float* qt = qc + t * ld;
            const float bt = beta[(c0 + t) * ldb];
            for (int64_t s = 0; s <= t; ++s) {
                const float* ks = kc + s * ld;
                float akk = 0.0f, aqk = 0.0f;
                for (int64_t i = 0; i < D; ++i) {
                    const float e = std::exp(G[t * D + i] - G[s * D + i]) * ks[i];
                    akk += kt[i] * e;
                    aqk += qt[i] * e;
                }
                A[t * C + s] = bt * akk;
                Aqk[t * C + s] = aqk;
            }
        }

        // Right-hand side beta_t (v_t - S0^T (exp(G_t) k_t)), then forward substitution.
        for (int64_t t = 0; t < nc; ++t) {
            const float* kt = kc + t * ld;
            const float bt = beta[(c0 + t) * ldb];
            for (int64_t i = 0; i < D; ++i) tmp[i] = std::exp(G[t * D + i]) * kt[i];
            float* ut = U + t * D;
            for (int64_t j = 0; j < D; ++j) ut[j] = bt * (vc[t * ld + j] - dot_f32(M + j * D, tmp, D));
            for (int64_t s = 0; s < t; ++s) {
                const float a = A[t * C + s];
                const float* us = U + s * D;
                for (int64_t j = 0; j < D; ++j) ut[j] -= a * us[j];
            }
        }

        // Outputs: inter-chunk part through S0, intra-chunk part through the solved u.
        for (int64_t t = 0; t < nc; ++t) {
            const float* qt = qc + t * ld;
            for (int64_t i = 0; i < D; ++i) X[i] = std::exp(G[t * D + i]) * qt[i];
            float* ot = o + (c0 + t) * ldo;
            for (int64_t j = 0; j < D; ++j) ot[j] = dot_f32(M + j * D, X, D);
            for (int64_t s = 0; s <= t; ++s) {
                const float a = Aqk[t * C + s];
                const float* us = U + s * D;
                for (int64_t j = 0; j < D; ++j) ot[j] += a * us[j];
            }
            for (int64_t j = 0; j < D; ++j) ot[j] *= scale;
        }

        // State update to the end of the chunk.
        const float* GL = G + (nc - 1) * D;
        for (int64_t i = 0; i < D; ++i) eG[i] = std::exp(GL[i]);
        for (int64_t s = 0; s < nc; ++s)
            for (int64_t i = 0; i < D; ++i) KD[s * D + i] = std::exp(GL[i] - G[s * D + i]) * kc[s * ld + i];
        for (int64_t j = 0; j < D; ++j) {
            float* Mj = M + j * D;
            for (int64_t i = 0; i < D; ++i) Mj[i] *= eG[i];
            for (int64_t s = 0; s < nc; ++s) {
                const float u = U[s * D + j];
                const float* kd = KD + s * D;
                for (int64_t i = 0; i < D; ++i) Mj[i] += u * kd[i];
            }
        }
    }
}

// ---- the layer ----

namespace {

// Causal depthwise conv over the last W projected inputs (tap W-1 = current token), then SiLU, in
// place. state: [di][W-1] oldest first; updated to the last W-1 inputs. Channels are the inner loop
// so it vectorises; each channel still sums its taps in order from 0.0f (ggml_ssm_conv's order).
void conv_silu(float* x, int64_t n, int64_t di, int64_t W, const float* taps, float* state) {
    const int64_t S = W - 1;
    std::vector<float> tw(size_t(W * di)), out(static_cast<size_t>(di)), next(size_t(S * di));
    for (int64_t ch = 0; ch < di; ++ch)
        for (int64_t j = 0; j < W; ++j) tw[size_t(j * di + ch)] = taps[ch * W + j];
    // Input row i of the window [state; x] (state is [ch][S], x is [t][ch]).
    auto in = [&](int64_t i, int64_t ch) { return i < S ? state[ch * S + i] : x[(i - S) * di + ch]; };
    for (int64_t j = 0; j < S; ++j)      // the new state: the last S inputs, read before x is overwritten
        for (int64_t ch = 0; ch < di; ++ch) next[size_t(ch * S + j)] = in(n + j, ch);
    // Descending t: output t reads inputs t..t+S of the window, i.e. x rows < t and the state only.
    for (int64_t t = n - 1; t >= 0; --t) {
        float* o = out.data();
        for (int64_t ch = 0; ch < di; ++ch) o[ch] = 0.0f;
        for (int64_t j = 0; j < W; ++j) {
            const float* w = tw.data() + j * di;
            const int64_t i = t + j;
            if (i >= S) {
                const float* xr = x + (i - S) * di;
                for (int64_t ch = 0; ch < di; ++ch) o[ch] += xr[ch] * w[ch];
            } else {
                for (int64_t ch = 0; ch < di; ++ch) o[ch] += state[ch * S + i] * w[ch];
            }
        }
        ops::silu(o, x + t * di, di);
    }
    std::copy(next.begin(), next.end(), state);
}

}  // namespace

void kda_layer(FwdCtx& c, int il, const float* xn, float* out) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.w.layers[size_t(il)];
    Session::LayerState& st = c.states[size_t(il)];
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
    c.mm_many({{L.attn_q, q}, {L.attn_k, k}, {L.attn_v, v}, {L.ssm_f_a, fa}, {L.ssm_beta, beta},
               L.ssm_g ? FwdCtx::Out{L.ssm_g, gate} : FwdCtx::Out{L.ssm_g_a, ga}},
              xn);
    const int64_t S = W - 1;
    conv_silu(q, n, di, W, L.conv_q, st.conv.data());
    conv_silu(k, n, di, W, L.conv_k, st.conv.data() + di * S);
    conv_silu(v, n, di, W, L.conv_v, st.conv.data() + 2 * di * S);

    // Decay gate (log space, per key channel).
    float* g = s.get(size_t(n * di));
    matmul(c.pool, mat_of(L.ssm_f_b), fa, n, g);
    // Per-token element-wise work (decay gate, beta, q/k L2 norms), split by tokens in prefill.
    c.pool.parallel_for(n, [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t) {
            float* gt = g + t * di;
            for (int64_t h = 0; h < H; ++h) {
                const float a = L.ssm_a[h];                     // -exp(A_log)
                for (int64_t i = 0; i < D; ++i) {
                    const float f = gt[h * D + i] + L.ssm_dt_b[h * D + i];
                    gt[h * D + i] = hp.has_gate_lower_bound
                        ? ops::sigmoid(-(f * a)) * hp.gate_lower_bound   // K3: lb * sigmoid(exp(A_log) f)
                        : ops::softplus(f) * a;                           // Kimi Linear
                }
            }
            for (int64_t h = 0; h < H; ++h) {
                beta[t * H + h] = ops::sigmoid(beta[t * H + h]);
                ops::l2_norm(q + t * di + h * D, q + t * di + h * D, D, hp.rms_eps);
                ops::l2_norm(k + t * di + h * D, k + t * di + h * D, D, hp.rms_eps);
            }
        }
    }, 2);

    float* o = s.get(size_t(n * di));
    const bool chunked = n > 1 && c.opt.kda_chunked;
    const size_t per_head = kda_chunk_scratch_floats(D);
    float* scratch = chunked ? s.get(per_head * size_t(H)) : nullptr;
    c.pool.parallel_for(H, [&](int64_t h0, int64_t h1, int) {
        for (int64_t h = h0; h < h1; ++h) {
            float* M = st.kda.data() + h * D * D;
            if (chunked)
                kda_chunked_head(D, n, q + h * D, k + h * D, v + h * D, g + h * D, beta + h, di, H, M, o + h * D, di,
                                 scratch + size_t(h) * per_head);
            else
                kda_recurrent_head(D, n, q + h * D, k + h * D, v + h * D, g + h * D, beta + h, di, H, M, o + h * D, di);
        }
    });

    // Output gate: full rank (K3) or low rank (Kimi Linear); per-head RMSNorm, sigmoid gate.
    if (!L.ssm_g) matmul(c.pool, mat_of(L.ssm_g_b), ga, n, gate);
    c.pool.parallel_for(n, [&](int64_t t0, int64_t t1, int) {
        for (int64_t t = t0; t < t1; ++t)
            for (int64_t h = 0; h < H; ++h) {
                float* oh = o + t * di + h * D;
                const float* gh = gate + t * di + h * D;
                ops::rms_norm(oh, L.ssm_norm, oh, D, hp.rms_eps);
                for (int64_t i = 0; i < D; ++i) oh[i] *= ops::sigmoid(gh[i]);
            }
    }, 2);
    c.mm(L.attn_output, o, out);
}

}  // namespace kinfer::model
