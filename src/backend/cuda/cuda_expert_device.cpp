#include "backend/cuda/cuda_expert_device.h"

#include "common/error.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>

namespace kinfer::backend::KINFER_CUDA_BACKEND_NS {

CudaExpertDevice::~CudaExpertDevice() {
    // No copy may still write a slot that is freed. A destructor must not throw: after a sticky
    // CUDA error (the context is lost) every call fails, and the process is on its way out with
    // the error that caused it already reported.
    try {
        be_.synchronize();
        for (const Stage& s : stages_)   // the copy stream's staged copies, which synchronize() does not wait for
            if (s.ticket) be_.copy_host_wait(s.ticket);
        for (Buffer& b : chunks_) be_.free(b);
        for (auto& [p, b] : pinned_) be_.free_pinned_host(b);
        for (Stage& s : stages_) be_.free_pinned_host(s.buf);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kinfer: %s: freeing the expert slots: %s\n", be_.name().c_str(), e.what());
    }
}

size_t CudaExpertDevice::reserve() const { return std::min(kReserve, be_.total_bytes() / 8); }

size_t CudaExpertDevice::capacity() const {
    const size_t f = be_.free_bytes(), keep = reserve();
    const size_t in_chunk = chunks_.empty() ? 0 : chunks_.back().bytes - chunk_used_;
    return (f > keep ? f - keep : 0) + in_chunk;
}

// The two rates: a 64 MiB copy timed after a warm-up one (the staged one also pins the ring's
// first buffers, which it keeps). The expert store asks before it takes its slots; a device too
// full for the probe's buffer gets a rate from a smaller one, and past that the PCIe 4.0 x16
// figure the simulated device assumes, rather than a failure.
double CudaExpertDevice::probe_gbps(bool staged) const {
    auto& self = const_cast<CudaExpertDevice&>(*this);
    for (size_t bytes = size_t(64) << 20; bytes >= (size_t(4) << 20); bytes /= 4) {
        Buffer dev, pinned;   // freed however the probe ends
        std::vector<uint8_t> pageable;
        struct Free {
            CudaExpertDevice& d;
            Buffer& dev;
            Buffer& pinned;
            ~Free() {
                if (pinned.ptr) d.be_.free_pinned_host(pinned);
                if (dev.ptr) d.be_.free(dev);
            }
        } release{self, dev, pinned};
        try {
            dev = self.be_.alloc(bytes, "copy speed probe");
            const void* src = nullptr;
            if (staged) {
                pageable.assign(bytes, 0);   // pageable and touched, as a resident mapping is
                src = pageable.data();
            } else {
                pinned = self.be_.alloc_pinned_host(bytes, "copy speed probe");
                std::memset(pinned.ptr, 0, bytes);
                src = pinned.ptr;
            }
            const runtime::DeviceBuffer to{reinterpret_cast<uint64_t>(dev.ptr), bytes};
            // From pinned memory one copy on the copy stream; from pageable memory copy_async's
            // way, through the ring (it knows only alloc_pinned's buffers as pinned).
            auto copy = [&] {
                return staged ? self.copy_async(to, 0, src, bytes) : self.be_.upload_after_compute(dev.ptr, src, bytes);
            };
            self.be_.copy_host_wait(copy());   // warm-up
            const auto t0 = std::chrono::steady_clock::now();
            self.be_.copy_host_wait(copy());
            const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            return std::max(staged ? 0.5 : 1.0, double(bytes) / std::max(s, 1e-9) / 1e9);
        } catch (const Error&) {
            continue;   // a smaller probe
        }
    }
    return 25.0;
}

double CudaExpertDevice::copy_gbps() const {
    if (gbps_ <= 0) gbps_ = probe_gbps(false);
    return gbps_;
}

double CudaExpertDevice::staged_copy_gbps() const {
    if (staged_gbps_ <= 0) staged_gbps_ = probe_gbps(true);
    return staged_gbps_;
}

runtime::DeviceBuffer CudaExpertDevice::alloc(size_t bytes) {
    if (bytes == 0) return {};
    const size_t need = (bytes + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    if (auto sp = spare_.find(need); sp != spare_.end() && !sp->second.empty()) {
        const uint64_t addr = sp->second.back();
        sp->second.pop_back();
        slots_[addr] = need;
        return runtime::DeviceBuffer{addr, bytes};
    }
    if (chunks_.empty() || chunks_.back().bytes - chunk_used_ < need) {
        // A new chunk, twice the last one (4 MiB first: a small model's few slots take little
        // more than they need) up to kChunkBytes, at most what is left above the reserve, at
        // least this slot.
        const size_t f = be_.free_bytes(), keep = reserve(), room = f > keep ? f - keep : 0;
        const size_t want = std::min(kChunkBytes, (size_t(4) << 20) << std::min<size_t>(chunks_.size(), 6));
        const size_t chunk = std::max(need, std::min(want, room / kSlotAlign * kSlotAlign));
        if (chunk > room) return {};   // "does not fit": the store stops adding slots
        try {
            chunks_.push_back(be_.alloc(chunk, "expert slots"));
        } catch (const Error&) {
            return {};
        }
        chunk_used_ = 0;
    }
    const uint64_t addr = reinterpret_cast<uint64_t>(chunks_.back().ptr) + chunk_used_;
    chunk_used_ += need;
    slots_[addr] = need;
    return runtime::DeviceBuffer{addr, bytes};
}

// The slot's memory stays in its chunk for a later slot of its size; a copy still queued into it
// is ordered before any later one (upload_after_compute follows the queued work).
void CudaExpertDevice::free(runtime::DeviceBuffer b) {
    const auto it = slots_.find(b.offset);
    if (it == slots_.end()) return;
    spare_[it->second].push_back(it->first);
    slots_.erase(it);
}

uint8_t* CudaExpertDevice::alloc_pinned(size_t bytes) {
    try {
        Buffer b = be_.alloc_pinned_host(bytes, "expert host tier");
        pinned_[b.ptr] = b;
        return b.ptr;
    } catch (const Error&) {
        return nullptr;   // the system refuses to pin that much: the caller says so
    }
}

void CudaExpertDevice::free_pinned(uint8_t* p, size_t) {
    const auto it = pinned_.find(p);
    if (it == pinned_.end()) return;
    be_.free_pinned_host(it->second);
    pinned_.erase(it);
}

bool CudaExpertDevice::is_pinned(const void* p, size_t bytes) const {
    const auto* q = static_cast<const uint8_t*>(p);
    auto it = pinned_.upper_bound(const_cast<uint8_t*>(q));
    if (it == pinned_.begin()) return false;
    --it;
    return q + bytes <= it->first + it->second.bytes;
}

uint64_t CudaExpertDevice::copy_async(runtime::DeviceBuffer dst, size_t dst_offset, const void* src, size_t bytes) {
    if (dst_offset + bytes > dst.bytes)
        fail("{}: expert copy of {} bytes at offset {} into a slot of {}", be_.name(), bytes, dst_offset, dst.bytes);
    auto* to = reinterpret_cast<uint8_t*>(dst.offset) + dst_offset;
    if (bytes == 0 || is_pinned(src, bytes)) return be_.upload_after_compute(to, src, bytes);
    // From pageable memory (the model's mapping, when there is no host tier): a copy that CUDA
    // stages itself may return only once the copy stream has run it, and this one runs after the
    // compute work queued so far, so the calling thread (the op thread issuing a layer's misses,
    // with the store's lock held) would wait for the GPU. Staged here instead, through a ring of
    // pinned buffers: a piece is copied into the next buffer once that buffer's last copy has
    // left it, and queued. The ring grows while the next buffer is still in flight, up to
    // stage_limit_ buffers (256 MiB: a K3 layer's burst of misses, 8 experts of about 24 MiB at
    // Q4_K, queues without a wait); past that the thread waits for the oldest piece. The copy
    // stream runs them in order, so the last piece's ticket is the whole copy's.
    const auto* from = static_cast<const uint8_t*>(src);
    uint64_t ticket = 0;
    for (size_t done = 0; done < bytes;) {
        const size_t piece = std::min(stage_bytes_, bytes - done);
        if (stages_.size() < stage_limit_ && (stages_.empty() || !be_.copy_done(stages_[next_stage_].ticket))) {
            try {
                stages_.insert(stages_.begin() + std::ptrdiff_t(stages_.empty() ? 0 : next_stage_),
                               Stage{be_.alloc_pinned_host(stage_bytes_, "expert copy staging"), 0});
            } catch (const Error&) {
                stage_limit_ = stages_.size();   // the system pins no more: the ring stays as it is
            }
        }
        if (stages_.empty()) return be_.upload_after_compute(to + done, from + done, bytes - done);
        Stage& s = stages_[next_stage_];
        if (s.ticket) be_.copy_host_wait(s.ticket);
        std::memcpy(s.buf.ptr, from + done, piece);
        ticket = s.ticket = be_.upload_after_compute(to + done, s.buf.ptr, piece);
        next_stage_ = (next_stage_ + 1) % stages_.size();   // the oldest piece's buffer next
        done += piece;
    }
    return ticket;
}

}  // namespace kinfer::backend::KINFER_CUDA_BACKEND_NS
