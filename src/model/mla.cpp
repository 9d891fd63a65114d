// Gated MLA mixer, DESIGN.md section 3.3 (NoPE: no rotary embedding). The cache keeps only the
// latent [c | k_pe] per position, in pages at the cache type. Up to tiled_min_keys keys the
// absorbed form (q_nope folded through attn_k_b, attention over the latent, attn_v_b after) runs
// as llama.cpp runs it, for batch and decode alike. Beyond that the tiled (flash) kernels run:
// absorbed for decode, the decompressed (MHA) form for prefill chunks where it costs fewer
// operations per (query, key) pair.
#include "model/forward_ctx.h"

#include <cmath>
#include <vector>

namespace kinfer::model {

namespace {

// y_h = W.slice(h) . x_h for every head h < H in one pass of the backend: x_h is n rows of W.cols
// floats at x + h * x_head (rows ldx apart), y_h n rows at y + h * y_head (ldy apart). The same
// products as H matmul calls, but one wake-up of the CPU pool instead of H: decode of a K3-wide
// layer called it 2 x 96 times a token for products of 45 KB each. Bit for bit on the CPU (the same
// conversions and per-row kernels) and in a CUDA decode step; a CUDA chunk of kGemmMinTokens or
// more takes one grouped cuBLAS GEMM instead of H single ones.
void per_head_matmul(backend::Backend& be, const Mat& W, int64_t H, const float* x, int64_t x_head, int64_t ldx,
                     int64_t n, float* y, int64_t y_head, int64_t ldy) {
    std::vector<backend::MatInput> inputs(static_cast<size_t>(H));
    std::vector<backend::MatTask> tasks(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h) {
        inputs[size_t(h)] = backend::MatInput{x + h * x_head, n, W.cols, ldx};
        tasks[size_t(h)] = backend::MatTask{W.slice(h), int(h), 0, n, y + h * y_head, ldy};
    }
    be.matmul_tasks(inputs, tasks);
}

}  // namespace

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
        per_head_matmul(be, k_b, H, q, dk, H * dk, n, Q, R, H * R);
        // q_pe of every (token, head) pair, taken as n * H rows: q's are dk apart, Q's R apart.
        be.copy_rows(Q + r, R, q + dn, dk, n * H, dr);
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
        per_head_matmul(be, v_b, H, lat, r, H * r, n, o, dv, H * dv);
    }

    if (L.attn_gate) be.mul_sigmoid(o, g, n * H * dv);   // K3: o *= sigmoid(attn_gate . x)
    be.matmul(mat_of(L.attn_output), o, n, out);
}

}  // namespace kinfer::model
