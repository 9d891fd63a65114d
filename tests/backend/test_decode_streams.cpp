// Decode's stream layout and prefetch distance: the calibration tries every layout, then every
// distance, keeps one of each in force, and KINFER_DECODE_STREAMS / KINFER_DECODE_PREFETCH fix them
// (or are refused with the accepted values). The layouts' bits are
// held equal in tests/quant (vec_dot_rows); here a decoded token's logits are too. And
// KINFER_K_TILES, the prefill tiles' instruction form, the same way.
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "backend/registry.h"
#include "model/model.h"
#include "model/session.h"
#include "quant/matmul.h"
#include "runtime/thread_pool.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <vector>

using namespace kinfer;

namespace {

struct EnvGuard {
    explicit EnvGuard(const char* v, const char* name = "KINFER_DECODE_STREAMS") : name_(name) {
        if (v) setenv(name, v, 1);
        else unsetenv(name);
    }
    ~EnvGuard() {
        unsetenv(name_);
        quant::set_decode_streams(0);
        quant::set_decode_prefetch(0);
    }
    const char* name_;
};

// A calibration stage's record: every candidate in order, each measured (a rate above the 0 it
// starts from), and the one in force among them.
void check_measured(const std::vector<std::pair<int, double>>& tried, const std::vector<int>& candidates, int in_force) {
    REQUIRE(tried.size() == candidates.size());
    bool found = false;
    for (size_t i = 0; i < candidates.size(); ++i) {
        CHECK(tried[i].first == candidates[i]);
        CHECK(tried[i].second > 0);
        found = found || candidates[i] == in_force;
    }
    CHECK(found);
}

}  // namespace

TEST_CASE("decode streams: calibration measures every layout and keeps one") {
    EnvGuard env(nullptr);
    EnvGuard ahead(nullptr, "KINFER_DECODE_PREFETCH");
    runtime::ThreadPool pool(2);
    const auto d = backend::cpu::calibrate_decode_streams(pool);
    if (quant::active_isa() < quant::Isa::avx2) {
        CHECK(d.gbps.empty());
        return;
    }
    // Every layout that differs on this ISA, each measured; the one kept is one of them.
    check_measured(d.gbps, quant::decode_stream_layouts(quant::active_isa()), d.chosen);
    CHECK(quant::decode_streams() == d.chosen);
    CHECK_FALSE(d.from_env);
    // Then every prefetch distance, in the layout kept, the default first.
    CHECK(quant::decode_prefetch_distances().front() == quant::kDefaultDecodePrefetch);
    check_measured(d.prefetch_gbps, quant::decode_prefetch_distances(), quant::decode_prefetch());
    CHECK_FALSE(d.prefetch_from_env);
}

TEST_CASE("decode streams: KINFER_DECODE_PREFETCH fixes the distance, or is refused") {
    runtime::ThreadPool pool(1);
    {
        // The layouts are still measured, at the user's distance; the distances are not.
        EnvGuard env("2048", "KINFER_DECODE_PREFETCH");
        EnvGuard streams(nullptr);
        const auto d = backend::cpu::calibrate_decode_streams(pool);
        CHECK(d.prefetch_from_env);
        CHECK(d.prefetch_gbps.empty());
        CHECK(d.gbps.size() == quant::decode_stream_layouts(quant::active_isa()).size());
        CHECK(quant::decode_prefetch() == 2048);
    }
    {
        // KINFER_DECODE_STREAMS skips the whole calibration: the distance stays the user's.
        EnvGuard env("4096", "KINFER_DECODE_PREFETCH");
        EnvGuard streams("4");
        const auto d = backend::cpu::calibrate_decode_streams(pool);
        CHECK(d.from_env);
        CHECK(d.prefetch_from_env);
        CHECK(quant::decode_prefetch() == 4096);
        CHECK(d.gbps.empty());
        CHECK(d.prefetch_gbps.empty());
    }
    {
        EnvGuard env("1024", "KINFER_DECODE_PREFETCH");
        backend::Backends b(1);   // a CPU backend starting puts the user's distance in force
        CHECK(quant::decode_prefetch() == 1024);
    }
    for (const char* bad : {"100", "0", "32768", "1k"}) {
        EnvGuard env(bad, "KINFER_DECODE_PREFETCH");
        CHECK_THROWS_WITH_AS(backend::cpu::apply_decode_prefetch_env(), doctest::Contains("multiple of 64"), Error);
    }
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

TEST_CASE("prefill tiles: KINFER_K_TILES fixes the instruction form when a CPU backend starts, or is refused") {
    struct Restore {
        ~Restore() { quant::set_k_tile_form(quant::KTileForm::automatic); }
    } restore;
    for (const char* name : {"dpbusd", "maddubs"}) {
        EnvGuard env(name, "KINFER_K_TILES");
        quant::set_k_tile_form(quant::KTileForm::automatic);
        backend::Backends b(1);
        CHECK(std::string(quant::k_tile_form_name(quant::k_tile_form())) == name);
        CHECK(quant::k_tile_times().dpbusd_ns == 0);   // set, not measured
    }
    {
        EnvGuard env(nullptr, "KINFER_K_TILES");
        CHECK_FALSE(backend::cpu::apply_k_tile_form_env());
    }
    for (const char* bad : {"auto", "DPBUSD", "maddubs "}) {
        EnvGuard env(bad, "KINFER_K_TILES");
        CHECK_THROWS_WITH_AS(backend::cpu::apply_k_tile_form_env(), doctest::Contains("expected dpbusd or maddubs"), Error);
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
    for (int s : {1, 2, 4, 8, -64, -16384}) {
        // Negative: the default layout with that prefetch distance (timing only, same bits).
        quant::set_decode_streams(s > 0 ? s : 0);
        quant::set_decode_prefetch(s > 0 ? 0 : -s);
        model::Session session(*m, model::SessionOptions{.n_ctx = 16, .n_threads = 2});
        session.prefill(std::vector<int32_t>{1, 2, 3, 4});
        session.decode(5);
        session.decode(6);
        logits.push_back(session.logits());
    }
    quant::set_decode_streams(0);
    quant::set_decode_prefetch(0);
    for (size_t i = 1; i < logits.size(); ++i) CHECK(logits[i] == logits[0]);
}
