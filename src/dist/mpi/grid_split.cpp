// Every --split as one grid of S pipeline stages x E expert shards (plan.h): rank r is stage
// r / E, shard r % E. pipeline is the grid S = ranks, E = 1; experts is S = 1, E = ranks; both
// is anything between.
//
// - Stage 0 embeds the chunk (each of its shards, from the same ids, gets the same bits).
// - A stage runs its layers [first, last). In a MoE layer each shard computes only its own
//   experts' (token, slot) rows of ys, already weighted, then the shards of the stage swap
//   their rows (an all-gather within the stage), so every shard holds all of ys and sums the
//   slots in selection order exactly as one process does. What moves is the expert outputs at
//   the latent width (K3: expert_latent_length): the inputs need not move, since every shard
//   computed the latent itself.
// - Shard e of a stage sends its residual (K3: the partial sum and every banked block sum,
//   Residual::to_bytes) to shard e of the next stage.
// - Shard 0 of the last stage runs the output head and sends the logits to rank 0.
// Every rank thus computes exactly what a single process computes for its part, so the logits
// are the same bits. With several stages, --micro-batch keeps several pieces of a prefill chunk
// in flight (run()).
#include "backend/backend.h"
#include "dist/mpi/rank_split.h"
#include "model/forward.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kinfer::dist {

namespace {

class GridSplit final : public RankSplit {
public:
    GridSplit(Comm& comm, const model::Model& m, SplitKind kind, int stages, const StageCosts* costs)
        : RankSplit(comm, m, kind, stages, costs) {
        const RankPart& p = mine();
        for (int e = 0; e < plan_.shards; ++e) stage_group_.push_back(plan_.rank_at(p.stage, e));
    }

    bool shards_experts() const override { return plan_.shards > 1; }
    bool owns_expert(int, int e) const override { return plan_.expert_shard(e) == mine().shard; }

    void forward(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) override {
        try {
            const auto t0 = std::chrono::steady_clock::now();
            const double waited = comm_.wait_s;
            run(env, tokens, want_all, host);
            comm_.busy_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() - (comm_.wait_s - waited);
        } catch (const std::exception& e) {
            comm_.abort(fmt::format("{}: {}", describe(), e.what()));
        }
    }

    void gather_slots(int, const std::vector<int32_t>& sel, backend::Backend& be, float* ys, int64_t, int64_t,
                      int64_t lat) override {
        if (!be.host_memory()) comm_.abort("--split experts / both runs on the CPU only; a MoE layer ran on " + be.name());
        const int me = comm_.rank();
        const size_t row = size_t(lat) * sizeof(float);
        // Entries (t * K + slot) each shard computed, in entry order: every shard derives the
        // same lists from the same selections.
        std::vector<std::vector<int64_t>> of(static_cast<size_t>(comm_.size()));
        for (size_t i = 0; i < sel.size(); ++i) of[size_t(stage_group_[size_t(plan_.expert_shard(sel[i]))])].push_back(int64_t(i));
        std::vector<std::vector<uint8_t>> in(static_cast<size_t>(comm_.size()));
        std::vector<uint8_t> packed(of[size_t(me)].size() * row);
        for (size_t j = 0; j < of[size_t(me)].size(); ++j)
            std::memcpy(packed.data() + j * row, ys + of[size_t(me)][j] * lat, row);
        for (int q : stage_group_)
            if (q != me) in[size_t(q)].resize(of[size_t(q)].size() * row);
        comm_.all_gather(packed, in, kTagSlots, stage_group_);
        for (int q : stage_group_) {
            if (q == me) continue;
            for (size_t j = 0; j < of[size_t(q)].size(); ++j)
                std::memcpy(ys + of[size_t(q)][j] * lat, in[size_t(q)].data() + j * row, row);
        }
    }

private:
    std::vector<int> stage_group_;   // the ranks of this rank's stage, by shard

    const RankPart& mine() const { return plan_.part[size_t(comm_.rank())]; }
    int head_rank() const { return plan_.rank_at(plan_.stages - 1, 0); }

    std::string describe() const {
        const RankPart& p = mine();
        std::string s = fmt::format("stage {} (layers {}-{})", p.stage, p.first_layer, p.last_layer - 1);
        if (plan_.shards > 1) s += fmt::format(", expert shard {} (experts {}-{})", p.shard, p.first_expert, p.last_expert - 1);
        return s;
    }

    // The chunk in pieces of micro_batch tokens (one piece when 0 or with a single stage). Each
    // layer sees the pieces in order, so a piece's result is what one process computes with
    // -b micro_batch. The head rank keeps the logits of every piece and sends them once at the
    // end: rank 0 then never waits on it while the pieces are still going round.
    void run(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) {
        const int r = comm_.rank(), head = head_rank();
        const int64_t V = env.hp.n_vocab;
        const int64_t piece = micro_batch > 0 && plan_.stages > 1 ? std::min(micro_batch, env.n) : env.n;
        const int64_t rows = want_all ? env.n : 1;
        std::vector<float> lg(r == head && r != 0 ? size_t(rows * V) : 0);
        float* out = r == 0 ? host : r == head ? lg.data() : nullptr;
        for (int64_t off = 0; off < env.n; off += piece) {
            model::FwdEnv e = env;
            e.pos0 = env.pos0 + off, e.n = std::min(piece, env.n - off);
            const bool final_piece = off + e.n == env.n;
            // Rows of this piece whose logits are wanted, written at `out + its row`.
            const int64_t want = want_all ? e.n : final_piece ? 1 : 0;
            // A rank that keeps no logits has out == null: no offset is applied to it.
            step(e, tokens + off, want, out ? out + (want_all ? off * V : 0) : nullptr);
        }
        if (r == head && r != 0) comm_.send(0, kTagLogits, lg.data(), lg.size() * sizeof(float));
        // Rank 0 waits on the whole pipeline, so longer than a rank waits on its neighbour: the
        // rank next to a silent one is the first to give up, and it names the silent one.
        if (r == 0 && head != 0)
            comm_.recv_into(head, kTagLogits, host, size_t(rows * V) * sizeof(float), 2 * comm_.timeout_s + 1);
    }

    // One piece through this rank's layers; the head rank writes the logits of its last `want`
    // rows to out.
    void step(const model::FwdEnv& env, const int32_t* tokens, int64_t want, float* out) {
        const RankPart& p = mine();
        model::Residual res;
        if (p.stage == 0) {
            res = model::embed(env, tokens);
        } else {
            const int from = plan_.rank_at(p.stage - 1, p.shard);
            const std::vector<uint8_t> in = comm_.recv(from, kTagResidual, comm_.timeout_s);
            backend::Backend& be = env.pl.layer(p.first_layer);
            res = model::Residual::from_bytes(in, be, env.ws_of(be));
            if (res.n != env.n) fail("the residual from rank {} has {} rows, this piece {}", from, res.n, env.n);
        }
        model::forward_layers(env, p.first_layer, p.last_layer, res, {});
        if (p.stage + 1 < plan_.stages) {
            const std::vector<uint8_t> bytes = res.to_bytes();
            comm_.send(plan_.rank_at(p.stage + 1, p.shard), kTagResidual, bytes.data(), bytes.size());
        } else if (p.head && want > 0) {
            model::output_logits(env, model::final_stream(env, res, {}), env.n - want, out);
        }
    }
};

}  // namespace

std::unique_ptr<RankSplit> make_split(Comm& comm, const model::Model& m, SplitKind kind, int64_t micro_batch, int stages,
                                      const StageCosts* costs) {
    auto s = std::make_unique<GridSplit>(comm, m, kind, stages, costs);
    s->micro_batch = micro_batch;
    return s;
}

}  // namespace kinfer::dist
