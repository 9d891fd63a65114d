// Property tests of the forward pass: the two KDA forms agree, the two MLA forms agree,
// chunking a prefill differently does not change the logits, and the routed experts give the
// same bits by slot as grouped by expert.
#include "test_util.h"
#include "parity_util.h"

#include "backend/cpu/kda_kernels.h"
#include "backend/registry.h"
#include "model/session.h"

#include <cstring>

#include <doctest/doctest.h>
#include <random>

using namespace kinfer;
using namespace kinfer::test;

TEST_CASE("KDA: chunked (WY) form == recurrence") {
    // Random unit-norm q/k, strong and weak decays, partial last chunk, non-zero start state.
    for (int64_t D : {8, 32}) {
        for (int64_t n : {1, 5, 16, 17, 50}) {
            std::mt19937 rng(uint32_t(D * 1000 + n));
            std::normal_distribution<float> N(0.0f, 1.0f);
            std::uniform_real_distribution<float> U(0.0f, 1.0f);
            const size_t nd = size_t(n * D), nn = size_t(n);
            std::vector<float> q(nd), k(nd), v(nd), g(nd), beta(nn);
            auto unit = [&](float* x) {
                float s = 0;
                for (int64_t i = 0; i < D; ++i) {
                    x[i] = N(rng);
                    s += x[i] * x[i];
                }
                for (int64_t i = 0; i < D; ++i) x[i] /= std::sqrt(s);
            };
            for (int64_t t = 0; t < n; ++t) {
                unit(&q[size_t(t * D)]);
                unit(&k[size_t(t * D)]);
                for (int64_t i = 0; i < D; ++i) {
                    v[size_t(t * D + i)] = N(rng);
                    g[size_t(t * D + i)] = -5.0f * U(rng) * U(rng);   // down to exp(-5) per step
                }
                beta[size_t(t)] = U(rng);
            }
            const size_t dd = size_t(D * D);
            std::vector<float> M0(dd);
            for (auto& x : M0) x = 0.1f * N(rng);
            auto M1 = M0, M2 = M0;
            std::vector<float> o1(nd), o2(nd), scratch(kinfer::backend::cpu::kda_chunk_scratch_floats(D));
            kinfer::backend::cpu::kda_recurrent_head(D, n, q.data(), k.data(), v.data(), g.data(), beta.data(), D, 1, M1.data(), o1.data(), D);
            kinfer::backend::cpu::kda_chunked_head(D, n, q.data(), k.data(), v.data(), g.data(), beta.data(), D, 1, M2.data(), o2.data(), D,
                                    scratch.data());
            double md = 0, ms = 0;
            for (size_t i = 0; i < o1.size(); ++i) md = std::max(md, double(std::fabs(o1[i] - o2[i])));
            for (size_t i = 0; i < M1.size(); ++i) ms = std::max(ms, double(std::fabs(M1[i] - M2[i])));
            CAPTURE(D);
            CAPTURE(n);
            CHECK(md < 2e-5);
            CHECK(ms < 2e-5);
        }
    }
}

TEST_CASE("KDA: whole model, chunked prefill == recurrent prefill") {
    for (const char* name : {"k3-tiny-a", "kl-tiny-a"}) {
        auto m = f32_model(name);
        if (!m) return;
        auto ids = read_ids(golden("llama.cpp/prompts/prompt64.ids.txt"));
        auto a = eval_logits(*m, ids, true, {.kda_chunked = true});
        auto b = eval_logits(*m, ids, true, {.kda_chunked = false});
        Diff d = compare(a.data(), b.data(), 64, m->hparams().n_vocab);
        print_diff(std::string(name) + " chunked vs recurrent", d);
        CHECK(d.max_abs < 2e-5);
    }
}

TEST_CASE("MLA: absorbed == decompressed (MHA)") {
    for (const char* name : {"k3-tiny-a", "kl-tiny-a"}) {
        auto m = f32_model(name);
        if (!m) return;
        auto ids = read_ids(golden("llama.cpp/prompts/prompt64.ids.txt"));
        // Two chunks, so the second one attends to cached positions of the first.
        auto a = eval_logits(*m, ids, true, {.n_batch = 40, .mla_decompressed = false});
        auto b = eval_logits(*m, ids, true, {.n_batch = 40, .mla_decompressed = true});
        Diff d = compare(a.data(), b.data(), 64, m->hparams().n_vocab);
        print_diff(std::string(name) + " absorbed vs MHA", d);
        CHECK(d.max_abs < 2e-5);
    }
}

TEST_CASE("prefill chunk size does not change the logits") {
    for (const char* name : {"k3-tiny-a", "kl-tiny-a"}) {
        auto m = f32_model(name);
        if (!m) return;
        auto ids = read_ids(golden("llama.cpp/prompts/prompt64.ids.txt"));
        ids.insert(ids.end(), ids.begin(), ids.end());   // 128 tokens: chunks cross KDA chunk edges
        auto ref = eval_logits(*m, ids, true, {.n_batch = 512});
        for (int64_t nb : {1, 7, 64}) {
            auto x = eval_logits(*m, ids, true, {.n_batch = nb});
            Diff d = compare(x.data(), ref.data(), int(ids.size()), m->hparams().n_vocab);
            print_diff(std::string(name) + " -b " + std::to_string(nb) + " vs -b 512", d);
            CHECK(d.max_abs < 2e-5);
        }
    }
}

TEST_CASE("session: reset, context limit, logits of the last position") {
    auto m = f32_model("kl-tiny-a");
    if (!m) return;
    auto ids = read_ids(golden("llama.cpp/prompts/prompt64.ids.txt"));
    model::Session s(*m, {.n_ctx = 64, .n_threads = 1});
    std::vector<float> all;
    s.prefill(ids, &all);
    CHECK(s.n_past() == 64);
    const int64_t V = m->hparams().n_vocab;
    CHECK(std::equal(s.logits().begin(), s.logits().end(), all.end() - V));
    CHECK_THROWS_AS(s.decode(1), Error);            // context full
    s.reset();
    s.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 10));
    // A fresh session gives the same last-position logits (bit for bit: same kernels).
    model::Session s2(*m, {.n_ctx = 64, .n_threads = 1});
    s2.prefill(std::vector<int32_t>(ids.begin(), ids.begin() + 10));
    CHECK(s.logits() == s2.logits());
    CHECK_THROWS_AS(s.decode(int32_t(V)), Error);   // token id out of range
}

// model/moe.cpp routed_slots (the choices left on the backend: a GPU's decode step) against the
// grouping by expert (ByExpert, the CPU's default): one row per chosen expert through the same
// per-row arithmetic, weighted by the same product, so the logits are equal bit for bit, in a
// 64-token prefill (experts with several rows take the CPU's tile kernels there) and token by
// token, on the CPU and with every layer on a simulated device.
TEST_CASE("MoE: routed by slot == grouped by expert, bit for bit") {
    const auto ids = read_ids(data("prompt64.ids.txt"));
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        auto m = model::Model::load(data(std::string("models/") + name + ".gguf"));
        for (const bool batch : {true, false}) {
            INFO(name, batch ? " prefill" : " decode");
            const auto grouped = eval_logits(*m, ids, batch, {.moe_slots = 0});
            const auto slots = eval_logits(*m, ids, batch, {.moe_slots = 1});
            REQUIRE(grouped.size() == slots.size());
            CHECK(std::memcmp(grouped.data(), slots.data(), grouped.size() * sizeof(float)) == 0);
        }
        backend::Backends bk(2);
        bk.add_device("sim:256MiB");
        const auto on_device = eval_logits(*m, ids, false, {.moe_slots = 1, .backends = &bk, .n_gpu_layers = 99});
        const auto grouped = eval_logits(*m, ids, false, {.moe_slots = 0});
        CHECK(std::memcmp(grouped.data(), on_device.data(), grouped.size() * sizeof(float)) == 0);
    }
}
