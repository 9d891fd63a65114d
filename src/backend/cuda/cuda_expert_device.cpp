#include "backend/cuda/cuda_expert_device.h"

#include "common/error.h"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace kinfer::backend::cuda {

CudaExpertDevice::~CudaExpertDevice() {
    be_.synchronize();   // no copy may still write a slot that is freed
    for (auto& [addr, b] : slots_) be_.free(b);
    for (auto& [p, b] : pinned_) be_.free_pinned_host(b);
}

size_t CudaExpertDevice::capacity() const {
    const size_t f = be_.free_bytes();
    return f > kReserve ? f - kReserve : 0;
}

double CudaExpertDevice::copy_gbps() const {
    if (gbps_ > 0) return gbps_;
    const size_t bytes = size_t(64) << 20;
    auto& self = const_cast<CudaExpertDevice&>(*this);
    Buffer host = self.be_.alloc_pinned_host(bytes, "copy speed probe");
    Buffer dev = self.be_.alloc(bytes, "copy speed probe");
    std::memset(host.ptr, 0, bytes);
    self.be_.copy_host_wait(self.be_.upload_after_compute(dev.ptr, host.ptr, bytes));   // warm-up
    const auto t0 = std::chrono::steady_clock::now();
    self.be_.copy_host_wait(self.be_.upload_after_compute(dev.ptr, host.ptr, bytes));
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    self.be_.free(dev);
    self.be_.free_pinned_host(host);
    gbps_ = std::max(1.0, double(bytes) / std::max(s, 1e-9) / 1e9);
    return gbps_;
}

runtime::DeviceBuffer CudaExpertDevice::alloc(size_t bytes) {
    if (bytes == 0 || bytes > capacity()) return {};
    try {
        Buffer b = be_.alloc(bytes, "expert slot");
        const auto addr = reinterpret_cast<uint64_t>(b.ptr);
        slots_[addr] = b;
        return runtime::DeviceBuffer{addr, bytes};
    } catch (const Error&) {
        return {};   // "does not fit": the store stops adding slots
    }
}

void CudaExpertDevice::free(runtime::DeviceBuffer b) {
    const auto it = slots_.find(b.offset);
    if (it == slots_.end()) return;
    be_.synchronize();
    be_.free(it->second);
    slots_.erase(it);
}

uint8_t* CudaExpertDevice::alloc_pinned(size_t bytes) {
    try {
        Buffer b = be_.alloc_pinned_host(bytes, "expert host tier");
        pinned_[b.ptr] = b;
        return b.ptr;
    } catch (const Error&) {
        return nullptr;   // the system refuses to pin that much: the caller says so
    }
}

void CudaExpertDevice::free_pinned(uint8_t* p, size_t) {
    const auto it = pinned_.find(p);
    if (it == pinned_.end()) return;
    be_.free_pinned_host(it->second);
    pinned_.erase(it);
}

uint64_t CudaExpertDevice::copy_async(runtime::DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) {
    if (dst_offset + bytes > dst.bytes)
        fail("{}: expert copy of {} bytes at offset {} into a slot of {}", be_.name(), bytes, dst_offset, dst.bytes);
    return be_.upload_after_compute(reinterpret_cast<uint8_t*>(dst.offset) + dst_offset, src, bytes);
}

}  // namespace kinfer::backend::cuda
