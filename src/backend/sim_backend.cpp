#include "backend/sim_backend.h"

#include "backend/device_memory.h"
#include "common/error.h"
#include "runtime/device.h"

#include <cstring>

namespace kinfer::backend {

SimBackend::SimBackend(runtime::SimDeviceSpec spec, std::shared_ptr<runtime::ThreadPool> pool, std::string name)
    : CpuBackend(std::move(pool), name), device_(spec, name) {
    register_device_memory(this->name().c_str(), device_.base(), device_.capacity());
}

SimBackend::~SimBackend() { unregister_device_memory(device_.base()); }

std::string SimBackend::describe() const {
    return fmt::format("{}: simulated device, {} ({} free), copies at {:g} GB/s, CPU kernels on {} threads", name(),
                       runtime::format_bytes(double(total_bytes())), runtime::format_bytes(double(free_bytes())),
                       device_.copy_gbps(), n_threads());
}

Buffer SimBackend::alloc(size_t bytes, std::string_view what) {
    const runtime::DeviceBuffer b = device_.alloc(std::max<size_t>(bytes, 1));
    if (!b.valid())
        fail("{}: out of device memory for {}: {} asked, {} free of {} (give the device more: --device sim:SIZE)", name(),
             what, runtime::format_bytes(double(bytes)), runtime::format_bytes(double(free_bytes())),
             runtime::format_bytes(double(total_bytes())));
    return Buffer{const_cast<uint8_t*>(device_.data(b)), bytes, b.offset};
}

void SimBackend::free(Buffer& b) {
    if (b.valid()) device_.free(runtime::DeviceBuffer{b.handle, std::max<size_t>(b.bytes, 1)});
    b = Buffer{};
}

bool SimBackend::owns(const void* p, size_t bytes) const {
    const uint8_t* a = static_cast<const uint8_t*>(p);
    return a >= device_.base() && a + bytes <= device_.base() + device_.capacity();
}

void SimBackend::upload(void* dst, const void* host_src, size_t bytes) {
    need(dst, bytes, "upload", "dst");
    if (device_owning(host_src, bytes)) fail("{}: upload from device memory", name());
    std::memcpy(dst, host_src, bytes);
}

void SimBackend::download(void* host_dst, const void* src, size_t bytes) {
    need(src, bytes, "download", "src");
    if (device_owning(host_dst, bytes)) fail("{}: download into device memory", name());
    std::memcpy(host_dst, src, bytes);
}

Buffer SimBackend::alloc_pinned_host(size_t bytes, std::string_view what) {
    uint8_t* p = device_.alloc_pinned(bytes);
    if (!p) fail("{}: cannot allocate {} of pinned host memory for {}", name(), runtime::format_bytes(double(bytes)), what);
    return Buffer{p, bytes, 0};
}

void SimBackend::free_pinned_host(Buffer& b) {
    device_.free_pinned(b.ptr, b.bytes);
    b = Buffer{};
}

// The compute stream runs on the calling thread: a copy still queued on the engine when an op
// reads its destination means nobody made the stream wait for it (a race on a GPU).
void SimBackend::need_landed(const void* p, size_t bytes, const char* op, const char* arg) const {
    if (const uint64_t t = device_.unfinished_copy(p, bytes))
        fail("{}: op {} reads {} ({} bytes at {}) while copy #{} is still writing it: the compute stream must "
             "wait(Event) for that copy first", name(), op, arg, bytes, p, t);
}

Event SimBackend::upload_async(void* dst, const void* host_src, size_t bytes) {
    // Not need(): a copy queued behind another one into the same bytes is ordered by the engine.
    if (!owns(dst, bytes)) fail("{}: upload_async into memory that is not this device's ({} bytes at {})", name(), bytes, dst);
    const runtime::DeviceBuffer whole{0, device_.capacity()};
    const size_t off = size_t(static_cast<uint8_t*>(dst) - device_.base());
    return Event{device_.copy_async(whole, off, host_src, bytes)};
}

// The simulated compute stream runs on the calling thread, so waiting for an event means
// waiting for the copy engine to get there.
void SimBackend::wait(Event e) {
    if (e.ticket) device_.wait(e.ticket);
}

}  // namespace kinfer::backend
