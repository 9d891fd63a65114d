#include "dist/mpi/rank_split.h"

#include "dist/mpi/protocol.h"
#include "backend/registry.h"
#include "model/session.h"

#include <cstdio>
#include <sys/resource.h>

namespace kinfer::dist {

namespace {

void tell_workers(Comm& c, const std::vector<uint8_t>& m) {
    for (int q = 1; q < c.size(); ++q) c.send(q, kTagCommand, m.data(), m.size());
}

}  // namespace

RankSplit::RankSplit(Comm& comm, const model::Model& m, SplitKind kind, int stages, const StageCosts* costs)
    : comm_(comm), model_(m), costs_(costs ? *costs : StageCosts{}),
      plan_(Plan::make(m, kind, comm.size(), stages, costs)) {}

void RankSplit::open(const model::SessionOptions& o) {
    if (comm_.rank() != 0) return;
    if (o.experts || o.routing_replay || o.routing_record || !o.overrides.empty())
        usage_fail("--split does not combine with the expert store, routing traces or -ot yet");
    OpenCmd c;
    c.kind = plan_.kind;
    c.stages = plan_.stages;
    c.n_ctx = o.n_ctx, c.n_batch = o.n_batch, c.n_threads = o.n_threads;
    c.kda_chunked = o.kda_chunked, c.mla_decompressed = o.mla_decompressed;
    c.timeout_s = comm_.timeout_s;
    c.micro_batch = micro_batch;
    c.cache_type = int32_t(o.cache_type), c.cache_page_rows = o.cache_page_rows, c.tiled_min_keys = o.tiled_min_keys;
    c.costs = costs_;
    c.plan_digest = plan_.digest();
    // Every rank opens rank 0's device and places its share of the same layers there.
    if (o.backends && o.backends->n_devices() > 0) c.device = o.backends->specs();
    c.n_gpu_layers = c.device.empty() ? 0 : o.n_gpu_layers;
    c.cpu_moe = o.cpu_moe, c.n_cpu_moe = o.n_cpu_moe, c.shard_experts = o.shard_experts;
    // auto without a device: MPI, decided here for every rank (no endpoints to swap).
    if (link == Link::automatic && c.device.empty()) link = Link::mpi;
    c.link = link;
    c.model_path = model_.path();
    tell_workers(comm_, encode(c));
}

model::Share RankSplit::share() const {
    const RankPart& p = plan_.part[size_t(comm_.rank())];
    model::Share s;
    s.first_layer = p.first_layer, s.last_layer = p.last_layer, s.head = p.head;
    if (plan_.shards > 1) s.first_expert = p.first_expert, s.last_expert = p.last_expert;
    return s;
}

void RankSplit::close() {
    if (comm_.rank() == 0) tell_workers(comm_, encode(Op::close));
}

void RankSplit::begin(const int32_t* tokens, int64_t n, int64_t pos0, bool want_all) {
    if (comm_.rank() != 0) return;
    ForwardCmd c;
    c.pos0 = pos0, c.want_all = want_all;
    c.tokens.assign(tokens, tokens + n);
    tell_workers(comm_, encode(c));
}

RankStats own_stats(const Comm& comm) {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return RankStats{comm.bytes_sent, uint64_t(ru.ru_maxrss) * 1024, comm.busy_s};
}

void release_workers(Comm& comm, bool print_stats) {
    if (comm.rank() != 0) return;
    tell_workers(comm, encode(Op::quit));
    std::vector<RankStats> all{own_stats(comm)};
    for (int q = 1; q < comm.size(); ++q) {
        all.emplace_back();
        comm.recv_into(q, kTagStats, &all.back(), sizeof(RankStats), comm.timeout_s);
    }
    if (!print_stats) return;
    uint64_t total = 0;
    for (int q = 0; q < comm.size(); ++q) {
        std::fprintf(stderr, "kinfer: rank %d: sent %llu bytes, peak RSS %.1f MiB, busy %.3f s\n", q,
                     (unsigned long long)all[size_t(q)].bytes_sent, double(all[size_t(q)].max_rss) / 1048576.0, all[size_t(q)].busy_s);
        total += all[size_t(q)].bytes_sent;
    }
    std::fprintf(stderr, "kinfer: %d ranks sent %llu bytes in all\n", comm.size(), (unsigned long long)total);
}

}  // namespace kinfer::dist
