// Feed-forward blocks, DESIGN.md section 3.4: the dense FFN of the leading layers and the MoE
// with sigmoid routing, selection bias, optional latent space (K3) and shared experts.
//
// Routed experts run where their bytes are. With no expert store they are tensors of the layer:
// on its backend (batched, one grouped matmul per step), or in the mapping when --cpu-moe /
// --n-cpu-moe keep a device layer's experts on the CPU (then the latent rows go to the CPU and
// the weighted outputs come back). Through the store, each expert is acquired from its tier: a
// device slot runs on the device backend, host RAM or the mapping on the CPU backend. Results
// are always combined on the layer's backend.
#include "model/forward_ctx.h"
#include "model/split.h"
#include "runtime/expert_store.h"
#include "runtime/routing_trace.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <span>

namespace kinfer::model {

namespace {

// The chunk's (token, slot) entries t * K + slot grouped by expert: expert e owns
// entry[off[e] .. off[e + 1]), in entry order (a counting sort of the selections).
struct ByExpert {
    std::vector<int64_t> off, entry;
    // keep (optional, [E]): only these experts' entries are listed (--split experts: the
    // experts this rank owns); the others' lists are empty.
    ByExpert(const std::vector<int32_t>& sel, int64_t E, const std::vector<char>* keep = nullptr)
        : off(size_t(E + 1), 0) {
        auto kept = [&](int32_t e) { return !keep || (*keep)[size_t(e)]; };
        for (int32_t e : sel)
            if (kept(e)) ++off[size_t(e) + 1];
        for (int64_t e = 0; e < E; ++e) off[size_t(e + 1)] += off[size_t(e)];
        entry.resize(size_t(off[size_t(E)]));
        std::vector<int64_t> next(off.begin(), off.end() - 1);
        for (size_t i = 0; i < sel.size(); ++i)
            if (kept(sel[i])) entry[size_t(next[size_t(sel[i])]++)] = int64_t(i);
    }
    int64_t n_expert() const { return int64_t(off.size()) - 1; }
    std::span<const int64_t> of(int64_t e) const {
        return {entry.data() + off[size_t(e)], size_t(off[size_t(e + 1)] - off[size_t(e)])};
    }
    // The same lists for experts [first, last) only (a device's shard), every other one empty.
    ByExpert only(int64_t first, int64_t last) const {
        ByExpert r;
        const int64_t a = off[size_t(first)], b = off[size_t(last)];
        r.off.reserve(off.size());
        for (int64_t o : off) r.off.push_back(std::clamp(o, a, b) - a);
        r.entry.assign(entry.begin() + a, entry.begin() + b);
        return r;
    }

private:
    ByExpert() = default;
};

// down . act(gate . x, up . x) for n rows of x, on be.
void glu_ffn(backend::Backend& be, backend::Workspace& ws, const backend::Glu& act, const Mat& gate, const Mat& up,
             const Mat& down, const float* x, int64_t n, float* out) {
    ScratchScope s(ws);
    const int64_t ff = gate.rows;
    float* g = s.get(size_t(n * ff));
    float* u = s.get(size_t(n * ff));
    be.matmul_many({{gate, g}, {up, u}}, x, n);
    be.glu(g, u, n, ff, act);
    be.matmul(down, g, n, out);
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
// at its real input, and ask the store to fetch those experts now, one layer ahead. Only when
// the next layer runs on the same backend (its router weights are there).
void prefetch_next_layer(FwdCtx& c, int il, const float* xn) {
    const HParams& hp = c.hp;
    int next = -1;
    for (int l = il + 1; l < int(c.w.layers.size()) && next < 0; ++l)
        if (c.w.layers[size_t(l)].ffn_gate_inp) next = l;
    if (next < 0 || &c.env.pl.layer(next) != &c.be) return;
    const LayerWeights& N = c.w.layers[size_t(next)];
    const int64_t E = hp.n_expert, K = hp.n_expert_used;
    ScratchScope s(c.ws);
    float* probs = s.get(size_t(c.n * E));
    c.be.matmul(mat_of(N.ffn_gate_inp), xn, c.n, probs);
    std::vector<int32_t> want(size_t(c.n * K));
    std::vector<float> w(size_t(c.n * K));
    c.be.route(probs, N.exp_probs_b, c.n, backend::RouteParams{E, K, false, 1.0f}, want.data(), w.data(), nullptr);
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    c.opt.experts->prefetch(next, want);
}

// The routed experts of a chunk (and, when shared_here, the shared experts' down projection) as
// tensors on be: each expert's rows gathered, every gate/up product in one grouped matmul, then
// every down product in one more. Same per-row arithmetic as the one-expert-at-a-time store
// path, so the logits are identical; decode wakes the pool twice per layer instead of three times
// per expert. ys gets [n][K][lat], already weighted.
void routed_batched(backend::Backend& be, backend::Workspace& ws, const FwdCtx& c, const LayerWeights& L,
                    const ByExpert& by_expert, const float* z, int64_t ffs, float* shg, float* shu, const float* wsel,
                    float* ys, float* sh_out) {
    const HParams& hp = c.hp;
    const int64_t n = c.n, K = hp.n_expert_used, lat = hp.latent_dim(), E = hp.n_expert;
    const int64_t ff = L.ffn_gate_exps->ne[1];
    ScratchScope s(ws);
    const std::vector<int64_t>& off = by_expert.off;      // first gathered row of each expert
    const int64_t rows = off[size_t(E)];
    float* zg = s.get(size_t(rows * lat));
    float* g = s.get(size_t(rows * ff));
    float* u = s.get(size_t(rows * ff));
    float* yg = s.get(size_t(rows * lat));
    // The experts' lists lie end to end in entry, in off's order: one gather for all of them (on
    // a GPU one list upload and one kernel, not one per expert).
    be.gather_rows(z, lat, by_expert.entry, K, zg);

    const Mat gate = mat_of(L.ffn_gate_exps), up = mat_of(L.ffn_up_exps), down = mat_of(L.ffn_down_exps);
    std::vector<backend::MatTask> tasks;
    // Expert e's product with its gathered rows of input `in`, into its rows of y (width ld).
    auto add_expert_tasks = [&](const Mat& W, int in, float* y, int64_t ld) {
        for (int64_t e = 0; e < E; ++e) {
            const int64_t m = off[size_t(e + 1)] - off[size_t(e)];
            if (m) tasks.push_back(backend::MatTask{W.slice(e), in, off[size_t(e)], m, y + off[size_t(e)] * ld, ld});
        }
    };
    const backend::MatInput zin{zg, rows, lat, 0};
    add_expert_tasks(gate, 0, g, ff);
    add_expert_tasks(up, 0, u, ff);
    be.matmul_tasks({&zin, 1}, tasks);

    be.glu(g, u, rows, ff, c.glu());
    if (shg) be.glu(shg, shu, n, ffs, c.glu());

    // Down products of every expert, plus the shared experts' down projection.
    tasks.clear();
    add_expert_tasks(down, 0, yg, lat);
    const backend::MatInput din[2] = {{g, rows, ff, 0}, {shg, n, ffs, 0}};
    if (shg) tasks.push_back(backend::MatTask{mat_of(L.ffn_down_shexp), 1, 0, n, sh_out, 0});
    be.matmul_tasks({din, shg ? 2u : 1u}, tasks);

    be.scatter_weighted(yg, lat, by_expert.entry, wsel, ys);   // every expert's rows at once, as the gather
}

// The routed experts of a device layer kept in the mapping (--cpu-moe, --n-cpu-moe): the latent
// rows go to the CPU, the experts run there, the weighted slots come back.
void routed_on_cpu(FwdCtx& c, const LayerWeights& L, const ByExpert& by_expert, const float* z, const float* wsel,
                   float* ys) {
    backend::Backend& cpu = c.env.bk.cpu();
    backend::Workspace& cws = c.env.ws_of(cpu);
    ScratchScope s(cws);
    const int64_t n = c.n, K = c.hp.n_expert_used, lat = c.hp.latent_dim();
    float* zc = s.get(size_t(n * lat));
    float* yc = s.get(size_t(n * K * lat));
    backend::copy_between(cpu, zc, c.be, z, size_t(n * lat) * sizeof(float));
    routed_batched(cpu, cws, c, L, by_expert, zc, 0, nullptr, nullptr, wsel, yc, nullptr);
    backend::copy_between(c.be, ys, cpu, yc, size_t(n * K * lat) * sizeof(float));
}

// The routed experts through the expert store, one expert at a time: each is acquired (same
// bytes, possibly from a cache or device tier) only while its matmuls run, so a budget that holds
// a single expert per layer still works. Each runs on the backend of its tier; its input rows and
// outputs cross to and from the layer's backend when that is another one.
void routed_through_store(FwdCtx& c, int il, const LayerWeights& L, const ByExpert& by_expert, const float* z,
                          const float* wsel, float* ys) {
    runtime::ExpertStore* store = c.opt.experts;
    const int64_t K = c.hp.n_expert_used, lat = c.hp.latent_dim(), n = c.n;
    backend::Backend* dev = store->options().device ? c.env.bk.backend_of(store->options().device) : nullptr;
    if (store->options().device && !dev)
        fail("the expert store's device {} is not one of this session's backends (SessionOptions::backends)",
             store->options().device->name());
    ScratchScope s(c.ws);
    float* zg = s.get(size_t(n * lat));
    float* yg = s.get(size_t(n * lat));
    for (int64_t e = 0; e < by_expert.n_expert(); ++e) {
        const std::span<const int64_t> list = by_expert.of(e);
        if (list.empty()) continue;
        const int64_t m = int64_t(list.size());
        c.be.gather_rows(z, lat, list, K, zg);
        ExpertHold hold(store, il, int(e), m);
        Mat gate = mat_of(L.ffn_gate_exps).slice(e), up = mat_of(L.ffn_up_exps).slice(e), down = mat_of(L.ffn_down_exps).slice(e);
        gate.data = hold.ref.part[0], up.data = hold.ref.part[1], down.data = hold.ref.part[2];
        backend::Backend& xb = hold.ref.tier == runtime::Tier::device ? *dev : c.env.bk.cpu();
        if (hold.ref.ready) {
            // The copy into its slot is still in flight: the device's compute stream waits for
            // it, not this thread (on the simulated device, whose stream is this thread, both).
            const auto t0 = std::chrono::steady_clock::now();
            xb.wait(backend::Event{hold.ref.ready});
            store->add_stall(il, uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now() - t0).count()));
        }
        if (&xb == &c.be) {
            glu_ffn(xb, c.ws, c.glu(), gate, up, down, zg, m, yg);
        } else {
            backend::Workspace& xws = c.env.ws_of(xb);
            ScratchScope xs(xws);
            float* xz = xs.get(size_t(m * lat));
            float* xy = xs.get(size_t(m * lat));
            const size_t bytes = size_t(m * lat) * sizeof(float);
            backend::copy_between(xb, xz, c.be, zg, bytes);
            glu_ffn(xb, xws, c.glu(), gate, up, down, xz, m, xy);
            backend::copy_between(c.be, yg, xb, xy, bytes);
        }
        c.be.scatter_weighted(yg, lat, list, wsel, ys);
    }
}

// The routed experts of a layer shared among devices (--split-mode experts, model/placement.h):
// each device runs its shard's lists of by_expert batched as above. Another device gets the
// latent rows z (a peer copy between GPUs) and is given its work first, so that on GPUs, whose
// streams run apart from this thread, the devices compute at once; the layer's own device then
// writes its rows into ys; last, each other device's weighted rows come back compacted and are
// put in place (backend::place_rows, exact): the slots sum as with one device, bit for bit.
void routed_sharded(FwdCtx& c, const LayerWeights& L, const std::vector<ExpertShard>& shards,
                    const ByExpert& by_expert, const float* z, const float* wsel, float* ys) {
    const int64_t n = c.n, K = c.hp.n_expert_used, lat = c.hp.latent_dim();
    auto weights_of = [&](const ExpertShard& sh) {
        LayerWeights Ls = L;
        Ls.ffn_gate_exps = sh.gate, Ls.ffn_up_exps = sh.up, Ls.ffn_down_exps = sh.down;
        return Ls;
    };
    struct Remote {
        backend::Backend* be;
        ByExpert by;
        float* rows;   // the weighted rows of by.entry, in that order, on be
    };
    std::vector<Remote> remote;
    std::deque<ScratchScope> scopes;   // one per other device (a workspace each), held to the end
    for (const ExpertShard& sh : shards) {
        if (sh.be == &c.be) continue;
        ByExpert by = by_expert.only(sh.first, sh.last);
        if (by.entry.empty()) continue;
        backend::Backend& xb = *sh.be;
        backend::Workspace& xws = c.env.ws_of(xb);
        ScratchScope& xs = scopes.emplace_back(xws);
        float* xz = xs.get(size_t(n * lat));
        float* xy = xs.get(size_t(n * K * lat));
        float* xc = xs.get(by.entry.size() * size_t(lat));
        backend::copy_between(xb, xz, c.be, z, size_t(n * lat) * sizeof(float));
        routed_batched(xb, xws, c, weights_of(sh), by, xz, 0, nullptr, nullptr, wsel, xy, nullptr);
        xb.gather_rows(xy, lat, by.entry, 1, xc);
        remote.push_back(Remote{&xb, std::move(by), xc});
    }
    for (const ExpertShard& sh : shards)
        if (sh.be == &c.be) {
            const ByExpert by = by_expert.only(sh.first, sh.last);
            if (!by.entry.empty()) routed_batched(c.be, c.ws, c, weights_of(sh), by, z, 0, nullptr, nullptr, wsel, ys, nullptr);
        }
    for (const Remote& r : remote) {
        ScratchScope s(c.ws);
        float* yc = s.get(r.by.entry.size() * size_t(lat));
        backend::copy_between(c.be, yc, *r.be, r.rows, r.by.entry.size() * size_t(lat) * sizeof(float));
        backend::place_rows(c.be, yc, lat, r.by.entry, ys);
    }
}

// The routed experts slot by slot, with the routing left on be (Backend::route_resident): slot
// s = t K + k runs expert sel[s] on z[t]. Nothing comes back to the host, so a GPU's decode
// step does not stop at every MoE layer to read the choices, as the grouping by expert must
// (ByExpert is built on the host). Each slot is one row through the same per-row arithmetic as
// routed_batched's grouped products, weighted as scatter_weighted weights: the same bits
// (test_props). An expert chosen by two tokens is read twice, so this form is for a few tokens.
constexpr int64_t kMaxResidentSlots = 64;

void routed_slots(FwdCtx& c, const LayerWeights& L, const int32_t* sel, const float* w, const float* z, float* ys) {
    const int64_t K = c.hp.n_expert_used, lat = c.hp.latent_dim(), E = c.hp.n_expert, slots = c.n * K;
    const int64_t ff = L.ffn_gate_exps->ne[1];
    ScratchScope s(c.ws);
    float* g = s.get(size_t(slots * ff));
    float* u = s.get(size_t(slots * ff));
    c.be.matmul_id(mat_of(L.ffn_gate_exps), E, sel, slots, z, K, g);
    c.be.matmul_id(mat_of(L.ffn_up_exps), E, sel, slots, z, K, u);
    c.be.glu(g, u, slots, ff, c.glu());
    c.be.matmul_id(mat_of(L.ffn_down_exps), E, sel, slots, g, 1, ys);
    c.be.scale_rows(ys, w, slots, lat);
}

// The weighted slots ys [n][K][lat] summed in selection order (as ggml's chain of adds), back
// up from the latent space (K3), plus the shared experts' output sh_out (full width, unscaled;
// nullptr: none) into out [n][d].
void finish_moe(FwdCtx& c, const LayerWeights& L, const float* ys, const float* sh_out, float* out) {
    const HParams& hp = c.hp;
    const int64_t n = c.n, d = hp.n_embd, K = hp.n_expert_used, lat = hp.latent_dim();
    ScratchScope s(c.ws);
    float* yl = s.get(size_t(n * lat));
    c.be.sum_slots(ys, n, K, lat, yl);
    if (L.ffn_routed_up) {
        if (L.ffn_routed_norm) c.be.rms_norm(yl, L.ffn_routed_norm, yl, n, lat, hp.rms_eps);
        c.be.matmul(mat_of(L.ffn_routed_up), yl, n, out);
    } else {
        c.be.copy(out, yl, size_t(n * d) * sizeof(float));
    }
    if (sh_out) c.be.add(out, sh_out, n * d);
}

}  // namespace

void dense_ffn(FwdCtx& c, int il, const float* xn, float* out) {
    const LayerWeights& L = c.w.layers[size_t(il)];
    glu_ffn(c.be, c.ws, c.glu(), mat_of(L.ffn_gate), mat_of(L.ffn_up), mat_of(L.ffn_down), xn, c.n, out);
}

void moe_ffn(FwdCtx& c, int il, const float* xn, float* out) {
    const HParams& hp = c.hp;
    backend::Backend& be = c.be;
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
        std::vector<std::pair<Mat, float*>> outs{{mat_of(L.ffn_gate_inp), probs}};
        if (zl) outs.emplace_back(mat_of(L.ffn_routed_down), zl);
        if (ffs) outs.emplace_back(mat_of(L.ffn_gate_shexp), shg), outs.emplace_back(mat_of(L.ffn_up_shexp), shu);
        be.matmul_many(outs, xn, n);
    }

    // Routed experts read the latent input (K3) or x itself.
    const float* z = zl ? zl : xn;
    float* ys = s.get(size_t(n * K * lat));          // [t][slot][lat], already weighted
    const backend::RouteParams route_params{E, K, hp.expert_weights_norm, hp.expert_weights_scale};
    runtime::ExpertStore* store = c.opt.experts;
    const std::vector<ExpertShard>& shards = c.env.pl.expert_shards(il);
    const bool hooked = c.opt.routing_replay || c.opt.routing_record;
    const bool shards_experts = c.opt.split && c.opt.split->shards_experts();
    const bool with_layer = !store && shards.empty() && !shards_experts && c.env.pl.experts_with_layer(il);

    // Slot by slot with the choices left on be (a GPU's decode step), when nothing on the host
    // needs them: no store, trace or expert-sharing split.
    const bool by_slot = with_layer && !hooked &&
                         (c.opt.moe_slots == 1 || (c.opt.moe_slots < 0 && be.resident_moe() && n * K <= kMaxResidentSlots));
    if (by_slot) {
        auto* sel = reinterpret_cast<int32_t*>(s.get(size_t(n * K)));   // 4-byte slots of the workspace
        float* w = s.get(size_t(n * K));
        be.route_resident(probs, L.exp_probs_b, n, route_params, sel, w);
        routed_slots(c, L, sel, w, z, ys);
        float* sh_out = ffs ? s.get(size_t(n * d)) : nullptr;
        if (ffs) {
            be.glu(shg, shu, n, ffs, c.glu());
            be.matmul(mat_of(L.ffn_down_shexp), shg, n, sh_out);
        }
        finish_moe(c, L, ys, sh_out, out);
        return;
    }

    // Router: sigmoid scores in fp32; the bias only picks, the weights use the raw scores.
    std::vector<int32_t> sel(static_cast<size_t>(n * K));
    std::vector<float> wsel(static_cast<size_t>(n * K));
    const int moe_layer = il - hp.n_layer_dense_lead;
    auto hook = [&](int64_t t, int32_t* idx) {
        if (c.opt.routing_replay)     // benchmarks: a recorded trained model's choice instead
            c.opt.routing_replay->replay(c.pos0 + t, moe_layer, int(E), int(K), idx);
        if (c.opt.routing_record) c.opt.routing_record->record(c.pos0 + t, moe_layer, idx);
    };
    be.route(probs, L.exp_probs_b, n, route_params, sel.data(), wsel.data(),
             hooked ? backend::RouteHook(hook) : backend::RouteHook());

    // Tell the expert store this chunk's choices at once: its misses load while hits compute.
    if (store) {
        store->route(il, sel, n);
        if (c.opt.prefetch_next) prefetch_next_layer(c, il, xn);
    }

    // Group tokens by expert so each expert's weights are read once per chunk.
    model::Split* split = shards_experts ? c.opt.split : nullptr;
    std::vector<char> mine;
    if (split)
        for (int64_t e = 0; e < E; ++e) mine.push_back(split->owns_expert(il, int(e)));
    const ByExpert by_expert(sel, E, split ? &mine : nullptr);
    float* sh_out = ffs ? s.get(size_t(n * d)) : nullptr;   // shared experts' output [n x d]
    const bool shared_done = !store && shards.empty() && c.env.pl.experts_with_layer(il);
    if (store) routed_through_store(c, il, L, by_expert, z, wsel.data(), ys);
    else if (!shards.empty()) routed_sharded(c, L, shards, by_expert, z, wsel.data(), ys);
    else if (c.env.pl.experts_with_layer(il)) routed_batched(be, c.ws, c, L, by_expert, z, ffs, shg, shu, wsel.data(), ys, sh_out);
    else routed_on_cpu(c, L, by_expert, z, wsel.data(), ys);
    if (ffs && !shared_done) {
        be.glu(shg, shu, n, ffs, c.glu());
        be.matmul(mat_of(L.ffn_down_shexp), shg, n, sh_out);
    }
    // The other ranks' experts' rows, so every rank sums the whole set.
    if (split) split->gather_slots(il, sel, be, ys, n, K, lat);
    finish_moe(c, L, ys, sh_out, out);
}

}  // namespace kinfer::model
