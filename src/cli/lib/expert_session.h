// The expert runtime a command's --expert* / --routing-* flags ask for, created from the model
// (layer and expert counts come from its hyper-parameters) and wired into the session options.
#pragma once
#include "model/session.h"
#include "runtime/expert_flags.h"

#include <memory>

namespace kinfer::cli {

// nullptr when no flag asks for anything; so.experts / prefetch_next / routing_record /
// routing_replay are set either way. Call finish() on the result once the run is over.
std::unique_ptr<runtime::ExpertRuntime> attach_experts(const model::Model& m, const runtime::ExpertFlags& flags,
                                                       model::SessionOptions& so);

}  // namespace kinfer::cli
