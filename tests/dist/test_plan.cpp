// The rank plan: every layer and expert has exactly one owner, the bytes add up to the file's
// tensors, and the bytes moved per token follow from the model's shape. Stages balanced by a
// measured layer profile: the split is optimal, bytes give today's plan, bad profiles are refused.
#include "common/error.h"
#include "dist/layer_profile.h"
#include "dist/plan.h"
#include "test_util.h"

#include <doctest/doctest.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#ifdef KINFER_HAVE_MPI
#include "dist/mpi/protocol.h"
#endif

using namespace kinfer;
using namespace kinfer::test;

namespace {

// Bytes of every tensor whose name contains `part` ("" for all).
uint64_t tensor_bytes(const model::Model& m, const std::string& part) {
    uint64_t b = 0;
    for (const auto& t : m.file().tensors())
        if (t.name.find(part) != std::string::npos) b += t.nbytes;
    return b;
}

}  // namespace

TEST_CASE("dist plan: pipeline ranges cover every layer once and the bytes add up") {
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        auto m = model::Model::load(data(std::string("models/") + name + ".gguf"));
        const auto& hp = m->hparams();
        for (int R = 1; R <= std::min(4, hp.n_layer); ++R) {
            CAPTURE(name);
            CAPTURE(R);
            const auto p = dist::Plan::make(*m, dist::SplitKind::pipeline, R);
            REQUIRE(int(p.part.size()) == R);
            uint64_t bytes = 0;
            for (int r = 0; r < R; ++r) {
                CHECK(p.part[size_t(r)].first_layer < p.part[size_t(r)].last_layer);
                CHECK(p.part[size_t(r)].first_layer == (r ? p.part[size_t(r - 1)].last_layer : 0));
                bytes += p.part[size_t(r)].bytes;
            }
            CHECK(p.part.back().last_layer == hp.n_layer);
            CHECK(bytes == tensor_bytes(*m, ""));
            for (int il = 0; il < hp.n_layer; ++il) CHECK(p.layer_stage(il) == p.part[size_t(p.layer_stage(il))].stage);
            // Per decoded token: a residual message at each of the R - 1 boundaries, then one
            // row of logits back to rank 0.
            uint64_t want = 0;
            for (int r = 0; r + 1 < R; ++r) want += dist::residual_bytes_per_token(hp, p.part[size_t(r)].last_layer);
            if (R > 1) want += uint64_t(hp.n_vocab) * 4;
            CHECK(p.bytes_per_decode_token == want);
        }
    }
}

TEST_CASE("dist plan: the K3 residual carries the banked blocks") {
    auto m = model::Model::load(data("models/k3-tiny-a-Q4_K_M.gguf"));
    const auto& hp = m->hparams();
    REQUIRE(hp.attn_res_block_size > 0);
    const uint64_t row = uint64_t(hp.n_embd) * 4;
    CHECK(dist::residual_bytes_per_token(hp, 1) == 2 * row);   // p and the embedding block
    CHECK(dist::residual_bytes_per_token(hp, hp.attn_res_block_size + 1) == 3 * row);
}

TEST_CASE("dist plan: experts split into contiguous ranges, one owner each") {
    auto m = model::Model::load(data("models/k3-tiny-a-Q4_K_M.gguf"));
    const auto& hp = m->hparams();
    const uint64_t experts = tensor_bytes(*m, "_exps."), all = tensor_bytes(*m, "");
    uint64_t head = 0;
    for (const auto& t : m->file().tensors())
        if (t.name.rfind("output", 0) == 0) head += t.nbytes;
    for (int R = 1; R <= 3; ++R) {
        CAPTURE(R);
        const auto p = dist::Plan::make(*m, dist::SplitKind::experts, R);
        for (int e = 0; e < hp.n_expert; ++e) CHECK(p.expert_shard(int(e)) >= 0);
        uint64_t share = 0;
        for (const auto& q : p.part) share += q.bytes;
        // Every rank holds the dense part, rank 0 the head; together they hold every expert
        // once (each rank's share rounds down by less than a byte).
        const uint64_t want = uint64_t(R) * (all - experts - head) + head + experts;
        CHECK(share <= want);
        CHECK(share + uint64_t(R) > want);
        int n_moe = 0;
        for (int il = 0; il < hp.n_layer; ++il) n_moe += !hp.is_dense(il);
        CHECK(p.bytes_per_decode_token == uint64_t(n_moe) * uint64_t(hp.n_expert_used) * uint64_t(hp.latent_dim()) * 4 * uint64_t(R - 1));
    }
    CHECK_THROWS(dist::Plan::make(*m, dist::SplitKind::experts, int(hp.n_expert) + 1));
}

TEST_CASE("dist plan: both = a grid of stages x expert shards; each stage a pipeline range, each shard an expert range") {
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        auto m = model::Model::load(data(std::string("models/") + name + ".gguf"));
        const auto& hp = m->hparams();
        for (const auto& grid : {std::pair{4, 2}, std::pair{6, 2}, std::pair{6, 3}, std::pair{2, 1}, std::pair{2, 2}}) {
            const int R = grid.first, S = grid.second;   // no structured binding: clang's doctest macros cannot capture one
            CAPTURE(name);
            CAPTURE(R);
            CAPTURE(S);
            const auto p = dist::Plan::make(*m, dist::SplitKind::both, R, S);
            const int E = R / S;
            REQUIRE(p.stages == S);
            REQUIRE(p.shards == E);
            // The stages' layer ranges tile the model; the shards of a stage share its range and
            // split its experts into contiguous ranges.
            for (int s = 0; s < S; ++s)
                for (int e = 0; e < E; ++e) {
                    const auto& q = p.part[size_t(p.rank_at(s, e))];
                    CHECK(q.stage == s);
                    CHECK(q.shard == e);
                    CHECK(q.first_layer == p.part[size_t(p.rank_at(s, 0))].first_layer);
                    CHECK(q.last_layer == p.part[size_t(p.rank_at(s, 0))].last_layer);
                    CHECK(q.first_layer == (s ? p.part[size_t(p.rank_at(s - 1, 0))].last_layer : 0));
                    CHECK(q.first_expert == (e ? p.part[size_t(e - 1)].last_expert : 0));
                    CHECK(q.embeds == (s == 0));
                    CHECK(q.head == (s == S - 1 && e == 0));
                }
            CHECK(p.part.back().last_layer == hp.n_layer);
            CHECK(p.part[size_t(E - 1)].last_expert == hp.n_expert);
            for (int il = 0; il < hp.n_layer; ++il) CHECK(p.layer_stage(il) >= 0);
            // Per decoded token: the residual at each stage boundary once per shard, the slot rows
            // of every MoE layer to the other shards of its stage, one row of logits to rank 0.
            uint64_t want = 0;
            for (int s = 0; s + 1 < S; ++s)
                want += dist::residual_bytes_per_token(hp, p.part[size_t(p.rank_at(s, 0))].last_layer) * uint64_t(E);
            int n_moe = 0;
            for (int il = 0; il < hp.n_layer; ++il) n_moe += !hp.is_dense(il);
            want += uint64_t(n_moe) * uint64_t(hp.n_expert_used) * uint64_t(hp.latent_dim()) * 4 * uint64_t(E - 1);
            if (S > 1) want += uint64_t(hp.n_vocab) * 4;
            CHECK(p.bytes_per_decode_token == want);
        }
        // The same grid as the two named splits.
        const auto a = dist::Plan::make(*m, dist::SplitKind::both, 3, 3), b = dist::Plan::make(*m, dist::SplitKind::pipeline, 3);
        const auto c = dist::Plan::make(*m, dist::SplitKind::both, 3, 1), d = dist::Plan::make(*m, dist::SplitKind::experts, 3);
        for (int r = 0; r < 3; ++r) {
            CHECK(a.part[size_t(r)].first_layer == b.part[size_t(r)].first_layer);
            CHECK(a.part[size_t(r)].bytes == b.part[size_t(r)].bytes);
            CHECK(c.part[size_t(r)].first_expert == d.part[size_t(r)].first_expert);
            CHECK(c.part[size_t(r)].bytes == d.part[size_t(r)].bytes);
        }
        CHECK(a.bytes_per_decode_token == b.bytes_per_decode_token);
        CHECK(c.bytes_per_decode_token == d.bytes_per_decode_token);
        CHECK_THROWS_AS(dist::Plan::make(*m, dist::SplitKind::both, 5, 2), UsageError);   // 5 ranks are not 2 equal stages
    }
}

namespace {

// The smallest largest range sum over every way to cut w into `parts` non-empty ranges.
uint64_t brute_best(const std::vector<uint64_t>& w, int parts) {
    uint64_t best = UINT64_MAX;
    std::function<void(size_t, int, uint64_t)> go = [&](size_t from, int left, uint64_t worst) {
        if (left == 1) {
            uint64_t sum = 0;
            for (size_t i = from; i < w.size(); ++i) sum += w[i];
            best = std::min(best, std::max(worst, sum));
            return;
        }
        uint64_t sum = 0;
        for (size_t end = from + 1; end + size_t(left - 1) <= w.size(); ++end) {   // [from, end), then the rest
            sum += w[end - 1];
            go(end, left - 1, std::max(worst, sum));
        }
    };
    go(0, parts, 0);
    return best;
}

uint64_t largest_range(const std::vector<uint64_t>& w, const std::vector<int>& b) {
    uint64_t worst = 0;
    for (size_t k = 0; k + 1 < b.size(); ++k) {
        uint64_t sum = 0;
        for (int i = b[k]; i < b[k + 1]; ++i) sum += w[size_t(i)];
        worst = std::max(worst, sum);
    }
    return worst;
}

std::vector<std::pair<int, int>> ranges(const dist::Plan& p) {
    std::vector<std::pair<int, int>> r;
    for (const auto& q : p.part) r.push_back({q.first_layer, q.last_layer});
    return r;
}

// A profile of m with the given decode and prefill ns (every layer, then the head).
dist::LayerProfile profile_of(const model::Model& m, std::vector<uint64_t> dec, std::vector<uint64_t> pre) {
    dist::LayerProfile p;
    p.n_layer = m.hparams().n_layer, p.fingerprint = m.fingerprint(), p.model_name = "tiny.gguf";
    p.threads = 1, p.prompt = 64, p.batch = 16, p.decode = 8;
    p.decode_ns = std::move(dec), p.prefill_ns = std::move(pre);
    return p;
}

std::string write_text(const std::string& name, const std::string& text) {
    const std::string path = temp_path(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

}  // namespace

TEST_CASE("dist plan: contiguous_split is optimal (brute force on small cases)") {
    std::mt19937 rng(7);
    for (int L = 1; L <= 9; ++L)
        for (int parts = 1; parts <= L; ++parts)
            for (int trial = 0; trial < 20; ++trial) {
                std::vector<uint64_t> w(static_cast<size_t>(L));
                // Wide and narrow ranges of weights, zeros and ties among them.
                const uint64_t hi = trial % 3 == 0 ? 3 : trial % 3 == 1 ? 100 : 1000000;
                for (auto& x : w) x = std::uniform_int_distribution<uint64_t>(0, hi)(rng);
                CAPTURE(L);
                CAPTURE(parts);
                CAPTURE(trial);
                const auto b = dist::contiguous_split(w, parts);
                REQUIRE(b.size() == size_t(parts + 1));
                CHECK(b.front() == 0);
                CHECK(b.back() == L);
                for (int k = 0; k < parts; ++k) CHECK(b[size_t(k)] < b[size_t(k + 1)]);   // every range non-empty
                CHECK(largest_range(w, b) == brute_best(w, parts));
            }
    // A hand-made case: one heavy layer gets a stage of its own.
    const auto b = dist::contiguous_split({1, 1, 10, 1, 1, 1}, 3);
    CHECK(b == std::vector<int>{0, 2, 3, 6});
    CHECK_THROWS_AS(dist::contiguous_split({1, 2}, 3), Error);
}

TEST_CASE("dist plan: stage costs equal to the bytes give today's plan; measured costs move the cuts") {
    for (const char* name : {"k3-tiny-a-Q4_K_M", "kl-tiny-a-Q4_K_M"}) {
        CAPTURE(name);
        auto m = model::Model::load(data(std::string("models/") + name + ".gguf"));
        const int L = m->hparams().n_layer;
        // The bytes as costs: every layer's bytes, the head's apart (layer_weights adds it to the last).
        const std::vector<uint64_t> bytes = dist::layer_weights(*m, 1, nullptr);
        uint64_t head = 0;
        for (const auto& t : m->file().tensors())
            if (t.name.rfind("output", 0) == 0) head += t.nbytes;
        dist::StageCosts c;
        c.by = dist::Balance::decode, c.layer = bytes, c.layer.back() -= head, c.head = head;
        for (int R = 1; R <= std::min(4, L); ++R) {
            CAPTURE(R);
            const auto a = dist::Plan::make(*m, dist::SplitKind::pipeline, R), b = dist::Plan::make(*m, dist::SplitKind::pipeline, R, 0, &c);
            CHECK(ranges(a) == ranges(b));
            for (int r = 0; r < R; ++r) CHECK(a.part[size_t(r)].bytes == b.part[size_t(r)].bytes);
            CHECK(a.bytes_per_decode_token == b.bytes_per_decode_token);
            CHECK(a.balance == dist::Balance::bytes);
            CHECK(b.balance == dist::Balance::decode);
        }
        for (const auto& grid : {std::pair{4, 2}, std::pair{6, 3}}) {
            const int R = grid.first, S = grid.second;
            CAPTURE(R);
            const auto a = dist::Plan::make(*m, dist::SplitKind::both, R, S), b = dist::Plan::make(*m, dist::SplitKind::both, R, S, &c);
            CHECK(ranges(a) == ranges(b));
        }
    }
    // Today's byte plans of the shipped models, written out: the default must not move.
    auto k3 = model::Model::load(data("models/k3-tiny-a-Q4_K_M.gguf"));
    auto kl = model::Model::load(data("models/kl-tiny-a-Q4_K_M.gguf"));
    using R = std::vector<std::pair<int, int>>;
    CHECK(ranges(dist::Plan::make(*k3, dist::SplitKind::pipeline, 3)) == R{{0, 4}, {4, 7}, {7, 8}});
    CHECK(ranges(dist::Plan::make(*kl, dist::SplitKind::pipeline, 3)) == R{{0, 3}, {3, 6}, {6, 7}});
    CHECK(ranges(dist::Plan::make(*k3, dist::SplitKind::pipeline, 2)) == R{{0, 7}, {7, 8}});

    // Measured costs: a heavy first layer gets a stage of its own, and each stage's cost is the
    // sum of its layers' (the head's on the last): here the only cut with no stage over 30.
    dist::StageCosts t;
    t.by = dist::Balance::prefill, t.layer = {30, 10, 10, 10, 10, 10, 5, 0}, t.head = 5;
    REQUIRE(int(t.layer.size()) == k3->hparams().n_layer);
    const auto p = dist::Plan::make(*k3, dist::SplitKind::pipeline, 3, 0, &t);
    CHECK(ranges(p) == R{{0, 1}, {1, 4}, {4, 8}});
    CHECK(p.part[0].cost == 30);
    CHECK(p.part[1].cost == 30);
    CHECK(p.part[2].cost == 30);
    std::vector<uint64_t> w = t.layer;
    w.back() += t.head;
    CHECK(std::max({p.part[0].cost, p.part[1].cost, p.part[2].cost}) == brute_best(w, 3));
    dist::StageCosts wrong = t;
    wrong.layer.pop_back();
    CHECK_THROWS_AS(dist::Plan::make(*k3, dist::SplitKind::pipeline, 3, 0, &wrong), Error);
}

TEST_CASE("dist plan: layer profiles round-trip and bad ones are refused with a reason") {
    auto m = model::Model::load(data("models/k3-tiny-a-Q4_K_M.gguf"));
    const int L = m->hparams().n_layer;
    std::vector<uint64_t> dec, pre;
    for (int i = 0; i <= L; ++i) dec.push_back(uint64_t(1000 + i)), pre.push_back(uint64_t(100 + 2 * i));
    const dist::LayerProfile good = profile_of(*m, dec, pre);
    const std::string path = temp_path("layer.prof");
    good.save(path);
    const auto back = dist::LayerProfile::load(path);
    CHECK(back.text() == good.text());
    CHECK(back.decode_ns == dec);
    CHECK(back.prefill_ns == pre);
    CHECK_NOTHROW(back.check(*m, path));
    const auto c = back.costs(dist::Balance::prefill);
    CHECK(c.layer == std::vector<uint64_t>(pre.begin(), pre.end() - 1));
    CHECK(c.head == pre.back());
    CHECK_THROWS_AS(back.costs(dist::Balance::bytes), Error);

    // Another model: the layer count or the fingerprint differs.
    auto kl = model::Model::load(data("models/kl-tiny-a-Q4_K_M.gguf"));
    CHECK_THROWS_WITH_AS(back.check(*kl, path), doctest::Contains("8-layer model"), Error);
    dist::LayerProfile other = good;
    other.fingerprint ^= 1;
    CHECK_THROWS_WITH_AS(other.check(*m, path), doctest::Contains("another model"), Error);

    // Malformed files, each refused with its own one-line reason.
    const std::string text = good.text();
    auto replaced = [&](const std::string& from, const std::string& to) {
        std::string s = text;
        const size_t at = s.find(from);
        REQUIRE(at != std::string::npos);
        return s.replace(at, from.size(), to);
    };
    const std::pair<std::string, std::string> bad[] = {
        {"", "first line"},
        {replaced("kinfer-layer-profile 1", "kinfer-layer-profile 2"), "first line"},
        {replaced("layers 8", "layers 0"), "line 2"},
        {replaced("layers 8", "layers x8"), "line 2"},
        {replaced("fingerprint ", "fingerprint 0"), "line 2"},            // 17 hex digits
        {replaced(" model tiny.gguf", ""), "line 2"},
        {replaced("measured threads 1", "measured threads -1"), "line 3"},
        {replaced(" batch 16", ""), "line 3"},
        {replaced("\n3 1003 106\n", "\n"), "expected '3 "},            // a layer left out
        {replaced("\n3 1003 106\n", "\n4 1003 106\n"), "expected '3 "},   // out of order
        {replaced("3 1003 106", "3 -1 106"), "expected '3 "},
        {replaced("3 1003 106", "3 1003"), "expected '3 "},
        {replaced("3 1003 106", "3 1003 106 7"), "expected '3 "},
        {replaced("3 1003 106", "3 1000000000001 106"), "at most"},
        {replaced("3 1003 106", "3 18446744073709551617 106"), "expected '3 "},   // past 2^64
        {replaced("3 1003 106", "3 1e3 106"), "expected '3 "},
        {replaced("head ", "tail "), "expected 'head"},
        {text.substr(0, text.find("head ")), "ends before the line of the head"},
        {text + "8 1 1\n", "more lines"},
    };
    for (const auto& entry : bad) {
        // Not a structured binding: clang refuses those inside doctest's capturing macros.
        const std::string& body = entry.first;
        const std::string& why = entry.second;
        CAPTURE(body);
        const std::string f = write_text("bad.prof", body);
        CHECK_THROWS_WITH_AS(dist::LayerProfile::load(f), doctest::Contains(why.c_str()), Error);
        // Every reason is one line, naming the file.
        try {
            dist::LayerProfile::load(f);
        } catch (const Error& e) {
            CHECK(std::string(e.what()).find('\n') == std::string::npos);
            CHECK(std::string(e.what()).find(f) != std::string::npos);
        }
    }
    CHECK_THROWS_WITH_AS(dist::LayerProfile::load(temp_path("no-such.prof")), doctest::Contains("cannot open"), Error);
    // Comments and empty lines are skipped.
    const auto commented = dist::LayerProfile::load(write_text("comments.prof", "# measured here\n\n" + text + "\n# end\n"));
    CHECK(commented.prefill_ns == pre);

    // The flags: a profile balances by prefill unless told; a time balance needs a profile.
    CHECK(dist::costs_from_flags(*m, "", path)->by == dist::Balance::prefill);
    CHECK(dist::costs_from_flags(*m, "decode", path)->by == dist::Balance::decode);
    CHECK_FALSE(dist::costs_from_flags(*m, "bytes", path).has_value());
    CHECK_FALSE(dist::costs_from_flags(*m, "", "").has_value());
    CHECK_THROWS_AS(dist::costs_from_flags(*m, "prefill", ""), UsageError);
    CHECK_THROWS_AS(dist::costs_from_flags(*kl, "", path), Error);
    for (const char* name : {"layer.prof", "bad.prof", "comments.prof"}) std::filesystem::remove(temp_path(name));
}

TEST_CASE("dist plan: kinfer bench --layer-times writes a profile that info --plan balances by") {
    const std::string model = data("models/k3-tiny-a-Q4_K_M.gguf");
    const std::string prof = temp_path("bench.prof");
    const auto r = run_command(kinfer_bin() + " bench -m " + model + " --layer-times " + prof + " -p 32 -b 16 -n 4 -r 1 -t 1");
    INFO(r.out);
    REQUIRE(r.rc == 0);
    CHECK(r.out.find("MLA") != std::string::npos);
    auto m = model::Model::load(model);
    const auto p = dist::LayerProfile::load(prof);
    CHECK_NOTHROW(p.check(*m, prof));
    CHECK(p.prompt == 32);
    CHECK(p.batch == 16);
    CHECK(p.decode == 4);
    for (int il = 0; il < p.n_layer; ++il) {   // every layer takes some time
        CHECK(p.decode_ns[size_t(il)] > 0);
        CHECK(p.prefill_ns[size_t(il)] > 0);
    }
    const auto info = run_command(kinfer_bin() + " info " + model + " --plan --ranks 3 --split pipeline --layer-profile " + prof);
    INFO(info.out);
    REQUIRE(info.rc == 0);
    CHECK(info.out.find("balanced by the measured prefill time") != std::string::npos);
    CHECK(info.out.find("prefill") != std::string::npos);
    // A time balance without a profile, and a profile of another model, are refused.
    CHECK(run_command(kinfer_bin() + " info " + model + " --plan --ranks 3 --balance decode").rc != 0);
    const auto other = run_command(kinfer_bin() + " info " + data("models/kl-tiny-a-Q4_K_M.gguf") +
                                   " --plan --ranks 3 --layer-profile " + prof);
    CHECK(other.rc != 0);
    CHECK(other.out.find("8-layer model") != std::string::npos);
    std::filesystem::remove(prof);
}

#ifdef KINFER_HAVE_MPI
TEST_CASE("dist plan: the open command carries the stage costs to the other ranks") {
    dist::OpenCmd c;
    c.model_path = "/models/a b.gguf";
    c.costs.by = dist::Balance::prefill, c.costs.layer = {5, 6, 7}, c.costs.head = 9;
    const auto d = dist::decode_open(dist::encode(c));
    CHECK(d.costs.by == dist::Balance::prefill);
    CHECK(d.costs.layer == c.costs.layer);
    CHECK(d.costs.head == 9);
    CHECK(d.model_path == c.model_path);
    c.costs = {};
    const auto e = dist::decode_open(dist::encode(c));
    CHECK(e.costs.layer.empty());
    CHECK(e.model_path == c.model_path);
    // A cost count past the message is refused, not read.
    c.costs.layer = {1, 2};
    auto m = dist::encode(c);
    m.resize(m.size() - c.model_path.size() - 8);
    CHECK_THROWS_AS(dist::decode_open(m), Error);
}
#endif
