// The expert-store command-line flags shared by eval / run / bench / chat, and the bundle they
// build (device, seed profile, store). add_expert_flags is a template over the CLI11 App so that
// runtime/ does not depend on CLI11; only the commands that call it do.
//
//   auto ef = std::make_shared<runtime::ExpertFlags>();
//   runtime::add_expert_flags(app, *ef);
//   ...
//   auto ex = cli::attach_experts(*model, *ef, so);   // cli/lib/expert_session.h; nullptr: no flags
//   ... run ...
//   if (ex) ex->finish();   // --verbose-experts report, --expert-profile written
#pragma once
#include "gguf/reader.h"
#include "runtime/device.h"
#include "runtime/expert_store.h"
#include "runtime/routing_trace.h"

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace kinfer::runtime {

struct ExpertFlags {
    std::string ram_cache;          // --expert-cache-ram SIZE
    std::string dev_cache;          // --expert-cache SIZE (per device)
    std::string device;             // --device sim:SIZE[,GBps] (created by the caller's backend set)
    int n_gpu_layers = 0;           // -ngl / --n-gpu-layers: the last N layers on the device
    bool list_devices = false;      // --list-devices
    std::string io = "mmap";        // --expert-io
    std::string policy = "lfu-decay";
    double half_life = 32;
    std::string profile;            // --expert-profile FILE
    double seed_fraction = 0.5;
    bool cpu_moe = false;
    int n_cpu_moe = 0;
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

template <class App>
void add_expert_flags(App& app, ExpertFlags& f) {
    const char* g = "Expert store";
    // A count of layers: 0..2^20, refused at parse time (exit 2) like cli/lib/flag_check.h's int_in.
    auto count_check = [](const std::string& s) -> std::string {
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0') return "'" + s + "' is not an integer (range 0..1048576)";
        if (v < 0 || v > (1 << 20)) return s + " is outside the range 0..1048576";
        return {};
    };
    app.add_option("--expert-cache-ram", f.ram_cache, "host RAM budget for routed experts (e.g. 8GiB, or 25% of them)")->group(g);
    app.add_option("--expert-cache", f.dev_cache, "device expert cache per device (default: all of it)")->group(g);
    app.add_option("--device", f.device,
                   "device for -ngl layers and the expert cache: cudaN (GPU N, in a CUDA build; without that GPU the "
                   "run says so and stays on the CPU) or sim:SIZE[,GBps] (a strict simulated device: its own arena, "
                   "CPU kernels, every pointer checked)")->group(g);
    app.add_option("--n-gpu-layers,--ngl", f.n_gpu_layers,
                   "put the last N layers (and the output when N >= layers) on the device; llama.cpp's -ngl")
        ->check(count_check, "0..1048576")->group(g);
    app.add_flag("--list-devices", f.list_devices, "print the backends found (CPU, devices, every CUDA GPU with its free memory) and exit")->group(g);
    app.add_option("--expert-io", f.io, "how experts are read: mmap, pread or direct (O_DIRECT)")->group(g);
    app.add_option("--expert-policy", f.policy, "cache policy: lfu-decay or lru")->group(g);
    app.add_option("--expert-half-life", f.half_life, "LFU decay half-life in tokens")->group(g);
    app.add_option("--expert-profile", f.profile, "routing profile: seeds the caches if FILE exists, run counts are added to it")->group(g);
    app.add_option("--expert-seed-fraction", f.seed_fraction, "share of each cache the profile seed may take")->group(g);
    app.add_flag("--cpu-moe", f.cpu_moe, "keep all routed experts on the CPU")->group(g);
    app.add_option("--n-cpu-moe", f.n_cpu_moe, "keep the routed experts of the first N layers on the CPU")
        ->check(count_check, "0..1048576")->group(g);
    app.add_option("--ot,--override-tensor", f.overrides, "REGEX=DEVICE (CPU or a device name): expert tensors go to that tier; a layer whose other tensors match runs there "
                   "(all of them or none); llama.cpp's -ot")->group(g);
    app.add_flag("--prefetch-next", f.prefetch_next, "speculatively fetch the next layer's experts one layer early")->group(g);
    app.add_flag("--verbose-experts", f.verbose, "print expert hit rates, traffic, stalls and the hottest experts")->group(g);
    app.add_option("--expert-cpu-gbps", f.cpu_gbps, "cost model: CPU GEMV bandwidth (0: always copy misses to the device)")->group(g);
    app.add_flag("--expert-sync", f.sync_io, "load misses when computed instead of at routing (no overlap)")->group(g);
    app.add_option("--routing-record", f.routing_record, "write every routing decision of the run to FILE (a routing trace)")->group(g);
    app.add_option("--routing-replay", f.routing_replay,
                   "route by the trace in FILE instead of the router (benchmarks only: changes the output)")->group(g);
}

class ExpertRuntime {
public:
    // nullptr when no flag is set: the model then reads experts straight from the mapping.
    // hp_moe: MoE layers, experts and experts used, for the routing trace flags.
    // device: the device tier's copy engine and memory (the caller's backend set owns it).
    static std::unique_ptr<ExpertRuntime> create(const gguf::File& f, int n_layer, const ExpertFlags& flags,
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
