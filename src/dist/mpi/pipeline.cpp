// --split pipeline: rank r runs layers [first, last) of the plan. Rank 0 embeds the chunk; the
// residual (K3: the partial sum and every banked block sum, Residual::to_bytes) goes from each
// rank to the next; the last rank runs the output head and sends the logits to rank 0. Every
// rank computes exactly what a single process computes for its layers, so the logits are the
// same bits.
#include "dist/mpi/rank_split.h"
#include "model/forward.h"

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

    void run(const model::FwdEnv& env, const int32_t* tokens, bool want_all, float* host) {
        const int r = comm_.rank(), last = comm_.size() - 1;
        const RankPart& p = mine();
        model::Residual res;
        if (r == 0) {
            res = model::embed(env, tokens);
        } else {
            const std::vector<uint8_t> in = comm_.recv(r - 1, kTagResidual, comm_.timeout_s);
            backend::Backend& be = env.pl.layer(p.first_layer);
            res = model::Residual::from_bytes(in, be, env.ws_of(be));
            if (res.n != env.n) fail("the residual from rank {} has {} rows, this chunk {}", r - 1, res.n, env.n);
        }
        model::forward_layers(env, p.first_layer, p.last_layer, res, {});
        const int64_t rows = want_all ? env.n : 1;
        const size_t logit_bytes = size_t(rows * env.hp.n_vocab) * sizeof(float);
        if (r < last) {
            const std::vector<uint8_t> out = res.to_bytes();
            comm_.send(r + 1, kTagResidual, out.data(), out.size());
        } else if (r == 0) {
            model::output_logits(env, model::final_stream(env, res, {}), env.n - rows, host);
        } else {
            std::vector<float> lg(size_t(rows * env.hp.n_vocab));
            model::output_logits(env, model::final_stream(env, res, {}), env.n - rows, lg.data());
            comm_.send(0, kTagLogits, lg.data(), logit_bytes);
        }
        if (r == 0 && last > 0) comm_.recv_into(last, kTagLogits, host, logit_bytes, comm_.timeout_s);
    }
};

}  // namespace

std::unique_ptr<RankSplit> make_pipeline_split(Comm& comm, const model::Model& m) {
    return std::make_unique<PipelineSplit>(comm, m, SplitKind::pipeline);
}

}  // namespace kinfer::dist
