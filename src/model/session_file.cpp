#include "model/session_file.h"

#include "common/error.h"
#include "common/safe_file.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kinfer::model {

void save_session_file(const Session& s, const std::string& path, std::span<const uint8_t> extra) {
    const std::vector<uint8_t> bytes = s.save_state(extra);
    TempFile f(path);
    if (std::fwrite(bytes.data(), 1, bytes.size(), f.file()) != bytes.size())
        fail("{}: writing {} bytes of session state failed: {}", f.temp_path(), bytes.size(), std::strerror(errno));
    f.commit();
}

namespace {
// A read-only mapping, unmapped on every path out.
struct Mapping {
    void* p = MAP_FAILED;
    size_t n = 0;
    ~Mapping() {
        if (p != MAP_FAILED) ::munmap(p, n);
    }
};
}  // namespace

void load_session_file(Session& s, const std::string& path, const std::function<void(std::span<const uint8_t>)>& take_extra) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: not a regular file", path);
    }
    if (st.st_size == 0) {
        ::close(fd);
        fail("{}: empty file (not a kinfer session state)", path);
    }
    Mapping m;
    m.n = size_t(st.st_size);
    m.p = ::mmap(nullptr, m.n, PROT_READ, MAP_PRIVATE, fd, 0);
    const int err = errno;
    ::close(fd);
    if (m.p == MAP_FAILED) fail("{}: cannot map {} bytes: {}", path, m.n, std::strerror(err));
    ::madvise(m.p, m.n, MADV_SEQUENTIAL);
    try {
        s.load_state({static_cast<const uint8_t*>(m.p), m.n}, take_extra);
    } catch (const Error& e) {
        fail("{}: {}", path, e.what());
    }
}

}  // namespace kinfer::model
