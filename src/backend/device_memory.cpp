#include "backend/device_memory.h"

#include "common/error.h"

#include <atomic>
#include <cstdint>
#include <mutex>

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

const char* device_owning(const void* p, size_t bytes) {
    if (g_count.load(std::memory_order_acquire) == 0) return nullptr;
    const uintptr_t a = uintptr_t(p), b = a + (bytes ? bytes : 1);
    for (const Range& r : g_ranges) {
        const uintptr_t hi = r.hi.load(std::memory_order_acquire);
        if (hi != 0 && a < hi && b > r.lo.load(std::memory_order_relaxed)) return r.name;
    }
    return nullptr;
}

}  // namespace kinfer::backend
