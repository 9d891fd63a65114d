// The KDA kernels of the CPU backend (DESIGN.md 3.2): the delta-rule recurrence one head at a
// time (what llama.cpp's fused GATED_DELTA_NET op computes), its chunked WY / UT form, and the
// causal short convolution. The layer that calls them is src/model/kda.cpp.
#include "backend/cpu/kda_kernels.h"

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace kinfer::backend::cpu {

// ---- the recurrence (what llama.cpp's fused GATED_DELTA_NET op computes) ----

void kda_rows_step_avx2(float* M, int64_t nrows, const float* eg, const float* k, const float* q, int64_t D,
                        const float* v, float beta, float* o);
void conv4_step_avx2(const float* x, int64_t di, const float* taps, float* state, float* out);

namespace {
// For rows j < nrows of M (M[j] = column j of S):
// S = diag(exp g) S;  u_j = beta (v_j - (S^T k)_j);  S[:, j] += k u_j;  o_j = (S^T q)_j (unscaled).
void kda_rows_step(float* M, int64_t nrows, const float* eg, const float* k, const float* q, int64_t D,
                   const float* v, float beta, float* o) {
    static const bool avx2 = quant::active_isa() >= quant::Isa::avx2;
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


// Causal depthwise conv over channels [c0, c1), then SiLU, in place (kda_kernels.h). Channels are the inner loop
// so it vectorises; each channel still sums its taps in order from 0.0f with one fused multiply-add
// per tap: ggml_ssm_conv's order, as the golden build's compiler contracts it (unfused, the conv
// outputs differ in the last bit and k3-tiny-a Q8_0 drifts 0.37 in the logits at AVX-512).
void conv_silu_channels(float* x_rows, int64_t n, int64_t ld, int64_t W, const float* all_taps, float* all_state,
                        int64_t c0, int64_t c1) {
    const int64_t S = W - 1, di = c1 - c0;
    float* x = x_rows + c0;                       // rows ld apart; channels c0.. of each
    const float* taps = all_taps + c0 * W;
    float* state = all_state + c0 * S;
    // Scratch kept by the thread between calls: decode calls this three times a KDA layer, and
    // fresh vectors of a K3 layer's 12288 channels (tw alone 192 KiB) came from mmap each time,
    // zeroed and faulted in page by page (k3-wide Q4_K_M decode: 336 page faults a token, 17
    // with the scratch kept).
    thread_local std::vector<float> tw, out, next, col;
    auto fit = [](std::vector<float>& v, int64_t size) {
        if (v.size() < size_t(size)) v.resize(size_t(size));
    };
    static const bool avx2 = quant::active_isa() >= quant::Isa::avx2;
    if (n == 1 && W == 4 && avx2) {   // decode: the same sums, channel by channel (conv_step_avx2.cpp)
        fit(out, di);
        conv4_step_avx2(x, di, taps, state, out.data());
        ops::silu(out.data(), x, di);
        return;
    }
    fit(tw, W * di), fit(out, di), fit(next, S * di), fit(col, di);
    for (int64_t ch = 0; ch < di; ++ch)
        for (int64_t j = 0; j < W; ++j) tw[size_t(j * di + ch)] = taps[ch * W + j];
    // Input row i of the window [state; x] (state is [ch][S], x is [t][ch]).
    auto in = [&](int64_t i, int64_t ch) { return i < S ? state[ch * S + i] : x[(i - S) * ld + ch]; };
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
                fma_f32(o, x + (i - S) * ld, w, di);
            } else {
                for (int64_t ch = 0; ch < di; ++ch) col[size_t(ch)] = state[ch * S + i];   // state is [ch][S]
                fma_f32(o, col.data(), w, di);
            }
        }
        ops::silu(o, x + t * ld, di);
    }
    std::copy(next.begin(), next.begin() + S * di, state);
}


}  // namespace kinfer::backend::cpu
