// The strict simulated device (`--device sim:SIZE[,GBps]`): its memory is an arena of its own
// (runtime::SimDevice, which also gives it a bandwidth-limited copy engine), its ops are the CPU
// kernels run on that arena, and every op refuses a pointer outside the arena, naming the op and
// the tensor. While it exists, its arena is registered as device memory, so the CPU backend
// refuses arena pointers in turn. That is how a CPU-only machine catches the host/device mix-ups
// a GPU would crash on. Two more things a GPU gets silently wrong or slow are errors or counts
// here: an op reading device memory that an upload_async (or an expert copy) is still writing,
// because the compute stream was not made to wait for its event, is refused naming the op, the
// argument and the copy; and copies from host memory that is not pinned are counted
// (device().pageable_copies()). Pinned host memory comes from the device's own allocator.
#pragma once
#include "backend/cpu_backend.h"
#include "runtime/device_sim.h"

namespace kinfer::backend {

class SimBackend final : public CpuBackend {
public:
    SimBackend(runtime::SimDeviceSpec spec, std::shared_ptr<runtime::ThreadPool> pool, std::string name = "sim0");
    ~SimBackend() override;

    bool host_memory() const override { return false; }
    size_t total_bytes() const override { return device_.capacity(); }
    size_t free_bytes() const override { return device_.free_bytes(); }
    std::string describe() const override;

    Buffer alloc(size_t bytes, std::string_view what) override;
    void free(Buffer& b) override;
    bool owns(const void* p, size_t bytes) const override;

    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    Buffer alloc_pinned_host(size_t bytes, std::string_view what) override;
    void free_pinned_host(Buffer& b) override;
    Event upload_async(void* dst, const void* host_src, size_t bytes) override;
    void wait(Event e) override;

    // The memory and copy engine, for the expert store's slot pool.
    runtime::SimDevice& device() { return device_; }

protected:
    void need_landed(const void* p, size_t bytes, const char* op, const char* arg) const override;

private:
    runtime::SimDevice device_;
};

}  // namespace kinfer::backend
