#include "runtime/page_residency.h"

#include <algorithm>
#include <cstdint>
#include <fcntl.h>
#include <fstream>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kinfer::runtime {

namespace {
// mincore's vector is unsigned char on Linux, char on the BSDs and macOS; bit 0 is "resident".
#if defined(__linux__)
using VecByte = unsigned char;
#else
using VecByte = char;
#endif
}  // namespace

size_t page_size() {
    static const size_t ps = size_t(::sysconf(_SC_PAGESIZE));
    return ps;
}

size_t non_resident_bytes(const void* p, size_t n) {
    if (n == 0) return 0;
    const size_t ps = page_size();
    const uintptr_t begin = reinterpret_cast<uintptr_t>(p), end = begin + n;
    uintptr_t page = begin & ~uintptr_t(ps - 1);   // mincore wants a page-aligned start
    // Pages per call: the vector lives on the stack, so the hot path (an expert's three slices,
    // every acquire) allocates nothing.
    constexpr size_t kChunk = 1024;
    VecByte vec[kChunk];
    size_t missing = 0;
    while (page < end) {
        const size_t pages = std::min(kChunk, size_t((end - page + ps - 1) / ps));
        if (::mincore(reinterpret_cast<void*>(page), pages * ps, vec) != 0) return 0;
        for (size_t i = 0; i < pages; ++i) {
            if (vec[i] & 1) continue;
            const uintptr_t a = std::max(page + i * ps, begin), b = std::min(page + (i + 1) * ps, end);
            missing += size_t(b - a);
        }
        page += pages * ps;
    }
    return missing;
}

bool residency_visible(const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return true;
    // The kernel's test (mm/mincore.c, can_do_mincore): the owner (or a capable process), or
    // write permission on the file.
    if (st.st_uid == ::geteuid() || ::geteuid() == 0) return true;
    return ::faccessat(AT_FDCWD, path.c_str(), W_OK, AT_EACCESS) == 0;
}

std::optional<uint64_t> storage_read_bytes() {
    std::ifstream in("/proc/self/io");
    std::string key;
    uint64_t v = 0;
    while (in >> key >> v)
        if (key == "read_bytes:") return v;
    return std::nullopt;
}

}  // namespace kinfer::runtime
