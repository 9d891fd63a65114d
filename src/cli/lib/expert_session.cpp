#include "cli/lib/expert_session.h"

#include "common/error.h"

#include <cstdio>
#include <cstdlib>

namespace kinfer::cli {

std::unique_ptr<RunDevices> attach_experts(const model::Model& m, const runtime::ExpertFlags& flags,
                                           model::SessionOptions& so) {
    const auto& hp = m.hparams();
    auto rd = std::make_unique<RunDevices>();
    if (flags.n_gpu_layers < 0) fail("--n-gpu-layers {}: expected a number of layers >= 0", flags.n_gpu_layers);
    if (!flags.device.empty() || flags.list_devices) {
        rd->backends = std::make_unique<backend::Backends>(so.n_threads);
        if (!flags.device.empty()) rd->backends->add_device(flags.device);
        if (flags.list_devices) {
            for (const std::string& line : rd->backends->list()) std::printf("%s\n", line.c_str());
            std::exit(0);
        }
    }
    int ngl = flags.n_gpu_layers;
    if (ngl > 0 && (!rd->backends || rd->backends->n_devices() == 0)) {
        std::fprintf(stderr, "kinfer: -ngl %d: no device in this run (--device cudaN for a GPU, --device sim:SIZE "
                             "simulates one); running on the CPU\n", ngl);
        ngl = 0;
    }
    rd->experts = runtime::ExpertRuntime::create(m.file(), int(hp.n_layer), flags, int(hp.n_layer - hp.n_layer_dense_lead),
                                                 int(hp.n_expert), int(hp.n_expert_used),
                                                 rd->backends ? rd->backends->expert_device() : nullptr);
    runtime::ExpertRuntime* ex = rd->experts.get();
    so.experts = ex ? ex->store() : nullptr;
    so.prefetch_next = flags.prefetch_next;
    so.routing_record = ex ? ex->routing_record() : nullptr;
    so.routing_replay = ex ? ex->routing_replay() : nullptr;
    so.backends = rd->backends.get();
    so.n_gpu_layers = ngl;
    so.cpu_moe = flags.cpu_moe;
    so.n_cpu_moe = flags.n_cpu_moe;
    so.overrides = flags.overrides;
    return rd;
}

}  // namespace kinfer::cli
