// Which address ranges belong to a device. Device backends register their memory here when
// they are created; the CPU backend consults it to refuse device memory handed to a CPU op (the
// strict simulated device's arena is host memory, so nothing else would notice). A handful of
// ranges at most; registration happens at start-up, lookups on every op, without a lock.
#pragma once
#include <cstddef>

namespace kinfer::backend {

void register_device_memory(const char* device, const void* base, size_t bytes);
void unregister_device_memory(const void* base);
// The name of the device whose memory overlaps [p, p + bytes), or nullptr when none does.
const char* device_owning(const void* p, size_t bytes);

}  // namespace kinfer::backend
