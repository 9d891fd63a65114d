// The forward pass, one flat function per architecture (llama2.c style). Each computes the
// final residual stream h [n x d] for a chunk of n tokens; session.cpp turns it into logits.
#include "model/forward.h"

#include "model/ops.h"

#include <cstring>

namespace kinfer::model {

namespace {

void embed(FwdCtx& c, const int32_t* tokens, float* x) {
    const Mat E = mat_of(c.w.token_embd);
    for (int64_t t = 0; t < c.n; ++t) {
        if (tokens[t] < 0 || tokens[t] >= E.rows) fail("token id {} out of range [0, {})", tokens[t], E.rows);
        dequant_row(E, tokens[t], x + t * c.hp.n_embd);
    }
}

void norm_rows(const float* x, const float* w, float* y, int64_t n, int64_t d, float eps) {
    for (int64_t t = 0; t < n; ++t) ops::rms_norm(x + t * d, w, y + t * d, d, eps);
}

void mixer(FwdCtx& c, int il, const float* xn, float* out) {
    if (c.hp.is_kda(il)) kda_layer(c, il, xn, out);
    else mla_layer(c, il, xn, out);
}

void ffn(FwdCtx& c, int il, const float* xn, float* out) {
    if (c.hp.is_dense(il)) dense_ffn(c, il, xn, out);
    else moe_ffn(c, il, xn, out);
}

void add(float* y, const float* a, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] += a[i];
}

}  // namespace

// Kimi K3: AttnRes over banked block sums (DESIGN.md 3.1). p is the running partial sum of the
// current block; every bs layers the raw layer input is banked and p restarts from the mixer.
void forward_kimi_k3(FwdCtx& c, const int32_t* tokens, const LayerHook& hook, float* h) {
    const HParams& hp = c.hp;
    const int64_t n = c.n, d = hp.n_embd, nd = n * d;
    const int bs = hp.attn_res_block_size;
    ScratchScope s(c.ws);
    float* p = s.get(size_t(nd));
    float* x = s.get(size_t(nd));      // mixed input of the current sub-layer
    float* xn = s.get(size_t(nd));
    float* y = s.get(size_t(nd));
    std::vector<float*> stack;         // banked block inputs, stack[0] = embedding

    embed(c, tokens, p);
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights& L = c.w.layers[size_t(il)];
        const float* in = p;
        if (bs > 0 && !stack.empty()) {
            attn_res_mix(c, stack, p, L.attn_res_score, x);
            in = x;
        }
        bool banked = false;
        if (bs > 0 && il % bs == 0) {   // bank the RAW layer input
            float* b = s.get(size_t(nd));
            std::memcpy(b, p, size_t(nd) * sizeof(float));
            stack.push_back(b);
            banked = true;
        }
        norm_rows(in, L.attn_norm, xn, n, d, hp.rms_eps);
        mixer(c, il, xn, y);
        if (banked) std::memcpy(p, y, size_t(nd) * sizeof(float));
        else add(p, y, nd);

        in = p;
        if (bs > 0) {
            attn_res_mix(c, stack, p, L.ffn_res_score, x);
            in = x;
        }
        norm_rows(in, L.ffn_norm, xn, n, d, hp.rms_eps);
        ffn(c, il, xn, y);
        add(p, y, nd);
        if (hook) hook(il, c.pos0, n, p);
    }
    if (bs > 0) attn_res_mix(c, stack, p, c.w.output_res_score, h);
    else std::memcpy(h, p, size_t(nd) * sizeof(float));
    if (hook) hook(hp.n_layer, c.pos0, n, h);
}

// Kimi Linear: the plain pre-norm residual stream.
void forward_kimi_linear(FwdCtx& c, const int32_t* tokens, const LayerHook& hook, float* h) {
    const HParams& hp = c.hp;
    const int64_t n = c.n, d = hp.n_embd, nd = n * d;
    ScratchScope s(c.ws);
    float* xn = s.get(size_t(nd));
    float* y = s.get(size_t(nd));

    embed(c, tokens, h);
    for (int il = 0; il < hp.n_layer; ++il) {
        const LayerWeights& L = c.w.layers[size_t(il)];
        norm_rows(h, L.attn_norm, xn, n, d, hp.rms_eps);
        mixer(c, il, xn, y);
        add(h, y, nd);
        norm_rows(h, L.ffn_norm, xn, n, d, hp.rms_eps);
        ffn(c, il, xn, y);
        add(h, y, nd);
        if (hook) hook(il, c.pos0, n, h);
    }
    if (hook) hook(hp.n_layer, c.pos0, n, h);
}

}  // namespace kinfer::model
