// Gated MLA mixer, DESIGN.md section 3.3 (NoPE: no rotary embedding). The cache keeps only the
// latent [c | k_pe] per position. The absorbed form (q_nope folded through attn_k_b, attention
// over the latent, attn_v_b after) is what llama.cpp runs for both batch and decode, so it is the
// default everywhere; the decompressed (MHA) form expands K/V per head and serves long prefill
// and the absorbed == MHA property test.
#include "model/forward_ctx.h"
#include "model/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kinfer::model {

namespace {

// Absorbed attention of n queries over cache rows [0, pos0 + t] for each query t.
// Q: [n][H][R] with R = kv_lora + d_rope ([q_abs | q_pe]); lat out: [n][H][r].
void attend_absorbed(FwdCtx& c, const float* cache, const float* Q, float* lat) {
    const HParams& hp = c.hp;
    const int64_t H = hp.n_head, r = hp.kv_lora_rank, R = hp.mla_cache_dim();
    const float scale = 1.0f / std::sqrt(float(hp.key_length_mla));
    const int64_t n = c.n, pos0 = c.pos0;
    const int64_t n_kv_max = pos0 + n;
    ScratchScope s(c.ws);
    float* probs_all = s.get(size_t(c.pool.size()) * size_t(n_kv_max));
    // Causal rows grow with t: deal (t, h) pairs round-robin so every thread gets the same mix
    // of short and long rows (contiguous ranges left the last thread three quarters of the work).
    c.pool.run([&](int ith, int nth) {
        float* p = probs_all + size_t(ith) * size_t(n_kv_max);
        for (int64_t th = ith; th < n * H; th += nth) {
            const int64_t t = th / H, h = th % H;
            const int64_t n_kv = pos0 + t + 1;           // causal
            const float* qh = Q + (t * H + h) * R;
            int64_t j = 0;
            for (; j + 4 <= n_kv; j += 4) {
                const float* rows[4] = {cache + j * R, cache + (j + 1) * R, cache + (j + 2) * R, cache + (j + 3) * R};
                dot4_f32(qh, rows, R, p + j);
            }
            for (; j < n_kv; ++j) p[j] = dot_f32(qh, cache + j * R, R);
            ops::softmax(p, n_kv, scale);
            float* out = lat + (t * H + h) * r;
            std::fill(out, out + r, 0.0f);
            for (int64_t j = 0; j < n_kv; ++j) mad_f32(out, cache + j * R, p[j], r);
        }
    });
}

// Decompressed attention: K_nope / V per head from the latent of every cached position.
// q: [n][H][dk]; o: [n][H][dv].
void attend_decompressed(FwdCtx& c, const LayerWeights& L, const float* cache, const float* q, float* o) {
    const HParams& hp = c.hp;
    const int64_t H = hp.n_head, r = hp.kv_lora_rank, R = hp.mla_cache_dim();
    const int64_t dk = hp.key_length_mla, dn = hp.dk_nope(), dr = hp.rope_dim, dv = hp.value_length_mla;
    const float scale = 1.0f / std::sqrt(float(dk));
    const int64_t n = c.n, pos0 = c.pos0, n_kv_max = pos0 + n;
    ScratchScope s(c.ws);
    float* wk = s.get(size_t(r * dn));         // attn_k_b[h]: r rows of dn
    float* wv = s.get(size_t(dv * r));         // attn_v_b[h]: dv rows of r
    float* K = s.get(size_t(n_kv_max * dn));
    float* V = s.get(size_t(n_kv_max * dv));
    float* p = s.get(size_t(n_kv_max));
    for (int64_t h = 0; h < H; ++h) {
        const Mat mk = mat_slice(L.attn_k_b, h), mv = mat_slice(L.attn_v_b, h);
        for (int64_t i = 0; i < r; ++i) dequant_row(mk, i, wk + i * dn);
        for (int64_t i = 0; i < dv; ++i) dequant_row(mv, i, wv + i * r);
        c.pool.parallel_for(n_kv_max, [&](int64_t b, int64_t e, int) {
            for (int64_t j = b; j < e; ++j) {
                const float* cj = cache + j * R;
                float* kj = K + j * dn;
                std::fill(kj, kj + dn, 0.0f);
                for (int64_t i = 0; i < r; ++i)            // k_nope = attn_k_b[h]^T c
                    for (int64_t a = 0; a < dn; ++a) kj[a] += wk[i * dn + a] * cj[i];
                for (int64_t a = 0; a < dv; ++a) V[j * dv + a] = dot_f32(wv + a * r, cj, r);
            }
        }, 16);
        for (int64_t t = 0; t < n; ++t) {
            const int64_t n_kv = pos0 + t + 1;
            const float* qh = q + (t * H + h) * dk;
            for (int64_t j = 0; j < n_kv; ++j)
                p[j] = dot_f32(qh, K + j * dn, dn) + dot_f32(qh + dn, cache + j * R + r, dr);
            ops::softmax(p, n_kv, scale);
            float* oh = o + (t * H + h) * dv;
            std::fill(oh, oh + dv, 0.0f);
            for (int64_t j = 0; j < n_kv; ++j)
                for (int64_t a = 0; a < dv; ++a) oh[a] += p[j] * V[j * dv + a];
        }
    }
}

}  // namespace

void mla_layer(FwdCtx& c, int il, const float* xn, float* out) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.w.layers[size_t(il)];
    const int64_t n = c.n, H = hp.n_head, r = hp.kv_lora_rank, R = hp.mla_cache_dim();
    const int64_t dk = hp.key_length_mla, dn = hp.dk_nope(), dr = hp.rope_dim, dv = hp.value_length_mla;
    if (c.pos0 + n > c.opt.n_ctx)
        fail("context full: {} tokens do not fit in n_ctx = {}", c.pos0 + n, c.opt.n_ctx);
    ScratchScope s(c.ws);

    // Every projection of xn in one batch: queries (or their LoRA input), the latent of the new
    // positions (straight into the cache) and the output gate.
    float* q = s.get(size_t(n * H * dk));
    float* qa = L.attn_q_a ? s.get(size_t(n * hp.q_lora_rank)) : nullptr;
    float* g = L.attn_gate ? s.get(size_t(n * H * dv)) : nullptr;
    float* cache = c.states[size_t(il)].mla.data();
    float* kv = cache + c.pos0 * R;
    const FwdCtx::Out qo = L.attn_q_a ? FwdCtx::Out{L.attn_q_a, qa} : FwdCtx::Out{L.attn_q, q};
    if (L.attn_gate) c.mm_many({qo, {L.attn_kv_a_mqa, kv}, {L.attn_gate, g}}, xn);
    else c.mm_many({qo, {L.attn_kv_a_mqa, kv}}, xn);
    if (L.attn_q_a) {
        for (int64_t t = 0; t < n; ++t)
            ops::rms_norm(qa + t * hp.q_lora_rank, L.attn_q_a_norm, qa + t * hp.q_lora_rank, hp.q_lora_rank, hp.rms_eps);
        matmul(c.pool, mat_of(L.attn_q_b), qa, n, q);
    }
    for (int64_t t = 0; t < n; ++t) ops::rms_norm(kv + t * R, L.attn_kv_a_norm, kv + t * R, r, hp.rms_eps);

    float* o = s.get(size_t(n * H * dv));
    if (c.opt.mla_decompressed && n > 1) {
        attend_decompressed(c, L, cache, q, o);
    } else {
        // q_abs_h = attn_k_b[h] q_nope_h (a matmul per head, activations quantized like ggml).
        float* Q = s.get(size_t(n * H * R));
        float* qn = s.get(size_t(n * dn));
        float* qk = s.get(size_t(n * r));
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t t = 0; t < n; ++t) std::memcpy(qn + t * dn, q + (t * H + h) * dk, size_t(dn) * sizeof(float));
            matmul(c.pool, mat_slice(L.attn_k_b, h), qn, n, qk);
            for (int64_t t = 0; t < n; ++t) {
                float* Qth = Q + (t * H + h) * R;
                std::memcpy(Qth, qk + t * r, size_t(r) * sizeof(float));
                std::memcpy(Qth + r, q + (t * H + h) * dk + dn, size_t(dr) * sizeof(float));
            }
        }
        float* lat = s.get(size_t(n * H * r));
        attend_absorbed(c, cache, Q, lat);
        // o_h = attn_v_b[h] . latent_h
        float* lh = s.get(size_t(n * r));
        float* vh = s.get(size_t(n * dv));
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t t = 0; t < n; ++t) std::memcpy(lh + t * r, lat + (t * H + h) * r, size_t(r) * sizeof(float));
            matmul(c.pool, mat_slice(L.attn_v_b, h), lh, n, vh);
            for (int64_t t = 0; t < n; ++t) std::memcpy(o + (t * H + h) * dv, vh + t * dv, size_t(dv) * sizeof(float));
        }
    }

    if (L.attn_gate) {   // K3: o *= sigmoid(attn_gate . x)
        for (int64_t i = 0; i < n * H * dv; ++i) o[i] *= ops::sigmoid(g[i]);
    }
    c.mm(L.attn_output, o, out);
}

}  // namespace kinfer::model
