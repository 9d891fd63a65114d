// The rank plan: every layer and expert has exactly one owner, the bytes add up to the file's
// tensors, and the bytes moved per token follow from the model's shape.
#include "common/error.h"
#include "dist/plan.h"
#include "test_util.h"

#include <doctest/doctest.h>

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
