// Files written so that nobody else can redirect them and nobody sees half of one:
//
//  * TempFile creates a fresh, uniquely named file next to the destination with mkostemp
//    (O_CREAT|O_EXCL: an existing name, a planted symlink included, is never opened, so another
//    local user cannot make kinfer write through it). commit() flushes, fsyncs, renames onto the
//    destination (rename replaces a symlink there instead of following it) and fsyncs the
//    directory so the new name survives a crash. Until then the destination is untouched.
//  * Every live temp file is in a small registry; SIGINT, SIGTERM and SIGHUP unlink them before
//    the process dies of the signal, so an interrupted quantize leaves no half-written model.
//  * check_output_path() / check_input_file() let a command refuse a bad path before it starts
//    work: an output in a missing or read-only directory, or a directory as output; an input that
//    is a FIFO, a device or a directory (opening a FIFO would block forever).
//
// Header-only: the gguf writer, the CLI and the runtime's small text files all use it.
#pragma once
#include "common/error.h"

#include <array>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <sys/stat.h>
#include <unistd.h>

namespace kinfer {

namespace safe_file_detail {

constexpr size_t kSlots = 16;
constexpr size_t kPathMax = 4096;

// A slot is claimed with `used`, filled, then published with `ready`; the signal handler reads
// only published slots, with async-signal-safe calls (unlink, sigaction, raise).
struct Slot {
    std::atomic<bool> used{false};
    std::atomic<bool> ready{false};
    char path[kPathMax];
};
inline std::array<Slot, kSlots> g_slots;
inline std::atomic<bool> g_handlers_installed{false};

extern "C" inline void on_fatal_signal(int sig) {
    for (Slot& s : g_slots)
        if (s.ready.load()) ::unlink(s.path);
    // Die of the same signal, so the parent sees what happened (shells print nothing extra for
    // SIGINT, and exit status 130 / 143 tells scripts).
    struct sigaction sa {};
    sa.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
    ::raise(sig);
}

inline void install_handlers() {
    if (g_handlers_installed.exchange(true)) return;
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
        struct sigaction old {};
        sigaction(sig, nullptr, &old);
        // Leave a signal alone that someone else handles or ignores (nohup ignores SIGHUP; chat
        // catches SIGINT to stop a reply and cleans up through the destructors instead).
        if (old.sa_handler != SIG_DFL) continue;
        struct sigaction sa {};
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = 0;
        sigaction(sig, &sa, nullptr);
    }
}

inline void release(int slot) {
    if (slot < 0) return;
    g_slots[size_t(slot)].ready.store(false);
    g_slots[size_t(slot)].used.store(false);
}

// Creates the temp file from `name` (a mkostemp template, rewritten to the file's name) with its
// slot claimed and published first, mkostemp writing the name into the slot's own buffer: glibc
// fills the name in before it creates the file, so a signal at any moment after the file exists
// finds its name there. (A slot published only after mkostemp returned left a window in which a
// signal killed the process before the handler knew the file: the first-hour test's SIGINT hit
// it on a loaded machine.) Before the file exists the slot names none of ours: unlinking the
// template, or a name mkostemp is trying, removes nothing kinfer wrote. Returns the descriptor,
// or -1 with errno; slot is -1 when all are taken (the file is then removed by its owner only).
inline int create_registered(std::string& name, int& slot) {
    install_handlers();
    slot = -1;
    for (size_t i = 0; i < kSlots && slot < 0 && name.size() < kPathMax; ++i) {
        bool expected = false;
        if (g_slots[i].used.compare_exchange_strong(expected, true)) slot = int(i);
    }
    if (slot < 0) return ::mkostemp(name.data(), O_CLOEXEC);
    Slot& s = g_slots[size_t(slot)];
    std::memcpy(s.path, name.c_str(), name.size() + 1);
    s.ready.store(true);
    const int fd = ::mkostemp(s.path, O_CLOEXEC);
    const int e = errno;
    if (fd >= 0) name.assign(s.path);
    else release(slot), slot = -1;
    errno = e;
    return fd;
}

inline std::string dir_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    if (slash == std::string::npos) return ".";
    if (slash == 0) return "/";
    return path.substr(0, slash);
}

inline std::string base_of(const std::string& path) {
    const size_t slash = path.find_last_of('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

inline const char* kind_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

}  // namespace safe_file_detail

// Throws unless `path` can be created or replaced: its directory exists and is writable, and
// the path itself is not a directory (nor a FIFO or device, which a rename would silently
// replace). `what` starts the message ("quantize: output").
inline void check_output_path(const std::string& path, const std::string& what) {
    using namespace safe_file_detail;
    if (path.empty()) fail("{}: empty file name", what);
    struct stat st {};
    if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        fail("{} '{}' is {}; give a file name", what, path, kind_of(st.st_mode));
    const std::string dir = dir_of(path);
    if (::stat(dir.c_str(), &st) != 0) fail("{} '{}': directory '{}' does not exist", what, path, dir);
    if (!S_ISDIR(st.st_mode)) fail("{} '{}': '{}' is not a directory", what, path, dir);
    if (::access(dir.c_str(), W_OK | X_OK) != 0)
        fail("{} '{}': directory '{}' is not writable: {}", what, path, dir, std::strerror(errno));
}

// Throws unless `path` names a regular file (a symlink to one is fine). Checked before opening,
// so a FIFO or a terminal device is refused at once instead of blocking the read.
inline void check_input_file(const std::string& path, const std::string& what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("{} '{}': cannot open: {}", what, path, std::strerror(errno));
    if (!S_ISREG(st.st_mode))
        fail("{} '{}' is {}, not a regular file", what, path, safe_file_detail::kind_of(st.st_mode));
}

// A temporary file beside `path`, renamed onto it by commit(); removed by the destructor (or a
// fatal signal) when not committed. Writes go through file(), a stdio stream.
class TempFile {
public:
    explicit TempFile(std::string path) : path_(std::move(path)) {
        using namespace safe_file_detail;
        // Hidden, unpredictable name in the destination's directory (rename needs the same
        // filesystem); mkostemp opens it with O_CREAT|O_EXCL, so a planted name is never used.
        std::string name = dir_of(path_) + "/." + base_of(path_) + ".tmp.XXXXXX";
        const int fd = create_registered(name, slot_);
        if (fd < 0) fail("{}: cannot create a temporary file in '{}': {}", path_, dir_of(path_), std::strerror(errno));
        tmp_ = std::move(name);
        // mkostemp makes the file 0600; give it the mode a plain open() would (0666 & ~umask).
        const mode_t mask = ::umask(0);
        ::umask(mask);
        ::fchmod(fd, 0666 & ~mask);
        f_ = ::fdopen(fd, "wb");
        if (!f_) {
            const int e = errno;
            ::close(fd);
            discard();
            fail("{}: cannot open a stream: {}", tmp_, std::strerror(e));
        }
    }
    ~TempFile() { discard(); }
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    std::FILE* file() { return f_; }
    const std::string& path() const { return path_; }
    const std::string& temp_path() const { return tmp_; }

    // Flush, fsync, close, rename onto the destination, fsync the directory. Throws naming the
    // file on any failure (the temporary is removed then).
    void commit() {
        using namespace safe_file_detail;
        if (!f_) fail("{}: already committed", path_);
        if (std::fflush(f_) != 0) io_fail("write");
        if (::fsync(::fileno(f_)) != 0) io_fail("fsync");
        const int rc = std::fclose(f_);
        f_ = nullptr;
        if (rc != 0) io_fail("close");
        if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
            const int e = errno;
            discard();
            fail("{}: cannot rename {} onto it: {}", path_, tmp_, std::strerror(e));
        }
        release(slot_);
        slot_ = -1;
        committed_ = true;
        const int dfd = ::open(dir_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            ::fsync(dfd);   // best effort: some filesystems refuse fsync on a directory
            ::close(dfd);
        }
    }

private:
    [[noreturn]] void io_fail(const char* what) {
        const int e = errno;
        discard();
        fail("{}: {} failed: {}", tmp_, what, std::strerror(e));
    }
    void discard() {
        if (f_) {
            std::fclose(f_);
            f_ = nullptr;
        }
        if (!committed_ && !tmp_.empty()) ::unlink(tmp_.c_str());
        safe_file_detail::release(slot_);
        slot_ = -1;
    }

    std::string path_, tmp_;
    std::FILE* f_ = nullptr;
    int slot_ = -1;
    bool committed_ = false;
};

}  // namespace kinfer
