#include "runtime/device.h"

#include "common/error.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <string>

namespace kinfer::runtime {

size_t parse_bytes(std::string_view s) {
    const std::string str(s);
    size_t used = 0;
    double v = 0;
    try {
        v = std::stod(str, &used);
    } catch (...) {
        fail("'{}' is not a size (expected e.g. 512MiB, 60GiB or a byte count)", str);
    }
    std::string unit;
    for (size_t i = used; i < str.size(); ++i) unit += char(std::tolower(static_cast<unsigned char>(str[i])));
    double mul = 1;
    if (unit.empty() || unit == "b") mul = 1;
    else if (unit == "k" || unit == "kb" || unit == "kib") mul = 1024.0;
    else if (unit == "m" || unit == "mb" || unit == "mib") mul = 1024.0 * 1024;
    else if (unit == "g" || unit == "gb" || unit == "gib") mul = 1024.0 * 1024 * 1024;
    else if (unit == "t" || unit == "tb" || unit == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
    else fail("'{}': unknown size unit '{}' (use K, M, G or T, optionally with iB)", str, unit);
    if (!(v >= 0) || !std::isfinite(v)) fail("'{}' is not a valid size", str);
    return size_t(std::llround(v * mul));
}

// Plain page-aligned memory: what a device without a pinning API copies from.
uint8_t* Device::alloc_pinned(size_t bytes) {
    return static_cast<uint8_t*>(std::aligned_alloc(4096, (std::max<size_t>(bytes, 1) + 4095) & ~size_t(4095)));
}

void Device::free_pinned(uint8_t* p, size_t) { std::free(p); }

std::string format_bytes(double b) {
    if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
    if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
    if (b >= 1024.0) return fmt::format("{:.2f} KiB", b / 1024.0);
    return fmt::format("{:.0f} B", b);
}

}  // namespace kinfer::runtime
