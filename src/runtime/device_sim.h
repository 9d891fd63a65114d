// A simulated device: device memory is a separate host buffer with a fixed size, and copies into
// it go through one copy-engine thread that takes bytes / bandwidth seconds per copy, like a
// PCIe DMA engine. It lets the expert store's slot pool, eviction, copy overlap and stall
// accounting run (and be tested) on a CPU-only machine: `--device sim:SIZE[,GBps]`.
// It is strict where a GPU would be silently slow or wrong: it keeps a list of the pinned host
// ranges it handed out and counts copies from anywhere else (pageable), and it can say which
// queued copy is still writing a range (a compute op reading it has not waited for its event).
#pragma once
#include "runtime/device.h"
#include "runtime/range_alloc.h"

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace kinfer::runtime {

struct SimDeviceSpec {
    size_t bytes = 0;
    double gbps = 25.0;      // PCIe 4.0 x16-like by default
    double staged_gbps = 0;  // from pageable memory (staged_copy_gbps); 0: the same as gbps
};
// Parses "sim:SIZE[,GBps]" (SIZE as parse_bytes accepts it); throws kinfer::Error otherwise.
SimDeviceSpec parse_sim_device(const std::string& spec);

class SimDevice final : public Device {
public:
    explicit SimDevice(SimDeviceSpec spec, std::string name = "sim0");
    ~SimDevice() override;

    std::string name() const override { return name_; }
    size_t capacity() const override { return spec_.bytes; }
    double copy_gbps() const override { return spec_.gbps; }
    double staged_copy_gbps() const override { return spec_.staged_gbps > 0 ? spec_.staged_gbps : spec_.gbps; }
    DeviceBuffer alloc(size_t bytes) override;
    void free(DeviceBuffer b) override;
    uint64_t copy_async(DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) override;
    bool done(uint64_t ticket) override;
    void wait(uint64_t ticket) override;
    uint8_t* alloc_pinned(size_t bytes) override;
    void free_pinned(uint8_t* p, size_t bytes) override;
    const uint8_t* data(DeviceBuffer b) const override { return mem_.get() + b.offset; }

    const uint8_t* base() const { return mem_.get(); }   // the arena: [base, base + capacity)
    size_t free_bytes() const;       // sum of the free list
    uint64_t bytes_copied() const;   // total through the copy engine
    double busy_seconds() const;     // simulated time the copy engine spent copying
    // Copies whose source was not pinned memory of this device, and their bytes.
    uint64_t pageable_copies() const;
    uint64_t pageable_bytes() const;
    size_t pinned_bytes() const;     // pinned host memory handed out and not yet freed
    // The ticket of a queued or running copy that writes into [p, p + bytes); 0 when none.
    uint64_t unfinished_copy(const void* p, size_t bytes) const;

private:
    struct Copy {
        uint64_t ticket;
        uint8_t* dst;
        const void* src;
        size_t bytes;
    };
    void engine();

    SimDeviceSpec spec_;
    std::string name_;
    std::unique_ptr<uint8_t[]> mem_;
    // First-fit free list over [0, bytes): (offset, size) sorted by offset.
    RangeAllocator arena_;

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Copy> queue_;        // not yet completed; the front one is being copied
    uint64_t next_ticket_ = 1;
    uint64_t completed_ = 0;        // copies finish in order: tickets <= completed_ are done
    uint64_t bytes_copied_ = 0;
    double busy_ = 0;
    std::vector<std::pair<const uint8_t*, size_t>> pinned_;   // (start, bytes), unsorted
    uint64_t pageable_copies_ = 0, pageable_bytes_ = 0;
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace kinfer::runtime
