#include "backend/device_memory.h"

#include "common/error.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>

namespace kinfer::backend {

namespace {
struct Range {
    std::atomic<uintptr_t> lo{0}, hi{0};   // [lo, hi); hi == 0: free slot
    const char* name = "";
};
constexpr int kMaxRanges = 16;
Range g_ranges[kMaxRanges];
std::atomic<int> g_count{0};   // registered ranges: with none (CPU-only runs) lookups return at once
std::mutex g_mu;   // writers only

struct Allocation {
    uintptr_t hi;
    const char* name;
};
std::shared_mutex g_alloc_mu;
std::map<uintptr_t, Allocation> g_allocs;   // by first byte
std::atomic<size_t> g_alloc_count{0};
}  // namespace

void register_device_memory(const char* device, const void* base, size_t bytes) {
    std::lock_guard<std::mutex> lk(g_mu);
    for (Range& r : g_ranges)
        if (r.hi.load() == 0) {
            r.name = device;
            r.lo.store(uintptr_t(base));
            r.hi.store(uintptr_t(base) + bytes);
            g_count.fetch_add(1);
            return;
        }
    fail("more than {} device memory ranges", kMaxRanges);
}

void unregister_device_memory(const void* base) {
    std::lock_guard<std::mutex> lk(g_mu);
    for (Range& r : g_ranges)
        if (r.lo.load() == uintptr_t(base) && r.hi.load() != 0) {
            r.hi.store(0);
            r.lo.store(0);
            g_count.fetch_sub(1);
            return;
        }
}

void register_device_allocation(const char* device, const void* base, size_t bytes) {
    std::unique_lock lk(g_alloc_mu);
    g_allocs[uintptr_t(base)] = Allocation{uintptr_t(base) + (bytes ? bytes : 1), device};
    g_alloc_count.store(g_allocs.size(), std::memory_order_release);
}

void unregister_device_allocation(const void* base) {
    std::unique_lock lk(g_alloc_mu);
    g_allocs.erase(uintptr_t(base));
    g_alloc_count.store(g_allocs.size(), std::memory_order_release);
}

void unregister_device_allocations(const char* device) {
    std::unique_lock lk(g_alloc_mu);
    std::erase_if(g_allocs, [&](const auto& kv) { return kv.second.name == device; });
    g_alloc_count.store(g_allocs.size(), std::memory_order_release);
}

const char* device_owning(const void* p, size_t bytes) {
    const uintptr_t a = uintptr_t(p), b = a + (bytes ? bytes : 1);
    if (g_count.load(std::memory_order_acquire) != 0)
        for (const Range& r : g_ranges) {
            const uintptr_t hi = r.hi.load(std::memory_order_acquire);
            if (hi != 0 && a < hi && b > r.lo.load(std::memory_order_relaxed)) return r.name;
        }
    if (g_alloc_count.load(std::memory_order_acquire) == 0) return nullptr;
    // Allocations do not overlap: when the last one starting before b ends at or before a, so does
    // every earlier one.
    std::shared_lock lk(g_alloc_mu);
    auto it = g_allocs.lower_bound(b);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    return it->second.hi > a ? it->second.name : nullptr;
}

const char* device_containing(const void* p, size_t bytes) {
    if (g_alloc_count.load(std::memory_order_acquire) == 0) return nullptr;
    const uintptr_t a = uintptr_t(p);
    std::shared_lock lk(g_alloc_mu);
    auto it = g_allocs.upper_bound(a);   // the first allocation starting after a
    if (it == g_allocs.begin()) return nullptr;
    --it;
    return a + (bytes ? bytes : 1) <= it->second.hi ? it->second.name : nullptr;
}

}  // namespace kinfer::backend
