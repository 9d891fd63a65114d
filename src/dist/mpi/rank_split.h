// model::Split across the ranks of an MPI job. The same object runs on every rank: on rank 0
// (which owns the terminal, the tokenizer and the sampler) open / begin / close also tell the
// other ranks, which mirror rank 0's sessions one for one (worker.cpp). forward() is the split's
// own (grid_split.cpp: every --split is a grid of pipeline stages x expert shards). Any error
// inside a forward pass ends the whole job (Comm::abort): the ranks' states would no longer agree.
#pragma once
#include "dist/mpi/comm.h"
#include "dist/mpi/protocol.h"
#include "dist/plan.h"
#include "model/split.h"

#include <memory>

namespace kinfer::dist {

class RankSplit : public model::Split {
public:
    // costs: balance the stages by these instead of bytes (nullptr: by bytes).
    RankSplit(Comm& comm, const model::Model& m, SplitKind kind, int stages, const StageCosts* costs);
    void open(const model::SessionOptions& opt) override;
    void close() override;
    void begin(const int32_t* tokens, int64_t n, int64_t pos0, bool want_all) override;
    const Plan& plan() const { return plan_; }
    // This rank's layers, head and expert shard: what its placement copies to a device.
    model::Share share() const override;
    // --dist-link: how the residual and the expert rows move between the ranks.
    Link link = Link::automatic;
    // --micro-batch: with several stages, a prefill chunk goes through them in pieces of this
    // many tokens, so stage s runs piece i + 1 while stage s + 1 runs piece i (0: whole chunks).
    int64_t micro_batch = 0;

protected:
    Comm& comm_;
    const model::Model& model_;
    StageCosts costs_;   // empty layer costs: balanced by bytes
    Plan plan_;
};

// stages: --split both's pipeline stages (0: the plan's default); costs: what the stages are
// balanced by (nullptr: bytes).
std::unique_ptr<RankSplit> make_split(Comm& comm, const model::Model& m, SplitKind kind, int64_t micro_batch = 0,
                                      int stages = 0, const StageCosts* costs = nullptr);

// What each rank reports when the job ends (--dist-stats).
struct RankStats {
    uint64_t bytes_sent = 0;   // payload bytes this rank sent
    uint64_t max_rss = 0;      // peak resident set, bytes (mapped weight pages it touched count)
    double busy_s = 0;         // seconds it computed its part of the forward passes (Comm::busy_s)
};
RankStats own_stats(const Comm& comm);

// The loop ranks other than 0 run instead of a command: mirror rank 0's sessions until it
// quits. Returns the process exit code.
int serve(Comm& comm);
// Rank 0 at exit: tells the other ranks to quit. Each answers with what it sent and its peak
// RSS; with print_stats rank 0 prints one line per rank to stderr.
void release_workers(Comm& comm, bool print_stats);

}  // namespace kinfer::dist
