// The expert store: the only way the MoE layer reaches routed expert weights (DESIGN.md 3.4, 5).
// The unit is one expert of one layer (its gate, up and down slices). Tiers, slowest first:
//   file    the GGUF, through the mapping (zero-copy) or pread / O_DIRECT (ExpertReader)
//   host    a RAM cache with a byte budget (--expert-cache-ram); always on with pread / direct.
//           With a device tier its buffers are the device's pinned host memory
//           (Device::alloc_pinned), so host -> device copies run at full speed and overlap
//   device  a slot pool on a Device (--expert-cache / --device sim:SIZE[,GBps])
// With no budget and no device the store is a view of the mapping: acquire() is pointer
// arithmetic, no lock, no copy (count_faults, for the report, adds a mincore call and a lock).
//
// Per layer the forward pass calls route() with the router's choices as soon as they are known:
// the store counts them (profile, policy), and sends the misses at once to its I/O thread (file ->
// host) and to the device's copy engine (host -> device) while the hits compute. Then for each
// expert: acquire(), compute, release(). acquire() waits on the host only for file reads (an
// expert still on its way from disk); a device copy still in flight is handed back as its copy
// ticket (ExpertRef::ready), which the device backend's compute stream waits for
// (Backend::wait(Event{ready}): cudaStreamWaitEvent on a GPU), so the host thread goes on to
// queue the next expert's work. The waiting is "stall" time, reported through add_stall(). An expert in flight is never requested twice: concurrent acquires of one
// expert wait for the single load. Errors (short read, I/O error) name layer, expert and offset;
// the failed request throws kinfer::Error and the store stays usable.
#pragma once
#include "gguf/reader.h"
#include "runtime/device.h"
#include "runtime/expert_io.h"
#include "runtime/expert_layout.h"
#include "runtime/expert_placement.h"
#include "runtime/expert_policy.h"
#include "runtime/expert_profile.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kinfer::runtime {

struct ExpertStoreOptions {
    ExpertIo io = ExpertIo::mmap;
    size_t ram_budget = 0;          // host cache bytes; 0 = none (pread/direct use one expert's worth)
    Device* device = nullptr;       // device tier (not owned); nullptr = none
    size_t device_budget = 0;       // slot pool bytes on the device; 0 = all of device->capacity()
    PolicyKind policy = PolicyKind::lfu_decay;
    double half_life = 32;          // LFU decay half-life, tokens
    const ExpertProfile* seed = nullptr;   // residency seed (hottest experts stay resident)
    double seed_fraction = 0.5;     // share of each budget given to the seed; the rest is adaptive
    PlacementRules placement;       // --cpu-moe, --n-cpu-moe, -ot
    bool record = false;            // count routing into profile() (--expert-profile)
    bool async = true;              // misses go to the I/O thread at route(); false: at acquire()
    // Cost model for a device miss: copy it (bytes / device->copy_gbps(), or staged_copy_gbps()
    // when it comes from the mapping: no host tier) when that is cheaper
    // than computing it where it is (bytes / cpu_gbps per token routed to it, times reuse, the
    // uses a copied expert is expected to serve). cpu_gbps = 0: always copy.
    double cpu_gbps = 0;
    double reuse = 4;
    // Count the bytes of experts served from the mapping that were not in RAM (mincore at each
    // acquire from it and each device copy from it; --verbose-experts sets it). Off by default:
    // only the report reads the count.
    bool count_faults = false;
};

// Where an acquired expert's bytes are.
enum class Tier : uint8_t { mapped, host, device };
const char* tier_name(Tier t);

struct ExpertRef {
    int layer = -1, expert = -1;
    Tier tier = Tier::mapped;
    const uint8_t* part[3] = {nullptr, nullptr, nullptr};   // gate, up, down slices
    // Device tier: the copy ticket the compute stream must wait for before reading part[]
    // (backend::Event{ready}); 0 when the bytes are already there.
    uint64_t ready = 0;
};

struct ExpertLayerStats {
    uint64_t uses = 0;            // (layer, expert) selections, counted once per route() call
    uint64_t hits = 0;            // already in (or on its way to) the expert's fastest tier
    uint64_t host_hits = 0;       // device layers: missed the device but were in host RAM
    uint64_t cpu_computed = 0;    // device misses the cost model left on the CPU
    uint64_t bytes_read = 0;      // file -> host
    uint64_t bytes_copied = 0;    // host -> device
    // count_faults: the mapping's bytes behind acquires served from it (Tier::mapped) and
    // device copies made from it, on pages that were not resident then: read from disk by the
    // page faults that follow. mapped_uses / mapped_resident: those acquires, and the ones whose
    // pages were all resident.
    uint64_t bytes_faulted = 0;
    uint64_t mapped_uses = 0, mapped_resident = 0;
    uint64_t stall_ns = 0;        // waiting for bytes: file reads in acquire(), device copies (add_stall)
    uint64_t prefetched = 0, prefetch_used = 0;
};

struct ExpertStoreStats {
    uint64_t tokens = 0;
    std::vector<ExpertLayerStats> layers;
    ExpertLayerStats total() const;
};

class ExpertStore {
public:
    // names: the routed expert tensors of each layer (model::expert_tensor_names).
    ExpertStore(const gguf::File& f, const ExpertTensorNames& names, ExpertStoreOptions opt);
    ~ExpertStore();
    ExpertStore(const ExpertStore&) = delete;
    ExpertStore& operator=(const ExpertStore&) = delete;

    const ExpertLayout& layout() const { return lay_; }
    bool zero_copy() const { return !host_on_ && !dev_on_; }
    const ExpertStoreOptions& options() const { return opt_; }

    // The router's selections for n tokens of `layer` (sel: n * k ids). Counts, updates the
    // policies and starts fetching the misses.
    void route(int layer, std::span<const int32_t> sel, int64_t n_tokens);
    // Speculative: fetch these experts of `layer` if there is room, without counting a use.
    void prefetch(int layer, std::span<const int32_t> experts);

    // The bytes of expert e of layer; n_tokens (how many rows it will multiply) feeds the cost
    // model. Blocks while the expert is being read from the file; a device copy in flight comes
    // back as r.ready instead (see above). Must be paired with release().
    ExpertRef acquire(int layer, int expert, int64_t n_tokens = 1);
    void release(const ExpertRef& r);
    // Host-side wait for r.ready (tests, host code reading a device slot), counted as stall.
    void wait(const ExpertRef& r);
    // Time the compute stream spent waiting for an expert's copy (the forward pass measures it
    // around Backend::wait).
    void add_stall(int layer, uint64_t ns);

    ExpertStoreStats stats() const;
    const ExpertProfile& profile() const { return profile_; }   // read it once routing has stopped
    ExpertReader& reader() { return *reader_; }
    // The --verbose-experts report: per-layer hit rate, bytes moved per token (read, copied,
    // faulted from the mapping), the share of mapped uses found in RAM, stall time, and the
    // hottest experts (by this run's routing counts).
    std::string report(int top_n = 10) const;

private:
    enum class St : uint8_t { absent, loading, ready };
    struct Entry {
        uint8_t* ram = nullptr;
        St ram_st = St::absent;
        int ram_pins = 0;          // acquires + device copies reading it + the I/O thread
        bool ram_seeded = false;
        int slot = -1;             // device slot
        St dev_st = St::absent;
        uint64_t ticket = 0;
        bool copy_pins_ram = false;
        int dev_pins = 0;
        bool dev_fixed = false;    // seeded or statically placed: never evicted
        bool prefetched = false;
    };
    struct Job {
        int layer;
        std::vector<int> experts;
        std::vector<bool> then_copy;
    };

    uint32_t key(int l, int e) const { return uint32_t(l) * uint32_t(lay_.n_expert) + uint32_t(e); }
    Entry& ent(int l, int e) { return entries_[key(l, e)]; }
    bool dev_layer(int l) const { return dev_on_ && placement_[size_t(l)] != Placement::cpu; }
    bool cached_layer(int l) const { return host_on_ || dev_layer(l); }   // a hit rate means something
    // Bytes of expert (l, e)'s slices in the mapping on pages not in RAM now (no lock needed).
    uint64_t mapped_missing(int l, int e) const;
    void count_mapped_use(int l, int e);   // count_faults: one acquire served from the mapping; takes mu_

    // All below run with mu_ held (the unique_lock is passed where they may wait).
    uint8_t* host_alloc(size_t bytes, bool may_wait, std::unique_lock<std::mutex>& lk);
    uint8_t* host_new(size_t bytes);              // pinned when there is a device tier
    void host_delete(uint8_t* p, size_t bytes);
    void host_free(uint8_t* p, size_t bytes);
    bool evict_host_one();
    int dev_slot(bool may_wait, std::unique_lock<std::mutex>& lk);
    bool evict_dev_one();
    void finish_copy(int l, int e);
    void start_copy(int l, int e, const uint8_t* src);
    const uint8_t* host_bytes(int l, int e) const;     // ready host copy or mapping; nullptr if neither
    bool copy_pays(int l, int64_t n_tokens) const;
    void load_host_sync(int l, int e, std::unique_lock<std::mutex>& lk);   // throws on read failure
    void issue(int layer, const std::vector<int>& experts, bool speculative, std::unique_lock<std::mutex>& lk);
    void seed(std::unique_lock<std::mutex>& lk);
    void io_loop();

    const gguf::File& f_;
    ExpertStoreOptions opt_;
    ExpertLayout lay_;
    std::unique_ptr<ExpertReader> reader_;
    std::vector<Placement> placement_;
    bool host_on_ = false, dev_on_ = false;
    bool faults_visible_ = true;   // mincore tells this process the file's page cache (page_residency.h)
    std::optional<uint64_t> storage_read0_;   // the process's storage reads when the store opened
    int first_moe_layer_ = -1;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Entry> entries_;
    ExpertProfile profile_;        // this run's routing counts
    ExpertStoreStats stats_;

    // Host tier: byte budget, buffers recycled by size (layers of one model share 1-3 sizes).
    size_t ram_budget_ = 0, ram_allocated_ = 0;
    std::unordered_map<size_t, std::vector<uint8_t*>> ram_free_;
    std::unique_ptr<EvictionPolicy> ram_policy_;
    int ram_loading_ = 0;

    // Device tier: fixed-size slots carved from the device at start.
    size_t slot_bytes_ = 0;
    std::vector<DeviceBuffer> slots_;
    std::vector<int> free_slots_;
    std::vector<uint32_t> slot_owner_;
    std::unique_ptr<EvictionPolicy> dev_policy_;
    int dev_copying_ = 0;

    std::deque<Job> jobs_;
    bool stop_ = false;
    std::thread io_;
};

}  // namespace kinfer::runtime
