// Shared by the fuzz targets: tolerate kinfer::Error, a sink the optimiser cannot drop, and a
// per-process scratch file for parsers that read paths (tmpfs when there is one).
#pragma once
#include "common/error.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <unistd.h>

namespace kinfer::fuzz {

inline volatile uint64_t g_sink = 0;

inline void sink(uint64_t v) { g_sink = g_sink + v; }
inline void sink(std::string_view s) { g_sink = g_sink + s.size() + (s.empty() ? 0 : uint8_t(s[0]) + uint8_t(s.back())); }

template <typename F>
bool tolerate(F&& f) {
    try {
        f();
        return true;
    } catch (const kinfer::Error&) {
        return false;
    }
}

// A scratch path unique to this process: /dev/shm/kinfer_fuzz_<pid>_<name> when /dev/shm is
// there (no disk traffic at tens of thousands of writes a second), else the temp directory.
inline std::string scratch_path(const std::string& name) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::path dir = fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    return (dir / ("kinfer_fuzz_" + std::to_string(::getpid()) + "_" + name)).string();
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) __builtin_trap();
    if (size && std::fwrite(data, 1, size, f) != size) __builtin_trap();
    std::fclose(f);
}

// Splits data at the first `sep` byte: (before, after); after is empty when there is none.
inline std::pair<std::string_view, std::string_view> split_at(std::string_view s, char sep) {
    const size_t i = s.find(sep);
    if (i == std::string_view::npos) return {s, {}};
    return {s.substr(0, i), s.substr(i + 1)};
}

}  // namespace kinfer::fuzz
