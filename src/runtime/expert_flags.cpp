#include "runtime/expert_flags.h"

#include "common/error.h"

#include <cstdio>
#include <filesystem>

namespace kinfer::runtime {

namespace {
// A budget as a size, or as "N%" of all routed experts' bytes (what the benchmarks sweep).
size_t budget_of(const std::string& s, size_t total) {
    if (!s.empty() && s.back() == '%') {
        double pct = 0;
        try {
            pct = std::stod(s.substr(0, s.size() - 1));
        } catch (...) {
            fail("'{}' is not a percentage", s);
        }
        if (!(pct >= 0 && pct <= 100)) fail("'{}': a percentage between 0 and 100", s);
        return size_t(double(total) * pct / 100.0);
    }
    return parse_bytes(s);
}
}  // namespace

bool ExpertFlags::any() const { return any_store() || !routing_record.empty() || !routing_replay.empty(); }

bool ExpertFlags::any_store() const {
    return !ram_cache.empty() || !dev_cache.empty() || !device.empty() || io != "mmap" || !profile.empty() || cpu_moe ||
           n_cpu_moe > 0 || !overrides.empty() || prefetch_next || verbose;
}

std::unique_ptr<ExpertRuntime> ExpertRuntime::create(const gguf::File& f, const ExpertTensorNames& names, const ExpertFlags& fl,
                                                     int moe_layers, int n_expert, int n_used, Device* device) {
    if (!fl.any()) return nullptr;
    auto rt = std::unique_ptr<ExpertRuntime>(new ExpertRuntime());
    rt->flags_ = fl;
    if (!fl.routing_replay.empty()) {
        rt->replay_ = std::make_unique<RoutingTrace>(RoutingTrace::load(fl.routing_replay));
        rt->replay_->check_replay(moe_layers, n_expert, n_used);
    }
    if (!fl.routing_record.empty()) {
        if (moe_layers <= 0) fail("--routing-record: the model has no MoE layer");
        rt->record_ = std::make_unique<RoutingTrace>(moe_layers, n_expert, n_used);
    }
    if (!fl.any_store()) return rt;
    ExpertStoreOptions o;
    o.io = parse_expert_io(fl.io);
    o.policy = parse_policy(fl.policy);
    o.half_life = fl.half_life;
    o.seed_fraction = fl.seed_fraction;
    o.record = !fl.profile.empty() || fl.verbose;
    o.count_faults = fl.verbose;   // the report is the only reader of the faulted bytes
    o.async = !fl.sync_io;
    o.cpu_gbps = fl.cpu_gbps;
    const size_t total = ExpertLayout::from_file(f, names).total_bytes();
    if (!fl.ram_cache.empty()) o.ram_budget = budget_of(fl.ram_cache, total);
    if (device) {
        rt->device_ = device;
        o.device = device;
        // Layers placed on the device need room there too: by default the cache takes half of it.
        // Without -ngl it keeps an eighth for the scratch of the experts it runs.
        if (fl.dev_cache.empty()) o.device_budget = fl.n_gpu_layers > 0 ? device->capacity() / 2 : device->capacity() / 8 * 7;
    } else if (!fl.dev_cache.empty()) {
        fail("--expert-cache needs a device (--device cudaN, or the simulated sim:SIZE[,GBps])");
    }   // without a device, --cpu-moe / --n-cpu-moe are accepted and moot: all is on the CPU
    if (!fl.dev_cache.empty()) o.device_budget = budget_of(fl.dev_cache, total);
    o.placement.cpu_moe = fl.cpu_moe;
    o.placement.n_cpu_moe = fl.n_cpu_moe;
    for (const auto& s : fl.overrides) o.placement.add_override(s);
    if (!fl.profile.empty() && std::filesystem::exists(fl.profile)) {
        rt->seed_ = std::make_unique<ExpertProfile>(ExpertProfile::load(fl.profile));
        o.seed = rt->seed_.get();
    }
    rt->store_ = std::make_unique<ExpertStore>(f, names, o);
    return rt;
}

ExpertRuntime::~ExpertRuntime() = default;

void ExpertRuntime::finish() {
    if (finished_) return;
    finished_ = true;
    if (record_) record_->save(flags_.routing_record);
    if (!store_) return;
    if (flags_.verbose) std::fputs(store_->report().c_str(), stderr);
    if (!flags_.profile.empty()) {
        ExpertProfile p = store_->profile();
        if (seed_) p.merge(*seed_);
        p.save(flags_.profile);
    }
}

}  // namespace kinfer::runtime
