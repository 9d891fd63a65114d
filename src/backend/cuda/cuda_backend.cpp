// The CUDA backend: memory, streams and events through the CUDA runtime API, ops through the
// nvcc-built kernels (kernels.h, namespace kinfer::cuda::gpu). Built by the host compiler (see
// cuda_backend.h). Ops are queued on the compute stream; download and route (whose results are
// host arrays) wait for it.
#ifndef KINFER_CUDA_NS
#define KINFER_CUDA_NS gpu
#endif
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_expert_device.h"
#include "backend/device_memory.h"

#include "backend/cuda/kernels.h"
#include "common/error.h"

#if defined(KINFER_CUDA_EMU_RUNTIME)
#include "backend/cuda/emu/runtime.h"
#else
#include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>
#include <tuple>
#include <vector>

namespace kinfer::backend::KINFER_CUDA_BACKEND_NS {

namespace kern = kinfer::cuda::KINFER_CUDA_NS;   // the launchers: nvcc's kernels, or their CPU-mode build

namespace {

cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

std::string gib(size_t bytes) { return fmt::format("{:.1f} GiB", double(bytes) / double(1ull << 30)); }

#if !defined(KINFER_CUDA_EMU_RUNTIME)
// "cuda0" / "cuda:0" / "cuda" -> 0; -1 when the spec is not of that form.
int parse_index(const std::string& spec) {
    std::string rest = spec.substr(4);
    if (!rest.empty() && rest[0] == ':') rest = rest.substr(1);
    if (rest.empty()) return 0;
    if (rest.size() > 3 || !std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
    return std::stoi(rest);
}
#endif

}  // namespace

#if !defined(KINFER_CUDA_EMU_RUNTIME)

std::vector<std::string> list_devices() {
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) return {fmt::format("cuda: no device ({})", cudaGetErrorString(err))};
    if (n == 0) return {"cuda: no device"};
    std::vector<std::string> out;
    for (int i = 0; i < n; ++i) {
        cudaDeviceProp p{};
        size_t free_b = 0, total_b = 0;
        if (cudaGetDeviceProperties(&p, i) != cudaSuccess || cudaSetDevice(i) != cudaSuccess ||
            cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
            out.push_back(fmt::format("cuda{}: cannot be queried ({})", i, cudaGetErrorString(cudaGetLastError())));
            continue;
        }
        out.push_back(fmt::format("cuda{}: {}, {} ({} free), compute capability {}.{}", i, p.name, gib(total_b),
                                  gib(free_b), p.major, p.minor));
    }
    return out;
}

std::unique_ptr<Backend> open_device(const std::string& spec, std::string* why) {
    const int idx = parse_index(spec);
    if (idx < 0) fail("--device '{}': expected cudaN (cuda0, cuda1, ...)", spec);
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
        if (why) *why = err != cudaSuccess ? fmt::format("no CUDA device ({})", cudaGetErrorString(err)) : "no CUDA device";
        return nullptr;
    }
    if (idx >= n) {
        if (why) *why = fmt::format("no CUDA device {} (this machine has {})", idx, n);
        return nullptr;
    }
    return std::make_unique<CudaBackend>(idx, "cuda" + std::to_string(idx));
}

#else

std::unique_ptr<Backend> open_device(const std::string& spec, std::string*) {
    size_t bytes = size_t(2) << 30;
    if (spec.rfind("emu-cuda", 0) != 0 || (spec.size() > 8 && spec[8] != ':'))
        fail("--device '{}': expected emu-cuda or emu-cuda:SIZE (an emulated GPU, e.g. emu-cuda:2GiB)", spec);
    if (spec.size() > 9) bytes = runtime::parse_bytes(spec.substr(9));
    const int idx = emu_add_device(bytes);
    return std::make_unique<CudaBackend>(idx, "emu-cuda" + std::to_string(idx));
}

#endif

runtime::Device* expert_device(Backend& be) {
    auto* c = dynamic_cast<CudaBackend*>(&be);
    return c ? &c->expert_device() : nullptr;
}

CudaBackend::Math CudaBackend::math_from_env(const char* var, const char* what, bool kda) const {
    const char* v = std::getenv(var);
    Math m = Math::fp32;
    if (!v || !*v || (kinfer::cuda::math_from_name(v, m) && kinfer::cuda::math_taken(m, kda))) return m;
    fail("{}: {}='{}': expected {} (the arithmetic of {})", name_, var, v, kinfer::cuda::math_choices(kda), what);
}


CudaBackend::CudaBackend(int device, std::string name) : device_(device), name_(std::move(name)) {
    if (const char* g = std::getenv("KINFER_CUDA_GEMM"); g && *g) {
        if (std::strcmp(g, "int8") == 0) prefill_gemm_ = PrefillGemm::int8;
        else if (std::strcmp(g, "fused") == 0) prefill_gemm_ = PrefillGemm::fused;
        else if (std::strcmp(g, "fp16") != 0)
            fail("{}: KINFER_CUDA_GEMM='{}': expected fp16, int8 or fused (the prefill GEMM of the quantized types)", name_,
                 g);
    }
    kda_math_ = math_from_env("KINFER_CUDA_KDA", "the chunked KDA of prefill", true);
    mla_math_ = math_from_env("KINFER_CUDA_MLA", "the MLA attention kernels", false);
    select();
    cudaStream_t s = nullptr;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating the compute stream");
    compute_ = s;
    check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "creating the copy stream");
    copy_ = s;
}

CudaBackend::~CudaBackend() {
    step_abort();   // a step that threw: its capture is dropped
    select();
    expert_device_.reset();   // it synchronizes the compute stream and frees its slots: before the streams go
    for (void* e : execs_)
        if (e) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
    for (auto& [ticket, e] : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e.ev));
    for (Buffer* b : {&scratch_, &gemm_ws_})
        if (b->valid()) {
            unregister_device_allocation(b->ptr);   // before the address can be handed out again
            cudaFree(b->ptr);
        }
    kern::blas_destroy(static_cast<kern::Blas*>(blas_));
    for (auto& [first, t] : tables_) {
        retire(t.dev, false);
        retire(t.pinned, true);
    }
    tables_.clear();
    free_retired();
    cudaStreamDestroy(stream_of(compute_));
    cudaStreamDestroy(stream_of(copy_));
    // Whatever is still registered (buffers the owner never freed) goes too: the registry holds
    // name_'s address.
    unregister_device_allocations(name_.c_str());
}

void CudaBackend::select() const { cudaSetDevice(device_); }

void CudaBackend::check(int e, const char* what) const {
    if (e != cudaSuccess) fail("{}: {}: CUDA error {} ({})", name_, what, e, cudaGetErrorString(cudaError_t(e)));
}

size_t CudaBackend::total_bytes() const {
    select();
    size_t f = 0, t = 0;
    return cudaMemGetInfo(&f, &t) == cudaSuccess ? t : 0;
}

size_t CudaBackend::free_bytes() const {
    select();
    size_t f = 0, t = 0;
    return cudaMemGetInfo(&f, &t) == cudaSuccess ? f : 0;
}

std::string CudaBackend::describe() const {
    cudaDeviceProp p{};
    cudaGetDeviceProperties(&p, device_);
    return fmt::format("{}: {}, {} ({} free), compute capability {}.{}{}", name_, p.name, gib(total_bytes()),
                       gib(free_bytes()), p.major, p.minor,
                       prefill_gemm_ == PrefillGemm::int8    ? ", prefill GEMM on int8 tensor cores"
                       : prefill_gemm_ == PrefillGemm::fused ? ", prefill GEMM fused (weights decoded in the kernel)"
                                                             : "");
}

// ---- memory ----

Buffer CudaBackend::alloc(size_t bytes, std::string_view what) {
    HostStop stop(*this);
    select();
    void* p = nullptr;
    if (const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess) {
        cudaGetLastError();
        if (e != cudaErrorMemoryAllocation)   // an earlier fault (a lost context), not a full device
            fail("{}: cannot allocate {} bytes for {}: CUDA error {} ({})", name_, bytes, what, int(e), cudaGetErrorString(e));
        fail("{}: out of device memory for {}: {} bytes asked, {} free of {}", name_, what, bytes, gib(free_bytes()),
             gib(total_bytes()));
    }
    // Known to owns() without a driver call, and to the CPU backend, which refuses it.
    register_device_allocation(name_.c_str(), p, std::max<size_t>(bytes, 1));
    return Buffer{static_cast<uint8_t*>(p), bytes, 0};
}

void CudaBackend::free(Buffer& b) {
    HostStop stop(*this);
    if (b.valid()) {
        select();
        // A latent cache's first page going: its page table goes too (a later cache may get
        // the same address).
        if (const auto t = tables_.find(b.ptr); t != tables_.end()) {
            retire(t->second.dev, false);
            retire(t->second.pinned, true);
            tables_.erase(t);
        }
        unregister_device_allocation(b.ptr);
        cudaFree(b.ptr);
    }
    b = Buffer{};
}

void CudaBackend::retire(Buffer b, bool pinned) {
    if (b.valid()) retired_.emplace_back(b, pinned);
}

void CudaBackend::free_retired() {
    for (auto& [b, pinned] : retired_) pinned ? free_pinned_host(b) : free(b);
    retired_.clear();
}

Buffer CudaBackend::alloc_pinned_host(size_t bytes, std::string_view what) {
    HostStop stop(*this);
    select();   // the pinned memory belongs to the current device's context
    void* p = nullptr;
    if (cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocPortable) != cudaSuccess) {
        cudaGetLastError();
        fail("{}: cannot pin {} bytes of host memory for {}", name_, bytes, what);
    }
    return Buffer{static_cast<uint8_t*>(p), bytes, 0};
}

void CudaBackend::free_pinned_host(Buffer& b) {
    HostStop stop(*this);
    select();
    if (b.valid()) cudaFreeHost(b.ptr);
    b = Buffer{};
}

bool CudaBackend::owns(const void* p, size_t bytes) const {
    if (bytes == 0) return true;
    // Inside one of this backend's allocations: a lookup in the registry alloc() keeps. Anything
    // else (memory of another backend on the same GPU, or none of this device's) asks the driver,
    // as every op's pointers did before the registry: a call a pointer, a few thousand a token.
    if (device_containing(p, bytes) == name_.c_str()) return true;
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return a.type == cudaMemoryTypeDevice && a.device == device_;
}

void CudaBackend::need(const void* p, size_t bytes, const char* op, const char* arg) const {
    if (!owns(p, bytes)) fail("{}: op {} was handed memory that is not this device's for {} ({} bytes at {})", name_, op, arg, bytes, p);
}

void CudaBackend::need(const Mat& W, const char* op) const {
    if (!owns(W.data, W.bytes())) fail("{}: op {} was handed weight {} outside this device's memory", name_, op, W.name);
}

// The scratch buffer and the GEMM workspace grow by half at least (a prefill's ops ask a little
// more, chunk after chunk). The old buffer may still be read by queued work: it is retired (freed
// when the compute stream is next known idle) rather than freed after a wait, so growing never
// stops the host in the middle of a step.
void CudaBackend::grow(Buffer& b, size_t bytes, const char* what) {
    // The capture ends here, outside the fallbacks below: an error of the graph itself (an
    // invalidated capture, a refused launch) must reach the caller, not pass for a full device.
    HostStop stop(*this);
    const size_t grown = std::max(bytes, b.bytes + b.bytes / 2);
    retire(b, false);
    b = Buffer{};
    try {
        b = alloc(grown, what);
    } catch (const std::exception&) {
        // Without the extra half, and then with the retired buffers freed (after a wait).
        try {
            b = alloc(bytes, what);
        } catch (const std::exception&) {
            synchronize();
            b = alloc(bytes, what);
        }
    }
}

void* CudaBackend::scratch(size_t bytes) {
    if (scratch_.bytes < bytes) grow(scratch_, bytes, "op scratch");
    return scratch_.ptr;
}

void* CudaBackend::blas() {
    if (!blas_) {
        HostStop stop(*this);   // creating the handle allocates
        select();
        try {
            blas_ = kern::blas_create(compute_);
        } catch (const std::exception& e) {
            fail("{}: {}", name_, e.what());
        }
    }
    return blas_;
}

void* CudaBackend::gemm_workspace(size_t bytes) {
    if (gemm_ws_.bytes < bytes) grow(gemm_ws_, bytes, "prefill GEMM workspace");
    return gemm_ws_.ptr;
}

// ---- copies ----

void CudaBackend::upload(void* dst, const void* host_src, size_t bytes) {
    HostStop stop(*this);
    need(dst, bytes, "upload", "dst");
    select();
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_of(compute_)), "upload");
    check(cudaStreamSynchronize(stream_of(compute_)), "upload");   // host_src may be reused on return
}

void CudaBackend::download(void* host_dst, const void* src, size_t bytes) {
    HostStop stop(*this);
    need(src, bytes, "download", "src");
    select();
    check(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_of(compute_)), "download");
    check(cudaStreamSynchronize(stream_of(compute_)), "download");
    free_retired();   // the compute stream, the only one reading them, is idle
}

void CudaBackend::copy(void* dst, const void* src, size_t bytes) {
    need(dst, bytes, "copy", "dst");
    need(src, bytes, "copy", "src");
    select();
    check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_of(compute_)), "copy");
}

bool CudaBackend::copy_to(Backend& dst_be, void* dst, const void* src, size_t bytes) {
    auto* peer = dynamic_cast<CudaBackend*>(&dst_be);
    if (!peer) return false;
    HostStop stop(*this);
    need(src, bytes, "copy_to", "src");
    peer->need(dst, bytes, "copy_to", "dst");
    // The peer's queued kernels may still read the buffer being overwritten; this device's
    // copy then follows the kernels that wrote src, and is complete before the peer's next op.
    peer->synchronize();
    enable_peer_access(*peer);
    select();
    check(cudaMemcpyPeerAsync(dst, peer->device_, src, device_, bytes, stream_of(compute_)), "copy_to");
    check(cudaStreamSynchronize(stream_of(compute_)), "copy_to");
    return true;
}

// Without peer access a copy between two GPUs is staged through host memory (CUDA's rule); with
// it, it goes over NVLink or PCIe directly. Asked once per pair, both ways; where the two
// cannot (or are the same GPU) nothing changes.
void CudaBackend::enable_peer_access(CudaBackend& peer) {
    if (peer.device_ == device_ || !peers_asked_.insert(peer.device_).second) return;
    peer.peers_asked_.insert(device_);
    int can = 0;
    if (cudaDeviceCanAccessPeer(&can, device_, peer.device_) != cudaSuccess || !can) {
        cudaGetLastError();
        return;
    }
    for (CudaBackend* from : {this, &peer}) {
        from->select();
        const cudaError_t e = cudaDeviceEnablePeerAccess(from == this ? peer.device_ : device_, 0);
        if (e != cudaSuccess) cudaGetLastError();   // already enabled (another backend on the same GPU), or refused
    }
}

Event CudaBackend::upload_async(void* dst, const void* host_src, size_t bytes) {
    HostStop stop(*this);
    select();
    need(dst, bytes, "upload_async", "dst");
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_of(copy_)), "upload_async");
    return Event{record_copy("upload_async")};
}

uint64_t CudaBackend::record_copy(const char* op) {
    std::lock_guard lock(events_mu_);
    reap();
    cudaEvent_t ev = nullptr;
    check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), op);
    const cudaError_t recorded = cudaEventRecord(ev, stream_of(copy_));
    if (recorded != cudaSuccess) cudaEventDestroy(ev);
    check(recorded, op);
    const uint64_t ticket = next_ticket_++;
    events_[ticket] = CopyEvent{ev, 0};
    return ticket;
}

// Copies on the copy stream complete in the order they were queued: the oldest events that have
// fired are released, and a ticket older than every remaining event is complete. An event a
// host thread is blocked on stays (and the ones after it) until that thread is done with it.
// Called with events_mu_ held.
void CudaBackend::reap() {
    while (!events_.empty()) {
        const auto it = events_.begin();
        if (it->second.host_waiters > 0 || cudaEventQuery(static_cast<cudaEvent_t>(it->second.ev)) != cudaSuccess) break;
        cudaEventDestroy(static_cast<cudaEvent_t>(it->second.ev));
        events_.erase(it);
    }
    cudaGetLastError();   // cudaErrorNotReady is not an error
}

// The compute stream waits on the GPU; the host thread goes on.
void CudaBackend::wait(Event e) {
    if (e.ticket == 0) return;
    std::lock_guard lock(events_mu_);                       // the event stays while the wait is queued
    const auto it = events_.find(e.ticket);
    if (it == events_.end()) return;                        // reaped: the copy is complete
    HostStop stop(*this);                                   // a wait on the copy stream: not in a capture
    select();
    check(cudaStreamWaitEvent(stream_of(compute_), static_cast<cudaEvent_t>(it->second.ev), 0), "wait");
}

bool CudaBackend::copy_done(uint64_t ticket) {
    std::lock_guard lock(events_mu_);
    const auto it = events_.find(ticket);
    if (it == events_.end()) return true;
    HostStop stop(*this);
    select();
    const cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(it->second.ev));
    if (e == cudaErrorNotReady) {
        cudaGetLastError();
        return false;
    }
    check(e, "copy_done");
    return true;
}

void CudaBackend::copy_host_wait(uint64_t ticket) {
    void* ev = nullptr;
    {
        // Blocking under the lock would hold up the I/O thread's next copies: the event is
        // marked instead, so that reap() leaves it alone meanwhile.
        std::lock_guard lock(events_mu_);
        const auto it = events_.find(ticket);
        if (it == events_.end()) return;
        ev = it->second.ev;
        ++it->second.host_waiters;
    }
    // Unmarked however this ends (HostStop may throw too); reap() never erases a marked event.
    struct Unmark {
        CudaBackend& be;
        uint64_t ticket;
        ~Unmark() {
            std::lock_guard lock(be.events_mu_);
            --be.events_.at(ticket).host_waiters;
        }
    } unmark{*this, ticket};
    HostStop stop(*this);
    select();
    check(cudaEventSynchronize(static_cast<cudaEvent_t>(ev)), "copy_host_wait");
}

uint64_t CudaBackend::upload_after_compute(void* dst, const void* host_src, size_t bytes) {
    HostStop stop(*this);
    select();   // first: the expert store's I/O thread calls this, and a thread's device is its own
    need(dst, bytes, "upload_after_compute", "dst");
    // The copy may overwrite what kernels already queued still read (an evicted expert's slot):
    // the copy stream first waits for the compute stream as it stands now.
    cudaEvent_t now = nullptr;
    check(cudaEventCreateWithFlags(&now, cudaEventDisableTiming), "upload_after_compute: event");
    check(cudaEventRecord(now, stream_of(compute_)), "upload_after_compute: event");
    check(cudaStreamWaitEvent(stream_of(copy_), now, 0), "upload_after_compute: wait");
    cudaEventDestroy(now);   // released once the wait is queued
    check(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_of(copy_)), "upload_after_compute");
    return record_copy("upload_after_compute");
}

runtime::Device& CudaBackend::expert_device() {
    if (!expert_device_) expert_device_ = std::make_unique<CudaExpertDevice>(*this);
    return *expert_device_;
}

void CudaBackend::synchronize() {
    HostStop stop(*this);
    select();
    check(cudaStreamSynchronize(stream_of(compute_)), "synchronize");
    free_retired();
}

// ---- CUDA graphs of decode steps ----

// Only the thread that runs the step ends and restarts its captures (the session keeps graphs
// off where another thread queues work: the expert store's copies, --split's transfers).
CudaBackend::HostStop::HostStop(CudaBackend& b)
    : be(b), was(b.capturing_ && std::this_thread::get_id() == b.step_thread_) {
    if (was) be.end_segment();
}

CudaBackend::HostStop::~HostStop() {
    if (was && be.step_) {
        try {
            be.begin_segment();
        } catch (...) {
            be.step_ = false;   // the rest of the step runs without graphs
        }
    }
}

void CudaBackend::begin_segment() {
    select();
    // Thread-local: the expert store's own thread may allocate and copy meanwhile.
    check(cudaStreamBeginCapture(stream_of(compute_), cudaStreamCaptureModeThreadLocal), "CUDA graph capture");
    capturing_ = true;
}

void CudaBackend::end_segment() {
    capturing_ = false;
    select();
    cudaGraph_t g = nullptr;
    // An invalidated capture has lost its work: a call that is not behind a HostStop (a bug).
    check(cudaStreamEndCapture(stream_of(compute_), &g), "CUDA graph capture (an op the capture refused)");
    size_t nodes = 0;
    const cudaError_t counted = cudaGraphGetNodes(g, nullptr, &nodes);
    if (counted != cudaSuccess || nodes == 0) {
        cudaGraphDestroy(g);
        check(counted, "CUDA graph");
        return;
    }
    const size_t at = segment_++;
    if (execs_.size() <= at) execs_.resize(at + 1, nullptr);
    auto exec = static_cast<cudaGraphExec_t>(execs_[at]);
    if (exec) {
        // The same kernels with this step's arguments (positions, pointers): updated in place.
        cudaGraphExecUpdateResultInfo info{};
        if (cudaGraphExecUpdate(exec, g, &info) != cudaSuccess) {
            cudaGetLastError();
            cudaGraphExecDestroy(exec);
            exec = nullptr;
            execs_[at] = nullptr;   // not left behind if the instantiation below fails
        }
    }
    if (!exec) {
        const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
        if (e != cudaSuccess) cudaGraphDestroy(g);
        check(e, "CUDA graph instantiate");
        ++graph_builds_;
    }
    execs_[at] = exec;
    cudaGraphDestroy(g);
    check(cudaGraphLaunch(exec, stream_of(compute_)), "CUDA graph launch");
    ++graph_launches_;
}

void CudaBackend::step_begin(int64_t n_tokens) {
    if (n_tokens != 1 || step_) return;
    step_thread_ = std::this_thread::get_id();
    step_ = true;
    segment_ = 0;
    begin_segment();
}

void CudaBackend::step_end() {
    if (!step_) return;
    step_ = false;
    if (capturing_) end_segment();
}

void CudaBackend::step_abort() {
    step_ = false;
    if (!capturing_) return;
    // The capture's work is thrown away; an error here (an invalidated capture) is not the
    // step's, which is the one the caller reports. It must not throw.
    capturing_ = false;
    select();
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_of(compute_), &g);
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
}

// ---- ops with kernels ----

void CudaBackend::matmul(const Mat& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy) {
    need(W, "matmul");
    if (!kern::matvec_supported(W.type)) fail("{}: matmul: no kernel for weight {} of type {}", name_, W.name, quant::type_facts(W.type).name);
    select();
    if (int8_matmul(W, n)) {
        // Decode (and up to kGemmMinTokens tokens) on int8 activations (matvec_q8.cu says why),
        // and with KINFER_CUDA_GEMM=int8 prefill too (mmq.cu): the activation rows quantized once
        // into the scratch buffer, then dp4a or the int8 tensor cores.
        void* xq = scratch(kern::q8_act_row_bytes(W.type, W.cols) * size_t(n));
        try {
            kern::quantize_act(W.type, x, ldx, n, W.cols, xq, compute_);
            if (n < kern::kGemmMinTokens) kern::matvec_q8(W.type, W.data, W.row_bytes, W.rows, W.cols, xq, n, y, ldy, compute_);
            else kern::mmq_matmul(W.type, W.data, W.row_bytes, W.rows, W.cols, xq, n, y, ldy, compute_);
        } catch (const std::exception& e) {
            fail("{}: matmul {} ({} x {}, {} tokens): {}", name_, W.name, W.rows, W.cols, n, e.what());
        }
        check(cudaGetLastError(), "matmul");
        return;
    }
    if (n < kern::kGemmMinTokens) {
        kern::matvec(W.type, W.data, W.row_bytes, W.rows, W.cols, x, ldx, n, y, ldy, compute_);
        check(cudaGetLastError(), "matmul");
        return;
    }
    if (fused_matmul(W, n)) {
        // Prefill with KINFER_CUDA_GEMM=fused: the activations converted, then the weights decoded
        // inside the fp16 tensor-core GEMM (gemm_fused.cu).
        void* ws = gemm_workspace(kern::fused_gemm_workspace_bytes(W.cols, n));
        try {
            kern::fused_gemm_matmul(W.type, W.data, W.row_bytes, W.rows, W.cols, x, ldx, n, y, ldy, ws, gemm_ws_.bytes,
                                    compute_);
        } catch (const std::exception& e) {
            fail("{}: matmul {} ({} x {}, {} tokens): {}", name_, W.name, W.rows, W.cols, n, e.what());
        }
        check(cudaGetLastError(), "matmul");
        return;
    }
    // Prefill: dequantized tiles and cuBLAS (gemm.cu), on the compute stream.
    void* ws = gemm_workspace(kern::gemm_workspace_bytes(W.type, W.rows, W.cols, n));
    try {
        kern::gemm_matmul(static_cast<kern::Blas*>(blas()), W.type, W.data, W.row_bytes, W.rows, W.cols, x, ldx, n, y,
                         ldy, ws, gemm_ws_.bytes, compute_);
    } catch (const std::exception& e) {
        fail("{}: matmul {} ({} x {}, {} tokens): {}", name_, W.name, W.rows, W.cols, n, e.what());
    }
    check(cudaGetLastError(), "matmul");
}

bool CudaBackend::int8_matmul(const Mat& W, int64_t n) const {
    return (n < kern::kGemmMinTokens || prefill_gemm_ == PrefillGemm::int8) &&
           kern::matvec_q8_supported(W.type, W.data, W.row_bytes, W.cols);
}

bool CudaBackend::fused_matmul(const Mat& W, int64_t n) const {
    return n >= kern::kGemmMinTokens && prefill_gemm_ == PrefillGemm::fused && kern::fused_gemm_supported(W.type);
}

// Tasks go in groups of the same weight type, width and row size: those of a prefill's size
// (kGemmMinTokens tokens on) as one grouped GEMM (dequantized weights, one cuBLAS call for as many
// as the workspace holds; with KINFER_CUDA_GEMM=int8 the int8 types' as one mmq_group launch for up
// to kMatvecGroupMax tasks, with KINFER_CUDA_GEMM=fused the quantized types' through
// fused_gemm_grouped, up to kMatvecGroupMax tasks a launch), the others (the routed experts' shares
// of a chunk, decode's projections) as grouped matvecs, one launch for up to kMatvecGroupMax tasks
// (K3 decode: 16 experts' gate and up in one launch, their down in another).
void CudaBackend::matmul_tasks(std::span<const MatInput> inputs, std::span<const MatTask> tasks) {
    struct Src {
        const float* x;   // the task's first input row
        int64_t ld;
    };
    std::vector<Src> src(tasks.size());
    std::vector<size_t> small, large;
    for (size_t i = 0; i < tasks.size(); ++i) {
        const MatTask& t = tasks[i];
        if (t.n <= 0) continue;
        if (t.input < 0 || size_t(t.input) >= inputs.size() || t.W.cols != inputs[size_t(t.input)].cols ||
            t.row0 < 0 || t.row0 + t.n > inputs[size_t(t.input)].rows)
            fail("{}: matmul_tasks: task {} ({}) does not fit its input", name_, i, t.W.name);
        need(t.W, "matmul_tasks");
        if (!kern::matvec_supported(t.W.type))
            fail("{}: matmul_tasks: no kernel for weight {} of type {}", name_, t.W.name, quant::type_facts(t.W.type).name);
        const MatInput& in = inputs[size_t(t.input)];
        const int64_t ld = in.ld ? in.ld : in.cols;
        src[i] = {in.x + t.row0 * ld, ld};
        (t.n >= kern::kGemmMinTokens ? large : small).push_back(i);
    }
    // Same weight type, width and row size next to each other, in task order otherwise; each run
    // of equal keys (of at most `limit` tasks) is one call of `f`.
    auto key = [&](size_t i) {
        const Mat& W = tasks[i].W;
        return std::tuple(int(W.type), W.cols, W.row_bytes);
    };
    auto runs = [&](std::vector<size_t>& list, size_t limit, const auto& f) {
        std::stable_sort(list.begin(), list.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
        for (size_t b = 0, e; b < list.size(); b = e) {
            for (e = b + 1; e < list.size() && e - b < limit && key(list[e]) == key(list[b]);) ++e;
            f(std::span<const size_t>(list.data() + b, e - b), tasks[list[b]].W);
            check(cudaGetLastError(), "matmul_tasks");
        }
    };
    select();
    // The int8 tasks' activations (the tasks int8_matmul gives the int8 kernels, as matmul does:
    // the same bits as matmul, and below kGemmMinTokens tokens as matmul_id): each input quantized once a call
    // per activation format, only its rows from the first to the last such a task reads. (A MoE
    // prefill's experts read ranges of one gathered input of n x K rows: quantized whole for
    // every run of kMatvecGroupMax tasks, that was tens of passes over it a layer.)
    struct Quantized {
        int input, format;
        quant::Type type;   // one weight type of the format
        int64_t lo, hi;     // the input rows quantized
        size_t at = 0, rb = 0;
    };
    std::vector<Quantized> quantized;
    std::vector<int> q8_of(tasks.size(), -1);   // an int8 task's entry in `quantized`
    for (size_t i = 0; i < tasks.size(); ++i) {
        const MatTask& t = tasks[i];
        if (t.n <= 0 || !int8_matmul(t.W, t.n)) continue;
        const int f = kern::q8_act_format(t.W.type);
        size_t k = 0;
        while (k < quantized.size() && !(quantized[k].input == t.input && quantized[k].format == f)) ++k;
        if (k == quantized.size()) quantized.push_back({t.input, f, t.W.type, t.row0, t.row0 + t.n});
        quantized[k].lo = std::min(quantized[k].lo, t.row0);
        quantized[k].hi = std::max(quantized[k].hi, t.row0 + t.n);
        q8_of[i] = int(k);
    }
    size_t q8_bytes = 0;
    for (Quantized& q : quantized) {
        q.rb = kern::q8_act_row_bytes(q.type, inputs[size_t(q.input)].cols);   // a multiple of 16
        q.at = q8_bytes;
        q8_bytes += q.rb * size_t(q.hi - q.lo);
    }
    auto* xq = q8_bytes ? static_cast<uint8_t*>(scratch(q8_bytes)) : nullptr;
    for (const Quantized& q : quantized) {
        const MatInput& in = inputs[size_t(q.input)];
        const int64_t ld = in.ld ? in.ld : in.cols;
        kern::quantize_act(q.type, in.x + q.lo * ld, ld, q.hi - q.lo, in.cols, xq + q.at, compute_);
    }
    check(cudaGetLastError(), "matmul_tasks");
    // An int8 group (matvec_q8_group or mmq_group) of the tasks `q8`, their activations quantized above.
    auto int8_group = [&](std::span<const size_t> q8, const Mat& W0, bool gemm) {
        kern::MatvecQ8Group g;
        for (size_t i : q8) {
            const MatTask& t = tasks[i];
            const Quantized& q = quantized[size_t(q8_of[i])];
            g.task[g.n_tasks++] = {t.W.data, xq + q.at + size_t(t.row0 - q.lo) * q.rb, t.y, t.W.rows, t.n, t.ldy};
        }
        try {
            if (gemm) kern::mmq_group(W0.type, W0.row_bytes, W0.cols, g, compute_);
            else kern::matvec_q8_group(W0.type, W0.row_bytes, W0.cols, g, compute_);
        } catch (const std::exception& ex) {
            fail("{}: matmul_tasks ({} int8 tasks of {} columns, first {}): {}", name_, g.n_tasks, W0.cols,
                 tasks[q8[0]].W.name, ex.what());
        }
    };
    // The large int8 tasks, kMatvecGroupMax a launch; the others' runs below.
    std::vector<size_t> large_q8, large_f;
    for (size_t i : large) (q8_of[i] >= 0 ? large_q8 : large_f).push_back(i);
    runs(large_q8, size_t(kern::kMatvecGroupMax), [&](std::span<const size_t> run, const Mat& W0) { int8_group(run, W0, true); });
    runs(large_f, large_f.size(), [&](std::span<const size_t> run, const Mat& W0) {
        std::vector<kern::GemmTask> group;
        for (size_t i : run) group.push_back({tasks[i].W.data, tasks[i].W.rows, src[i].x, src[i].ld, tasks[i].n, tasks[i].y, tasks[i].ldy});
        if (fused_matmul(W0, kern::kGemmMinTokens)) {   // (every task of `large` has that many tokens or more)
            void* ws = gemm_workspace(kern::fused_gemm_grouped_workspace_bytes(W0.cols, group.data(), int64_t(group.size())));
            try {
                kern::fused_gemm_grouped(W0.type, W0.row_bytes, W0.cols, group.data(), int64_t(group.size()), ws,
                                         gemm_ws_.bytes, compute_);
            } catch (const std::exception& ex) {
                fail("{}: matmul_tasks ({} fused GEMMs of {} columns, first {}): {}", name_, group.size(), W0.cols, W0.name,
                     ex.what());
            }
            return;
        }
        void* ws = gemm_workspace(kern::gemm_grouped_workspace_bytes(W0.type, W0.cols, group.data(), int64_t(group.size())));
        try {
            kern::gemm_matmul_grouped(static_cast<kern::Blas*>(blas()), W0.type, W0.row_bytes, W0.cols, group.data(),
                                     int64_t(group.size()), ws, gemm_ws_.bytes, compute_);
        } catch (const std::exception& ex) {
            fail("{}: matmul_tasks ({} GEMMs of {} columns, first {}): {}", name_, group.size(), W0.cols, W0.name, ex.what());
        }
    });
    runs(small, size_t(kern::kMatvecGroupMax), [&](std::span<const size_t> all, const Mat& W0) {
        // The int8 tasks in one grouped launch on the activations quantized above (a row's int8
        // values do not depend on the rows around it), the others in one grouped fp32-activation
        // launch.
        std::vector<size_t> q8, run;
        for (size_t i : all) (q8_of[i] >= 0 ? q8 : run).push_back(i);
        if (!q8.empty()) int8_group(q8, W0, false);
        if (run.empty()) return;
        kern::MatvecGroup g;
        for (size_t i : run)
            g.task[g.n_tasks++] = {tasks[i].W.data, src[i].x, tasks[i].y, tasks[i].W.rows, tasks[i].n, src[i].ld, tasks[i].ldy};
        try {
            kern::matvec_group(W0.type, W0.row_bytes, W0.cols, g, compute_);
        } catch (const std::exception& ex) {
            fail("{}: matmul_tasks ({} tasks of {} x {}, first {}): {}", name_, g.n_tasks, W0.rows, W0.cols, W0.name,
                 ex.what());
        }
    });
}

void CudaBackend::rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps, int64_t ld) {
    select();
    kern::rms_norm(x, w, y, rows, d, eps, ld, compute_);
    check(cudaGetLastError(), "rms_norm");
}

void CudaBackend::softmax_rows(float* x, int64_t rows, int64_t n, float scale) {
    select();
    kern::softmax_rows(x, rows, n, scale, compute_);
    check(cudaGetLastError(), "softmax_rows");
}

void CudaBackend::glu(float* g, const float* u, int64_t rows, int64_t ff, const Glu& act) {
    select();
    kern::glu(g, u, rows * ff, act.situ, act.beta, act.linear_beta, compute_);
    check(cudaGetLastError(), "glu");
}

void CudaBackend::copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
    if (rows <= 0) return;
    select();
    check(cudaMemcpy2DAsync(dst, size_t(ldd) * 4, src, size_t(lds) * 4, size_t(cols) * 4, size_t(rows),
                            cudaMemcpyDeviceToDevice, stream_of(compute_)),
          "copy_rows");
}

void CudaBackend::gather_rows(const float* src, int64_t cols, std::span<const int64_t> idx, int64_t div, float* dst) {
    if (idx.empty()) return;
    select();
    if (idx.size() <= size_t(kGatherCopiesMax)) {
        // A decode step's few rows: device copies, which a CUDA graph holds (an upload of the
        // list would end the capture).
        for (size_t j = 0; j < idx.size(); ++j)
            check(cudaMemcpyAsync(dst + int64_t(j) * cols, src + (idx[j] / div) * cols, size_t(cols) * 4,
                                  cudaMemcpyDeviceToDevice, stream_of(compute_)),
                  "gather_rows");
        return;
    }
    // A prefill chunk's n x K rows (65536 at 8192 tokens and top-8): the list uploaded once and
    // one kernel, instead of a copy call of microseconds per row.
    HostStop stop(*this);
    const auto* d_idx = static_cast<const int64_t*>(upload_list(idx.data(), idx.size() * sizeof(int64_t), "gather_rows"));
    kern::gather_rows(src, cols, d_idx, div, int64_t(idx.size()), dst, compute_);
    check(cudaGetLastError(), "gather_rows");
}

void* CudaBackend::upload_list(const void* host, size_t bytes, const char* op) {
    void* d = scratch(bytes);
    select();
    // From pageable memory cudaMemcpyAsync copies the bytes to staging memory before it
    // returns (CUDA's API synchronization rules), so `host` may go at once; no host wait.
    check(cudaMemcpyAsync(d, host, bytes, cudaMemcpyHostToDevice, stream_of(compute_)), op);
    return d;
}

void CudaBackend::kda_scan(const KdaScan& s) {
    // Prefill chunks take the chunked (WY / UT) form, decode the recurrence: a chunk of fewer
    // tokens than the default chunk size has no chunk to share work over. The GPU does not follow
    // the CPU's bits either way (its activations stay fp32), so the choice is speed alone, and it
    // is unmeasured (kinfer_gpu_check times the recurrence and each chunked form, kda_math_'s).
    select();
    if (s.chunked || s.n >= kern::kda_chunked_default_chunk(s.D))
        kern::kda_chunked(s.q, s.k, s.v, s.g, s.beta, s.state, s.o, s.n, s.H, s.D, compute_, 0, 0, kda_math_);
    else
        kern::kda_recurrent(s.q, s.k, s.v, s.g, s.beta, s.state, s.o, s.n, s.H, s.D, compute_);
    check(cudaGetLastError(), "kda_scan");
}

void CudaBackend::mla_attend_absorbed(const float* cache, const float* Q, float* lat, const MlaShape& s) {
    kern::MlaArgs a;
    a.n = s.n;
    a.pos0 = s.pos0;
    a.H = s.H;
    a.r = s.r;
    a.dr = s.dr;
    a.scale = s.scale;
    a.math = mla_math_;
    float* part = static_cast<float*>(scratch(kern::mla_scratch_floats(a) * sizeof(float)));
    select();
    kern::mla_attend_absorbed(cache, Q, lat, a, part, compute_);
    check(cudaGetLastError(), "mla_attend_absorbed");
}

void CudaBackend::route(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel, float* w,
                        const RouteHook& hook) {
    HostStop stop(*this);   // its choices come back to the host
    const int64_t E = p.n_expert, K = p.n_used;
    const size_t sel_bytes = size_t(n * K) * sizeof(int32_t), w_bytes = size_t(n * K) * sizeof(float);
    auto* d_sel = static_cast<uint8_t*>(scratch(sel_bytes + w_bytes));
    select();
    kern::route(probs, bias, n, E, K, p.norm, p.scale, reinterpret_cast<int32_t*>(d_sel),
               reinterpret_cast<float*>(d_sel + sel_bytes), compute_);
    check(cudaGetLastError(), "route");
    check(cudaMemcpyAsync(sel, d_sel, sel_bytes, cudaMemcpyDeviceToHost, stream_of(compute_)), "route");
    check(cudaMemcpyAsync(w, d_sel + sel_bytes, w_bytes, cudaMemcpyDeviceToHost, stream_of(compute_)), "route");
    check(cudaStreamSynchronize(stream_of(compute_)), "route");
    if (!hook) return;
    // A hook (routing traces) may replace a token's ids: its weights are then taken again, as
    // the CPU op does, from the scores.
    std::vector<float> scores(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t) {
        std::vector<int32_t> ids(sel + t * K, sel + (t + 1) * K);
        ids.resize(size_t(E));                                  // the hook sees a full-length list
        hook(t, ids.data());
        if (std::equal(ids.begin(), ids.begin() + K, sel + t * K)) continue;
        download(scores.data(), probs + t * E, size_t(E) * sizeof(float));
        float* wt = w + t * K;
        double sum = 0;
        for (int64_t i = 0; i < K; ++i) {
            sel[t * K + i] = ids[size_t(i)];
            wt[i] = scores[size_t(ids[size_t(i)])];
            sum += double(wt[i]);
        }
        if (p.norm)
            for (int64_t i = 0; i < K; ++i) wt[i] /= std::max(float(sum), 6.103515625e-5f);
        if (p.scale != 1.0f)
            for (int64_t i = 0; i < K; ++i) wt[i] *= p.scale;
    }
}

void CudaBackend::l2_norm(float* x, int64_t rows, int64_t d, float eps) {
    select();
    kern::l2_norm(x, rows, d, eps, compute_);
    check(cudaGetLastError(), "l2_norm");
}

void CudaBackend::add(float* y, const float* a, int64_t n) {
    select();
    kern::add(y, a, n, compute_);
    check(cudaGetLastError(), "add");
}

void CudaBackend::mul_sigmoid(float* y, const float* g, int64_t n) {
    select();
    kern::mul_sigmoid(y, g, n, compute_);
    check(cudaGetLastError(), "mul_sigmoid");
}

void CudaBackend::sigmoid(float* x, int64_t n) {
    select();
    kern::sigmoid(x, n, compute_);
    check(cudaGetLastError(), "sigmoid");
}

void CudaBackend::sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out) {
    select();
    kern::sum_slots(ys, n, K, cols, out, compute_);
    check(cudaGetLastError(), "sum_slots");
}

// The routed experts by slot (model/moe.cpp routed_slots): the choices stay in device memory, so
// the host queues the whole MoE layer without waiting for the router.
void CudaBackend::route_resident(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel,
                                 float* w) {
    need(sel, size_t(n * p.n_used) * sizeof(int32_t), "route_resident", "sel");
    need(w, size_t(n * p.n_used) * sizeof(float), "route_resident", "w");
    select();
    kern::route(probs, bias, n, p.n_expert, p.n_used, p.norm, p.scale, sel, w, compute_);
    check(cudaGetLastError(), "route_resident");
}

void CudaBackend::matmul_id(const Mat& experts, int64_t n_slices, const int32_t* sel, int64_t slots, const float* x,
                            int64_t x_div, float* y) {
    need(experts, "matmul_id");
    if (experts.slice_rows <= 0) fail("{}: matmul_id: {} is not a 3-D expert tensor", name_, experts.name);
    if (!kern::matvec_supported(experts.type))
        fail("{}: matmul_id: no kernel for weight {} of type {}", name_, experts.name, quant::type_facts(experts.type).name);
    select();
    try {
        const size_t slice_bytes = size_t(experts.slice_rows) * experts.row_bytes;
        if (kern::matvec_q8_supported(experts.type, experts.data, experts.row_bytes, experts.cols)) {
            // Experts on int8 activations: each input row quantized once for all its slots.
            const int64_t x_rows = (slots - 1) / x_div + 1;
            void* xq = scratch(kern::q8_act_row_bytes(experts.type, experts.cols) * size_t(x_rows));
            kern::quantize_act(experts.type, x, experts.cols, x_rows, experts.cols, xq, compute_);
            kern::matvec_q8_id(experts.type, experts.data, experts.row_bytes, slice_bytes, n_slices, experts.slice_rows, experts.cols,
                              sel, slots, xq, x_div, y, compute_);
        } else {
            kern::matvec_id(experts.type, experts.data, experts.row_bytes, slice_bytes, n_slices, experts.slice_rows,
                           experts.cols, sel, slots, x, x_div, y, compute_);
        }
    } catch (const std::exception& e) {
        fail("{}: matmul_id {} ({} slots): {}", name_, experts.name, slots, e.what());
    }
    check(cudaGetLastError(), "matmul_id");
}

void CudaBackend::scale_rows(float* y, const float* w, int64_t rows, int64_t cols) {
    select();
    kern::scale_rows(y, w, rows, cols, compute_);
    check(cudaGetLastError(), "scale_rows");
}

void CudaBackend::conv_silu(float* x, int64_t n, int64_t channels, int64_t W, const float* taps, float* state) {
    select();
    kern::conv_silu(x, n, channels, W, taps, state, compute_);
    check(cudaGetLastError(), "conv_silu");
}

void CudaBackend::kda_decay(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D,
                            const KdaGate& gate) {
    select();
    kern::kda_decay(g, dt_bias, a, n, H, D, gate.lower_bound, gate.lb, compute_);
    check(cudaGetLastError(), "kda_decay");
}

void CudaBackend::scatter_weighted(const float* src, int64_t cols, std::span<const int64_t> idx, const float* w,
                                   float* dst) {
    if (idx.empty()) return;   // most experts of a one-token step: no graph split for them
    HostStop stop(*this);
    // The host lists go up as (index, weight of that index) pairs in one scratch upload.
    const size_t rows = idx.size();
    std::vector<uint8_t> lists(rows * (sizeof(int64_t) + sizeof(float)));
    std::memcpy(lists.data(), idx.data(), rows * sizeof(int64_t));
    auto* wj = reinterpret_cast<float*>(lists.data() + rows * sizeof(int64_t));
    for (size_t j = 0; j < rows; ++j) wj[j] = w[size_t(idx[j])];
    const auto* d_lists = static_cast<const uint8_t*>(upload_list(lists.data(), lists.size(), "scatter_weighted"));
    kern::scatter_weighted(src, cols, reinterpret_cast<const int64_t*>(d_lists),
                          reinterpret_cast<const float*>(d_lists + rows * sizeof(int64_t)), int64_t(rows), dst, compute_);
    check(cudaGetLastError(), "scatter_weighted");
}

void CudaBackend::attn_res_mix(std::span<const float* const> stack, const float* p, const float* w, float* out,
                               int64_t n, int64_t d, float eps) {
    kern::AttnResStack st;
    if (stack.size() > size_t(kern::kAttnResMaxBlocks))
        fail("{}: attn_res_mix: {} banked blocks, at most {}", name_, stack.size(), kern::kAttnResMaxBlocks);
    for (size_t j = 0; j < stack.size(); ++j) st.blocks[j] = stack[j];
    st.m = int(stack.size());
    select();
    kern::attn_res_mix(st, p, w, out, n, d, eps, compute_);
    check(cudaGetLastError(), "attn_res_mix");
}

// The table's rows by token id (embed.cu checks every id against the table before a launch).
void CudaBackend::embed(const Mat& E, const int32_t* tokens, int64_t n, float* x) {
    need(E, "embed");
    need(x, size_t(n * E.cols) * sizeof(float), "embed", "x");
    select();
    try {
        kern::embed_rows(E.type, E.data, E.row_bytes, E.rows, E.cols, tokens, n, x, compute_);
    } catch (const std::exception& e) {
        fail("{}: embed from {}: {}", name_, E.name, e.what());
    }
    check(cudaGetLastError(), "embed");
}
// ---- the paged latent cache ----

namespace {

kern::LatentArgs latent_args(const LatentPages& c, const uint8_t* const* table) {
    kern::LatentArgs a;
    a.type = int(c.type), a.R = c.R, a.page_rows = c.page_rows, a.row_bytes = c.row_bytes, a.pages = table;
    return a;
}

}  // namespace

const uint8_t* const* CudaBackend::page_table(const LatentPages& c, const char* op) {
    const size_t n = size_t(c.n_pages);
    if (n == 0) fail("{}: {}: a latent cache without pages", name_, op);
    PageTable& t = tables_[c.pages[0]];
    auto* staged = reinterpret_cast<const uint8_t**>(t.pinned.ptr);
    size_t same = 0;
    while (same < std::min(n, t.n) && staged[same] == c.pages[same]) ++same;
    if (same == n && n == t.n) return reinterpret_cast<const uint8_t* const*>(t.dev.ptr);
    for (size_t p = same; p < n; ++p) need(c.pages[p], size_t(c.page_rows) * c.row_bytes, op, "latent cache page");
    if (t.cap < n) {
        // Twice what is needed (a cache grows a page at a time); the old buffers may still be
        // read by queued work.
        retire(t.dev, false);
        retire(t.pinned, true);
        t.cap = std::max<size_t>(2 * n, 64);
        t.dev = alloc(t.cap * sizeof(uint8_t*), "latent page table");
        t.pinned = alloc_pinned_host(t.cap * sizeof(uint8_t*), "latent page table");
        staged = reinterpret_cast<const uint8_t**>(t.pinned.ptr);
        same = t.n = 0;
    }
    // Pages only appended: entries below `same` stay as they are, so a copy still queued reads
    // what it read. Anything else (a page replaced) rewrites staged entries a queued copy may
    // not have read yet: that waits for them first.
    if (same < t.n) synchronize();
    std::copy(c.pages + same, c.pages + n, staged + same);
    select();
    check(cudaMemcpyAsync(reinterpret_cast<const uint8_t**>(t.dev.ptr) + same, staged + same, (n - same) * sizeof(uint8_t*),
                          cudaMemcpyHostToDevice, stream_of(compute_)),
          "latent page table");
    t.n = n;
    return reinterpret_cast<const uint8_t* const*>(t.dev.ptr);
}

void CudaBackend::mla_cache_store(const LatentPages& c, int64_t pos0, int64_t n, const float* rows, int64_t ld) {
    if (pos0 + n > c.capacity()) fail("{}: mla_cache_store: rows up to {} in a cache of {}", name_, pos0 + n, c.capacity());
    const auto* table = page_table(c, "mla_cache_store");
    need(rows, size_t(((n - 1) * (ld ? ld : c.R) + c.R)) * sizeof(float), "mla_cache_store", "rows");
    select();
    kern::latent_store(latent_args(c, table), pos0, n, rows, ld, compute_);
    check(cudaGetLastError(), "mla_cache_store");
}

void CudaBackend::mla_cache_load(const LatentPages& c, int64_t pos0, int64_t n, float* rows) {
    if (pos0 + n > c.capacity()) fail("{}: mla_cache_load: rows up to {} in a cache of {}", name_, pos0 + n, c.capacity());
    const auto* table = page_table(c, "mla_cache_load");
    need(rows, size_t(n * c.R) * sizeof(float), "mla_cache_load", "rows");
    select();
    kern::latent_load(latent_args(c, table), pos0, n, rows, compute_);
    check(cudaGetLastError(), "mla_cache_load");
}

void CudaBackend::mla_attend_tiled(const LatentPages& c, const float* Q, float* lat, const MlaShape& s) {
    const auto* table = page_table(c, "mla_attend_tiled");
    kern::MlaArgs a;
    a.n = s.n, a.pos0 = s.pos0, a.H = s.H, a.r = s.r, a.dr = s.dr, a.scale = s.scale;
    a.math = mla_math_;
    float* part = static_cast<float*>(scratch(kern::mla_scratch_floats(a) * sizeof(float)));
    select();
    kern::mla_attend_paged(latent_args(c, table), Q, lat, a, part, compute_);
    check(cudaGetLastError(), "mla_attend_tiled");
}

namespace {

kern::MlaMhaArgs mha_args(const MlaShape& s, CudaBackend::Math math) {
    kern::MlaMhaArgs a;
    a.n = s.n, a.pos0 = s.pos0, a.H = s.H, a.r = s.r, a.dr = s.dr, a.dn = s.dn, a.dv = s.dv, a.scale = s.scale;
    a.math = math;
    return a;
}

}  // namespace

void CudaBackend::need_heads(const Mat& W, int64_t slice_rows, int64_t cols, const MlaShape& s, const char* op) const {
    need(W, op);
    if (W.slice_rows != slice_rows || W.rows != slice_rows * s.H || W.cols != cols)
        fail("{}: {}: weight {} is {} rows of {} in slices of {}, the shape wants {} heads of {} rows of {}", name_, op,
             W.name, W.rows, W.cols, W.slice_rows, s.H, slice_rows, cols);
    if (!kern::matvec_supported(W.type))
        fail("{}: {}: no kernel for weight {} of type {}", name_, op, W.name, quant::type_facts(W.type).name);
}

// The decompressed (MHA) form: mla_mha.cu expands K and V per block of keys with two GEMMs (fp32,
// or fp16 on the weights' split over an f16 cache with f16x2 / f16) and runs a flash kernel over them. Its workspace is the prefill GEMM's (gemm_workspace): the
// op calls blas's GEMM directly, never gemm_matmul, so nothing else uses it meanwhile.
void CudaBackend::mla_attend_decompressed(const Mat& k_b, const Mat& v_b, const float* cache, const float* q, float* o,
                                          const MlaShape& s) {
    if (s.n <= 0) return;
    need_heads(k_b, s.r, s.dn, s, "mla_attend_decompressed");
    need_heads(v_b, s.dv, s.r, s, "mla_attend_decompressed");
    need(cache, size_t((s.pos0 + s.n) * (s.r + s.dr)) * sizeof(float), "mla_attend_decompressed", "cache");
    const kern::MlaMhaArgs a = mha_args(s, mla_math_);
    void* ws = gemm_workspace(kern::mla_mha_workspace_bytes(a));
    select();
    try {
        kern::mla_attend_mha(static_cast<kern::Blas*>(blas()), {k_b.type, k_b.data, k_b.row_bytes},
                            {v_b.type, v_b.data, v_b.row_bytes}, cache, q, o, a, ws, gemm_ws_.bytes, compute_);
    } catch (const std::exception& e) {
        fail("{}: mla_attend_decompressed ({} queries at {}): {}", name_, s.n, s.pos0, e.what());
    }
    check(cudaGetLastError(), "mla_attend_decompressed");
}

void CudaBackend::mla_attend_tiled_mha(const Mat& k_b, const Mat& v_b, const LatentPages& c, const float* q, float* o,
                                       const MlaShape& s) {
    if (s.n <= 0) return;
    if (s.pos0 + s.n > c.capacity())
        fail("{}: mla_attend_tiled_mha: rows up to {} in a cache of {}", name_, s.pos0 + s.n, c.capacity());
    need_heads(k_b, s.r, s.dn, s, "mla_attend_tiled_mha");
    need_heads(v_b, s.dv, s.r, s, "mla_attend_tiled_mha");
    const auto* table = page_table(c, "mla_attend_tiled_mha");
    const kern::MlaMhaArgs a = mha_args(s, mla_math_);
    const kern::LatentArgs pages = latent_args(c, table);
    void* ws = gemm_workspace(kern::mla_mha_workspace_bytes(a, pages));
    select();
    try {
        kern::mla_attend_mha_paged(static_cast<kern::Blas*>(blas()), {k_b.type, k_b.data, k_b.row_bytes},
                                  {v_b.type, v_b.data, v_b.row_bytes}, pages, q, o, a, ws, gemm_ws_.bytes, compute_);
    } catch (const std::exception& e) {
        fail("{}: mla_attend_tiled_mha ({} queries at {}): {}", name_, s.n, s.pos0, e.what());
    }
    check(cudaGetLastError(), "mla_attend_tiled_mha");
}

}  // namespace kinfer::backend::KINFER_CUDA_BACKEND_NS
