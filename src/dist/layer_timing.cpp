#include "dist/layer_timing.h"

#include "model/session.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fmt/format.h>
#include <random>

namespace kinfer::dist {

namespace {

using Clock = std::chrono::steady_clock;

// Nanoseconds of each layer (then the head) in the forward passes run while it is attached to
// a session: the time from the previous hook (or the pass's start) to this layer's hook.
struct LayerClock {
    std::vector<double> ns;
    Clock::time_point last;

    explicit LayerClock(int n_layer) : ns(size_t(n_layer + 1), 0.0) {}
    void lap(size_t slot) {
        const Clock::time_point now = Clock::now();
        ns[slot] += std::chrono::duration<double, std::nano>(now - last).count();
        last = now;
    }
};

}  // namespace

LayerProfile time_layers(const model::Model& m, const TimingOptions& o) {
    const int L = m.hparams().n_layer;
    model::SessionOptions so;
    so.n_ctx = o.prompt + o.decode;
    so.n_batch = o.batch > 0 ? std::min(o.batch, o.prompt) : o.prompt;
    so.n_threads = o.threads;
    so.cache_type = o.cache_type;
    model::Session s(m, so);
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> tok(0, int32_t(m.hparams().n_vocab) - 1);
    std::vector<int32_t> ids(size_t(o.prompt));

    // Per repetition: per-token ns of every slot, for prefill and for decode.
    std::vector<std::vector<double>> pre, dec;
    for (int rep = 0; rep <= o.reps; ++rep) {   // rep 0 warms up: pages in the weights, sizes the scratch
        LayerClock pc(L), dc(L);
        LayerClock* cur = &pc;
        s.on_layer = [&](int layer, int64_t, int64_t, const float*) {
            if (layer < L) cur->lap(size_t(layer));   // layer == L is the final stream: part of the head
        };
        s.reset();
        for (auto& id : ids) id = tok(rng);
        pc.last = Clock::now();
        s.prefill(ids);
        pc.lap(size_t(L));
        cur = &dc;
        for (int i = 0; i < o.decode; ++i) {
            dc.last = Clock::now();
            s.decode(tok(rng));
            dc.lap(size_t(L));
        }
        s.on_layer = nullptr;
        if (rep == 0) continue;
        for (double& x : pc.ns) x /= double(o.prompt);
        for (double& x : dc.ns) x /= double(std::max(o.decode, 1));
        pre.push_back(pc.ns), dec.push_back(dc.ns);
    }

    LayerProfile p;
    p.n_layer = L;
    p.fingerprint = m.fingerprint();
    p.model_name = std::filesystem::path(m.path()).filename().string();
    // One line of the file: no line breaks in the name.
    std::replace_if(p.model_name.begin(), p.model_name.end(), [](char c) { return c == '\n' || c == '\r'; }, '?');
    p.threads = s.n_threads();
    p.prompt = o.prompt, p.batch = so.n_batch, p.decode = o.decode;
    // The median over the repetitions: one slow repetition (a busy core) does not move it.
    auto median = [](std::vector<std::vector<double>>& runs, size_t slot) {
        std::vector<double> v;
        for (const auto& r : runs) v.push_back(r[slot]);
        std::sort(v.begin(), v.end());
        const double x = v.empty() ? 0.0 : v[v.size() / 2];
        return uint64_t(std::clamp(x, 0.0, double(LayerProfile::kMaxNs)) + 0.5);
    };
    for (size_t slot = 0; slot <= size_t(L); ++slot) p.decode_ns.push_back(median(dec, slot)), p.prefill_ns.push_back(median(pre, slot));
    return p;
}

std::string format_layer_times(const LayerProfile& p, const model::Model& m) {
    const model::HParams& hp = m.hparams();
    uint64_t dec = 0, pre = 0;
    for (size_t i = 0; i < p.decode_ns.size(); ++i) dec += p.decode_ns[i], pre += p.prefill_ns[i];
    auto pct = [](uint64_t x, uint64_t all) { return all ? 100.0 * double(x) / double(all) : 0.0; };
    std::string s = fmt::format("{:>5}  {:>5}  {:>5}  {:>14}  {:>6}  {:>15}  {:>6}\n", "layer", "mixer", "ffn", "decode us/tok", "share",
                                "prefill us/tok", "share");
    for (size_t i = 0; i < p.decode_ns.size(); ++i) {
        const bool head = i == size_t(p.n_layer);
        const int il = int(i);
        s += fmt::format("{:>5}  {:>5}  {:>5}  {:>14.2f}  {:>5.1f}%  {:>15.3f}  {:>5.1f}%\n", head ? "head" : std::to_string(il),
                         head ? "-" : hp.is_kda(il) ? "KDA" : "MLA", head ? "-" : hp.is_dense(il) ? "dense" : "MoE",
                         double(p.decode_ns[i]) / 1e3, pct(p.decode_ns[i], dec), double(p.prefill_ns[i]) / 1e3, pct(p.prefill_ns[i], pre));
    }
    s += fmt::format("total: decode {:.1f} us/token ({:.1f} tokens/s), prefill {:.2f} us/token ({:.1f} tokens/s); {} threads, "
                     "{}-token prompt in chunks of {}, {} decodes\n",
                     double(dec) / 1e3, dec ? 1e9 / double(dec) : 0.0, double(pre) / 1e3, pre ? 1e9 / double(pre) : 0.0, p.threads,
                     p.prompt, p.batch, p.decode);
    return s;
}

}  // namespace kinfer::dist
