// The store changes where expert bytes are read from, never what is computed: logits must be
// bit-identical with and without every cache, budget, policy, placement, prefetch and the
// simulated device, on every golden model (batch prefill and token-by-token decode).
#include "store_util.h"

#include "backend/registry.h"
#include "model/session.h"
#include "runtime/device_sim.h"

#include <cstring>
#include <filesystem>

using namespace kinfer;
using namespace kinfer::runtime;

namespace {

// 20 tokens prefilled in chunks of 8 (several routes per layer), then 6 decoded one by one.
kinfer::test::TokenRun run(const model::Model& m, ExpertStore* store, bool prefetch, backend::Backends* bk = nullptr) {
    model::SessionOptions so = kinfer::test::small_session(8);
    so.experts = store;
    so.backends = bk;
    so.prefetch_next = prefetch;
    return kinfer::test::run_tokens(m, so, 20, 6);
}

bool identical(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void check_model(const std::string& path) {
    auto m = model::Model::load(path);
    const int nl = int(m->hparams().n_layer);
    const auto& f = m->file();
    const auto lay = ExpertLayout::from_file(f, kinfer::test::expert_names(f));
    size_t one_per_layer = 0;
    for (const auto& L : lay.layers) one_per_layer += L.bytes;
    const kinfer::test::TokenRun base = run(*m, nullptr, false);

    struct Config {
        std::string name;
        ExpertStoreOptions o;
        bool sim = false;
        size_t sim_slots = 0;
        bool prefetch = false;
        double sim_gbps = 20;
    };
    std::vector<Config> cfgs;
    auto add = [&](std::string name, auto edit, bool sim = false, size_t slots = 0, bool pf = false) {
        Config c;
        c.name = std::move(name);
        edit(c.o);
        c.sim = sim, c.sim_slots = slots, c.prefetch = pf;
        cfgs.push_back(std::move(c));
    };
    add("zero-copy + record", [](ExpertStoreOptions& o) { o.record = true; });
    add("mmap, host 1/layer, lfu", [&](ExpertStoreOptions& o) { o.ram_budget = one_per_layer; });
    add("pread, host 1 expert, lru", [&](ExpertStoreOptions& o) { o.io = ExpertIo::pread; o.policy = PolicyKind::lru; });
    add("direct, host 1/layer, sync", [&](ExpertStoreOptions& o) { o.io = ExpertIo::direct; o.ram_budget = one_per_layer; o.async = false; });
    add("pread, host all, prefetch", [&](ExpertStoreOptions& o) { o.io = ExpertIo::pread; o.ram_budget = lay.total_bytes(); }, false, 0, true);
    add("sim, 1 slot", [](ExpertStoreOptions&) {}, true, 1);
    add("sim, 1/layer + pread host, prefetch", [&](ExpertStoreOptions& o) { o.io = ExpertIo::pread; o.ram_budget = one_per_layer; }, true, size_t(nl), true);
    add("sim, cost model keeps misses on CPU", [](ExpertStoreOptions& o) { o.cpu_gbps = 1e4; o.reuse = 1; }, true, 8);
    add("sim, --n-cpu-moe 3", [](ExpertStoreOptions& o) { o.placement.n_cpu_moe = 3; }, true, size_t(lay.n_expert) * size_t(nl));
    // Copies of ~1 ms each: every expert op on the device would find its slot still being written
    // (and the strict device refuse it) unless the forward pass makes the stream wait for it.
    add("sim, slow copies, 4 slots + pread host", [&](ExpertStoreOptions& o) { o.io = ExpertIo::pread; o.ram_budget = one_per_layer; }, true, 4);
    cfgs.back().sim_gbps = double(lay.max_expert_bytes()) / 1e-3 / 1e9;
    ExpertProfile prof(nl, lay.n_expert);
    for (int l = 0; l < nl; ++l)
        for (int e = 0; e < lay.n_expert; ++e) prof.add(l, e, uint64_t((l * 31 + e * 17) % 23));
    add("profile-seeded, host + sim", [&](ExpertStoreOptions& o) { o.seed = &prof; o.ram_budget = one_per_layer * 2; }, true, size_t(nl) * 2);

    for (const auto& c : cfgs) {
        CAPTURE(path);
        CAPTURE(c.name);
        // The device tier is a strict simulated device: experts in its slots run on its ops, and a
        // slot pointer handed to a CPU op (or a host pointer to a device op) throws.
        std::unique_ptr<backend::Backends> bk;
        ExpertStoreOptions o = c.o;
        if (c.sim) {
            bk = std::make_unique<backend::Backends>(kinfer::test::small_session(8).n_threads);
            bk->add_device(fmt::format("sim:{},{}", lay.max_expert_bytes() * c.sim_slots + (4u << 20), c.sim_gbps));
            o.device = bk->expert_device();
            o.device_budget = lay.max_expert_bytes() * c.sim_slots;   // the rest is the device's scratch
        }
        ExpertStore store(f, kinfer::test::expert_names(f), o);
        const kinfer::test::TokenRun r = run(*m, &store, c.prefetch, bk.get());
        CHECK_MESSAGE(identical(r.prefill, base.prefill), "prefill logits differ");
        CHECK_MESSAGE(identical(r.decode, base.decode), "decode logits differ");
        const auto t = store.stats().total();
        CHECK(store.stats().tokens == 20 + 6);
        if (!store.zero_copy()) CHECK(t.uses > 0);
        if (c.sim && o.io != ExpertIo::mmap)   // copies from the host tier: pinned, never staged
            CHECK(dynamic_cast<SimDevice*>(o.device)->pageable_copies() == 0);
    }
}

}  // namespace

TEST_CASE("logits are bit-identical through every store configuration: shipped models") {
    for (const char* m : {"k3-tiny-a-Q4_K_M.gguf", "kl-tiny-a-Q4_K_M.gguf"}) check_model(kinfer::test::data(std::string("models/") + m));
}

TEST_CASE("logits are bit-identical through every store configuration: golden models") {
    if (!kinfer::test::have_golden("llama.cpp/models")) return;
    for (const char* arch : {"k3-tiny-a", "kl-tiny-a"})
        for (const char* q : {"F32", "Q8_0", "Q4_K_M", "MXFP4_MOE"})
            check_model(kinfer::test::golden(fmt::format("llama.cpp/models/{}-{}.gguf", arch, q)));
}
