// Ranks other than 0: wait for rank 0's commands and mirror its sessions. A worker has no
// terminal of its own: it prints nothing except the one line that ends the job on an error.
#include "dist/mpi/protocol.h"
#include "dist/mpi/rank_split.h"
#include "backend/registry.h"
#include "model/session.h"

namespace kinfer::dist {

namespace {

struct Worker {
    Comm& comm;
    // Rank 0's device, opened here too (declared first: it outlives the sessions using it).
    std::unique_ptr<backend::Backends> backends;
    std::string device_spec;
    int device_threads = 0;
    std::unique_ptr<model::Model> model;
    std::unique_ptr<RankSplit> split;
    std::unique_ptr<model::Session> session;

    void open(const OpenCmd& c) {
        session.reset();
        if (!model || model->path() != c.model_path) {
            split.reset();
            model.reset();
            model = model::Model::load(c.model_path);
        }
        split = make_split(comm, *model, c.kind, c.micro_batch, c.stages, c.costs.layer.empty() ? nullptr : &c.costs);
        if (split->plan().digest() != c.plan_digest)
            fail("this rank's plan of {} differs from rank 0's (the model files or the stage costs differ)", c.model_path);
        comm.timeout_s = c.timeout_s;
        model::SessionOptions so;
        so.n_ctx = c.n_ctx, so.n_batch = c.n_batch, so.n_threads = c.n_threads;
        so.kda_chunked = c.kda_chunked, so.mla_decompressed = c.mla_decompressed;
        if (c.cache_type < 0 || c.cache_type > int32_t(backend::CacheType::q8_0))
            fail("open command: cache type {} unknown", c.cache_type);
        so.cache_type = backend::CacheType(c.cache_type);
        so.cache_page_rows = c.cache_page_rows, so.tiled_min_keys = c.tiled_min_keys;
        split->link = c.link;
        if (c.device != device_spec || c.n_threads != device_threads) {
            backends.reset();
            if (!c.device.empty()) {
                backends = std::make_unique<backend::Backends>(c.n_threads);
                backends->add_devices(c.device);
            }
            device_spec = c.device, device_threads = c.n_threads;
        }
        so.backends = backends.get();
        so.n_gpu_layers = backends && backends->n_devices() > 0 ? c.n_gpu_layers : 0;
        so.cpu_moe = c.cpu_moe, so.n_cpu_moe = c.n_cpu_moe, so.shard_experts = c.shard_experts;
        so.split = split.get();
        session = std::make_unique<model::Session>(*model, so);
    }

    void forward(const ForwardCmd& c) {
        if (!session) fail("a forward command before any session was opened");
        // Rank 0 reset its session (a new chat, the next perplexity window): do the same.
        if (c.pos0 == 0 && session->n_past() != 0) session->reset();
        if (c.pos0 != session->n_past())
            fail("rank 0 runs position {} but this rank's session is at {} (a saved state loaded on rank 0 only?)",
                 c.pos0, session->n_past());
        std::vector<float> all;
        session->prefill(c.tokens, c.want_all ? &all : nullptr);
    }
};

}  // namespace

int serve(Comm& comm) {
    Worker w{comm, nullptr, {}, 0, nullptr, nullptr, nullptr};
    try {
        for (;;) {
            const std::vector<uint8_t> m = comm.recv(0, kTagCommand, -1.0);
            switch (op_of(m)) {
                case Op::open: w.open(decode_open(m)); break;
                case Op::forward: w.forward(decode_forward(m)); break;
                case Op::close: w.session.reset(); break;
                case Op::quit: {
                    const RankStats st = own_stats(comm);
                    comm.send(0, kTagStats, &st, sizeof st);
                    return 0;
                }
                default: fail("unknown command {} from rank 0", int(op_of(m)));
            }
        }
    } catch (const std::exception& e) {
        comm.abort(e.what());
    }
}

}  // namespace kinfer::dist
