// Routing traces (--routing-record / --routing-replay): a recorded run replayed onto the same
// model computes exactly the same thing, replay onto a model with r times the experts picks the
// expanded groups, and broken trace files fail with the file and line.
#include "store_util.h"

#include "model/session.h"
#include "runtime/routing_trace.h"

#include <cstdio>
#include <cstring>
#include <fstream>

using namespace kinfer;
using namespace kinfer::runtime;

namespace {

// 12 tokens prefilled in chunks of 5, then 5 decoded: all the logits, one vector.
std::vector<float> run(const model::Model& m, RoutingTrace* rec, const RoutingTrace* rep) {
    model::SessionOptions so = kinfer::test::small_session(5);
    so.routing_record = rec;
    so.routing_replay = rep;
    auto r = kinfer::test::run_tokens(m, so, 12, 5);
    r.prefill.insert(r.prefill.end(), r.decode.begin(), r.decode.end());
    return r.prefill;
}

std::string tmp_path(const char* name) { return (std::filesystem::temp_directory_path() / name).string(); }

}  // namespace

TEST_CASE("routing trace: record, save, load, replay gives the same logits") {
    for (const char* name : {"k3-tiny-a-Q4_K_M.gguf", "kl-tiny-a-Q4_K_M.gguf"}) {
        CAPTURE(name);
        auto m = model::Model::load(kinfer::test::data(std::string("models/") + name));
        const auto& hp = m->hparams();
        const int L = int(hp.n_layer - hp.n_layer_dense_lead), E = int(hp.n_expert), K = int(hp.n_expert_used);
        RoutingTrace rec(L, E, K);
        const auto base = run(*m, &rec, nullptr);
        CHECK(rec.n_tokens() == 12 + 5);
        const std::string path = tmp_path("kinfer_test_trace.txt");
        rec.save(path);
        const RoutingTrace back = RoutingTrace::load(path);
        std::remove(path.c_str());
        CHECK(back.n_tokens() == rec.n_tokens());
        back.check_replay(L, E, K);
        const auto again = run(*m, nullptr, &back);
        REQUIRE(again.size() == base.size());
        CHECK(std::memcmp(again.data(), base.data(), base.size() * sizeof(float)) == 0);

        // A trace that always picks the same experts changes the output (the replay is used).
        RoutingTrace fixed(1, E, K);
        std::vector<int32_t> pick(static_cast<size_t>(K));
        for (int i = 0; i < K; ++i) pick[size_t(i)] = i;
        fixed.record(0, 0, pick.data());
        const auto forced = run(*m, nullptr, &fixed);
        CHECK(std::memcmp(forced.data(), base.data(), base.size() * sizeof(float)) != 0);
    }
}

TEST_CASE("routing trace: replay onto r times the experts expands each choice") {
    RoutingTrace t(2, 4, 2);
    const int32_t a[2] = {3, 1}, b[2] = {0, 2};
    t.record(0, 0, a);
    t.record(0, 1, b);
    int32_t out[4];
    t.check_replay(5, 8, 4);
    t.replay(0, 0, 8, 4, out);
    CHECK(out[0] == 6); CHECK(out[1] == 7); CHECK(out[2] == 2); CHECK(out[3] == 3);
    t.replay(7, 3, 8, 4, out);          // token 7 wraps to 0, MoE layer 3 to 1
    CHECK(out[0] == 0); CHECK(out[1] == 1); CHECK(out[2] == 4); CHECK(out[3] == 5);
    CHECK_THROWS_WITH_AS(t.check_replay(5, 8, 3), doctest::Contains("cannot stand for"), kinfer::Error);
    CHECK_THROWS_WITH_AS(t.check_replay(5, 6, 3), doctest::Contains("cannot stand for"), kinfer::Error);
    CHECK_THROWS_WITH_AS(RoutingTrace(2, 4, 2).check_replay(2, 4, 2), doctest::Contains("no tokens"), kinfer::Error);
}

TEST_CASE("routing trace: malformed files name the file and line") {
    const std::string path = tmp_path("kinfer_test_bad_trace.txt");
    auto expect = [&](const std::string& text, const char* what) {
        { std::ofstream(path) << text; }
        CAPTURE(text);
        CHECK_THROWS_WITH_AS(RoutingTrace::load(path), doctest::Contains(what), kinfer::Error);
    };
    expect("", "line 1");
    expect("kinfer-routing-trace 2\n", "line 1");
    expect("kinfer-routing-trace 1\nlayers 1 experts 4 used 5 tokens 1\n", "line 2");
    expect("kinfer-routing-trace 1\nlayers 1 experts 4 used 2 tokens 2\n0 0 1 2\n", "ends after line 3");
    expect("kinfer-routing-trace 1\nlayers 1 experts 4 used 2 tokens 1\n0 0 1 9\n", "line 3");
    expect("kinfer-routing-trace 1\nlayers 2 experts 4 used 2 tokens 1\n0 1 1 2\n", "line 3: expected token 0 layer 0");
    // Found by fuzz_routing_trace: the header alone sized the selection array, so three lines
    // claiming 2^32 tokens of 1000 layers asked for 137 TB (std::bad_alloc, not this message).
    expect("kinfer-routing-trace 1\nlayers 1000 experts 8 used 8 tokens 4294967296\n0 0 0 1 2 3 4 5 6 7\n", "ends after line 3");
    CHECK_THROWS_WITH_AS(RoutingTrace::load(path + ".missing"), doctest::Contains("cannot open"), kinfer::Error);
    std::remove(path.c_str());
}
