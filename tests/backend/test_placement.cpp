// The backend seam: placements on the strict simulated device give logits bit-identical to the
// CPU alone; a host pointer handed to a device op (and a device pointer to a CPU op) throws;
// session state survives save / load; a failed call leaves a session that refuses clearly.
#include "test_util.h"

#include "backend/registry.h"
#include "backend/sim_backend.h"
#include "cli/lib/expert_session.h"
#include "model/placement.h"
#include "model/session.h"
#include "model/tensor_list.h"
#include "runtime/expert_layout.h"
#include "runtime/expert_store.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kinfer;

namespace {

std::vector<int32_t> prompt(int64_t n_vocab, int n) {
    std::vector<int32_t> ids;
    uint32_t s = 12345;
    for (int i = 0; i < n; ++i) ids.push_back(int32_t((s = s * 1664525u + 1013904223u) % uint32_t(n_vocab)));
    return ids;
}

// 24 tokens prefilled in chunks of 8, then 4 decoded: every position's logits.
std::vector<float> run(const model::Model& m, model::SessionOptions so) {
    so.n_ctx = 64, so.n_batch = 8, so.n_threads = 2;
    model::Session s(m, so);
    const auto ids = prompt(m.hparams().n_vocab, 28);
    std::vector<float> out;
    s.prefill(std::span(ids).first(24), &out);
    for (int i = 24; i < 28; ++i) {
        s.decode(ids[size_t(i)]);
        out.insert(out.end(), s.logits().begin(), s.logits().end());
    }
    return out;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::string> models() {
    std::vector<std::string> p{test::data("models/k3-tiny-a-Q4_K_M.gguf"), test::data("models/kl-tiny-a-Q4_K_M.gguf")};
    if (test::have_golden("llama.cpp/models"))
        for (const char* a : {"k3-tiny-a", "kl-tiny-a"})
            for (const char* q : {"F32", "Q8_0", "Q4_K_M", "MXFP4_MOE"})
                p.push_back(test::golden(std::string("llama.cpp/models/") + a + "-" + q + ".gguf"));
    return p;
}

}  // namespace

TEST_CASE("placement on the strict sim device: -ngl, expert caches, --n-cpu-moe give the CPU's logits bit for bit") {
    for (const std::string& path : models()) {
        CAPTURE(path);
        auto m = model::Model::load(path);
        const int L = m->hparams().n_layer;
        const auto base = run(*m, {});
        for (int ngl : {0, 1, L / 2, L, L + 1}) {
            for (int n_cpu_moe : {0, 1}) {
                CAPTURE(ngl);
                CAPTURE(n_cpu_moe);
                backend::Backends bk(2);
                bk.add_device("sim:256MiB");
                model::SessionOptions so;
                so.backends = &bk, so.n_gpu_layers = ngl, so.n_cpu_moe = n_cpu_moe;
                CHECK_MESSAGE(same(run(*m, so), base), "logits differ");
            }
        }
        // Experts through the store with a device cache of 10 / 50 / 100 % of their bytes.
        const auto lay = runtime::ExpertLayout::from_file(m->file(), model::expert_tensor_names(m->hparams()));
        for (double frac : {0.1, 0.5, 1.0}) {
            for (int ngl : {0, L}) {
                CAPTURE(frac);
                CAPTURE(ngl);
                backend::Backends bk(2);
                bk.add_device("sim:256MiB");
                runtime::ExpertStoreOptions o;
                o.device = bk.expert_device();
                // 100 %: a slot (of the largest expert's size) for every expert.
                o.device_budget = frac == 1.0 ? lay.max_expert_bytes() * size_t(lay.n_expert) * size_t(L)
                                              : std::max(lay.max_expert_bytes(), size_t(double(lay.total_bytes()) * frac));
                if (frac == 1.0 && ngl) o.placement.n_cpu_moe = 1;   // mixed: layer 1's experts stay on the CPU
                runtime::ExpertStore store(m->file(), model::expert_tensor_names(m->hparams()), o);
                model::SessionOptions so;
                so.backends = &bk, so.n_gpu_layers = ngl, so.experts = &store;
                CHECK_MESSAGE(same(run(*m, so), base), "logits differ");
                CHECK(store.stats().total().uses > 0);
            }
        }
    }
}

TEST_CASE("a host pointer handed to a device op, or a device pointer to a CPU op, fails loudly") {
    backend::Backends bk(1);
    backend::Backend& dev = bk.add_device("sim:1MiB");
    std::vector<float> host(64, 1.0f);
    backend::Buffer b = dev.alloc(64 * sizeof(float), "test");
    float* d = reinterpret_cast<float*>(b.ptr);
    dev.upload(d, host.data(), 64 * sizeof(float));
    CHECK_THROWS_WITH(dev.add(d, host.data(), 64), doctest::Contains("sim0: op add was handed host memory for a"));
    CHECK_THROWS_WITH(bk.cpu().add(host.data(), d, 64), doctest::Contains("cpu: op add was handed sim0 memory for a"));
    backend::Mat W;
    W.type = quant::Type::F32, W.cols = 8, W.rows = 8, W.row_bytes = 32, W.data = reinterpret_cast<const uint8_t*>(host.data());
    W.name = "blk.0.attn_q.weight";
    CHECK_THROWS_WITH(dev.matmul(W, d, 1, d + 8, 0, 0), doctest::Contains("weight blk.0.attn_q.weight"));
    dev.add(d, d + 32, 32);   // device memory on a device op is fine
    dev.free(b);
}

// --device cuda0 where there is no GPU at run time: the CPU, with a one-line note; but with
// KINFER_REQUIRE_DEVICE=1 (tests/gpu's scripts) an error, so that a device check cannot compare
// the CPU with itself and pass. Which branch runs depends on the build and the machine: a build
// without the CUDA backend refuses cudaN either way; a machine with a GPU opens it either way.
TEST_CASE("--device cuda0 without a GPU: the CPU with a note, or an error under KINFER_REQUIRE_DEVICE=1") {
    struct EnvGuard {
        ~EnvGuard() { unsetenv("KINFER_REQUIRE_DEVICE"); }
    } guard;
    unsetenv("KINFER_REQUIRE_DEVICE");
    std::string without_cuda;
    bool on_cpu = false, on_gpu = false;
    {
        backend::Backends bk(1);
        try {
            backend::Backend& be = bk.add_device("cuda0");
            on_cpu = &be == &bk.cpu();
            on_gpu = !on_cpu;
        } catch (const std::exception& e) {
            without_cuda = e.what();
        }
    }
    setenv("KINFER_REQUIRE_DEVICE", "1", 1);
    backend::Backends bk(1);
    if (!without_cuda.empty()) {
        CHECK_MESSAGE(without_cuda.find("built without the CUDA backend") != std::string::npos, without_cuda);
        CHECK_THROWS_WITH(bk.add_device("cuda0"), doctest::Contains("built without the CUDA backend"));
    } else if (on_cpu) {
        CHECK_THROWS_WITH(bk.add_device("cuda0"), doctest::Contains("KINFER_REQUIRE_DEVICE is set"));
        setenv("KINFER_REQUIRE_DEVICE", "0", 1);   // "0" is off
        CHECK(&bk.add_device("cuda0") == &bk.cpu());
    } else {
        CHECK(on_gpu);
        CHECK(&bk.add_device("cuda0") != &bk.cpu());
    }
}

TEST_CASE("a device op reading memory that a copy is still writing fails loudly; after wait(Event) it runs") {
    backend::Backends bk(1);
    // 1 MB/s: a 64 KiB copy takes ~65 ms, so it is surely still queued when the op runs.
    backend::Backend& dev = bk.add_device("sim:1MiB,0.001");
    const int64_t n = 16384;
    backend::Buffer b = dev.alloc(size_t(2 * n) * sizeof(float), "test");
    float* d = reinterpret_cast<float*>(b.ptr);
    std::vector<float> host(static_cast<size_t>(n), 2.0f), back(static_cast<size_t>(n));
    dev.upload(d + n, host.data(), size_t(n) * sizeof(float));
    const backend::Event e = dev.upload_async(d, host.data(), size_t(n) * sizeof(float));
    CHECK(e.ticket != 0);
    CHECK_THROWS_WITH(dev.add(d + n, d, n), doctest::Contains("sim0: op add reads a"));
    CHECK_THROWS_WITH(dev.add(d + n, d, n), doctest::Contains("must wait(Event) for that copy first"));
    dev.add(d + n, d + n, 1);   // memory no copy is writing is fine meanwhile
    dev.wait(e);
    dev.add(d + n, d, n);
    dev.download(back.data(), d + n, size_t(n) * sizeof(float));
    CHECK(back[0] == 6.0f);                // doubled above, then + 2
    CHECK(back[size_t(n) - 1] == 4.0f);    // 2 + 2
    dev.free(b);
}

TEST_CASE("pinned host memory: the sim device counts copies from anything else") {
    backend::Backends bk(1);
    backend::Backend& dev = bk.add_device("sim:1MiB");
    auto* sim = dynamic_cast<runtime::SimDevice*>(bk.expert_device());
    REQUIRE(sim != nullptr);
    backend::Buffer b = dev.alloc(4096, "test");
    backend::Buffer pin = dev.alloc_pinned_host(4096, "staging");
    CHECK(sim->pinned_bytes() == 4096);
    std::vector<uint8_t> pageable(4096, 7);
    dev.wait(dev.upload_async(b.ptr, pin.ptr, 4096));
    CHECK(sim->pageable_copies() == 0);
    dev.wait(dev.upload_async(b.ptr, pageable.data(), 4096));
    CHECK(sim->pageable_copies() == 1);
    CHECK(sim->pageable_bytes() == 4096);
    dev.free_pinned_host(pin);
    CHECK(sim->pinned_bytes() == 0);
    dev.free(b);
}

TEST_CASE("session state: save, load into a new session, continue: identical logits; bad bytes refused") {
    for (const std::string& path : models()) {
        CAPTURE(path);
        auto m = model::Model::load(path);
        const auto ids = prompt(m->hparams().n_vocab, 30);
        model::Session a(*m, {.n_ctx = 64, .n_batch = 8, .n_threads = 2});
        a.prefill(std::span(ids).first(20));
        const std::vector<uint8_t> st = a.save_state();
        for (int i = 20; i < 30; ++i) a.decode(ids[size_t(i)]);

        backend::Backends bk(2);
        bk.add_device("sim:256MiB");
        model::Session b(*m, {.n_ctx = 64, .n_batch = 8, .n_threads = 2, .backends = &bk, .n_gpu_layers = 99});
        b.load_state(st);
        CHECK(b.n_past() == 20);
        for (int i = 20; i < 30; ++i) b.decode(ids[size_t(i)]);
        CHECK(std::memcmp(a.logits().data(), b.logits().data(), a.logits().size() * sizeof(float)) == 0);

        std::vector<uint8_t> bad = st;
        bad[bad.size() / 2] ^= 1;
        CHECK_THROWS_WITH(b.load_state(bad), doctest::Contains("checksum"));
        CHECK_THROWS_WITH(b.load_state(std::span(st).first(st.size() - 9)), doctest::Contains("checksum"));
        CHECK(b.n_past() == 30);   // refused loads leave the session as it was
    }
    auto k3 = model::Model::load(test::data("models/k3-tiny-a-Q4_K_M.gguf"));
    auto kl = model::Model::load(test::data("models/kl-tiny-a-Q4_K_M.gguf"));
    model::Session s3(*k3, {.n_ctx = 64, .n_threads = 1});
    s3.prefill(prompt(k3->hparams().n_vocab, 4));
    model::Session sl(*kl, {.n_ctx = 64, .n_threads = 1});
    CHECK_THROWS_WITH(sl.load_state(s3.save_state()), doctest::Contains("another model"));
}

TEST_CASE("an error mid-forward leaves a session that refuses until reset, then matches an untouched one") {
    auto m = model::Model::load(test::data("models/k3-tiny-a-Q4_K_M.gguf"));
    const auto ids = prompt(m->hparams().n_vocab, 12);
    backend::Backends bk(2);
    bk.add_device("sim:256MiB");
    model::SessionOptions so{.n_ctx = 64, .n_batch = 8, .n_threads = 2, .backends = &bk, .n_gpu_layers = 1};
    model::Session s(*m, so);
    s.prefill(std::span(ids).first(4));
    // The fault: a layer hook that throws after some layers have advanced their state.
    s.on_layer = [](int layer, int64_t, int64_t, const float*) {
        if (layer == 2) throw Error("injected failure in layer 2");
    };
    CHECK_THROWS_WITH(s.prefill(std::span(ids).subspan(4, 4)), doctest::Contains("injected failure"));
    s.on_layer = nullptr;
    CHECK_THROWS_WITH(s.decode(ids[4]), doctest::Contains("unusable after an earlier error (injected failure"));
    s.reset();
    s.prefill(std::span(ids).first(8));
    model::Session fresh(*m, so);
    fresh.prefill(std::span(ids).first(8));
    CHECK(std::memcmp(s.logits().data(), fresh.logits().data(), s.logits().size() * sizeof(float)) == 0);
}

TEST_CASE("-ot moves whole layers (and the embedding table) between the CPU and the device; a split layer or an unknown backend is refused") {
    auto m = model::Model::load(test::data("models/k3-tiny-a-Q4_K_M.gguf"));
    const int L = m->hparams().n_layer;
    REQUIRE(L >= 2);
    const auto base = run(*m, {});
    backend::Backends bk(2);
    bk.add_device("sim:256MiB");
    // -ngl all, then layer 1 back on the CPU: logits unchanged, one layer fewer on the device.
    model::SessionOptions so;
    so.backends = &bk, so.n_gpu_layers = L, so.overrides = {"blk\\.1\\.=CPU"};
    CHECK(same(run(*m, so), base));
    {
        model::Session s(*m, so);
        CHECK(s.placement().n_device_layers() == L - 1);
        CHECK(&s.placement().layer(1) == &bk.cpu());
        CHECK(&s.placement().layer(0) == bk.device(0));
    }
    // No -ngl: layer 0 and the output head to the device by name.
    so.n_gpu_layers = 0, so.overrides = {"blk\\.0\\.=sim0,^output=sim0"};
    CHECK(same(run(*m, so), base));
    {
        model::Session s(*m, so);
        CHECK(s.placement().n_device_layers() == 1);
        CHECK(&s.placement().output() == bk.device(0));
    }
    // Only the attention norm of layer 0: the layer would be split.
    so.overrides = {"blk\\.0\\.attn_norm=sim0"};
    CHECK_THROWS_WITH_AS(model::Session(*m, so), doctest::Contains("runs a layer on one backend"), Error);
    so.overrides = {"blk\\.0\\.=cuda7"};
    CHECK_THROWS_WITH_AS(model::Session(*m, so), doctest::Contains("no backend called 'cuda7'"), Error);
    // The embedding table to the device: the gather runs there, the same bits.
    so.overrides = {"token_embd=sim0"};
    CHECK(same(run(*m, so), base));
    {
        model::Session s(*m, so);
        CHECK(&s.placement().embed() == bk.device(0));
        CHECK(s.placement().n_device_layers() == 0);
        CHECK(s.placement().device_bytes() == m->file().find_tensor("token_embd.weight")->nbytes);
    }
    so.n_gpu_layers = L, so.overrides = {"token_embd=sim0"};
    CHECK(same(run(*m, so), base));
    so.n_gpu_layers = 0;
    so.overrides = {"blk\\.0\\.("};
    CHECK_THROWS_WITH_AS(model::Session(*m, so), doctest::Contains("expected REGEX=DEVICE"), Error);
}

namespace {

// --split-mode layer: the -ngl layers in contiguous runs, each device used, the earlier ones
// taking the odd layers; the head with the last layer.
void check_layer_runs(const model::Placement& pl, backend::Backends& bk, int L, int ngl, int n_dev) {
    int prev = -1;
    std::vector<int> per(size_t(n_dev), 0);
    for (int il = L - ngl; il < L; ++il) {
        int d = 0;
        while (&pl.layer(il) != bk.device(size_t(d))) ++d;
        CHECK(d >= prev);
        prev = d, ++per[size_t(d)];
    }
    for (int d = 0; d < n_dev; ++d) CHECK(per[size_t(d)] == ngl / n_dev + (d < ngl % n_dev ? 1 : 0));
    CHECK(&pl.output() == (ngl >= L ? bk.device(size_t(n_dev - 1)) : &bk.cpu()));
}

// --split-mode experts: every device layer on the first device; each MoE one's experts in one
// contiguous range per device, in device order, covering every expert once.
void check_expert_shards(const model::Placement& pl, backend::Backends& bk, const model::HParams& hp, int ngl, int n_dev) {
    int sharded = 0;
    for (int il = 0; il < hp.n_layer; ++il) {
        const auto& shards = pl.expert_shards(il);
        if (il < hp.n_layer - ngl || il < hp.n_layer_dense_lead) {
            CHECK(shards.empty());
            if (il >= hp.n_layer - ngl) CHECK(&pl.layer(il) == bk.device(0));
            continue;
        }
        CHECK(&pl.layer(il) == bk.device(0));
        ++sharded;
        REQUIRE(shards.size() == size_t(n_dev));
        int64_t next = 0;
        for (int d = 0; d < n_dev; ++d) {
            CHECK(shards[size_t(d)].be == bk.device(size_t(d)));
            CHECK(shards[size_t(d)].first == next);
            CHECK(shards[size_t(d)].last > shards[size_t(d)].first);
            next = shards[size_t(d)].last;
        }
        CHECK(next == hp.n_expert);
    }
    CHECK(sharded > 0);
    CHECK(&pl.output() == (ngl >= hp.n_layer ? bk.device(0) : &bk.cpu()));
}

}  // namespace

TEST_CASE("several devices in one process (--device sim:..,sim:..): -ngl spreads the layers over them in runs, or "
          "--split-mode experts divides each layer's experts among them; logits bit for bit") {
    backend::Backends parse(1);
    parse.add_devices("sim:64MiB,25,sim:32MiB");   // a number after a sim spec is its bandwidth
    REQUIRE(parse.n_devices() == 2);
    CHECK(parse.specs() == "sim:64MiB,25,sim:32MiB");
    for (const char* name : {"models/k3-tiny-a-Q4_K_M.gguf", "models/kl-tiny-a-Q4_K_M.gguf"}) {
        CAPTURE(name);
        auto m = model::Model::load(test::data(name));
        const auto& hp = m->hparams();
        const int L = hp.n_layer;
        const auto base = run(*m, {});
        for (bool shard : {false, true})
            for (int n_dev : {2, 3})
                for (int ngl : {L, L - 1}) {
                    CAPTURE(shard);
                    CAPTURE(n_dev);
                    CAPTURE(ngl);
                    // Strict simulated devices: a kernel given another device's pointer fails.
                    backend::Backends bk(2);
                    for (int d = 0; d < n_dev; ++d) bk.add_device("sim:128MiB");
                    model::SessionOptions so;
                    so.backends = &bk, so.n_gpu_layers = ngl, so.shard_experts = shard;
                    CHECK_MESSAGE(same(run(*m, so), base), "logits differ");
                    model::Session s(*m, so);
                    const model::Placement& pl = s.placement();
                    if (ngl < L) CHECK(&pl.layer(0) == &bk.cpu());
                    if (shard) check_expert_shards(pl, bk, hp, ngl, n_dev);
                    else check_layer_runs(pl, bk, L, ngl, n_dev);
                }
    }
}

// --device with -ngl and no expert store flag (cli attach_experts): the routed experts go with
// their layers when the device layers fit 90 % of the devices' free memory, so a GPU decode step
// can keep the router's choices on the device; a store when they do not fit, when no layer is on
// the device, or when a store flag asks for one.
TEST_CASE("attach_experts: --device -ngl N makes no expert store when the layers fit, one when they do not") {
    auto m = model::Model::load(test::data("models/k3-tiny-a-Q4_K_M.gguf"));
    struct Case {
        const char* device;
        int ngl;
        const char* dev_cache;
        const char* ot;
        bool store;
    };
    // Two devices: the layers go in two runs, the head with the second (k3-tiny-a: 0.7 MiB on the
    // first, 1.7 MiB on the second); a device too small for its run makes the store.
    // An -ot rule for token_embd places the table, not experts: no store; one for experts is a tier.
    for (const Case c : {Case{"sim:1GiB", 99, "", "", false}, Case{"sim:1GiB", 2, "", "", false},
                         Case{"sim:1MiB", 99, "", "", true}, Case{"sim:1GiB", 0, "", "", true},
                         Case{"sim:1GiB", 99, "50%", "", true}, Case{"sim:1GiB,sim:1GiB", 99, "", "", false},
                         Case{"sim:1GiB,sim:1MiB", 99, "", "", true}, Case{"sim:512KiB,sim:1GiB", 99, "", "", true},
                         Case{"sim:1GiB", 99, "", "token_embd=sim0", false},
                         Case{"sim:1GiB", 99, "", "ffn_.*_exps=CPU", true},
                         // A dense-only -ot rule moves the last four layers (experts too, without a
                         // store) onto the 4 MiB device as well, which then does not fit (with their
                         // latent caches at -c 4096); a rule naming experts is a store tier; a dense
                         // rule with a store made for another reason is not an expert tier.
                         Case{"sim:4MiB,sim:1GiB", 99, "", "", false},
                         Case{"sim:4MiB,sim:1GiB", 99, "", "blk\\.[4-7]\\.(?!ffn_(gate|up|down)_exps)=sim0", true},
                         Case{"sim:4MiB,sim:1GiB", 99, "", "blk\\.[4-7]\\.=sim0", true},
                         Case{"sim:1MiB", 99, "", "token_embd=sim0", true}}) {
        INFO((std::string(c.device) + " -ngl " + std::to_string(c.ngl) + " --expert-cache '" + c.dev_cache + "' -ot '" + c.ot + "'"));
        runtime::ExpertFlags f;
        f.device = c.device;
        f.n_gpu_layers = c.ngl;
        f.dev_cache = c.dev_cache;
        if (*c.ot) f.overrides = {c.ot};
        model::SessionOptions so;
        so.n_threads = 2;
        const auto rd = cli::attach_experts(*m, f, so);
        CHECK((so.experts != nullptr) == c.store);
        CHECK(so.n_gpu_layers == c.ngl);
    }
}
