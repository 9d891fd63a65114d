#include "runtime/expert_io.h"

#include "common/error.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/uio.h>
#include <unistd.h>

namespace kinfer::runtime {

namespace {
constexpr size_t kDirectAlign = 4096;                  // logical block size O_DIRECT needs
constexpr size_t kMaxRunBytes = size_t(64) << 20;      // one read at most; bounds the bounce buffer
static const char* kPart[3] = {"gate", "up", "down"};

struct FreeDeleter {
    void operator()(uint8_t* p) const { std::free(p); }
};
}  // namespace

ExpertIo parse_expert_io(const std::string& s) {
    if (s == "mmap") return ExpertIo::mmap;
    if (s == "pread") return ExpertIo::pread;
    if (s == "direct" || s == "odirect") return ExpertIo::direct;
    fail("--expert-io '{}': use mmap, pread or direct", s);
}

const char* expert_io_name(ExpertIo io) {
    return io == ExpertIo::mmap ? "mmap" : io == ExpertIo::pread ? "pread" : "direct";
}

ExpertReader::ExpertReader(const gguf::File& f, const ExpertLayout& lay, ExpertIo io) : f_(f), lay_(lay), io_(io) {
    if (io_ == ExpertIo::mmap) return;
    if (io_ == ExpertIo::direct) {
        fd_ = ::open(f.path().c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
        direct_ = fd_ >= 0;
        // tmpfs and some FUSE filesystems refuse O_DIRECT: fall back to buffered pread.
    }
    if (fd_ < 0) fd_ = ::open(f.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail("expert store: cannot open '{}' for reading experts: {}", f.path(), std::strerror(errno));
}

ExpertReader::~ExpertReader() {
    if (fd_ >= 0) ::close(fd_);
}

void ExpertReader::fail_read(int layer, int e, uint64_t off, size_t len, const std::string& why) const {
    fail("expert store: layer {} expert {}: reading {} bytes at offset {} of '{}' failed: {}", layer, e, len, off,
         f_.path(), why);
}

void ExpertReader::read(int layer, std::vector<Job> jobs) {
    if (jobs.empty()) return;
    const ExpertLayer& L = lay_.layers[size_t(layer)];
    std::sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) { return a.expert < b.expert; });
    if (before_read)
        for (const Job& j : jobs) before_read(layer, j.expert);
    experts_ += jobs.size();
    for (int p = 0; p < 3; ++p) {
        // Runs of consecutive expert ids, each at most kMaxRunBytes.
        size_t i = 0;
        while (i < jobs.size()) {
            size_t j = i + 1;
            while (j < jobs.size() && jobs[j].expert == jobs[j - 1].expert + 1 && (j - i + 1) * L.slice[p] <= kMaxRunBytes) ++j;
            std::vector<uint8_t*> dsts;
            for (size_t k = i; k < j; ++k) dsts.push_back(jobs[k].dst + L.buf_off[p]);
            read_run(layer, p, jobs[i].expert, int(j - i), dsts);
            i = j;
        }
    }
}

void ExpertReader::read_run(int layer, int part, int e0, int count, const std::vector<uint8_t*>& dsts) {
    const size_t slice = lay_.layers[size_t(layer)].slice[part];
    const uint64_t off = lay_.file_offset(f_, layer, part, e0);
    const size_t len = slice * size_t(count);
    ++reads_;
    bytes_ += len;
    if (io_ == ExpertIo::mmap) {
        for (int k = 0; k < count; ++k) std::memcpy(dsts[size_t(k)], lay_.mapped(layer, part, e0 + k), slice);
        return;
    }
    auto why = [&](ssize_t got, uint64_t at) {
        if (got < 0) return std::string(std::strerror(errno));
        return fmt::format("unexpected end of file at offset {} ({} tensor '{}' truncated?)", at, kPart[part],
                           lay_.layers[size_t(layer)].t[part]->name);
    };
    if (!direct_) {
        // Scatter straight into the expert buffers: one syscall per run.
        std::vector<iovec> iov(static_cast<size_t>(count));
        for (int k = 0; k < count; ++k) iov[size_t(k)] = {dsts[size_t(k)], slice};
        size_t done = 0;
        size_t first = 0;
        while (done < len) {
            const ssize_t got = ::preadv(fd_, iov.data() + first, int(iov.size() - first), off_t(off + done));
            if (got <= 0) {
                if (got < 0 && errno == EINTR) continue;
                fail_read(layer, e0 + int(done / slice), off + done, len - done, why(got, off + done));
            }
            done += size_t(got);
            // Advance the iovec past what was read (short reads are legal).
            size_t adv = size_t(got);
            while (adv > 0) {
                iovec& v = iov[first];
                const size_t take = std::min(adv, v.iov_len);
                v.iov_base = static_cast<uint8_t*>(v.iov_base) + take;
                v.iov_len -= take;
                adv -= take;
                if (v.iov_len == 0) ++first;
            }
        }
        return;
    }
    // O_DIRECT: offset, length and buffer must be block aligned, so read the enclosing aligned
    // range into a bounce buffer and copy the slices out.
    const uint64_t a0 = off & ~uint64_t(kDirectAlign - 1);
    const uint64_t a1 = (off + len + kDirectAlign - 1) & ~uint64_t(kDirectAlign - 1);
    const size_t alen = size_t(a1 - a0);
    std::unique_ptr<uint8_t, FreeDeleter> bounce(static_cast<uint8_t*>(std::aligned_alloc(kDirectAlign, alen)));
    if (!bounce) fail("expert store: cannot allocate a {}-byte read buffer", alen);
    size_t done = 0;
    const size_t need = size_t(off + len - a0);   // the tail past EOF may come back short
    while (done < need) {
        const ssize_t got = ::pread(fd_, bounce.get() + done, alen - done, off_t(a0 + done));
        if (got <= 0) {
            if (got < 0 && errno == EINTR) continue;
            const uint64_t at = std::max<uint64_t>(a0 + done, off);
            fail_read(layer, e0 + int((at - off) / slice), at, size_t(off + len - at), why(got, at));
        }
        done += size_t(got);
        if (done % kDirectAlign != 0 && done < need) {
            // A short unaligned read means EOF inside the range.
            const uint64_t at = a0 + done;
            fail_read(layer, e0 + int((at - off) / slice), at, size_t(off + len - at), why(0, at));
        }
    }
    for (int k = 0; k < count; ++k)
        std::memcpy(dsts[size_t(k)], bounce.get() + (off - a0) + size_t(k) * slice, slice);
}

}  // namespace kinfer::runtime
