// Decode's stream layout: the calibration tries every layout, keeps one of them in force, and
// KINFER_DECODE_STREAMS fixes it (or is refused with the accepted values). The layouts' bits are
// held equal in tests/quant (vec_dot_rows); here a decoded token's logits are too.
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "backend/registry.h"
#include "model/model.h"
#include "model/session.h"
#include "quant/matmul.h"
#include "runtime/thread_pool.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <vector>

using namespace kinfer;

namespace {

struct EnvGuard {
    explicit EnvGuard(const char* v) {
        if (v) setenv("KINFER_DECODE_STREAMS", v, 1);
        else unsetenv("KINFER_DECODE_STREAMS");
    }
    ~EnvGuard() {
        unsetenv("KINFER_DECODE_STREAMS");
        quant::set_decode_streams(0);
    }
};

}  // namespace

TEST_CASE("decode streams: calibration measures every layout and keeps one") {
    EnvGuard env(nullptr);
    runtime::ThreadPool pool(2);
    const auto d = backend::cpu::calibrate_decode_streams(pool);
    if (quant::active_isa() < quant::Isa::avx2) {
        CHECK(d.gbps.empty());
        return;
    }
    // Every layout that differs on this ISA, each measured; the one kept is one of them.
    const std::vector<int> want = quant::decode_stream_layouts(quant::active_isa());
    REQUIRE(d.gbps.size() == want.size());
    bool found = false;
    for (size_t i = 0; i < want.size(); ++i) {
        CHECK(d.gbps[i].first == want[i]);
        CHECK(d.gbps[i].second > 0);
        found = found || want[i] == d.chosen;
    }
    CHECK(found);
    CHECK(quant::decode_streams() == d.chosen);
    CHECK_FALSE(d.from_env);
}

TEST_CASE("decode streams: KINFER_DECODE_STREAMS sets the layout without measuring, or is refused") {
    runtime::ThreadPool pool(1);
    {
        EnvGuard env("4");
        const auto d = backend::cpu::calibrate_decode_streams(pool);
        CHECK(d.from_env);
        CHECK(d.chosen == 4);
        CHECK(d.gbps.empty());
        CHECK(quant::decode_streams() == 4);
    }
    {
        EnvGuard env("1");
        quant::set_decode_streams(0);
        backend::Backends b(1);   // a CPU backend starting puts the user's layout in force
        CHECK(quant::decode_streams() == 1);
    }
    {
        EnvGuard env("3");
        CHECK_THROWS_WITH_AS(backend::cpu::calibrate_decode_streams(pool), doctest::Contains("expected 1, 2, 4 or 8"), Error);
    }
    {
        EnvGuard env("4x");   // not a number, though it starts like one
        CHECK_THROWS_WITH_AS(backend::cpu::apply_decode_streams_env(), doctest::Contains("expected 1, 2, 4 or 8"), Error);
    }
}

TEST_CASE("decode streams: the layouts of each ISA") {
    CHECK(quant::decode_stream_layouts(quant::Isa::scalar).empty());
    CHECK(quant::decode_stream_layouts(quant::Isa::avx2) == std::vector<int>{1, 2, 4, 8});
    CHECK(quant::decode_stream_layouts(quant::Isa::avx512) == std::vector<int>{1, 4, 8});
    CHECK(quant::default_decode_streams(quant::Isa::avx2) == 2);
}

TEST_CASE("decode streams: a Q4_K_M model decodes the same logits in every layout") {
    const auto m = model::Model::load(test::data("models/k3-tiny-a-Q4_K_M.gguf"));
    std::vector<std::vector<float>> logits;
    for (int s : {1, 2, 4, 8}) {
        quant::set_decode_streams(s);
        model::Session session(*m, model::SessionOptions{.n_ctx = 16, .n_threads = 2});
        session.prefill(std::vector<int32_t>{1, 2, 3, 4});
        session.decode(5);
        session.decode(6);
        logits.push_back(session.logits());
    }
    quant::set_decode_streams(0);
    for (size_t i = 1; i < logits.size(); ++i) CHECK(logits[i] == logits[0]);
}
