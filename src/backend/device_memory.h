// Which address ranges belong to a device. Device backends register their memory here; the CPU
// backend consults it to refuse device memory handed to a CPU op (the strict simulated device's
// arena is host memory, so nothing else would notice; a GPU's memory would fault).
//   - arenas: a handful of large ranges registered at start-up (the simulated devices), looked
//     up on every op without a lock;
//   - allocations: one range per allocation of a backend without an arena (CUDA: one per
//     cudaMalloc, thousands for K3), in an ordered map behind a reader-writer lock. With none
//     registered (CPU-only runs) a lookup returns at once.
#pragma once
#include <cstddef>

namespace kinfer::backend {

void register_device_memory(const char* device, const void* base, size_t bytes);
void unregister_device_memory(const void* base);

// device must outlive the registration (a backend's own name string), and the names the lookups
// return are used after them (in error messages): a backend outlives the ops that run on any
// backend, as everywhere else in kinfer. Ranges must not overlap (unregister before freeing).
void register_device_allocation(const char* device, const void* base, size_t bytes);
void unregister_device_allocation(const void* base);
void unregister_device_allocations(const char* device);   // every one of device's (its backend goes)

// The name of the device whose memory overlaps [p, p + bytes), or nullptr when none does.
const char* device_owning(const void* p, size_t bytes);
// The name of the device one of whose allocations holds all of [p, p + bytes), or nullptr.
const char* device_containing(const void* p, size_t bytes);

}  // namespace kinfer::backend
