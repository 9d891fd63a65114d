// The expert store's device tier on a GPU (runtime/device.h): slots are cudaMalloc'd memory of
// the backend's device, host buffers are pinned (cudaHostAlloc), and a copy goes on the backend's
// copy stream after the compute work queued so far, so overwriting an evicted expert's slot never
// races a kernel that still reads it; a copy from the mapping goes through pinned staging
// buffers, so that the thread queueing it does not wait for the GPU. The ticket a copy returns is the one the backend's
// wait(Event) makes the compute stream wait for (moe.cpp does), so a miss stalls the GPU, not the
// host. The same paging logic runs on the simulated device in every test (device_sim.h); this
// adapter has not run on a GPU yet.
#pragma once
#include "backend/cuda/cuda_backend.h"
#include "common/error.h"
#include "runtime/device.h"

#include <map>
#include <vector>

namespace kinfer::backend::KINFER_CUDA_BACKEND_NS {

class CudaExpertDevice final : public runtime::Device {
public:
    explicit CudaExpertDevice(CudaBackend& be) : be_(be) {}
    ~CudaExpertDevice() override;

    std::string name() const override { return be_.name(); }
    // What is free on the GPU now, less a reserve for the CUDA context and op scratch.
    size_t capacity() const override;
    // Measured once: a 64 MiB copy from pinned memory on the copy stream.
    double copy_gbps() const override;
    // Measured once: a 64 MiB copy_async from pageable memory (through the staging ring).
    double staged_copy_gbps() const override;

    // Slots are carved from chunks of up to kChunkBytes (one cudaMalloc each, freed with the tier):
    // K3's store asks for tens of thousands of equal slots, and a cudaMalloc each would cost
    // start-up time and a device-wide synchronizing cudaFree each at the end. offset = the
    // device address. A freed slot is reused for a later request of the same size.
    runtime::DeviceBuffer alloc(size_t bytes) override;
    void free(runtime::DeviceBuffer b) override;
    uint8_t* alloc_pinned(size_t bytes) override;
    void free_pinned(uint8_t* p, size_t bytes) override;

    uint64_t copy_async(runtime::DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) override;
    bool done(uint64_t ticket) override { return be_.copy_done(ticket); }
    void wait(uint64_t ticket) override { be_.copy_host_wait(ticket); }
    const uint8_t* data(runtime::DeviceBuffer b) const override { return reinterpret_cast<const uint8_t*>(b.offset); }

    // Kept free for the CUDA context, workspaces and op scratch: 1 GiB, or an eighth of a smaller
    // device (an emulated one in the tests).
    static constexpr size_t kReserve = size_t(1) << 30;
    size_t reserve() const;
    static constexpr size_t kChunkBytes = size_t(256) << 20;
    static constexpr size_t kSlotAlign = 256;
    // copy_async from pageable memory stages through up to kStages pinned buffers of
    // kStageBytes (cuda_expert_device.cpp says why).
    static constexpr size_t kStageBytes = size_t(8) << 20;
    static constexpr size_t kStages = 32;
    // Another ring (tests: a small one, to see it wrap); before the first staged copy (the ring's
    // buffers are stage_bytes each once made).
    void set_staging(size_t stage_bytes, size_t stages) {
        if (!stages_.empty()) fail("{}: set_staging after the first staged copy", be_.name());
        stage_bytes_ = stage_bytes;
        stage_limit_ = stages;
    }

private:
    bool is_pinned(const void* p, size_t bytes) const;   // inside one of alloc_pinned's buffers
    double probe_gbps(bool staged) const;                  // copy_gbps / staged_copy_gbps, measured
    struct Stage {
        Buffer buf;                         // pinned, kStageBytes
        uint64_t ticket = 0;                // its last copy, 0 before the first
    };
    CudaBackend& be_;
    std::vector<Buffer> chunks_;
    size_t chunk_used_ = 0;                 // bytes carved from the last chunk
    std::map<uint64_t, size_t> slots_;      // live slots: device address -> bytes
    std::map<size_t, std::vector<uint64_t>> spare_;   // freed slots by size
    std::map<uint8_t*, Buffer> pinned_;
    std::vector<Stage> stages_;
    size_t next_stage_ = 0;
    size_t stage_bytes_ = kStageBytes;
    size_t stage_limit_ = kStages;          // fewer when pinning more failed
    mutable double gbps_ = 0, staged_gbps_ = 0;
};

}  // namespace kinfer::backend::KINFER_CUDA_BACKEND_NS
