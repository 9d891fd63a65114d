// page_residency: mincore's count of the bytes of a span not in RAM, on a file mapping whose
// pages are touched (all resident) and then dropped from the page cache (none resident), with
// the count clipped to the span at both ends.
#include "test_util.h"

#include "runtime/page_residency.h"

#include <cstdint>
#include <fcntl.h>
#include <filesystem>
#include <string>
#include <sys/mman.h>
#include <unistd.h>
#include <vector>

using namespace kinfer::runtime;

namespace {

// A file of n bytes in the build tree (not /tmp: a tmpfs keeps its pages whatever we advise),
// written and synced so the page cache may drop it, mapped shared and read-only.
struct MappedFile {
    std::string path;
    int fd = -1;
    const uint8_t* p = nullptr;
    size_t n = 0, len = 0;   // len: the mapping, whole pages

    explicit MappedFile(size_t bytes) : n(bytes) {
        const auto dir = std::filesystem::path(KINFER_BUILD_DIR) / "test-tmp";
        std::filesystem::create_directories(dir);
        path = (dir / ("page_residency_" + std::to_string(::getpid()))).string();
        std::vector<uint8_t> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = uint8_t(i * 131 + 7);
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        REQUIRE(fd >= 0);
        REQUIRE(::write(fd, data.data(), n) == ssize_t(n));
        REQUIRE(::fsync(fd) == 0);   // dirty pages are not dropped by POSIX_FADV_DONTNEED
        len = (n + page_size() - 1) / page_size() * page_size();
        void* m = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
        REQUIRE(m != MAP_FAILED);
        p = static_cast<const uint8_t*>(m);
        // No read-around: a fault then brings in its own page only, so the counts below are exact.
        ::madvise(m, len, MADV_RANDOM);
    }
    ~MappedFile() {
        if (p) ::munmap(const_cast<uint8_t*>(p), len);
        if (fd >= 0) ::close(fd);
        std::filesystem::remove(path);
    }
    unsigned touch(size_t page) const { return *static_cast<const volatile uint8_t*>(p + page * page_size()); }
    // Unmaps our page table entries, then asks the kernel to drop the (clean, now unmapped) pages.
    void evict() const {
        ::madvise(const_cast<uint8_t*>(p), len, MADV_DONTNEED);
        ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    }
};

}  // namespace

TEST_CASE("page residency: touched pages are resident") {
    const size_t ps = page_size();
    const MappedFile f(16 * ps + 100);   // the last page only partly in the file
    unsigned sum = 0;
    for (size_t i = 0; i * ps < f.n; ++i) sum += f.touch(i);
    CHECK(sum > 0);
    CHECK(non_resident_bytes(f.p, f.n) == 0);
    CHECK(non_resident_bytes(f.p + 17, f.n - 17) == 0);
    CHECK(non_resident_bytes(f.p, 0) == 0);
}

TEST_CASE("page residency: pages dropped from the page cache are counted, clipped to the span") {
    const size_t ps = page_size();
    const MappedFile f(16 * ps + 100);
    for (size_t i = 0; i * ps < f.n; ++i) f.touch(i);
    f.evict();
    const size_t cold = non_resident_bytes(f.p, f.n);
    if (cold == 0) {
        MESSAGE("the kernel kept the file's pages after POSIX_FADV_DONTNEED: nothing to count here");
        kinfer::test::skip_case(kinfer::test::SkipKind::machine, "the page cache would not drop a synced file's pages");
        return;
    }
    CHECK(cold == f.n);                                    // every byte, the partial last page clipped to the file
    CHECK(non_resident_bytes(f.p + 100, 200) == 200);      // inside one page: only the span's bytes
    CHECK(non_resident_bytes(f.p + ps - 10, 20) == 20);    // across a page boundary
    f.touch(5);                                            // one page read back in
    CHECK(non_resident_bytes(f.p + 5 * ps, ps) == 0);
    CHECK(non_resident_bytes(f.p, f.n) == f.n - ps);
    CHECK(non_resident_bytes(f.p + 5 * ps - 10, 30) == 10);   // 10 bytes on cold page 4, 20 on page 5
    CHECK(non_resident_bytes(f.p + 6 * ps - 10, 30) == 20);   // 10 on page 5, 20 on cold page 6
}

TEST_CASE("page residency: untouched anonymous memory is not resident; a span not all mapped counts nothing") {
    const size_t ps = page_size();
    void* m = ::mmap(nullptr, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(m != MAP_FAILED);
    ::munmap(static_cast<uint8_t*>(m) + ps, ps);   // a hole after the first page
    CHECK(non_resident_bytes(m, ps) == ps);          // never touched: not there yet
    CHECK(non_resident_bytes(m, 2 * ps) == 0);       // mincore refuses the hole
    ::munmap(m, ps);
}

TEST_CASE("page residency: a file this process owns shows its page cache") {
    const MappedFile f(page_size());
    CHECK(residency_visible(f.path));
    CHECK(residency_visible("/nonexistent/kinfer-page-residency"));   // not a file: memory as is
}

TEST_CASE("page residency: reading a file dropped from the page cache shows in the process's storage reads") {
    const auto before = storage_read_bytes();
    if (!before) {
        kinfer::test::skip_case(kinfer::test::SkipKind::machine, "no /proc/self/io read_bytes (task I/O accounting)");
        return;
    }
    const MappedFile f(16 * page_size() + 100);
    f.evict();
    if (non_resident_bytes(f.p, f.n) != f.n) {
        kinfer::test::skip_case(kinfer::test::SkipKind::machine, "the page cache would not drop a synced file's pages");
        return;
    }
    const auto b0 = storage_read_bytes();
    std::vector<uint8_t> buf(f.n);
    REQUIRE(::pread(f.fd, buf.data(), f.n, 0) == ssize_t(f.n));
    const auto b1 = storage_read_bytes();
    REQUIRE(b0);
    REQUIRE(b1);
    CHECK(*b1 - *b0 >= f.n);
}
