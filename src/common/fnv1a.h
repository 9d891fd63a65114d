// FNV-1a, 64-bit: the checksum of saved session states and the token-prefix check of state
// snapshots. Not cryptographic: it catches damage and mix-ups, not tampering.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kinfer {

inline uint64_t fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
    const auto* p = static_cast<const uint8_t*>(data);
    for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

}  // namespace kinfer
