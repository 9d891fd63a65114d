#include "cli/lib/split_session.h"

#include "cli/lib/flag_check.h"
#include "dist/layer_profile.h"
#include "dist/plan.h"
#include "model/split.h"

#include <cstdio>
#include <cstdlib>
#ifdef KINFER_HAVE_MPI
#include "dist/mpi/rank_split.h"
#include "runtime/thread_pool.h"

#include <algorithm>
#endif

namespace kinfer::cli {

SplitFlags& split_flags() {
    static SplitFlags f;
    return f;
}

void add_split_flags(CLI::App& app) {
    SplitFlags& f = split_flags();
    app.add_option("--split", f.split,
                   "under mpirun: pipeline (each rank runs a range of layers), experts (each rank runs a share of "
                   "every MoE layer's routed experts) or both (the ranks form --stages pipeline stages, and the "
                   "experts of each stage are shared among its ranks); default pipeline when there are several ranks")
        ->check(CLI::IsMember({"pipeline", "experts", "both"}))
        ->group("Across processes (mpirun)");
    app.add_option("--stages", f.stages, "under mpirun, --split both: the number of pipeline stages (the rank count "
                   "must be a multiple of it)")
        ->capture_default_str()
        ->check(int_in(1, 4096))
        ->group("Across processes (mpirun)");
    app.add_option("--dist-timeout", f.timeout_s, "under mpirun: seconds a rank waits on a peer mid-pass before the job ends")
        ->check(real_in(0, 1e6, true))
        ->group("Across processes (mpirun)");
    app.add_option("--micro-batch", f.micro_batch,
                   "under mpirun, --split pipeline or both: send each prefill chunk through the stages in pieces of N "
                   "tokens so that they overlap (the logits then equal one process run with -b N)")
        ->check(int_in(0, kMaxBatch))
        ->group("Across processes (mpirun)");
    app.add_option("--dist-link", f.link,
                   "under mpirun: how the residual and the expert rows move between ranks: mpi (through host "
                   "memory), nccl (GPU to GPU; every rank's layers on a GPU of its own, -ngl) or auto (nccl when "
                   "that holds on every rank and kinfer has NCCL, else mpi)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "mpi", "nccl"}))
        ->group("Across processes (mpirun)");
    app.add_flag("--dist-stats", f.stats, "under mpirun: print each rank's bytes sent, peak RSS and busy time at exit")
        ->group("Across processes (mpirun)");
    add_balance_flags(app, f.balance, f.layer_profile);
}

void add_balance_flags(CLI::App& app, std::string& balance, std::string& layer_profile) {
    app.add_option("--balance", balance, "--split pipeline or both: balance the stages by the bytes each layer reads, or by "
                   "its measured decode or prefill time per token (--layer-profile); default prefill with a profile (its "
                   "micro-batches run the stages at once, so the slowest sets the pace), else bytes")
        ->check(CLI::IsMember({"bytes", "decode", "prefill"}))
        ->group("Across processes (mpirun)");
    app.add_option("--layer-profile", layer_profile, "--split pipeline or both: the measured time of every layer (written by "
                   "kinfer bench --layer-times FILE) to balance the stages by")
        ->group("Across processes (mpirun)");
}

#ifdef KINFER_HAVE_MPI

int split_ranks() {
    const dist::Comm* c = dist::Comm::get();
    return c ? c->size() : 1;
}

std::unique_ptr<model::Split> attach_split(const model::Model& m, model::SessionOptions& so) {
    dist::Comm* c = dist::Comm::get();
    if (!c || c->size() < 2) return nullptr;
    const SplitFlags& f = split_flags();
    c->timeout_s = f.timeout_s;
    // Ranks on one machine share its cores: by default each gets its share of them.
    if (so.n_threads <= 0) so.n_threads = std::max(1, runtime::ThreadPool::default_threads() / c->local_size());
    // Rank 0 alone reads the profile; the open command carries the costs to the other ranks.
    const std::optional<dist::StageCosts> costs = dist::costs_from_flags(m, f.balance, f.layer_profile);
    auto s = dist::make_split(*c, m, dist::parse_split(f.split.empty() ? "pipeline" : f.split), f.micro_batch, f.stages,
                              costs ? &*costs : nullptr);
    s->link = dist::parse_link(f.link);
    so.split = s.get();
    return s;
}

DistScope::DistScope(int* argc, char*** argv) { dist::Comm::start(argc, argv); }

DistScope::~DistScope() {
    if (dist::Comm* c = dist::Comm::get()) {
        if (c->rank() == 0) dist::release_workers(*c, split_flags().stats);
        c->finish();
    }
}

bool DistScope::worker() const {
    const dist::Comm* c = dist::Comm::get();
    return c && c->rank() != 0;
}

int DistScope::serve() { return dist::serve(*dist::Comm::get()); }

#else

int split_ranks() { return 1; }

std::unique_ptr<model::Split> attach_split(const model::Model&, model::SessionOptions&) {
    if (!split_flags().split.empty() && (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK")))
        std::fprintf(stderr, "kinfer: note: this kinfer was built without MPI; --split is ignored and every rank runs alone\n");
    return nullptr;
}
DistScope::DistScope(int*, char***) {}
DistScope::~DistScope() = default;
bool DistScope::worker() const { return false; }
int DistScope::serve() { return 0; }

#endif

}  // namespace kinfer::cli
