// Feed-forward blocks, DESIGN.md section 3.4: the dense FFN of the leading layers and the MoE
// with sigmoid routing, selection bias, optional latent space (K3) and shared experts.
#include "model/forward_ctx.h"
#include "model/ops.h"
#include "runtime/expert_store.h"
#include "runtime/routing_trace.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <span>

namespace kinfer::model {

namespace {

void glu(const HParams& hp, const float* g, const float* u, float* out, int64_t n) {
    if (hp.use_situ()) ops::situ_glu(g, u, out, n, hp.situ_beta, hp.situ_linear_beta);
    else ops::swiglu(g, u, out, n);
}

// glu over `rows` rows of width ff in place (g = act(g, u)), split by rows across the pool once
// there is enough work to pay for waking it.
void glu_rows(FwdCtx& c, float* g, const float* u, int64_t rows, int64_t ff) {
    c.pool.parallel_for(rows, [&](int64_t b, int64_t e, int) { glu(c.hp, g + b * ff, u + b * ff, g + b * ff, (e - b) * ff); },
                        std::max<int64_t>(1, 1024 / ff));
}

// The chunk's (token, slot) entries t * K + slot grouped by expert: expert e owns
// entry[off[e] .. off[e + 1]), in entry order (a counting sort of the selections).
struct ByExpert {
    std::vector<int64_t> off, entry;
    ByExpert(const std::vector<int32_t>& sel, int64_t E) : off(size_t(E + 1), 0), entry(sel.size()) {
        for (int32_t e : sel) ++off[size_t(e) + 1];
        for (int64_t e = 0; e < E; ++e) off[size_t(e + 1)] += off[size_t(e)];
        std::vector<int64_t> next(off.begin(), off.end() - 1);
        for (size_t i = 0; i < sel.size(); ++i) entry[size_t(next[size_t(sel[i])]++)] = int64_t(i);
    }
    int64_t n_expert() const { return int64_t(off.size()) - 1; }
    std::span<const int64_t> of(int64_t e) const {
        return {entry.data() + off[size_t(e)], size_t(off[size_t(e + 1)] - off[size_t(e)])};
    }
};

// The input rows of an expert's (token, slot) entries, one after another.
void gather_rows(const float* z, std::span<const int64_t> list, int64_t K, int64_t lat, float* dst) {
    for (size_t j = 0; j < list.size(); ++j) std::memcpy(dst + int64_t(j) * lat, z + (list[j] / K) * lat, size_t(lat) * sizeof(float));
}

// An expert's output rows, times their routing weights, back to their (token, slot) places in ys.
void scatter_weighted(const float* src, std::span<const int64_t> list, const float* wsel, int64_t lat, float* ys) {
    for (size_t j = 0; j < list.size(); ++j) {
        const float w = wsel[size_t(list[j])];
        const float* r = src + int64_t(j) * lat;
        float* dst = ys + list[j] * lat;
        for (int64_t i = 0; i < lat; ++i) dst[i] = r[i] * w;
    }
}

// down . act(gate . x, up . x) for n rows of x.
void glu_ffn(FwdCtx& c, const Mat& gate, const Mat& up, const Mat& down, const float* x, int64_t n, float* out) {
    ScratchScope s(c.ws);
    const int64_t ff = gate.rows;
    float* g = s.get(size_t(n * ff));
    float* u = s.get(size_t(n * ff));
    const Mat gu[2] = {gate, up};
    float* const gu_out[2] = {g, u};
    matmul_many(c.pool, gu, gu_out, 2, x, n);
    glu_rows(c, g, u, n, ff);
    matmul(c.pool, down, g, n, out);
}

// Holds one expert acquired from the store for as long as its matmuls run.
struct ExpertHold {
    runtime::ExpertStore* store;
    runtime::ExpertRef ref;
    ExpertHold(runtime::ExpertStore* s, int il, int e, int64_t m) : store(s), ref(s->acquire(il, e, m)) {}
    ~ExpertHold() { store->release(ref); }
    ExpertHold(const ExpertHold&) = delete;
    ExpertHold& operator=(const ExpertHold&) = delete;
};

// --prefetch-next: run the next MoE layer's router on this layer's normed input, a cheap guess
// at its real input, and ask the store to fetch those experts now, one layer ahead.
void prefetch_next_layer(FwdCtx& c, int il, const float* xn) {
    const HParams& hp = c.hp;
    int next = -1;
    for (int l = il + 1; l < int(c.w.layers.size()) && next < 0; ++l)
        if (c.w.layers[size_t(l)].ffn_gate_inp) next = l;
    if (next < 0) return;
    const LayerWeights& N = c.w.layers[size_t(next)];
    const int64_t E = hp.n_expert, K = hp.n_expert_used;
    ScratchScope s(c.ws);
    float* probs = s.get(size_t(c.n * E));
    c.mm(N.ffn_gate_inp, xn, probs);
    std::vector<int32_t> idx(static_cast<size_t>(E)), want;
    for (int64_t t = 0; t < c.n; ++t) {
        float* pt = probs + t * E;
        for (int64_t e = 0; e < E; ++e) pt[e] = ops::sigmoid(pt[e]) + N.exp_probs_b[e];
        std::iota(idx.begin(), idx.end(), 0);
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int32_t a, int32_t b) { return pt[a] > pt[b]; });
        want.insert(want.end(), idx.begin(), idx.begin() + K);
    }
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    c.opt.experts->prefetch(next, want);
}

// The routed experts of a chunk (and the shared experts' down projection) when they come
// straight from the mapping: each expert's rows gathered, every gate/up product in one pass of the
// pool, then every down product in one more. Same per-row arithmetic as the one-expert-at-a-time
// path the expert store uses, so the logits are identical; decode wakes the pool twice per layer
// instead of three times per expert.
void routed_batched(FwdCtx& c, const LayerWeights& L, const ByExpert& by_expert,
                    const float* z, int64_t ffs, float* shg, float* shu, const float* wsel, float* ys, float* sh_out) {
    const HParams& hp = c.hp;
    const int64_t n = c.n, K = hp.n_expert_used, lat = hp.latent_dim(), E = hp.n_expert;
    const int64_t ff = L.ffn_gate_exps->ne[1];
    ScratchScope s(c.ws);
    const std::vector<int64_t>& off = by_expert.off;      // first gathered row of each expert
    const int64_t rows = off[size_t(E)];
    float* zg = s.get(size_t(rows * lat));
    float* g = s.get(size_t(rows * ff));
    float* u = s.get(size_t(rows * ff));
    float* yg = s.get(size_t(rows * lat));
    for (int64_t e = 0; e < E; ++e) gather_rows(z, by_expert.of(e), K, lat, zg + off[size_t(e)] * lat);

    // Activations for gate/up (one conversion serves both when their types agree).
    const Mat gate0 = mat_slice(L.ffn_gate_exps, 0), up0 = mat_slice(L.ffn_up_exps, 0), down0 = mat_slice(L.ffn_down_exps, 0);
    QuantActs zq_gate, zq_up, gq, shq;
    quantize_acts(&c.pool, gate0.type, zg, rows, lat, lat, zq_gate);
    const bool same_gu = up0.type == gate0.type;
    if (!same_gu) quantize_acts(&c.pool, up0.type, zg, rows, lat, lat, zq_up);
    const QuantActs& zq_u = same_gu ? zq_gate : zq_up;

    std::vector<MatJob> jobs;
    std::vector<QuantActs> views;
    views.reserve(size_t(2 * E));
    // Expert e's product with its gathered rows of acts, into its rows of y (width ld).
    auto add_expert_jobs = [&](TensorRef W, const QuantActs& acts, float* y, int64_t ld) {
        for (int64_t e = 0; e < E; ++e) {
            const int64_t m = off[size_t(e + 1)] - off[size_t(e)];
            if (!m) continue;
            views.push_back(acts.view(off[size_t(e)]));
            jobs.push_back(MatJob{mat_slice(W, e), &views.back(), m, y + off[size_t(e)] * ld, ld});
        }
    };
    add_expert_jobs(L.ffn_gate_exps, zq_gate, g, ff);
    add_expert_jobs(L.ffn_up_exps, zq_u, u, ff);
    matmul_jobs(c.pool, jobs.data(), jobs.size());

    glu_rows(c, g, u, rows, ff);
    if (ffs) glu_rows(c, shg, shu, n, ffs);

    // Down products of every expert, plus the shared experts' down projection.
    quantize_acts(&c.pool, down0.type, g, rows, ff, ff, gq);
    jobs.clear();
    views.clear();
    add_expert_jobs(L.ffn_down_exps, gq, yg, lat);
    if (ffs) {
        const Mat sd = mat_of(L.ffn_down_shexp);
        quantize_acts(&c.pool, sd.type, shg, n, ffs, ffs, shq);
        jobs.push_back(MatJob{sd, &shq, n, sh_out, sd.rows});
    }
    matmul_jobs(c.pool, jobs.data(), jobs.size());

    for (int64_t e = 0; e < E; ++e) scatter_weighted(yg + off[size_t(e)] * lat, by_expert.of(e), wsel, lat, ys);
}

// The routed experts through the expert store, one expert at a time: each is acquired (same
// bytes, possibly from a cache or device tier) only while its matmuls run, so a budget that holds
// a single expert per layer still works. Then the shared experts.
void routed_through_store(FwdCtx& c, int il, const LayerWeights& L, const ByExpert& by_expert,
                          const float* z, int64_t ffs, float* shg, float* shu, const float* wsel, float* ys, float* sh_out) {
    const int64_t K = c.hp.n_expert_used, lat = c.hp.latent_dim(), n = c.n;
    ScratchScope s(c.ws);
    float* zg = s.get(size_t(n * lat));
    float* yg = s.get(size_t(n * lat));
    for (int64_t e = 0; e < by_expert.n_expert(); ++e) {
        const std::span<const int64_t> list = by_expert.of(e);
        if (list.empty()) continue;
        gather_rows(z, list, K, lat, zg);
        Mat gate = mat_slice(L.ffn_gate_exps, e), up = mat_slice(L.ffn_up_exps, e), down = mat_slice(L.ffn_down_exps, e);
        ExpertHold hold(c.opt.experts, il, int(e), int64_t(list.size()));
        gate.data = hold.ref.part[0], up.data = hold.ref.part[1], down.data = hold.ref.part[2];
        glu_ffn(c, gate, up, down, zg, int64_t(list.size()), yg);
        scatter_weighted(yg, list, wsel, lat, ys);
    }
    if (ffs) {
        glu_rows(c, shg, shu, n, ffs);
        matmul(c.pool, mat_of(L.ffn_down_shexp), shg, n, sh_out);
    }
}

}  // namespace

void dense_ffn(FwdCtx& c, int il, const float* xn, float* out) {
    const LayerWeights& L = c.w.layers[size_t(il)];
    glu_ffn(c, mat_of(L.ffn_gate), mat_of(L.ffn_up), mat_of(L.ffn_down), xn, c.n, out);
}

void moe_ffn(FwdCtx& c, int il, const float* xn, float* out) {
    const HParams& hp = c.hp;
    const LayerWeights& L = c.w.layers[size_t(il)];
    const int64_t n = c.n, d = hp.n_embd, E = hp.n_expert, K = hp.n_expert_used, lat = hp.latent_dim();
    ScratchScope s(c.ws);

    // Every product of xn in one batch: router, latent down-projection, shared experts' gate/up.
    float* probs = s.get(size_t(n * E));
    float* zl = L.ffn_routed_down ? s.get(size_t(n * lat)) : nullptr;
    const int64_t ffs = L.ffn_gate_shexp ? L.ffn_gate_shexp->ne[1] : 0;
    float* shg = ffs ? s.get(size_t(n * ffs)) : nullptr;
    float* shu = ffs ? s.get(size_t(n * ffs)) : nullptr;
    {
        Mat ms[4];
        float* ys[4];
        size_t k = 0;
        ms[k] = mat_of(L.ffn_gate_inp), ys[k++] = probs;
        if (zl) ms[k] = mat_of(L.ffn_routed_down), ys[k++] = zl;
        if (ffs) ms[k] = mat_of(L.ffn_gate_shexp), ys[k++] = shg, ms[k] = mat_of(L.ffn_up_shexp), ys[k++] = shu;
        matmul_many(c.pool, ms, ys, k, xn, n);
    }

    // Router: sigmoid scores in fp32; the bias only picks, the weights use the raw scores.
    for (int64_t i = 0; i < n * E; ++i) probs[i] = ops::sigmoid(probs[i]);
    std::vector<int32_t> sel(static_cast<size_t>(n * K));
    std::vector<float> wsel(static_cast<size_t>(n * K));
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::vector<float> biased(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t) {
        const float* pt = probs + t * E;
        for (int64_t e = 0; e < E; ++e) biased[size_t(e)] = pt[e] + L.exp_probs_b[e];
        std::iota(idx.begin(), idx.end(), 0);
        // Descending biased score; exact ties go to the lower expert id.
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int32_t a, int32_t b) {
            return biased[size_t(a)] > biased[size_t(b)] || (biased[size_t(a)] == biased[size_t(b)] && a < b);
        });
        if (c.opt.routing_replay)     // benchmarks: a recorded trained model's choice instead
            c.opt.routing_replay->replay(c.pos0 + t, il - hp.n_layer_dense_lead, int(E), int(K), idx.data());
        if (c.opt.routing_record) c.opt.routing_record->record(c.pos0 + t, il - hp.n_layer_dense_lead, idx.data());
        float* wt = wsel.data() + t * K;
        for (int64_t i = 0; i < K; ++i) {
            sel[size_t(t * K + i)] = idx[size_t(i)];
            wt[i] = pt[idx[size_t(i)]];
        }
        if (hp.expert_weights_norm) {
            const float sum = std::max(ops::sum(wt, K), 6.103515625e-5f);
            for (int64_t i = 0; i < K; ++i) wt[i] /= sum;
        }
        if (hp.expert_weights_scale != 1.0f)
            for (int64_t i = 0; i < K; ++i) wt[i] *= hp.expert_weights_scale;
    }

    // Tell the expert store this chunk's choices at once: its misses load while hits compute.
    runtime::ExpertStore* store = c.opt.experts;
    if (store) {
        store->route(il, sel, n);
        if (c.opt.prefetch_next) prefetch_next_layer(c, il, xn);
    }

    // Routed experts read the latent input (K3) or x itself.
    const float* z = zl ? zl : xn;

    // Group tokens by expert so each expert's weights are read once per chunk.
    float* ys = s.get(size_t(n * K * lat));          // [t][slot][lat], already weighted
    const ByExpert by_expert(sel, E);
    float* sh_out = ffs ? s.get(size_t(n * d)) : nullptr;   // shared experts' output [n x d]
    if (store) routed_through_store(c, il, L, by_expert, z, ffs, shg, shu, wsel.data(), ys, sh_out);
    else routed_batched(c, L, by_expert, z, ffs, shg, shu, wsel.data(), ys, sh_out);
    // Sum the slots in selection order, as ggml's chain of adds does.
    float* yl = s.get(size_t(n * lat));
    for (int64_t t = 0; t < n; ++t) {
        float* dst = yl + t * lat;
        std::memcpy(dst, ys + (t * K) * lat, size_t(lat) * sizeof(float));
        for (int64_t k = 1; k < K; ++k) {
            const float* src = ys + (t * K + k) * lat;
            for (int64_t i = 0; i < lat; ++i) dst[i] += src[i];
        }
    }

    if (L.ffn_routed_up) {
        if (L.ffn_routed_norm)
            for (int64_t t = 0; t < n; ++t) ops::rms_norm(yl + t * lat, L.ffn_routed_norm, yl + t * lat, lat, hp.rms_eps);
        c.mm(L.ffn_routed_up, yl, out);
    } else {
        std::memcpy(out, yl, size_t(n * d) * sizeof(float));
    }

    if (ffs)   // shared experts: full width, unscaled
        for (int64_t i = 0; i < n * d; ++i) out[i] += sh_out[i];
}

}  // namespace kinfer::model
