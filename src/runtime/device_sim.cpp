#include "runtime/device_sim.h"

#include "common/error.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kinfer::runtime {

SimDeviceSpec parse_sim_device(const std::string& spec) {
    if (spec.rfind("sim:", 0) != 0) fail("--device '{}': expected sim:SIZE[,GBps]", spec);
    std::string rest = spec.substr(4);
    SimDeviceSpec d;
    const auto comma = rest.find(',');
    d.bytes = parse_bytes(rest.substr(0, comma));
    if (comma != std::string::npos) {
        try {
            size_t used = 0;
            d.gbps = std::stod(rest.substr(comma + 1), &used);
            if (used != rest.size() - comma - 1) throw 0;
        } catch (...) {
            fail("--device '{}': bandwidth '{}' is not a number of GB/s", spec, rest.substr(comma + 1));
        }
        if (!(d.gbps > 0)) fail("--device '{}': bandwidth must be positive", spec);
    }
    if (d.bytes == 0) fail("--device '{}': size must be positive", spec);
    return d;
}

SimDevice::SimDevice(SimDeviceSpec spec, std::string name)
    : spec_(spec), name_(std::move(name)), mem_(new uint8_t[spec.bytes]), arena_(spec.bytes) {
    thread_ = std::thread([this] { engine(); });
}

SimDevice::~SimDevice() {
    {
        std::lock_guard lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
}

DeviceBuffer SimDevice::alloc(size_t bytes) {
    std::lock_guard lk(mu_);
    const auto off = arena_.alloc(bytes);
    return off ? DeviceBuffer{*off, bytes} : DeviceBuffer{};
}

size_t SimDevice::free_bytes() const {
    std::lock_guard lk(mu_);
    return arena_.free_bytes();
}

void SimDevice::free(DeviceBuffer b) {
    if (!b.valid()) return;
    std::lock_guard lk(mu_);
    arena_.free(b.offset, b.bytes);
}

uint64_t SimDevice::copy_async(DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) {
    if (dst_offset + bytes > dst.bytes) fail("{}: copy of {} bytes at {} overflows a {}-byte buffer", name_, bytes, dst_offset, dst.bytes);
    std::lock_guard lk(mu_);
    const auto* a = static_cast<const uint8_t*>(src);
    bool pinned = false;
    for (const auto& [p, n] : pinned_) pinned |= a >= p && a + bytes <= p + n;
    if (!pinned) ++pageable_copies_, pageable_bytes_ += bytes;
    const uint64_t t = next_ticket_++;
    queue_.push_back({t, mem_.get() + dst.offset + dst_offset, src, bytes});
    cv_.notify_all();
    return t;
}

bool SimDevice::done(uint64_t ticket) {
    std::lock_guard lk(mu_);
    return ticket <= completed_;
}

void SimDevice::wait(uint64_t ticket) {
    std::unique_lock lk(mu_);
    cv_.wait(lk, [&] { return ticket <= completed_; });
}

uint8_t* SimDevice::alloc_pinned(size_t bytes) {
    uint8_t* p = Device::alloc_pinned(bytes);
    if (!p) return nullptr;
    std::lock_guard lk(mu_);
    pinned_.push_back({p, bytes});
    return p;
}

void SimDevice::free_pinned(uint8_t* p, size_t bytes) {
    if (!p) return;
    {
        std::lock_guard lk(mu_);
        auto it = std::find_if(pinned_.begin(), pinned_.end(), [&](const auto& r) { return r.first == p; });
        if (it == pinned_.end() || it->second != bytes)
            fail("{}: free_pinned of {} bytes at {}: not a pinned allocation of this device", name_, bytes,
                 static_cast<const void*>(p));
        pinned_.erase(it);
    }
    Device::free_pinned(p, bytes);
}

uint64_t SimDevice::pageable_copies() const {
    std::lock_guard lk(mu_);
    return pageable_copies_;
}

uint64_t SimDevice::pageable_bytes() const {
    std::lock_guard lk(mu_);
    return pageable_bytes_;
}

size_t SimDevice::pinned_bytes() const {
    std::lock_guard lk(mu_);
    size_t n = 0;
    for (const auto& r : pinned_) n += r.second;
    return n;
}

uint64_t SimDevice::unfinished_copy(const void* p, size_t bytes) const {
    const auto* a = static_cast<const uint8_t*>(p);
    std::lock_guard lk(mu_);
    for (const Copy& c : queue_)
        if (a < c.dst + c.bytes && c.dst < a + bytes) return c.ticket;
    return 0;
}

uint64_t SimDevice::bytes_copied() const {
    std::lock_guard lk(mu_);
    return bytes_copied_;
}

double SimDevice::busy_seconds() const {
    std::lock_guard lk(mu_);
    return busy_;
}

// The copy engine: one copy at a time, each held until bytes / bandwidth has elapsed since it
// started, so a burst of misses queues up exactly as it would behind a real DMA engine.
void SimDevice::engine() {
    using clock = std::chrono::steady_clock;
    std::unique_lock lk(mu_);
    for (;;) {
        cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;   // stop_ with nothing left
        const Copy c = queue_.front();   // stays queued until done: unfinished_copy() sees it
        lk.unlock();
        const auto t0 = clock::now();
        std::memcpy(c.dst, c.src, c.bytes);
        const double secs = double(c.bytes) / (spec_.gbps * 1e9);
        std::this_thread::sleep_until(t0 + std::chrono::duration<double>(secs));
        lk.lock();
        queue_.pop_front();
        completed_ = c.ticket;
        bytes_copied_ += c.bytes;
        busy_ += secs;
        cv_.notify_all();
    }
}

}  // namespace kinfer::runtime
