#include "runtime/expert_store.h"

#include "common/error.h"
#include "runtime/page_residency.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace kinfer::runtime {

namespace {
using Clock = std::chrono::steady_clock;
uint64_t ns_since(Clock::time_point t0) {
    return uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}
// Host buffers are page aligned: O_DIRECT-friendly, and what a pinned-memory allocator returns.
size_t host_alloc_size(size_t b) { return (b + 4095) & ~size_t(4095); }
}  // namespace

const char* tier_name(Tier t) { return t == Tier::mapped ? "mapped" : t == Tier::host ? "host" : "device"; }

ExpertLayerStats ExpertStoreStats::total() const {
    ExpertLayerStats s;
    for (const auto& l : layers) {
        s.uses += l.uses, s.hits += l.hits, s.host_hits += l.host_hits, s.cpu_computed += l.cpu_computed;
        s.bytes_read += l.bytes_read, s.bytes_copied += l.bytes_copied, s.stall_ns += l.stall_ns;
        s.bytes_faulted += l.bytes_faulted, s.mapped_uses += l.mapped_uses, s.mapped_resident += l.mapped_resident;
        s.prefetched += l.prefetched, s.prefetch_used += l.prefetch_used;
    }
    return s;
}

ExpertStore::ExpertStore(const gguf::File& f, const ExpertTensorNames& names, ExpertStoreOptions opt)
    : f_(f), opt_(std::move(opt)), lay_(ExpertLayout::from_file(f, names)) {
    const int n_layer = lay_.n_layer;
    reader_ = std::make_unique<ExpertReader>(f_, lay_, opt_.io);
    ExpertTensorNames present(static_cast<size_t>(n_layer));   // the layers the file has experts for
    for (int l = 0; l < n_layer; ++l) {
        if (!lay_.layers[size_t(l)].present()) continue;
        present[size_t(l)] = names[size_t(l)];
        if (first_moe_layer_ < 0) first_moe_layer_ = l;
    }
    placement_ = resolve_placement(opt_.placement, present, opt_.device ? opt_.device->name() : "");
    const bool any = lay_.n_expert > 0;
    host_on_ = any && (opt_.io != ExpertIo::mmap || opt_.ram_budget > 0);
    dev_on_ = any && opt_.device != nullptr;
    faults_visible_ = residency_visible(f_.path());
    storage_read0_ = storage_read_bytes();
    entries_.resize(size_t(n_layer) * size_t(std::max(lay_.n_expert, 1)));
    profile_ = ExpertProfile(n_layer, std::max(lay_.n_expert, 1));
    stats_.layers.resize(size_t(n_layer));
    if (opt_.seed && (opt_.seed->n_layer != n_layer || opt_.seed->n_expert != lay_.n_expert))
        fail("expert profile has {} layers x {} experts, the model {} x {}", opt_.seed->n_layer, opt_.seed->n_expert,
             n_layer, lay_.n_expert);

    if (host_on_) {
        // pread / direct need somewhere to put at least one expert.
        ram_budget_ = std::max(opt_.ram_budget, lay_.max_expert_bytes());
        ram_policy_ = make_policy(opt_.policy, opt_.half_life);
    }
    if (dev_on_) {
        // The cost model's copy rate, measured now (a device measures it with a copy of its own,
        // waiting for the GPU): at the first miss it would run under the store's lock, mid-step.
        if (opt_.cpu_gbps > 0) (void)(host_on_ ? opt_.device->copy_gbps() : opt_.device->staged_copy_gbps());
        slot_bytes_ = lay_.max_expert_bytes();
        size_t budget = opt_.device->capacity();
        if (opt_.device_budget > 0) budget = std::min(budget, opt_.device_budget);
        // Never more slots than experts: a device larger than the model's experts gets one slot
        // each, not its whole memory in slots (each slot is an allocation of the device tier).
        const size_t n = std::min(budget / slot_bytes_, size_t(lay_.n_moe_layers()) * size_t(lay_.n_expert));
        for (size_t i = 0; i < n; ++i) {
            DeviceBuffer b = opt_.device->alloc(slot_bytes_);
            if (!b.valid()) break;   // alignment padding ate the last slot
            slots_.push_back(b);
        }
        if (slots_.empty())
            fail("expert store: device {} ({}) cannot hold one expert ({})", opt_.device->name(),
                 format_bytes(double(budget)), format_bytes(double(slot_bytes_)));
        for (int i = int(slots_.size()) - 1; i >= 0; --i) free_slots_.push_back(i);
        dev_policy_ = make_policy(opt_.policy, opt_.half_life);
    }
    std::unique_lock lk(mu_);
    seed(lk);
    lk.unlock();
    if ((host_on_ || dev_on_) && opt_.async) io_ = std::thread([this] { io_loop(); });
}

ExpertStore::~ExpertStore() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (io_.joinable()) io_.join();
    // Copies read host buffers: let them land before the buffers go. Not throwing from here: a
    // device whose context is lost fails every call (its error was reported when it happened).
    if (dev_on_) {
        try {
            for (const auto& x : entries_)
                if (x.dev_st == St::loading) opt_.device->wait(x.ticket);
            for (const auto& b : slots_) opt_.device->free(b);
        } catch (const std::exception& e) {
            std::fprintf(stderr, "kinfer: the expert store's device: %s\n", e.what());
        }
    }
    for (size_t k = 0; k < entries_.size(); ++k)
        if (entries_[k].ram) host_delete(entries_[k].ram, lay_.layers[k / size_t(lay_.n_expert)].bytes);
    for (auto& [sz, v] : ram_free_)
        for (uint8_t* p : v) host_delete(p, sz);
}

// ---- host tier ---------------------------------------------------------------------------

// A device copies from pinned memory without staging it: the host tier feeding one is pinned.
uint8_t* ExpertStore::host_new(size_t bytes) {
    if (dev_on_) return opt_.device->alloc_pinned(host_alloc_size(bytes));
    return static_cast<uint8_t*>(std::aligned_alloc(4096, host_alloc_size(bytes)));
}

void ExpertStore::host_delete(uint8_t* p, size_t bytes) {
    if (dev_on_) opt_.device->free_pinned(p, host_alloc_size(bytes));
    else std::free(p);
}

uint8_t* ExpertStore::host_alloc(size_t bytes, bool may_wait, std::unique_lock<std::mutex>& lk) {
    for (;;) {
        auto& fl = ram_free_[bytes];
        if (!fl.empty()) {
            uint8_t* p = fl.back();
            fl.pop_back();
            return p;
        }
        if (ram_allocated_ + bytes <= ram_budget_) {
            uint8_t* p = host_new(bytes);
            if (!p) fail("expert store: out of memory allocating {} for an expert", format_bytes(double(bytes)));
            ram_allocated_ += bytes;
            return p;
        }
        bool freed = false;   // a recycled buffer of another size makes room
        for (auto& [sz, v] : ram_free_)
            if (sz != bytes && !v.empty()) {
                host_delete(v.back(), sz);
                v.pop_back();
                ram_allocated_ -= sz;
                freed = true;
                break;
            }
        if (freed || evict_host_one()) continue;
        if (!may_wait) return nullptr;
        if (ram_loading_ > 0) {   // the I/O thread holds buffers; they free up when it is done
            cv_.wait(lk);
            continue;
        }
        if (dev_copying_ > 0) {   // device copies hold host buffers until they land
            uint64_t t = 0;
            for (const auto& x : entries_)
                if (x.dev_st == St::loading && x.copy_pins_ram) t = std::max(t, x.ticket);
            if (t > 0) {
                lk.unlock();
                opt_.device->wait(t);
                lk.lock();
                for (int l = 0; l < lay_.n_layer; ++l)
                    for (int e = 0; e < lay_.n_expert; ++e) finish_copy(l, e);
                continue;
            }
        }
        return nullptr;   // everything left is pinned by acquires
    }
}

void ExpertStore::host_free(uint8_t* p, size_t bytes) { ram_free_[bytes].push_back(p); }

bool ExpertStore::evict_host_one() {
    const int64_t v = ram_policy_->victim([&](uint32_t k) {
        const Entry& x = entries_[k];
        return x.ram_st == St::ready && x.ram_pins == 0 && !x.ram_seeded;
    });
    if (v < 0) return false;
    Entry& x = entries_[size_t(v)];
    const int l = int(v / lay_.n_expert);
    host_free(x.ram, lay_.layers[size_t(l)].bytes);
    x.ram = nullptr;
    x.ram_st = St::absent;
    ram_policy_->erase(uint32_t(v));
    return true;
}

const uint8_t* ExpertStore::host_bytes(int l, int e) const {
    const Entry& x = entries_[key(l, e)];
    if (host_on_) return x.ram_st == St::ready ? x.ram : nullptr;
    return nullptr;   // the mapping: start_copy copies the three slices from it
}

void ExpertStore::load_host_sync(int l, int e, std::unique_lock<std::mutex>& lk) {
    Entry& x = ent(l, e);
    const ExpertLayer& L = lay_.layers[size_t(l)];
    for (;;) {
        if (x.ram_st == St::ready) return;
        if (x.ram_st == St::loading) {   // someone is reading it: wait for that one read
            cv_.wait(lk);
            continue;
        }
        uint8_t* buf = host_alloc(L.bytes, true, lk);
        if (x.ram_st != St::absent) {   // it arrived while we waited for room
            if (buf) host_free(buf, L.bytes);
            continue;
        }
        if (!buf) {
            if (opt_.io == ExpertIo::mmap) return;   // caller computes from the mapping
            fail("expert store: layer {} expert {}: the host budget ({}) is held by experts in use", l, e,
                 format_bytes(double(ram_budget_)));
        }
        x.ram = buf;
        x.ram_st = St::loading;
        ++x.ram_pins;
        ++ram_loading_;
        ram_policy_->insert(key(l, e));
        lk.unlock();
        try {
            reader_->read(l, {{e, buf}});
        } catch (...) {
            lk.lock();
            x.ram = nullptr;
            x.ram_st = St::absent;
            --x.ram_pins;
            --ram_loading_;
            ram_policy_->erase(key(l, e));
            host_free(buf, L.bytes);
            cv_.notify_all();
            throw;
        }
        lk.lock();
        x.ram_st = St::ready;
        --x.ram_pins;
        --ram_loading_;
        stats_.layers[size_t(l)].bytes_read += L.payload();
        cv_.notify_all();
        return;
    }
}

// ---- device tier -------------------------------------------------------------------------

int ExpertStore::dev_slot(bool may_wait, std::unique_lock<std::mutex>& lk) {
    for (;;) {
        if (!free_slots_.empty()) {
            const int s = free_slots_.back();
            free_slots_.pop_back();
            return s;
        }
        if (evict_dev_one()) continue;
        if (!may_wait || dev_copying_ == 0) return -1;
        // Every slot is busy with a copy: wait for the oldest to land.
        uint64_t t = UINT64_MAX;
        for (const auto& x : entries_)
            if (x.dev_st == St::loading) t = std::min(t, x.ticket);
        lk.unlock();
        opt_.device->wait(t);
        lk.lock();
    }
}

void ExpertStore::finish_copy(int l, int e) {
    Entry& x = ent(l, e);
    if (x.dev_st != St::loading || !opt_.device->done(x.ticket)) return;
    x.dev_st = St::ready;
    --dev_copying_;
    if (x.copy_pins_ram) {
        x.copy_pins_ram = false;
        --x.ram_pins;
        cv_.notify_all();
    }
}

bool ExpertStore::evict_dev_one() {
    const int64_t v = dev_policy_->victim([&](uint32_t k) {
        finish_copy(int(k / uint32_t(lay_.n_expert)), int(k % uint32_t(lay_.n_expert)));
        const Entry& x = entries_[k];
        return x.dev_st == St::ready && x.dev_pins == 0 && !x.dev_fixed;
    });
    if (v < 0) return false;
    Entry& x = entries_[size_t(v)];
    free_slots_.push_back(x.slot);
    x.slot = -1;
    x.dev_st = St::absent;
    dev_policy_->erase(uint32_t(v));
    return true;
}

// Queues expert (l, e) into its slot (already assigned to x.slot) from a host buffer, or from
// the mapping's three slices when src is nullptr.
void ExpertStore::start_copy(int l, int e, const uint8_t* src) {
    Entry& x = ent(l, e);
    const ExpertLayer& L = lay_.layers[size_t(l)];
    const DeviceBuffer& b = slots_[size_t(x.slot)];
    if (src) {
        x.ticket = opt_.device->copy_async(b, 0, src, L.bytes);
        if (src == x.ram) {
            ++x.ram_pins;
            x.copy_pins_ram = true;
        }
    } else {
        // The copy reads the mapping: what is not in RAM comes from disk on the way.
        if (opt_.count_faults) stats_.layers[size_t(l)].bytes_faulted += mapped_missing(l, e);
        for (int p = 0; p < 3; ++p) x.ticket = opt_.device->copy_async(b, L.buf_off[p], lay_.mapped(l, p, e), L.slice[p]);
    }
    x.dev_st = St::loading;
    ++dev_copying_;
    stats_.layers[size_t(l)].bytes_copied += L.payload();
    dev_policy_->insert(key(l, e));
}

bool ExpertStore::copy_pays(int l, int64_t n_tokens) const {
    if (opt_.cpu_gbps <= 0) return true;
    const double bytes = double(lay_.layers[size_t(l)].payload());
    // A miss copies from the host tier (pinned) when there is one, else from the mapping (staged).
    const double gbps = host_on_ ? opt_.device->copy_gbps() : opt_.device->staged_copy_gbps();
    const double copy_s = bytes / (gbps * 1e9);
    const double cpu_s = bytes / (opt_.cpu_gbps * 1e9) * double(std::max<int64_t>(n_tokens, 1));
    return copy_s <= cpu_s * opt_.reuse;
}

// ---- seeding and static placement --------------------------------------------------------

void ExpertStore::seed(std::unique_lock<std::mutex>& lk) {
    const int E = lay_.n_expert;
    auto bytes_host = [&](uint32_t k) { return lay_.layers[k / uint32_t(E)].bytes; };
    // Static device placement: every expert of those layers, resident for the whole run.
    std::vector<uint32_t> dev_keys;
    if (dev_on_)
        for (int l = 0; l < lay_.n_layer; ++l)
            if (placement_[size_t(l)] == Placement::device)
                for (int e = 0; e < E; ++e) dev_keys.push_back(key(l, e));
    if (dev_keys.size() > slots_.size())
        fail("expert store: the layers placed on {} need {} expert slots, it has {} ({} each)", opt_.device->name(),
             dev_keys.size(), slots_.size(), format_bytes(double(slot_bytes_)));
    const size_t static_keys = dev_keys.size();
    std::vector<uint32_t> host_keys;
    if (opt_.seed) {
        std::vector<uint64_t> counts = opt_.seed->counts;
        for (int l = 0; l < lay_.n_layer; ++l)   // a profile may count layers this model routes differently
            if (!lay_.layers[size_t(l)].present())
                for (int e = 0; e < E; ++e) counts[key(l, e)] = 0;
        if (host_on_) host_keys = seed_from_profile(counts, size_t(double(ram_budget_) * opt_.seed_fraction), bytes_host);
        if (dev_on_) {
            for (int l = 0; l < lay_.n_layer; ++l)   // only cached layers take part
                if (placement_[size_t(l)] != Placement::cached)
                    for (int e = 0; e < E; ++e) counts[key(l, e)] = 0;
            const size_t room = size_t(double(slots_.size() - static_keys) * opt_.seed_fraction) * slot_bytes_;
            auto d = seed_from_profile(counts, room, [&](uint32_t) { return slot_bytes_; });
            dev_keys.insert(dev_keys.end(), d.begin(), d.end());
        }
    }
    for (uint32_t k : host_keys) {
        const int l = int(k / uint32_t(E)), e = int(k % uint32_t(E));
        load_host_sync(l, e, lk);
        Entry& x = entries_[k];
        if (x.ram_st == St::ready) x.ram_seeded = true;
    }
    // One pinned staging buffer for the seeded experts' reads (freed however this ends).
    struct Staging {
        ExpertStore* s;
        uint8_t* p = nullptr;
        size_t bytes = 0;
        ~Staging() {
            if (p) s->host_delete(p, bytes);
        }
    } staging{this};
    for (uint32_t k : dev_keys) {
        const int l = int(k / uint32_t(E)), e = int(k % uint32_t(E));
        Entry& x = entries_[k];
        x.slot = dev_slot(false, lk);
        if (x.slot < 0) break;
        x.dev_fixed = true;
        const uint8_t* src = nullptr;
        if (host_on_) {   // through a staging buffer: the host budget is for the cache proper
            if (x.ram_st == St::ready) {
                src = x.ram;
            } else {
                if (!staging.p) {
                    staging.bytes = lay_.max_expert_bytes();
                    staging.p = host_new(staging.bytes);
                    if (!staging.p) fail("expert store: out of memory for a {} staging buffer", format_bytes(double(staging.bytes)));
                }
                reader_->read(l, {{e, staging.p}});
                src = staging.p;
            }
        }
        const uint64_t faulted = stats_.layers[size_t(l)].bytes_faulted;
        start_copy(l, e, src);
        stats_.layers[size_t(l)].bytes_copied -= lay_.layers[size_t(l)].payload();   // set-up, not traffic
        stats_.layers[size_t(l)].bytes_faulted = faulted;
        opt_.device->wait(x.ticket);
        finish_copy(l, e);
    }
}

// ---- routing, prefetch, I/O thread -------------------------------------------------------

void ExpertStore::issue(int l, const std::vector<int>& experts, bool speculative, std::unique_lock<std::mutex>&) {
    if (!opt_.async) return;
    Job job{l, {}, {}};
    const ExpertLayer& L = lay_.layers[size_t(l)];
    for (int e : experts) {
        Entry& x = ent(l, e);
        bool sent = false;
        const bool want_dev = dev_layer(l) && x.dev_st == St::absent && copy_pays(l, 1);
        const bool need_host = host_on_ && x.ram_st == St::absent;
        if (want_dev && !need_host && (x.ram_st == St::ready || !host_on_)) {
            std::unique_lock<std::mutex> dummy;
            const int s = dev_slot(false, dummy);
            if (s >= 0) {
                x.slot = s;
                start_copy(l, e, host_bytes(l, e));
                sent = true;
            }
        }
        if (need_host) {
            std::unique_lock<std::mutex> dummy;
            uint8_t* buf = host_alloc(L.bytes, false, dummy);
            if (buf) {
                x.ram = buf;
                x.ram_st = St::loading;
                ++x.ram_pins;
                ++ram_loading_;
                ram_policy_->insert(key(l, e));
                job.experts.push_back(e);
                job.then_copy.push_back(want_dev);
                sent = true;
            }
        }
        if (speculative && sent) {
            x.prefetched = true;
            ++stats_.layers[size_t(l)].prefetched;
        }
    }
    if (!job.experts.empty()) {
        jobs_.push_back(std::move(job));
        cv_.notify_all();
    }
}

void ExpertStore::io_loop() {
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
        if (stop_) {
            // Undo queued jobs so the destructor sees a consistent state.
            for (const Job& j : jobs_)
                for (int e : j.experts) {
                    Entry& x = ent(j.layer, e);
                    x.ram_st = St::absent;
                    --x.ram_pins;
                    --ram_loading_;
                }
            jobs_.clear();
            return;
        }
        Job job = std::move(jobs_.front());
        jobs_.pop_front();
        std::vector<ExpertReader::Job> rj;
        for (int e : job.experts) rj.push_back({e, ent(job.layer, e).ram});
        lk.unlock();
        bool ok = true;
        try {
            reader_->read(job.layer, rj);
        } catch (const Error&) {
            ok = false;   // a later acquire() re-reads it and reports the error to its caller
        }
        lk.lock();
        const ExpertLayer& L = lay_.layers[size_t(job.layer)];
        for (size_t i = 0; i < job.experts.size(); ++i) {
            const int e = job.experts[i];
            Entry& x = ent(job.layer, e);
            --x.ram_pins;
            --ram_loading_;
            if (!ok) {
                host_free(x.ram, L.bytes);
                x.ram = nullptr;
                x.ram_st = St::absent;
                ram_policy_->erase(key(job.layer, e));
                continue;
            }
            x.ram_st = St::ready;
            stats_.layers[size_t(job.layer)].bytes_read += L.payload();
            if (job.then_copy[i] && x.dev_st == St::absent) {
                const int s = dev_slot(false, lk);
                if (s >= 0) {
                    x.slot = s;
                    start_copy(job.layer, e, x.ram);
                }
            }
        }
        cv_.notify_all();
    }
}

void ExpertStore::route(int l, std::span<const int32_t> sel, int64_t n_tokens) {
    if (zero_copy() && !opt_.record) return;
    std::unique_lock lk(mu_);
    if (l == first_moe_layer_) stats_.tokens += uint64_t(n_tokens);
    for (int32_t e : sel) profile_.add(l, e);
    std::vector<int> uniq(sel.begin(), sel.end());
    std::sort(uniq.begin(), uniq.end());
    uniq.erase(std::unique(uniq.begin(), uniq.end()), uniq.end());
    ExpertLayerStats& st = stats_.layers[size_t(l)];
    if (zero_copy()) {   // the mapping is the only tier: count the uses for the report, fetch nothing
        st.uses += uniq.size();
        st.hits += uniq.size();   // as for any layer without a cache (the report shows no hit rate)
        return;
    }
    const double dt = double(n_tokens) / double(std::max(lay_.n_moe_layers(), 1));
    if (ram_policy_) ram_policy_->advance(dt);
    if (dev_policy_) dev_policy_->advance(dt);
    std::vector<int> misses;
    for (int e : uniq) {
        if (e < 0 || e >= lay_.n_expert) fail("expert store: layer {}: expert id {} out of range", l, e);
        Entry& x = ent(l, e);
        if (dev_on_) finish_copy(l, e);
        ++st.uses;
        bool hit;
        if (dev_layer(l)) {
            hit = x.dev_st != St::absent;
            if (!hit && host_on_ && x.ram_st != St::absent) ++st.host_hits;
            dev_policy_->access(key(l, e));
        } else {
            hit = !host_on_ || x.ram_st != St::absent;
        }
        if (host_on_) ram_policy_->access(key(l, e));
        if (x.prefetched && hit) ++st.prefetch_used;
        x.prefetched = false;
        if (hit) ++st.hits;
        else misses.push_back(e);
    }
    issue(l, misses, false, lk);
}

void ExpertStore::prefetch(int l, std::span<const int32_t> experts) {
    if (zero_copy()) return;
    std::unique_lock lk(mu_);
    std::vector<int> want;
    for (int32_t e : experts) {
        if (e < 0 || e >= lay_.n_expert) continue;
        const Entry& x = ent(l, e);
        const bool missing = dev_layer(l) ? x.dev_st == St::absent : (host_on_ && x.ram_st == St::absent);
        if (missing) want.push_back(e);
    }
    issue(l, want, true, lk);
}

// ---- acquire / release -------------------------------------------------------------------

ExpertRef ExpertStore::acquire(int l, int e, int64_t n_tokens) {
    ExpertRef r;
    r.layer = l;
    r.expert = e;
    if (zero_copy()) {   // the default: a view of the mapping, nothing else
        for (int p = 0; p < 3; ++p) r.part[p] = lay_.mapped(l, p, e);
        if (opt_.count_faults) count_mapped_use(l, e);
        return r;
    }
    const auto t0 = Clock::now();
    bool waited = false;
    std::unique_lock lk(mu_);
    Entry& x = ent(l, e);
    const ExpertLayer& L = lay_.layers[size_t(l)];
    ExpertLayerStats& st = stats_.layers[size_t(l)];
    if (dev_layer(l)) {
        finish_copy(l, e);
        if (x.dev_st == St::absent && copy_pays(l, n_tokens)) {
            if (host_on_ && x.ram_st != St::ready) {
                waited = true;
                load_host_sync(l, e, lk);
            }
            if (x.dev_st == St::absent) {
                const int s = dev_slot(true, lk);
                if (s >= 0) {
                    x.slot = s;
                    start_copy(l, e, host_bytes(l, e));
                }
            }
        }
        if (x.dev_st != St::absent) {   // ready, or a copy the compute stream waits for
            if (x.dev_st == St::loading) r.ready = x.ticket;
            ++x.dev_pins;
            r.tier = Tier::device;
            const uint8_t* base = opt_.device->data(slots_[size_t(x.slot)]);
            for (int p = 0; p < 3; ++p) r.part[p] = base + L.buf_off[p];
            if (waited) st.stall_ns += ns_since(t0);
            return r;
        }
        ++st.cpu_computed;   // the cost model (or a full slot pool) keeps it on the CPU
    }
    if (host_on_) {
        if (x.ram_st != St::ready) {
            waited = true;
            load_host_sync(l, e, lk);
        }
        if (x.ram_st == St::ready) {
            ++x.ram_pins;
            r.tier = Tier::host;
            for (int p = 0; p < 3; ++p) r.part[p] = x.ram + L.buf_off[p];
            if (waited) st.stall_ns += ns_since(t0);
            return r;
        }
    }
    r.tier = Tier::mapped;   // no host tier, or no room in it (mmap io): the mapping's bytes
    for (int p = 0; p < 3; ++p) r.part[p] = lay_.mapped(l, p, e);
    if (waited) st.stall_ns += ns_since(t0);
    if (opt_.count_faults) {
        lk.unlock();
        count_mapped_use(l, e);
    }
    return r;
}

uint64_t ExpertStore::mapped_missing(int l, int e) const {
    const ExpertLayer& L = lay_.layers[size_t(l)];
    uint64_t b = 0;
    for (int p = 0; p < 3; ++p) b += non_resident_bytes(lay_.mapped(l, p, e), L.slice[p]);
    return b;
}

// Asked at acquire, before the compute touches the bytes: what is missing now is what its page
// faults will read from disk. Only --verbose-experts pays for it. Measured (2-core VM, 4 KiB
// pages): 2-5 ns a page already in this process's page table, 50-150 ns one that is not (a page
// cache lookup). A Kimi-Linear-48B-shaped expert is ~1000 pages, ~200 experts a token: under
// 1 ms a token once the mapping is warm, and 10-30 ms cold, when the disk reads it counts take
// far longer.
void ExpertStore::count_mapped_use(int l, int e) {
    const uint64_t missing = mapped_missing(l, e);
    std::lock_guard lk(mu_);
    ExpertLayerStats& st = stats_.layers[size_t(l)];
    ++st.mapped_uses;
    if (missing == 0) ++st.mapped_resident;
    st.bytes_faulted += missing;
}

void ExpertStore::wait(const ExpertRef& r) {
    if (r.tier != Tier::device || r.ready == 0 || !dev_on_) return;
    const auto t0 = Clock::now();
    opt_.device->wait(r.ready);
    add_stall(r.layer, ns_since(t0));
}

void ExpertStore::add_stall(int layer, uint64_t ns) {
    if (layer < 0 || layer >= lay_.n_layer) return;
    std::lock_guard lk(mu_);
    stats_.layers[size_t(layer)].stall_ns += ns;
}

void ExpertStore::release(const ExpertRef& r) {
    if (r.tier == Tier::mapped) return;
    std::lock_guard lk(mu_);
    Entry& x = ent(r.layer, r.expert);
    if (r.tier == Tier::device) --x.dev_pins;
    else --x.ram_pins;
    cv_.notify_all();
}

// ---- reporting ---------------------------------------------------------------------------

ExpertStoreStats ExpertStore::stats() const {
    std::lock_guard lk(mu_);
    return stats_;
}

std::string ExpertStore::report(int top_n) const {
    const ExpertStoreStats s = stats();
    std::string out = fmt::format("expert store: io {}{}, host {}, device {}, policy {}{}\n", expert_io_name(opt_.io),
                                  opt_.io == ExpertIo::direct && !reader_->direct_active() ? " (O_DIRECT refused: buffered)" : "",
                                  host_on_ ? format_bytes(double(ram_budget_)) : "off",
                                  dev_on_ ? fmt::format("{} x {} slots on {}", slots_.size(), format_bytes(double(slot_bytes_)), opt_.device->name()) : "off",
                                  policy_name(opt_.policy), opt_.seed ? " (profile-seeded)" : "");
    // Faulted bytes are known only when counted and when mincore tells this process the truth.
    const bool faults = opt_.count_faults && faults_visible_;
    auto pct = [](uint64_t num, uint64_t den) { return den ? fmt::format("{:.1f}%", 100.0 * double(num) / double(den)) : std::string("-"); };
    auto mib = [&](uint64_t b) { return faults ? fmt::format("{:.2f}", double(b) / 1048576.0) : std::string("-"); };
    out += fmt::format("{:>6} {:>9} {:>7} {:>9} {:>7} {:>11} {:>11} {:>12} {:>8} {:>10} {:>9}\n", "layer", "uses", "hit%",
                       "host-hit", "cpu", "read MiB", "copied MiB", "faulted MiB", "in RAM%", "stall ms", "prefetch");
    uint64_t cached_uses = 0, cached_hits = 0;   // the hit rate of the layers that have a cache
    for (int l = 0; l < lay_.n_layer; ++l) {
        const auto& x = s.layers[size_t(l)];
        if (!lay_.layers[size_t(l)].present() || (x.uses == 0 && x.mapped_uses == 0 && x.bytes_faulted == 0)) continue;
        const bool cached = cached_layer(l);
        if (cached) cached_uses += x.uses, cached_hits += x.hits;
        out += fmt::format("{:>6} {:>9} {:>7} {:>9} {:>7} {:>11.2f} {:>11.2f} {:>12} {:>8} {:>10.2f} {:>4}/{:<4}\n", l,
                           x.uses, cached ? pct(x.hits, x.uses) : "-", x.host_hits, x.cpu_computed,
                           double(x.bytes_read) / 1048576.0, double(x.bytes_copied) / 1048576.0, mib(x.bytes_faulted),
                           faults ? pct(x.mapped_resident, x.mapped_uses) : "-", double(x.stall_ns) / 1e6,
                           x.prefetch_used, x.prefetched);
    }
    const auto t = s.total();
    const double tok = double(std::max<uint64_t>(s.tokens, 1));
    // A use served from the mapping is no cache hit or miss: it says whether its pages were in
    // RAM, and what was not is counted as moved (faulted), as bytes read into a cache are.
    const std::string hit = cached_uses ? "hit rate " + pct(cached_hits, cached_uses) : "hit rate - (no cache)";
    const std::string in_ram = !opt_.count_faults ? "mapped uses in RAM not counted"
                               : !faults_visible_ ? "mapped uses in RAM unknown"
                                                  : fmt::format("mapped uses in RAM {} ({} of {})", pct(t.mapped_resident, t.mapped_uses),
                                                                t.mapped_resident, t.mapped_uses);
    const std::string faulted = !opt_.count_faults ? "faulted from the mapping not counted"
                                : !faults_visible_ ? "faulted from the mapping unknown"
                                                   : "faulted from the mapping " + format_bytes(double(t.bytes_faulted));
    const uint64_t moved = t.bytes_read + t.bytes_copied + (faults ? t.bytes_faulted : 0);
    out += fmt::format("total: {} tokens, {}, {}, {} per token moved (read {}, copied {}, {}), stall {:.2f} ms "
                       "({:.3f} ms/token), prefetch {} used of {}\n",
                       s.tokens, hit, in_ram, format_bytes(double(moved) / tok), format_bytes(double(t.bytes_read)),
                       format_bytes(double(t.bytes_copied)), faulted, double(t.stall_ns) / 1e6,
                       double(t.stall_ns) / 1e6 / tok, t.prefetch_used, t.prefetched);
    out += "moved: the routed experts' bytes only (the dense weights are not counted): read from the file into host "
           "RAM, copied to the device, and faulted in from the mapping (pages not in RAM when used, by mincore)\n";
    const auto storage = storage_read_bytes();
    if (opt_.count_faults && storage && storage_read0_)
        out += fmt::format("read from storage by the whole process since the store opened: {} (/proc/self/io: read-ahead, "
                           "dense weights and every other file included)\n", format_bytes(double(*storage - *storage_read0_)));
    if (opt_.count_faults && !faults_visible_)
        out += fmt::format("faulted unknown: mincore reports every page of {} resident to a process that neither owns "
                           "it nor may write it\n", f_.path());
    ExpertProfile prof;
    {
        std::lock_guard lk(mu_);
        prof = profile_;
    }
    return out + format_hottest(summarize(prof, top_n), "hottest (layer:expert selections):");
}

}  // namespace kinfer::runtime
