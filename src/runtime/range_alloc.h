// First-fit allocation of offsets in [0, size), 256-byte aligned like cudaMalloc's (so block
// structs never straddle oddly), freed ranges merged with their neighbours so the space does not
// fragment: the simulated device's arena (device_sim.h) and the emulated CUDA runtime's device
// memory (backend/cuda/emu/runtime.h). Not thread-safe: its owner locks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace kinfer::runtime {

class RangeAllocator {
public:
    static constexpr size_t kAlign = 256;
    static size_t rounded(size_t bytes) { return (bytes + kAlign - 1) & ~(kAlign - 1); }

    explicit RangeAllocator(size_t size) : free_{{0, size}} {}

    // The offset of a range of `bytes` (rounded up to kAlign), or nullopt.
    std::optional<size_t> alloc(size_t bytes) {
        const size_t need = rounded(bytes);
        for (size_t i = 0; i < free_.size(); ++i) {
            auto& [off, size] = free_[i];
            if (size < need) continue;
            const size_t at = off;
            off += need;
            size -= need;
            if (size == 0) free_.erase(free_.begin() + std::ptrdiff_t(i));
            return at;
        }
        return std::nullopt;
    }

    // Gives back what alloc(bytes) returned at `offset`.
    void free(size_t offset, size_t bytes) {
        const size_t size = rounded(bytes);
        if (size == 0) return;
        auto it = free_.begin();
        while (it != free_.end() && it->first < offset) ++it;
        it = free_.insert(it, {offset, size});
        if (it + 1 != free_.end() && it->first + it->second == (it + 1)->first) {
            it->second += (it + 1)->second;
            free_.erase(it + 1);
        }
        if (it != free_.begin() && (it - 1)->first + (it - 1)->second == it->first) {
            (it - 1)->second += it->second;
            free_.erase(it);
        }
    }

    size_t free_bytes() const {
        size_t n = 0;
        for (const auto& f : free_) n += f.second;
        return n;
    }

private:
    std::vector<std::pair<size_t, size_t>> free_;   // (offset, bytes), by offset
};

}  // namespace kinfer::runtime
