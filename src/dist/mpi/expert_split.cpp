// --split experts: every rank runs the dense part of every layer (the same inputs and the same
// kernels give every rank the same bits), and the routed experts of each MoE layer are split
// into contiguous ranges of ids, one per rank. A rank computes only its experts' (token, slot)
// rows of ys, already weighted; then each rank sends its rows to every other one, so every rank
// holds all of ys and sums the slots in selection order exactly as one process does. What moves
// is the expert outputs at the latent width (K3: expert_latent_length): the inputs need not
// move, since every rank computed the latent itself. Rank 0 alone runs the output head.
#include "dist/mpi/rank_split.h"
#include "backend/backend.h"
#include "model/forward.h"

#include <cstring>

namespace kinfer::dist {

namespace {

class ExpertSplit final : public RankSplit {
public:
    using RankSplit::RankSplit;

    bool shards_experts() const override { return true; }
    bool owns_expert(int, int e) const override { return plan_.expert_owner(e) == comm_.rank(); }

    void forward(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) override {
        try {
            model::Residual res = model::embed(env, tokens);
            model::forward_layers(env, 0, env.hp.n_layer, res, {});
            if (comm_.rank() == 0) {
                const int64_t rows = want_all ? env.n : 1;
                model::output_logits(env, model::final_stream(env, res, {}), env.n - rows, host);
            }
        } catch (const std::exception& e) {
            const RankPart& p = plan_.part[size_t(comm_.rank())];
            comm_.abort(fmt::format("expert shard (experts {}-{}): {}", p.first_expert, p.last_expert - 1, e.what()));
        }
    }

    void gather_slots(int, const std::vector<int32_t>& sel, backend::Backend& be, float* ys, int64_t, int64_t,
                      int64_t lat) override {
        if (!be.host_memory()) comm_.abort("--split experts runs on the CPU only; a MoE layer ran on " + be.name());
        const int R = comm_.size(), me = comm_.rank();
        const size_t row = size_t(lat) * sizeof(float);
        // Entries (t * K + slot) each rank computed, in entry order: every rank derives the
        // same lists from the same selections.
        std::vector<std::vector<int64_t>> of(static_cast<size_t>(R));
        for (size_t i = 0; i < sel.size(); ++i) of[size_t(plan_.expert_owner(sel[i]))].push_back(int64_t(i));
        std::vector<std::vector<uint8_t>> in(static_cast<size_t>(R));
        std::vector<uint8_t> packed(of[size_t(me)].size() * row);
        for (size_t j = 0; j < of[size_t(me)].size(); ++j)
            std::memcpy(packed.data() + j * row, ys + of[size_t(me)][j] * lat, row);
        for (int q = 0; q < R; ++q)
            if (q != me) in[size_t(q)].resize(of[size_t(q)].size() * row);
        comm_.all_gather(packed, in, kTagSlots);
        for (int q = 0; q < R; ++q) {
            if (q == me) continue;
            for (size_t j = 0; j < of[size_t(q)].size(); ++j)
                std::memcpy(ys + of[size_t(q)][j] * lat, in[size_t(q)].data() + j * row, row);
        }
    }
};

}  // namespace

std::unique_ptr<RankSplit> make_expert_split(Comm& comm, const model::Model& m) {
    return std::make_unique<ExpertSplit>(comm, m, SplitKind::experts);
}

}  // namespace kinfer::dist
