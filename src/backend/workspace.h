// Grow-only scratch in one backend's memory: after the first chunk of a given size nothing is
// allocated any more. Buffers are handed out in order and handed back by ScratchScope, so nested
// layer code can borrow freely.
#pragma once
#include "backend/backend.h"

#include <algorithm>
#include <vector>

namespace kinfer::backend {

class Workspace {
public:
    explicit Workspace(Backend& be) : be_(be) {}
    ~Workspace() {
        for (Buffer& b : bufs_) be_.free(b);
    }
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    Backend& backend() const { return be_; }
    // A buffer of n floats valid until the scope that got it ends; contents are unspecified.
    float* get(size_t n) {
        if (next_ == bufs_.size()) bufs_.emplace_back();
        Buffer& b = bufs_[next_++];
        if (b.bytes < n * sizeof(float)) {
            be_.free(b);
            b = be_.alloc(std::max<size_t>(n, 1) * sizeof(float), "scratch");
        }
        return reinterpret_cast<float*>(b.ptr);
    }
    void reset() { next_ = 0; }
    size_t mark() const { return next_; }
    void release_to(size_t m) { next_ = m; }
    size_t bytes() const {
        size_t s = 0;
        for (const Buffer& b : bufs_) s += b.bytes;
        return s;
    }

private:
    Backend& be_;
    std::vector<Buffer> bufs_;
    size_t next_ = 0;
};

class ScratchScope {
public:
    explicit ScratchScope(Workspace& ws) : ws_(ws), mark_(ws.mark()) {}
    ~ScratchScope() { ws_.release_to(mark_); }
    ScratchScope(const ScratchScope&) = delete;
    ScratchScope& operator=(const ScratchScope&) = delete;
    float* get(size_t n) { return ws_.get(n); }

private:
    Workspace& ws_;
    size_t mark_;
};

}  // namespace kinfer::backend
