// Gated MLA mixer, DESIGN.md section 3.3 (NoPE: no rotary embedding). The cache keeps only the
// latent [c | k_pe] per position, in pages at the cache type. Up to tiled_min_keys keys the
// absorbed form (q_nope folded through attn_k_b, attention over the latent, attn_v_b after) runs
// as llama.cpp runs it, for batch and decode alike. Beyond that the tiled (flash) kernels run:
// absorbed for decode, the decompressed (MHA) form for prefill chunks where it costs fewer
// operations per (query, key) pair.
#include "model/forward_ctx.h"

#include <cmath>

namespace kinfer::model {

void mla_layer(FwdCtx& c, int il, const float* xn, float* out) {
    const HParams& hp = c.hp;
    backend::Backend& be = c.be;
    const LayerWeights& L = c.w.layers[size_t(il)];
    const int64_t n = c.n, H = hp.n_head, r = hp.kv_lora_rank, R = hp.mla_cache_dim();
    const int64_t dk = hp.key_length_mla, dn = hp.dk_nope(), dr = hp.rope_dim, dv = hp.value_length_mla;
    if (c.pos0 + n > c.opt.n_ctx)
        fail("context full: {} tokens do not fit in n_ctx = {}", c.pos0 + n, c.opt.n_ctx);
    ScratchScope s(c.ws);

    // Every projection of xn in one batch: queries (or their LoRA input), the latent of the new
    // positions and the output gate.
    float* q = s.get(size_t(n * H * dk));
    float* qa = L.attn_q_a ? s.get(size_t(n * hp.q_lora_rank)) : nullptr;
    float* g = L.attn_gate ? s.get(size_t(n * H * dv)) : nullptr;
    const backend::LatentPages& cache = c.states[size_t(il)].latent;
    float* kv = s.get(size_t(n * R));   // this chunk's latent rows, stored into the cache below
    const auto qo = L.attn_q_a ? std::pair{mat_of(L.attn_q_a), qa} : std::pair{mat_of(L.attn_q), q};
    if (L.attn_gate) be.matmul_many({qo, {mat_of(L.attn_kv_a_mqa), kv}, {mat_of(L.attn_gate), g}}, xn, n);
    else be.matmul_many({qo, {mat_of(L.attn_kv_a_mqa), kv}}, xn, n);
    if (L.attn_q_a) {
        be.rms_norm(qa, L.attn_q_a_norm, qa, n, hp.q_lora_rank, hp.rms_eps);
        be.matmul(mat_of(L.attn_q_b), qa, n, q);
    }
    be.rms_norm(kv, L.attn_kv_a_norm, kv, n, r, hp.rms_eps, R);   // c only, k_pe stays raw
    be.mla_cache_store(cache, c.pos0, n, kv);

    const backend::MlaShape sh{n, c.pos0, H, r, dr, dn, dv, 1.0f / std::sqrt(float(dk))};
    const Mat k_b = mat_of(L.attn_k_b), v_b = mat_of(L.attn_v_b);
    float* o = s.get(size_t(n * H * dv));
    const int64_t n_kv = c.pos0 + n;
    const bool tiled = !c.opt.mla_decompressed && n_kv > c.opt.tiled_min_keys;
    // Operations per (query, key) pair: absorbed scores over r + dr and sums over r; the MHA form
    // over dk and dv, plus expanding each key once per chunk (r x (dn + dv), shared by n queries).
    // Decode (n = 1) is absorbed by this measure; long prefill chunks are MHA.
    const double ops_absorbed = double(R + r), ops_mha = double(dk + dv) + double(r * (dn + dv)) / double(n);
    const bool mha = tiled && be.has_tiled_mha() &&
                     (c.opt.mla_tiled_form == 1 || (c.opt.mla_tiled_form < 0 && ops_mha < ops_absorbed));
    if (mha) {
        be.mla_attend_tiled_mha(k_b, v_b, cache, q, o, sh);
    } else if (!tiled && c.opt.mla_decompressed && n > 1) {
        float* rows = s.get(size_t(n_kv * R));
        be.mla_cache_load(cache, 0, n_kv, rows);
        be.mla_attend_decompressed(k_b, v_b, rows, q, o, sh);
    } else {
        // q_abs_h = attn_k_b[h] q_nope_h (a matmul per head, activations quantized like ggml),
        // next to q_pe_h: Q [n][H][r + dr].
        float* Q = s.get(size_t(n * H * R));
        for (int64_t h = 0; h < H; ++h) {
            be.matmul(k_b.slice(h), q + h * dk, n, Q + h * R, H * dk, H * R);
            be.copy_rows(Q + h * R + r, H * R, q + h * dk + dn, H * dk, n, dr);
        }
        float* lat = s.get(size_t(n * H * r));
        if (tiled) {
            be.mla_attend_tiled(cache, Q, lat, sh);
        } else {
            // Short contexts: llama.cpp's operation order over contiguous f32 rows.
            float* rows = s.get(size_t(n_kv * R));
            be.mla_cache_load(cache, 0, n_kv, rows);
            be.mla_attend_absorbed(rows, Q, lat, sh);
        }
        // o_h = attn_v_b[h] . latent_h
        for (int64_t h = 0; h < H; ++h) be.matmul(v_b.slice(h), lat + h * r, n, o + h * dv, H * r, H * dv);
    }

    if (L.attn_gate) be.mul_sigmoid(o, g, n * H * dv);   // K3: o *= sigmoid(attn_gate . x)
    be.matmul(mat_of(L.attn_output), o, n, out);
}

}  // namespace kinfer::model
