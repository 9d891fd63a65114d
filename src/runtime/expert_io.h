// Reads experts from the GGUF into host buffers: by copying out of the mapping (mmap), with
// pread (page cache), or with pread on an O_DIRECT descriptor (bypasses the page cache, so the
// store's RAM budget is the only RAM the experts take). Experts of one layer requested together
// are read in batches: consecutive expert ids are adjacent in each tensor, so a run of them is one
// read per tensor. Any failure names the layer, expert, file offset and cause.
#pragma once
#include "gguf/reader.h"
#include "runtime/expert_layout.h"

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kinfer::runtime {

enum class ExpertIo { mmap, pread, direct };
ExpertIo parse_expert_io(const std::string& s);   // "mmap" | "pread" | "direct"
const char* expert_io_name(ExpertIo io);

class ExpertReader {
public:
    ExpertReader(const gguf::File& f, const ExpertLayout& lay, ExpertIo io);
    ~ExpertReader();
    ExpertReader(const ExpertReader&) = delete;
    ExpertReader& operator=(const ExpertReader&) = delete;

    struct Job {
        int expert;
        uint8_t* dst;   // layout.layers[layer].bytes, 64-byte aligned
    };
    // Fills each job's buffer with its expert of `layer` (slices at buf_off). Thread-safe.
    // Throws kinfer::Error on a short or failed read.
    void read(int layer, std::vector<Job> jobs);

    ExpertIo io() const { return io_; }
    bool direct_active() const { return direct_; }   // false when the filesystem refused O_DIRECT
    uint64_t reads() const { return reads_.load(); }        // read calls issued (syscalls or copies)
    uint64_t bytes_read() const { return bytes_.load(); }   // bytes fetched from the file
    uint64_t experts_read() const { return experts_.load(); }

    // Tests: runs before each expert is read (e.g. to slow the I/O down or count loads).
    std::function<void(int layer, int expert)> before_read;

private:
    void read_run(int layer, int part, int e0, int count, const std::vector<uint8_t*>& dsts);
    [[noreturn]] void fail_read(int layer, int e, uint64_t off, size_t len, const std::string& why) const;

    const gguf::File& f_;
    const ExpertLayout& lay_;
    ExpertIo io_;
    int fd_ = -1;
    bool direct_ = false;
    std::atomic<uint64_t> reads_{0}, bytes_{0}, experts_{0};
};

}  // namespace kinfer::runtime
