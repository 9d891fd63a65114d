#include "cli/lib/expert_session.h"

namespace kinfer::cli {

std::unique_ptr<runtime::ExpertRuntime> attach_experts(const model::Model& m, const runtime::ExpertFlags& flags,
                                                       model::SessionOptions& so) {
    const auto& hp = m.hparams();
    auto ex = runtime::ExpertRuntime::create(m.file(), int(hp.n_layer), flags, int(hp.n_layer - hp.n_layer_dense_lead),
                                             int(hp.n_expert), int(hp.n_expert_used));
    so.experts = ex ? ex->store() : nullptr;
    so.prefetch_next = flags.prefetch_next;
    so.routing_record = ex ? ex->routing_record() : nullptr;
    so.routing_replay = ex ? ex->routing_replay() : nullptr;
    return ex;
}

}  // namespace kinfer::cli
