// The backends and expert runtime a command's --device / -ngl / --expert* / --routing-* flags
// ask for, created from the model (layer and expert counts come from its hyper-parameters) and
// wired into the session options.
#pragma once
#include "backend/registry.h"
#include "model/session.h"
#include "runtime/expert_flags.h"

#include <memory>

namespace CLI {
class App;
}

namespace kinfer::cli {

// What attach_experts sets up for a run; keep it alive as long as the sessions using it.
struct RunDevices {
    std::unique_ptr<backend::Backends> backends;        // nullptr: sessions make their own CPU backend
    std::unique_ptr<runtime::ExpertRuntime> experts;    // nullptr: experts straight from the mapping
    // Prints the --verbose-experts report and writes --expert-profile / --routing-record.
    void finish() {
        if (experts) experts->finish();
    }
};

// Declares --device, -ngl, --cpu-moe, -ot and the --expert-* / --routing-* flags on a command.
void add_expert_flags(CLI::App& app, runtime::ExpertFlags& f);
// --list-devices: prints the backends found (the CPU, those `devices` names, every CUDA GPU with
// its free memory) and exits (1 when a device cannot be opened).
[[noreturn]] void list_devices_and_exit(const std::string& devices);

// Whether what placement would put on each device fits 95 % of its free memory: the last ngl
// layers in contiguous runs (the output head with the last one) as moved by the -ot rules, their
// routed experts included, and each device layer's state at n_ctx tokens (the latent cache in
// so.cache_type and whole pages of so.cache_page_rows, the KDA state). Says on stderr which device does not.
bool device_layers_fit(const model::Model& m, int ngl, backend::Backends& bk, const std::vector<std::string>& overrides,
                       const model::SessionOptions& so);

// With --device, -ngl N and no expert store flag, the routed experts go with their layers when
// those fit (device_layers_fit), else through an expert store; --device without -ngl, or any store
// flag, makes the store. -ot rules that name no routed-expert tensor are not store flags.
// so.experts / prefetch_next / routing_record / routing_replay / backends / n_gpu_layers /
// cpu_moe / n_cpu_moe are set either way (so.n_threads must be set before the call: a device
// shares the CPU backend's threads; so.graphs, when set before, makes the store load its misses on
// the calling thread, as --expert-sync). (--list-devices exits while the line is parsed.)
std::unique_ptr<RunDevices> attach_experts(const model::Model& m, const runtime::ExpertFlags& flags,
                                           model::SessionOptions& so);

}  // namespace kinfer::cli
