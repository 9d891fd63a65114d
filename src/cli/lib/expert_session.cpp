#include "cli/lib/expert_session.h"

#include "cli/lib/flag_check.h"
#include "cli/lib/info_report.h"
#include "cli/lib/split_session.h"
#include "common/error.h"
#include "model/placement.h"
#include "model/tensor_list.h"
#include "runtime/expert_placement.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <vector>

namespace kinfer::cli {

void list_devices_and_exit(const std::string& devices) {
    try {
        backend::Backends b(1);
        if (!devices.empty()) b.add_devices(devices);
        for (const std::string& line : b.list()) std::printf("%s\n", line.c_str());
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        std::exit(1);
    }
    std::fflush(stdout);
    std::exit(0);
}

void add_expert_flags(CLI::App& app, runtime::ExpertFlags& f) {
    const char* g = "Expert store";
    app.add_option("--expert-cache-ram", f.ram_cache, "host RAM budget for routed experts (e.g. 8GiB, or 25% of them)")->group(g);
    app.add_option("--expert-cache", f.dev_cache, "device expert cache per device (default: all of it)")->group(g);
    app.add_option("--device", f.device,
                   "device for -ngl layers and the expert cache: cudaN (GPU N, in a CUDA build; without that GPU the "
                   "run says so and stays on the CPU), cuda:local (under mpirun: GPU N for the rank N of its machine), several comma-separated (-ngl shares the layers among them) or sim:SIZE[,GBps] (a strict simulated device: its own arena, "
                   "CPU kernels, every pointer checked) or emu-cuda[:SIZE] (the CUDA backend's host code and kernels on "
                   "an emulated GPU, default 2GiB: slow, for tests)")->group(g);
    app.add_option("--n-gpu-layers,--ngl", f.n_gpu_layers,
                   "put the last N layers (and the output when N >= layers) on the device; llama.cpp's -ngl. Their "
                   "routed experts go with them when the layers fit 95% of the device's free memory, else (and with "
                   "any expert store flag) through the expert store's device cache")
        ->check(int_in(0, 1 << 20))->group(g);
    app.add_option("--split-mode,--sm", f.split_mode,
                   "how several devices share the model: layer (the -ngl layers in contiguous runs, one device "
                   "each) or experts (the dense part on the first device, each layer's routed experts divided "
                   "among all of them; no expert store); llama.cpp's -sm")
        ->check(CLI::Validator(
            [](std::string& v) -> std::string {
                if (v == "layer" || v == "experts") return "";
                if (v == "row") return "row: kinfer does not split a tensor's rows among devices; layer (the default) or experts";
                return v + ": expected layer or experts";
            },
            "layer|experts"))
        ->group(g);
    // A callback: it runs once the line is parsed (--device with it), before the command asks for
    // its model, so `kinfer run --list-devices` needs none.
    app.add_flag_callback("--list-devices", [&f] { list_devices_and_exit(f.device); },
                          "print the backends found (CPU, the --device ones, every CUDA GPU with its free memory) and exit")
        ->group(g);
    app.add_option("--expert-io", f.io, "how experts are read: mmap, pread or direct (O_DIRECT)")->group(g);
    app.add_option("--expert-policy", f.policy, "cache policy: lfu-decay or lru")->group(g);
    app.add_option("--expert-half-life", f.half_life, "LFU decay half-life in tokens")->group(g);
    app.add_option("--expert-profile", f.profile, "routing profile: seeds the caches if FILE exists, run counts are added to it")->group(g);
    app.add_option("--expert-seed-fraction", f.seed_fraction, "share of each cache the profile seed may take")->group(g);
    app.add_flag("--cpu-moe", f.cpu_moe, "keep all routed experts on the CPU")->group(g);
    app.add_option("--n-cpu-moe", f.n_cpu_moe, "keep the routed experts of the first N layers on the CPU")
        ->check(int_in(0, 1 << 20))->group(g);
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

bool device_layers_fit(const model::Model& m, int ngl, backend::Backends& bk, const std::vector<std::string>& overrides,
                       const model::SessionOptions& so) {
    const int64_t n_ctx = so.n_ctx;
    const model::HParams& hp = m.hparams();
    const int L = hp.n_layer;
    const size_t n_dev = bk.n_devices();
    if (n_dev == 0) return true;
    // Where placement will put each layer, the head and the table (-ngl's runs as -ot moves them),
    // their experts with them (no store), and each device layer's state: the latent cache at -c
    // tokens (grown a page at a time) for an MLA layer, the recurrent and conv state for a KDA one.
    model::PlacementOptions po;
    po.n_gpu_layers = ngl;
    po.overrides = overrides;
    const model::Placement::Sites at = model::Placement::sites(m, bk, po);
    std::vector<uint64_t> need(n_dev, 0);
    auto add = [&](const backend::Backend* b, uint64_t bytes) {
        for (size_t d = 0; d < n_dev; ++d)
            if (bk.device(d) == b) need[d] += bytes;
    };
    const gguf::File& f = m.file();
    model::for_each_tensor(hp, [&](const std::string& name) { return f.find_tensor(name) != nullptr; },
                           [&](const model::TensorSpec& s) {
                               const gguf::TensorInfo* t = f.find_tensor(s.name);
                               if (t) add(at.of(s), s.is_vector() ? uint64_t(t->nelements()) * sizeof(float) : t->nbytes);   // vectors go as fp32
                           });
    const uint64_t rows = uint64_t(model::latent_cache_rows(std::max<int64_t>(n_ctx, 1), so.cache_page_rows));
    for (int il = 0; il < L; ++il)
        add(at.layer[size_t(il)], hp.is_kda(il) ? uint64_t(hp.kda_state_floats() + hp.conv_state_floats()) * sizeof(float)
                                                : rows * backend::cache_row_bytes(so.cache_type, hp.mla_cache_dim()));
    // A twentieth of each device's free memory for the ops' scratch.
    for (size_t d = 0; d < n_dev; ++d) {
        const size_t free = bk.device(d)->free_bytes();
        if (need[d] <= free / 20 * 19) continue;
        std::fprintf(stderr,
                     "kinfer: the layers placed on %s need %s with their state at -c %lld, more than 95%% of its %s "
                     "free: their routed experts go through an expert store (--expert-cache sets its size)\n",
                     bk.device(d)->name().c_str(), human_bytes(need[d]).c_str(), (long long)n_ctx, human_bytes(free).c_str());
        return false;
    }
    return true;
}

// The -ot rules that name a routed-expert tensor of the model (tiers of the expert store), one
// "REGEX=DEVICE" each; rules for dense tensors only (token_embd, a layer's attention) place
// layers, not experts.
std::vector<std::string> expert_overrides(const model::Model& m, const std::vector<std::string>& overrides) {
    std::vector<std::string> out;
    if (overrides.empty()) return out;
    runtime::PlacementRules rules;
    for (const std::string& o : overrides) rules.add_override(o);
    const runtime::ExpertTensorNames names = model::expert_tensor_names(m.hparams());
    for (const auto& [re_text, dev] : rules.overrides) {
        const std::regex re(re_text);
        for (const auto& layer : names)
            if (runtime::names_experts(re, layer)) {   // the store's own test (resolve_placement)
                out.push_back(re_text + "=" + dev);
                break;
            }
    }
    return out;
}

std::unique_ptr<RunDevices> attach_experts(const model::Model& m, const runtime::ExpertFlags& flags,
                                           model::SessionOptions& so) {
    const auto& hp = m.hparams();
    auto rd = std::make_unique<RunDevices>();
    if (flags.n_gpu_layers < 0) fail("--n-gpu-layers {}: expected a number of layers >= 0", flags.n_gpu_layers);
    if (!flags.device.empty()) {
        rd->backends = std::make_unique<backend::Backends>(so.n_threads);
        rd->backends->add_devices(flags.device);
    }
    int ngl = flags.n_gpu_layers;
    if (ngl > 0 && (!rd->backends || rd->backends->n_devices() == 0)) {
        std::fprintf(stderr, "kinfer: -ngl %d: no device in this run (--device cudaN for a GPU, --device sim:SIZE "
                             "simulates one); running on the CPU\n", ngl);
        ngl = 0;
    }
    // Under --split each rank copies its share of the routed experts with its layers, and under
    // --split-mode experts the devices hold them (model/placement.h): --device alone then makes
    // no expert store (the store serves one process and one device tier).
    const bool shard = flags.split_mode == "experts";
    // The store's own flags: -ot rules that name no expert tensor place layers only (Placement
    // reads them from so.overrides) and ask for no store.
    runtime::ExpertFlags bare = flags;
    bare.device.clear();
    bare.overrides = expert_overrides(m, flags.overrides);
    if (shard && bare.any_store())
        usage_fail("--split-mode experts divides the routed experts among the devices; the expert store's flags "
                   "(--expert-cache*, --cpu-moe, --n-cpu-moe, -ot, --expert-profile, --prefetch-next, "
                   "--verbose-experts, --expert-io) choose another placement: give one or the other");
    // --device with -ngl and no store flag: the experts go with their layers (llama.cpp's -ngl) when
    // the device layers fit the devices' free memory, so a GPU decode step keeps the router's
    // choices on the device (the slot form, model/moe.cpp) instead of reading them back for a
    // store every MoE layer. A store when a flag asks for one, when the device holds no layer
    // (the expert cache is then its only use), or when the layers do not fit.
    const bool experts_not_stored =
        !bare.any_store() && (shard || split_ranks() > 1 ||
                              (ngl > 0 && device_layers_fit(m, ngl, *rd->backends, flags.overrides, so)));
    runtime::ExpertFlags store_flags = bare;
    if (!experts_not_stored) store_flags.device = flags.device;
    // CUDA graphs (so.graphs): the store loads its misses on the step's thread, where a capture
    // can pause for them (Session::forward keeps graphs off for a store with an I/O thread).
    if (so.graphs) store_flags.sync_io = true;
    rd->experts = runtime::ExpertRuntime::create(m.file(), model::expert_tensor_names(hp), store_flags, int(hp.n_layer - hp.n_layer_dense_lead),
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
    so.shard_experts = shard;
    so.overrides = flags.overrides;
    return rd;
}

}  // namespace kinfer::cli
