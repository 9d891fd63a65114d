// --split pipeline: rank r runs layers [first, last) of the plan. Rank 0 embeds the chunk; the
// residual (K3: the partial sum and every banked block sum, Residual::to_bytes) goes from each
// rank to the next; the last rank runs the output head and sends the logits to rank 0. Every
// rank computes exactly what a single process computes for its layers, so the logits are the
// same bits. --micro-batch keeps several pieces of a prefill chunk in flight (run()).
#include "dist/mpi/rank_split.h"
#include "model/forward.h"

#include <algorithm>

namespace kinfer::dist {

namespace {

class PipelineSplit final : public RankSplit {
public:
    using RankSplit::RankSplit;

    void forward(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) override {
        try {
            run(env, tokens, want_all, host);
        } catch (const std::exception& e) {
            comm_.abort(fmt::format("pipeline stage (layers {}-{}): {}", mine().first_layer, mine().last_layer - 1, e.what()));
        }
    }

private:
    const RankPart& mine() const { return plan_.part[size_t(comm_.rank())]; }

    // The chunk in pieces of micro_batch tokens (one piece when 0). Each layer sees the pieces
    // in order, so a piece's result is what one process computes with -b micro_batch. The last
    // rank keeps the logits of every piece and sends them once at the end: rank 0 then never
    // waits on the last rank while the pieces are still going round.
    void run(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) {
        const int r = comm_.rank(), last = comm_.size() - 1;
        const int64_t V = env.hp.n_vocab;
        const int64_t piece = micro_batch > 0 ? std::min(micro_batch, env.n) : env.n;
        const int64_t rows = want_all ? env.n : 1;
        std::vector<float> lg(r == last && r != 0 ? size_t(rows * V) : 0);
        float* out = r == 0 ? host : lg.data();
        for (int64_t off = 0; off < env.n; off += piece) {
            model::FwdEnv e = env;
            e.pos0 = env.pos0 + off, e.n = std::min(piece, env.n - off);
            const bool final_piece = off + e.n == env.n;
            // Rows of this piece whose logits are wanted, written at `out + its row`.
            const int64_t want = want_all ? e.n : final_piece ? 1 : 0;
            // A middle rank keeps no logits (out is null): no offset is applied to it.
            step(e, tokens + off, want, out ? out + (want_all ? off * V : 0) : nullptr);
        }
        if (r == last && r != 0) comm_.send(0, kTagLogits, lg.data(), lg.size() * sizeof(float));
        // Rank 0 waits on the whole pipeline, so longer than a rank waits on its neighbour: the
        // rank next to a silent one is the first to give up, and it names the silent one.
        if (r == 0 && last > 0)
            comm_.recv_into(last, kTagLogits, host, size_t(rows * V) * sizeof(float), 2 * comm_.timeout_s + 1);
    }

    // One piece through this rank's layers; the last rank writes the logits of its last `want`
    // rows to out.
    void step(const model::FwdEnv& env, const int32_t* tokens, int64_t want, float* out) {
        const int r = comm_.rank(), last = comm_.size() - 1;
        const RankPart& p = mine();
        model::Residual res;
        if (r == 0) {
            res = model::embed(env, tokens);
        } else {
            const std::vector<uint8_t> in = comm_.recv(r - 1, kTagResidual, comm_.timeout_s);
            backend::Backend& be = env.pl.layer(p.first_layer);
            res = model::Residual::from_bytes(in, be, env.ws_of(be));
            if (res.n != env.n) fail("the residual from rank {} has {} rows, this piece {}", r - 1, res.n, env.n);
        }
        model::forward_layers(env, p.first_layer, p.last_layer, res, {});
        if (r < last) {
            const std::vector<uint8_t> bytes = res.to_bytes();
            comm_.send(r + 1, kTagResidual, bytes.data(), bytes.size());
        } else if (want > 0) {
            model::output_logits(env, model::final_stream(env, res, {}), env.n - want, out);
        }
    }
};

}  // namespace

std::unique_ptr<RankSplit> make_pipeline_split(Comm& comm, const model::Model& m) {
    return std::make_unique<PipelineSplit>(comm, m, SplitKind::pipeline);
}

}  // namespace kinfer::dist
