// The small device interface the expert store pages experts through (DESIGN.md section 5).
// A device owns memory the CPU cannot be assumed to address and a copy engine that moves host
// bytes into it asynchronously. The simulated device (device_sim.h) implements it over a host
// buffer; a CUDA backend implements the same calls with cudaMalloc / cudaMemcpyAsync on a copy
// stream, so the store's paging logic is tested here without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kinfer::runtime {

// "512MiB", "60GiB", "1.5G", "100000": byte sizes as the cache and device flags take them
// (K/M/G/T are powers of 1024, with or without "iB"). Throws kinfer::Error on anything else.
size_t parse_bytes(std::string_view s);
std::string format_bytes(double bytes);   // "1.50 GiB"

// An allocation in device memory, as an offset into the device's address space.
struct DeviceBuffer {
    uint64_t offset = 0;
    size_t bytes = 0;
    bool valid() const { return bytes != 0; }
};

class Device {
public:
    virtual ~Device() = default;
    virtual std::string name() const = 0;          // "sim0", "cuda0": what -ot REGEX=DEVICE names
    virtual size_t capacity() const = 0;            // bytes the expert cache may use
    virtual double copy_gbps() const = 0;           // host -> device bandwidth, for the cost model
    // The same from pageable memory (the model's mapping, when there is no host tier): a CUDA
    // copy from there goes through pinned staging buffers, a memcpy and then the copy engine,
    // which a pinned-memory rate overstates. The cost model takes this rate for such misses.
    virtual double staged_copy_gbps() const { return copy_gbps(); }

    // Device memory. alloc returns an invalid buffer when the request does not fit.
    virtual DeviceBuffer alloc(size_t bytes) = 0;
    virtual void free(DeviceBuffer b) = 0;

    // Host memory the copy engine reads at full speed (CUDA: cudaHostAlloc; a copy from pageable
    // memory is staged by the driver and does not overlap). Page aligned; nullptr when the
    // system refuses. The expert store's host tier comes from here whenever it feeds a device.
    virtual uint8_t* alloc_pinned(size_t bytes);
    virtual void free_pinned(uint8_t* p, size_t bytes);

    // Queues a host -> device copy on the copy engine and returns at once; src must stay valid
    // until wait(ticket) returns. Copies complete in the order they were queued. A ticket is
    // what backend::Event carries: the device backend's wait(Event{ticket}) makes its compute
    // stream wait for the copy.
    virtual uint64_t copy_async(DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) = 0;
    virtual bool done(uint64_t ticket) = 0;
    virtual void wait(uint64_t ticket) = 0;

    // What the device's kernels read for buffer b. For the simulated device this is a host
    // address (its "kernels" are the CPU ones); a CUDA backend returns the device pointer.
    virtual const uint8_t* data(DeviceBuffer b) const = 0;
};

}  // namespace kinfer::runtime
