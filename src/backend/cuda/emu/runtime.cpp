// The emulated CUDA runtime (runtime.h says what it keeps of a GPU's behaviour and why).
#include "backend/cuda/emu/runtime.h"
#include "runtime/range_alloc.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <optional>
#include <utility>
#include <vector>

// A stream: its queue of work not yet run, and how far it has got. Work n (counted from 1 in
// submission order) has run when executed >= n.
struct CUstream_st {
    struct Item {
        std::function<void()> work;           // empty for a wait
        CUstream_st* wait_for = nullptr;      // a wait: that stream up to wait_seq first
        uint64_t wait_seq = 0;
    };
    int device = 0;                           // the device current when it was created
    std::deque<Item> queue;
    uint64_t submitted = 0, executed = 0;
    bool draining = false;
    // Capture (cudaStreamBeginCapture): work goes into `graph` instead of the queue.
    kinfer::cuda::emu_rt::EmuGraph* graph = nullptr;
    bool invalidated = false;
    int capture_mode = 0;
    std::thread::id capture_thread;
};

namespace kinfer::cuda::emu_rt {

struct EmuEvent {
    CUstream_st* stream = nullptr;            // where it was last recorded (nullptr: never)
    uint64_t seq = 0;                         // complete when stream->executed >= seq
    bool captured = false;                    // recorded during a capture
};

struct EmuGraph {
    std::vector<std::function<void()>> work;
    std::vector<cpu_mode::WorkKey> keys;
};

struct EmuGraphExec {
    EmuGraph g;
};

namespace {

// One emulated device: an address range of its own, inaccessible outside queued work.
struct Device {
    uint8_t* base = nullptr;
    size_t size = 0;
    runtime::RangeAllocator ranges;
    std::map<size_t, size_t> used;            // offset -> bytes asked (cudaFree gives only the pointer)
    size_t span = 0;                          // bytes from base that allocations have reached (page multiple)
    int open_depth = 0;                       // > 0 while its memory is accessible
    explicit Device(size_t bytes) : size(bytes), ranges(bytes) {}
};

struct State {
    std::recursive_mutex m;
    std::vector<std::unique_ptr<Device>> devices;
    std::set<CUstream_st*> streams;
    std::map<const uint8_t*, size_t> pinned;  // cudaHostAlloc ranges
    bool query_runs_work = true;              // emu_set_query_runs_work
    uint64_t pointer_queries = 0;             // emu_pointer_queries
    std::set<std::pair<int, int>> peer_access;   // (device, peer) pairs enabled
};

State& state() {
    static State* s = new State;              // never destroyed: streams may outlive static destructors
    return *s;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

constexpr size_t page_up(size_t n) { return (n + 4095) & ~size_t(4095); }   // whole 4 KiB pages

cudaError_t set_error(cudaError_t e) {
    last_error = e;
    return e;
}

void protect(uint8_t* p, size_t bytes, int prot) {
    if (bytes && mprotect(p, bytes, prot) != 0) throw std::runtime_error("emulated cuda: mprotect failed");
}

// A device's memory is readable and writable while one of these for it lives (its queued work
// running, the runtime's own fills); nested scopes leave it open until the outermost ends. Only
// the span allocations have reached changes: the rest was never accessible. A stream's work opens
// its own device only, so a kernel that reads another GPU's buffer faults here as it does on a
// GPU without peer access to it (an illegal address; kinfer's kernels never rely on peer access,
// which it enables for copies only); a copy between two devices opens both.
struct Open {
    Device* d;
    explicit Open(int device) {
        if (device < 0 || size_t(device) >= state().devices.size())
            throw std::logic_error("emulated cuda: work on a device that does not exist");
        d = state().devices[size_t(device)].get();
        if (d->open_depth++ == 0) protect(d->base, d->span, PROT_READ | PROT_WRITE);
    }
    ~Open() {
        if (--d->open_depth == 0) protect(d->base, d->span, PROT_NONE);
    }
    Open(const Open&) = delete;
    Open& operator=(const Open&) = delete;
};

// The index of the device [p, p + bytes) lies in; -1 for host memory (or a range across the end).
int device_index(const void* p, size_t bytes = 1) {
    auto* q = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < state().devices.size(); ++i) {
        const Device& d = *state().devices[i];
        if (q >= d.base && q + bytes <= d.base + d.size) return int(i);
    }
    return -1;
}

Device* device_of(const void* p, size_t bytes = 1) {
    const int i = device_index(p, bytes);
    return i < 0 ? nullptr : state().devices[size_t(i)].get();
}

bool is_pinned(const void* p, size_t bytes) {
    auto* q = static_cast<const uint8_t*>(p);
    auto& pinned = state().pinned;
    auto it = pinned.upper_bound(q);
    if (it == pinned.begin()) return false;
    --it;
    return q >= it->first && q + bytes <= it->first + it->second;
}

// Runs s's queue up to work number `upto` (all of it by default), waits first.
void drain(CUstream_st* s, uint64_t upto = UINT64_MAX) {
    upto = std::min(upto, s->submitted);
    if (s->executed >= upto) return;
    if (s->draining)
        throw std::logic_error("emulated cuda: streams wait on each other in a cycle (a deadlock on a GPU)");
    s->draining = true;
    struct Done {
        CUstream_st* s;
        ~Done() { s->draining = false; }
    } done{s};
    std::optional<Open> open;                 // the stream's device, across consecutive work items
    while (s->executed < upto) {
        CUstream_st::Item item = std::move(s->queue.front());
        s->queue.pop_front();
        ++s->executed;
        if (item.wait_for) {
            open.reset();                     // the other stream's work runs with only its own device open
            if (state().streams.count(item.wait_for)) drain(item.wait_for, item.wait_seq);   // else destroyed, so done
        } else {
            if (!open) open.emplace(s->device);
            item.work();
        }
    }
}

void drain_all() {
    for (CUstream_st* s : state().streams) drain(s);
}

CUstream_st* checked(cudaStream_t s) {
    return state().streams.count(s) ? s : nullptr;
}

// An API call that a capture forbids (allocation, synchronization) while one is in progress in
// global mode, or in thread-local mode on the calling thread: it fails and invalidates those
// captures, as CUDA does.
bool refused_in_capture() {
    bool refused = false;
    for (CUstream_st* s : state().streams)
        if (s->graph && (s->capture_mode == cudaStreamCaptureModeGlobal ||
                         (s->capture_mode == cudaStreamCaptureModeThreadLocal && s->capture_thread == std::this_thread::get_id()))) {
            s->invalidated = true;
            refused = true;
        }
    return refused;
}

// A call that stream s (if any) may not take while it captures (it invalidates that capture),
// and, when `sync`, one that stops the host (refused_in_capture's captures too).
bool refused_on(CUstream_st* s, bool sync) {
    bool refused = sync && refused_in_capture();
    if (s && s->graph) s->invalidated = refused = true;
    return refused;
}

void enqueue(CUstream_st* s, std::function<void()> work, const cpu_mode::WorkKey& key) {
    if (s->graph) {
        if (!s->invalidated) {
            s->graph->work.push_back(std::move(work));
            s->graph->keys.push_back(key);
        }
        return;
    }
    s->queue.push_back({std::move(work), nullptr, 0});
    ++s->submitted;
}


}  // namespace

bool emu_set_query_runs_work(bool runs) {
    std::lock_guard lock(state().m);
    return std::exchange(state().query_runs_work, runs);
}

int emu_add_device(size_t bytes) {
    std::lock_guard lock(state().m);
    bytes = std::max<size_t>(page_up(bytes), 1 << 20);
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("emulated cuda: cannot reserve " + std::to_string(bytes) + " bytes");
    auto d = std::make_unique<Device>(bytes);
    d->base = static_cast<uint8_t*>(p);
    state().devices.push_back(std::move(d));
    return int(state().devices.size()) - 1;
}

static int emu_device_count() {
    std::lock_guard lock(state().m);
    return int(state().devices.size());
}

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorNoDevice: return "no CUDA-capable device is detected";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorInvalidResourceHandle: return "invalid resource handle";
        case cudaErrorNotReady: return "device not ready";
        case cudaErrorPeerAccessAlreadyEnabled: return "peer access is already enabled";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureIsolation: return "operation would make the legacy stream depend on a capturing blocking stream";
        case cudaErrorCapturedEvent: return "operation not permitted on an event last recorded in a capturing stream";
        case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
        case cudaErrorGraphExecUpdateFailure: return "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update";
    }
    return "unknown error";
}

cudaError_t cudaGetLastError() {
    const cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}


cudaError_t cudaGetDeviceCount(int* n) {
    *n = emu_device_count();
    return *n == 0 ? set_error(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= emu_device_count()) return set_error(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
    std::lock_guard lock(state().m);
    if (device < 0 || device >= int(state().devices.size())) return set_error(cudaErrorInvalidDevice);
    *p = cudaDeviceProp{};
    std::snprintf(p->name, sizeof p->name, "emulated GPU (CPU execution mode)");
    p->totalGlobalMem = state().devices[size_t(device)]->size;
    p->major = 9;
    p->minor = 0;
    p->multiProcessorCount = 1;
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    std::lock_guard lock(state().m);
    if (current_device >= int(state().devices.size())) return set_error(cudaErrorInvalidDevice);
    const Device& d = *state().devices[size_t(current_device)];
    *free_bytes = d.ranges.free_bytes();
    *total_bytes = d.size;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) {
    std::lock_guard lock(state().m);
    *p = nullptr;
    if (refused_in_capture()) return set_error(cudaErrorStreamCaptureUnsupported);
    if (current_device >= int(state().devices.size())) return set_error(cudaErrorInvalidDevice);
    Device& d = *state().devices[size_t(current_device)];
    const size_t need = runtime::RangeAllocator::rounded(std::max<size_t>(bytes, 1));
    const auto off = d.ranges.alloc(need);
    if (!off) return set_error(cudaErrorMemoryAllocation);
    d.used[*off] = need;
    *p = d.base + *off;
    const size_t end = page_up(*off + need), page = *off & ~size_t(4095);
    if (end > d.span) {
        if (d.open_depth > 0) protect(d.base + d.span, end - d.span, PROT_READ | PROT_WRITE);
        d.span = end;
    }
    const bool closed = d.open_depth == 0;
    if (closed) protect(d.base + page, end - page, PROT_READ | PROT_WRITE);
    std::memset(*p, 0xff, need);              // a GPU's fresh memory is not zeroed either
    if (closed) protect(d.base + page, end - page, PROT_NONE);
    return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
    std::lock_guard lock(state().m);
    if (!p) return cudaSuccess;
    if (refused_in_capture()) return set_error(cudaErrorStreamCaptureUnsupported);
    Device* d = device_of(p);
    if (!d) return set_error(cudaErrorInvalidValue);
    const auto it = d->used.find(size_t(static_cast<uint8_t*>(p) - d->base));
    if (it == d->used.end()) return set_error(cudaErrorInvalidValue);
    drain_all();                              // cudaFree waits for the device, as CUDA's does
    d->ranges.free(it->first, it->second);
    d->used.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
    std::lock_guard lock(state().m);
    *p = nullptr;
    if (refused_in_capture()) return set_error(cudaErrorStreamCaptureUnsupported);
    const size_t n = std::max<size_t>(page_up(bytes), 4096);
    void* q = std::aligned_alloc(4096, n);
    if (!q) return set_error(cudaErrorMemoryAllocation);
    state().pinned[static_cast<const uint8_t*>(q)] = n;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
    std::lock_guard lock(state().m);
    if (!p) return cudaSuccess;
    if (refused_in_capture()) return set_error(cudaErrorStreamCaptureUnsupported);
    if (!state().pinned.erase(static_cast<const uint8_t*>(p))) return set_error(cudaErrorInvalidValue);
    drain_all();                              // queued copies may still read it
    std::free(p);
    return cudaSuccess;
}

uint64_t emu_pointer_queries() {
    std::lock_guard lock(state().m);
    return state().pointer_queries;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
    std::lock_guard lock(state().m);
    ++state().pointer_queries;
    *a = cudaPointerAttributes{cudaMemoryTypeUnregistered, -1, nullptr, nullptr};
    auto& devs = state().devices;
    if (const Device* d = device_of(p)) {
        const auto i = std::find_if(devs.begin(), devs.end(), [d](const auto& x) { return x.get() == d; }) - devs.begin();
        *a = cudaPointerAttributes{cudaMemoryTypeDevice, int(i), const_cast<void*>(p), nullptr};
    } else if (is_pinned(p, 1)) {
        *a = cudaPointerAttributes{cudaMemoryTypeHost, -1, nullptr, const_cast<void*>(p)};
    }
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) {
    std::lock_guard lock(state().m);
    auto* st = new CUstream_st;
    st->device = current_device;
    state().streams.insert(st);
    *s = st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!st) return set_error(cudaErrorInvalidResourceHandle);
    drain(st);                                // its work still completes, as on a GPU
    state().streams.erase(st);
    delete st->graph;
    delete st;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    std::lock_guard lock(state().m);
    if (s && !checked(s)) return set_error(cudaErrorInvalidResourceHandle);
    if (refused_on(s, true)) return set_error(cudaErrorStreamCaptureUnsupported);
    if (s) drain(s);
    return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!st || !e) return set_error(cudaErrorInvalidResourceHandle);
    if (!e->stream || !state().streams.count(e->stream)) return cudaSuccess;   // never recorded, or its stream is gone (drained)
    if (st->graph) {
        // A captured wait on work outside the capture: CUDA refuses it and the capture is lost.
        if (!e->captured || e->stream != st) {
            st->invalidated = true;
            return set_error(cudaErrorStreamCaptureIsolation);
        }
        return cudaSuccess;                   // an event of this same capture: already in order
    }
    if (e->stream == st || e->stream->executed >= e->seq) return cudaSuccess;
    st->queue.push_back({{}, e->stream, e->seq});
    ++st->submitted;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) {
    *e = new EmuEvent;
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;                                 // waits already queued hold the stream and position
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!st || !e) return set_error(cudaErrorInvalidResourceHandle);
    e->stream = st;
    e->seq = st->submitted;
    e->captured = st->graph != nullptr;
    return cudaSuccess;
}

namespace {

// Synchronize and query: the work up to the event runs now (the emulated device is infinitely fast
// once asked). A query of an event whose work had not run yet says cudaErrorNotReady all the same
// (not a recorded error, as on a GPU): a caller that polls must poll again, as it would on a GPU
// where the copy is still in flight; the next query finds it complete.
cudaError_t event_wait(cudaEvent_t e, bool query) {
    std::lock_guard lock(state().m);
    if (!e) return set_error(cudaErrorInvalidResourceHandle);
    if (refused_in_capture()) return set_error(cudaErrorStreamCaptureUnsupported);
    if (e->captured) return set_error(cudaErrorCapturedEvent);   // recorded in a capture: nothing to wait for
    if (!e->stream || !state().streams.count(e->stream)) return cudaSuccess;
    const bool pending = e->stream->executed < std::min(e->seq, e->stream->submitted);
    if (query && pending && !state().query_runs_work) return cudaErrorNotReady;
    drain(e->stream, e->seq);
    return query && pending ? cudaErrorNotReady : cudaSuccess;
}

}  // namespace

cudaError_t cudaEventSynchronize(cudaEvent_t e) { return event_wait(e, false); }
cudaError_t cudaEventQuery(cudaEvent_t e) { return event_wait(e, true); }

namespace {

// Where a copy's bytes may live for its kind, and the copy itself (rows of `width` bytes).
cudaError_t copy_rows(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                      cudaMemcpyKind kind, cudaStream_t s, int what) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!st) return set_error(cudaErrorInvalidResourceHandle);
    if (width == 0 || height == 0) return cudaSuccess;
    const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
    const bool dst_dev = device_of(dst, dspan) != nullptr, src_dev = device_of(src, sspan) != nullptr;
    const bool want_dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    const bool want_src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost || dst_dev != want_dst_dev || src_dev != want_src_dev)
        return set_error(cudaErrorInvalidValue);   // also a device pointer outside any allocation's range
    auto* d = static_cast<uint8_t*>(dst);
    auto* q = static_cast<const uint8_t*>(src);
    const cpu_mode::WorkKey key{0, what + int(kind)};
    if (kind == cudaMemcpyHostToDevice && !is_pinned(src, sspan)) {
        // Pageable memory: staged when queued, so the caller may reuse it on return. A capture
        // cannot hold such a copy.
        if (refused_on(st, false)) return set_error(cudaErrorStreamCaptureUnsupported);
        auto staged = std::make_shared<std::vector<uint8_t>>(width * height);
        for (size_t r = 0; r < height; ++r) std::memcpy(staged->data() + r * width, q + r * spitch, width);
        enqueue(st, [d, dpitch, width, height, staged, dd = device_index(d)] {
            Open open_dst(dd);   // dd >= 0: a host-to-device copy's destination is a device's
            for (size_t r = 0; r < height; ++r) std::memcpy(d + r * dpitch, staged->data() + r * width, width);
        }, key);
        return cudaSuccess;
    }
    // A copy opens the devices it touches (another GPU's memory too, as CUDA's unified addresses
    // allow a copy to), whatever its stream's device.
    auto rows = [d, dpitch, q, spitch, width, height, dd = device_index(d), sd = device_index(q)] {
        std::optional<Open> open_dst, open_src;
        if (dd >= 0) open_dst.emplace(dd);
        if (sd >= 0) open_src.emplace(sd);
        for (size_t r = 0; r < height; ++r) std::memmove(d + r * dpitch, q + r * spitch, width);
    };
    if (kind == cudaMemcpyDeviceToHost && !is_pinned(dst, dspan)) {
        // Into pageable memory: returns once the copy is done, so the stream runs up to it.
        if (refused_on(st, true)) return set_error(cudaErrorStreamCaptureUnsupported);
        enqueue(st, rows, key);
        drain(st);
        return cudaSuccess;
    }
    enqueue(st, rows, key);
    return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s) {
    return copy_rows(dst, bytes, src, bytes, bytes, 1, kind, s, cpu_mode::kCopy);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s) {
    if (dpitch < width || spitch < width) return set_error(cudaErrorInvalidValue);
    return copy_rows(dst, dpitch, src, spitch, width, height, kind, s, cpu_mode::kCopy2D);
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
    std::lock_guard lock(state().m);
    const int n = int(state().devices.size());
    if (!can || device < 0 || peer < 0 || device >= n || peer >= n) return set_error(cudaErrorInvalidDevice);
    *can = device != peer;
    return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags) {
    std::lock_guard lock(state().m);
    const int n = int(state().devices.size());
    if (flags != 0 || peer < 0 || peer >= n || peer == current_device) return set_error(cudaErrorInvalidDevice);
    if (!state().peer_access.insert({current_device, peer}).second) return set_error(cudaErrorPeerAccessAlreadyEnabled);
    return cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t s) {
    {
        std::lock_guard lock(state().m);
        auto& devs = state().devices;
        if (dst_device < 0 || src_device < 0 || dst_device >= int(devs.size()) || src_device >= int(devs.size()) ||
            device_of(dst, bytes) != devs[size_t(dst_device)].get() || device_of(src, bytes) != devs[size_t(src_device)].get())
            return set_error(cudaErrorInvalidValue);
    }
    return copy_rows(dst, bytes, src, bytes, bytes, 1, cudaMemcpyDeviceToDevice, s, cpu_mode::kCopy);
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!st) return set_error(cudaErrorInvalidResourceHandle);
    if (st->graph) return set_error(cudaErrorStreamCaptureUnsupported);
    st->graph = new EmuGraph;
    st->invalidated = false;
    st->capture_mode = mode;
    st->capture_thread = std::this_thread::get_id();
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g) {
    std::lock_guard lock(state().m);
    *g = nullptr;
    CUstream_st* st = checked(s);
    if (!st || !st->graph) return set_error(cudaErrorInvalidValue);
    if (st->capture_mode != cudaStreamCaptureModeRelaxed && st->capture_thread != std::this_thread::get_id())
        return set_error(cudaErrorStreamCaptureWrongThread);
    std::unique_ptr<EmuGraph> graph(st->graph);
    st->graph = nullptr;
    if (st->invalidated) {
        st->invalidated = false;
        return set_error(cudaErrorStreamCaptureInvalidated);
    }
    *g = graph.release();
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!st) return set_error(cudaErrorInvalidResourceHandle);
    *status = !st->graph ? cudaStreamCaptureStatusNone
              : st->invalidated ? cudaStreamCaptureStatusInvalidated : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphGetNodes(cudaGraph_t g, void** nodes, size_t* count) {
    if (!g || nodes || !count) return set_error(cudaErrorInvalidValue);
    *count = g->work.size();
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long) {
    if (!g) return set_error(cudaErrorInvalidValue);
    *exec = new EmuGraphExec{*g};
    return cudaSuccess;
}

cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info) {
    if (!exec || !g) return set_error(cudaErrorInvalidValue);
    const bool same = exec->g.keys == g->keys;   // CUDA's rule (cpu_mode::WorkKey)
    if (info) info->result = same ? cudaGraphExecUpdateSuccess : cudaGraphExecUpdateError;
    if (!same) return set_error(cudaErrorGraphExecUpdateFailure);
    exec->g.work = g->work;                   // the new arguments and shapes, the same kernels
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    std::lock_guard lock(state().m);
    CUstream_st* st = checked(s);
    if (!exec || !st) return set_error(cudaErrorInvalidResourceHandle);
    for (size_t i = 0; i < exec->g.work.size(); ++i) enqueue(st, exec->g.work[i], exec->g.keys[i]);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

}  // namespace kinfer::cuda::emu_rt

namespace kinfer::cuda::cpu_mode {

void submit(cudaStream_t stream, std::function<void()> work, const WorkKey& key) {
    using namespace kinfer::cuda::emu_rt;
    if (!stream) {
        // The legacy default stream, as the kernel tests use it on host memory: run now. Nothing
        // queues on it with device memory (CudaBackend has its own streams), which stays closed:
        // such a kernel would fault, as a host read of device memory does.
        work();
        return;
    }
    std::unique_lock lock(state().m);
    CUstream_st* st = checked(stream);
    if (!st) throw std::invalid_argument("emulated cuda: work queued on a stream that does not exist");
    enqueue(st, std::move(work), key);
}

}  // namespace kinfer::cuda::cpu_mode
