// The expert-store command-line flags shared by eval / run / bench / chat / perplexity, and the
// bundle they build (device, seed profile, store). The flags are declared on a CLI11 App by
// cli::add_expert_flags (cli/lib/expert_session.h), so runtime/ does not depend on CLI11.
//
//   auto ef = std::make_shared<runtime::ExpertFlags>();
//   cli::add_expert_flags(app, *ef);
//   ...
//   auto ex = cli::attach_experts(*model, *ef, so);   // cli/lib/expert_session.h; nullptr: no flags
//   ... run ...
//   if (ex) ex->finish();   // --verbose-experts report, --expert-profile written
#pragma once
#include "gguf/reader.h"
#include "runtime/device.h"
#include "runtime/expert_store.h"
#include "runtime/routing_trace.h"

#include <memory>
#include <string>
#include <vector>

namespace kinfer::runtime {

struct ExpertFlags {
    std::string ram_cache;          // --expert-cache-ram SIZE
    std::string dev_cache;          // --expert-cache SIZE (per device)
    std::string device;             // --device sim:SIZE[,GBps] (created by the caller's backend set)
    int n_gpu_layers = 0;           // -ngl / --n-gpu-layers: the last N layers on the device
    std::string io = "mmap";        // --expert-io
    std::string policy = "lfu-decay";
    double half_life = 32;
    std::string profile;            // --expert-profile FILE
    double seed_fraction = 0.5;
    bool cpu_moe = false;
    int n_cpu_moe = 0;
    std::string split_mode = "layer";   // --split-mode layer|experts: how several devices share the model
    std::vector<std::string> overrides;   // -ot
    bool prefetch_next = false;
    bool verbose = false;
    double cpu_gbps = 0;
    bool sync_io = false;           // --expert-sync: no I/O thread (for measuring the overlap)
    std::string routing_record;     // --routing-record FILE
    std::string routing_replay;     // --routing-replay FILE

    // True when any flag asks for something beyond the plain mapping.
    bool any() const;
    // True when a store flag is set (the routing-trace flags alone need no store).
    bool any_store() const;
};

class ExpertRuntime {
public:
    // nullptr when no flag is set: the model then reads experts straight from the mapping.
    // hp_moe: MoE layers, experts and experts used, for the routing trace flags.
    // device: the device tier's copy engine and memory (the caller's backend set owns it).
    // names: the routed expert tensors of each layer (model::expert_tensor_names).
    static std::unique_ptr<ExpertRuntime> create(const gguf::File& f, const ExpertTensorNames& names, const ExpertFlags& flags,
                                                 int moe_layers = 0, int n_expert = 0, int n_used = 0,
                                                 Device* device = nullptr);
    ~ExpertRuntime();
    ExpertStore* store() { return store_.get(); }
    RoutingTrace* routing_record() { return record_.get(); }
    const RoutingTrace* routing_replay() const { return replay_.get(); }
    Device* device() { return device_; }
    // Prints the report (--verbose-experts, to stderr) and adds the run's counts to the profile.
    void finish();

private:
    ExpertFlags flags_;
    Device* device_ = nullptr;
    std::unique_ptr<ExpertProfile> seed_;
    std::unique_ptr<ExpertStore> store_;
    std::unique_ptr<RoutingTrace> record_, replay_;
    bool finished_ = false;
};

}  // namespace kinfer::runtime
