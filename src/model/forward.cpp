// The forward pass (llama2.c style): a chunk of n tokens is embedded into a residual, every
// layer adds its mixer and FFN to it, and the final stream comes out for the logits
// (session.cpp). Each layer runs on the backend the placement gives it; the residual moves
// with the layers (once onto a device for -ngl, once back for the output).
#include "model/forward.h"

#include <cstring>

namespace kinfer::model {

namespace {

void mixer(FwdCtx& c, int il, const float* xn, float* out) {
    if (c.hp.is_kda(il)) kda_layer(c, il, xn, out);
    else mla_layer(c, il, xn, out);
}

void ffn(FwdCtx& c, int il, const float* xn, float* out) {
    if (c.hp.is_dense(il)) dense_ffn(c, il, xn, out);
    else moe_ffn(c, il, xn, out);
}

// The hook reads host memory: device rows are downloaded for it.
void call_hook(const LayerHook& hook, int layer, const FwdEnv& env, backend::Backend& be, const float* x) {
    if (!hook) return;
    if (be.host_memory()) return hook(layer, env.pos0, env.n, x);
    std::vector<float> host(size_t(env.n * env.hp.n_embd));
    be.download(host.data(), x, host.size() * sizeof(float));
    hook(layer, env.pos0, env.n, host.data());
}

// Kimi K3: AttnRes over banked block sums (DESIGN.md 3.1). p is the running partial sum of the
// current block; every bs layers the raw layer input is banked (into `bank`, allocated by the
// caller so it outlives the layer) and p restarts from the mixer.
void layer_kimi_k3(FwdCtx& c, int il, Residual& r, float* bank) {
    const HParams& hp = c.hp;
    backend::Backend& be = c.be;
    const int64_t n = c.n, d = hp.n_embd, nd = n * d;
    const LayerWeights& L = c.w.layers[size_t(il)];
    ScratchScope s(c.ws);
    float* x = s.get(size_t(nd));      // mixed input of the current sub-layer
    float* xn = s.get(size_t(nd));
    float* y = s.get(size_t(nd));
    const bool res = hp.attn_res_block_size > 0;

    const float* in = r.p;
    if (res && !r.stack.empty()) {
        be.attn_res_mix(r.stack, r.p, L.attn_res_score, x, n, d, hp.rms_eps);
        in = x;
    }
    if (bank) {                        // bank the RAW layer input
        be.copy(bank, r.p, size_t(nd) * sizeof(float));
        r.stack.push_back(bank);
    }
    be.rms_norm(in, L.attn_norm, xn, n, d, hp.rms_eps);
    mixer(c, il, xn, y);
    if (bank) be.copy(r.p, y, size_t(nd) * sizeof(float));
    else be.add(r.p, y, nd);

    in = r.p;
    if (res) {
        be.attn_res_mix(r.stack, r.p, L.ffn_res_score, x, n, d, hp.rms_eps);
        in = x;
    }
    be.rms_norm(in, L.ffn_norm, xn, n, d, hp.rms_eps);
    ffn(c, il, xn, y);
    be.add(r.p, y, nd);
}

// Kimi Linear: the plain pre-norm residual stream x += Mixer(norm x); x += FFN(norm x).
void layer_kimi_linear(FwdCtx& c, int il, Residual& r) {
    const HParams& hp = c.hp;
    backend::Backend& be = c.be;
    const int64_t n = c.n, d = hp.n_embd, nd = n * d;
    const LayerWeights& L = c.w.layers[size_t(il)];
    ScratchScope s(c.ws);
    float* xn = s.get(size_t(nd));
    float* y = s.get(size_t(nd));
    be.rms_norm(r.p, L.attn_norm, xn, n, d, hp.rms_eps);
    mixer(c, il, xn, y);
    be.add(r.p, y, nd);
    be.rms_norm(r.p, L.ffn_norm, xn, n, d, hp.rms_eps);
    ffn(c, il, xn, y);
    be.add(r.p, y, nd);
}

}  // namespace

void Residual::move_to(backend::Backend& dst, backend::Workspace& ws) {
    if (be == &dst) return;
    const size_t bytes = size_t(n * d) * sizeof(float);
    auto moved = [&](const float* src) {
        float* q = ws.get(size_t(n * d));
        backend::copy_between(dst, q, *be, src, bytes);
        return q;
    };
    p = moved(p);
    for (float*& b : stack) b = moved(b);
    be = &dst;
}

std::vector<uint8_t> Residual::to_bytes() const {
    const size_t row = size_t(n * d) * sizeof(float);
    const int64_t head[3] = {n, d, int64_t(stack.size())};
    std::vector<uint8_t> out(sizeof head + row * (1 + stack.size()));
    std::memcpy(out.data(), head, sizeof head);
    be->download(out.data() + sizeof head, p, row);
    for (size_t i = 0; i < stack.size(); ++i) be->download(out.data() + sizeof head + row * (1 + i), stack[i], row);
    return out;
}

Residual Residual::from_bytes(std::span<const uint8_t> bytes, backend::Backend& be, backend::Workspace& ws) {
    int64_t head[3];
    if (bytes.size() < sizeof head) fail("residual: {} bytes, too short for its header", bytes.size());
    std::memcpy(head, bytes.data(), sizeof head);
    Residual r;
    r.be = &be, r.n = head[0], r.d = head[1];
    if (r.n <= 0 || r.d <= 0 || head[2] < 0 || head[2] > 4096) fail("residual: bad header ({} x {}, {} blocks)", r.n, r.d, head[2]);
    const size_t row = size_t(r.n * r.d) * sizeof(float);
    if (bytes.size() != sizeof head + row * size_t(1 + head[2]))
        fail("residual: {} bytes, expected {}", bytes.size(), sizeof head + row * size_t(1 + head[2]));
    auto take = [&](size_t i) {
        float* q = ws.get(size_t(r.n * r.d));
        be.upload(q, bytes.data() + sizeof head + row * i, row);
        return q;
    };
    r.p = take(0);
    for (int64_t i = 0; i < head[2]; ++i) r.stack.push_back(take(size_t(1 + i)));
    return r;
}

Residual embed(const FwdEnv& env, const int32_t* tokens) {
    backend::Backend& be = env.pl.embed();
    Residual r;
    r.be = &be, r.n = env.n, r.d = env.hp.n_embd;
    r.p = env.ws_of(be).get(size_t(r.n * r.d));
    be.embed(mat_of(env.pl.weights().token_embd), tokens, r.n, r.p);
    return r;
}

Residual embed_rows(const FwdEnv& env, const float* host_rows) {
    backend::Backend& be = env.pl.embed();
    Residual r;
    r.be = &be, r.n = env.n, r.d = env.hp.n_embd;
    r.p = env.ws_of(be).get(size_t(r.n * r.d));
    be.upload(r.p, host_rows, size_t(r.n * r.d) * sizeof(float));
    return r;
}

void forward_layers(const FwdEnv& env, int first, int last, Residual& r, const LayerHook& hook) {
    const int bs = env.hp.attn_res_block_size;
    for (int il = first; il < last; ++il) {
        backend::Backend& be = env.pl.layer(il);
        backend::Workspace& ws = env.ws_of(be);
        r.move_to(be, ws);
        FwdCtx c(env, be);
        if (env.hp.arch == Arch::KimiK3) {
            float* bank = bs > 0 && il % bs == 0 ? ws.get(size_t(r.n * r.d)) : nullptr;
            layer_kimi_k3(c, il, r, bank);
        } else {
            layer_kimi_linear(c, il, r);
        }
        call_hook(hook, il, env, be, r.p);
    }
}

float* final_stream(const FwdEnv& env, Residual& r, const LayerHook& hook) {
    backend::Backend& be = env.pl.output();
    backend::Workspace& ws = env.ws_of(be);
    r.move_to(be, ws);
    float* h = r.p;
    if (env.hp.arch == Arch::KimiK3 && env.hp.attn_res_block_size > 0) {
        h = ws.get(size_t(r.n * r.d));
        be.attn_res_mix(r.stack, r.p, env.pl.weights().output_res_score, h, r.n, r.d, env.hp.rms_eps);
    }
    call_hook(hook, env.hp.n_layer, env, be, h);
    return h;
}

void output_logits(const FwdEnv& env, const float* h, int64_t first, float* host) {
    const HParams& hp = env.hp;
    backend::Backend& be = env.pl.output();
    backend::Workspace& ws = env.ws_of(be);
    const int64_t rows = env.n - first;
    float* hn = ws.get(size_t(rows * hp.n_embd));
    be.rms_norm(h + first * hp.n_embd, env.pl.weights().output_norm, hn, rows, hp.n_embd, hp.rms_eps);
    float* lg = be.host_memory() ? host : ws.get(size_t(rows * hp.n_vocab));
    be.matmul(mat_of(env.pl.weights().output), hn, rows, lg);
    if (!be.host_memory()) be.download(host, lg, size_t(rows * hp.n_vocab) * sizeof(float));
}

}  // namespace kinfer::model
