// The emulated CUDA runtime (src/backend/cuda/emu/runtime.h) that CudaBackend runs on in the
// tests: each property it promises is one a GPU has and host code can get wrong, so each is
// checked to hold, with the wrong use shown to go wrong.
#include "backend/cuda/emu/runtime.h"

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/wait.h>

#include <csignal>
#include <unistd.h>

#include <cstring>
#include <vector>

using namespace kinfer::cuda::emu_rt;
namespace cm = kinfer::cuda::cpu_mode;

namespace {

// A device of its own for each case (devices are never removed; 16 MiB of address space each).
int fresh_device() {
    const int d = emu_add_device(size_t(16) << 20);
    REQUIRE(cudaSetDevice(d) == cudaSuccess);
    return d;
}

cudaStream_t stream() {
    cudaStream_t s = nullptr;
    REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    return s;
}

// Queues "add v to every int of p[0..n)" on s, as a kernel would.
void add_on(cudaStream_t s, int* p, int n, int v) {
    cm::submit(s, [=] { for (int i = 0; i < n; ++i) p[i] += v; }, cm::WorkKey{1, 0});
}

}  // namespace

TEST_CASE("emulated cuda: work runs when the host waits, in stream order; copies to pageable memory wait for it") {
    fresh_device();
    cudaStream_t s = stream();
    int* d = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 4 * sizeof(int)) == cudaSuccess);
    const int zeros[4] = {0, 0, 0, 0};
    REQUIRE(cudaMemcpyAsync(d, zeros, sizeof zeros, cudaMemcpyHostToDevice, s) == cudaSuccess);
    add_on(s, d, 4, 5);
    add_on(s, d, 4, 2);
    int host[4] = {-1, -1, -1, -1};
    // A copy into pageable memory returns once it is done: the two adds ran before it.
    REQUIRE(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(host[0] == 7);
    CHECK(host[3] == 7);

    // Into pinned memory the copy is queued like a kernel: nothing lands before a synchronize.
    int* pinned = nullptr;
    REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof host, cudaHostAllocPortable) == cudaSuccess);
    pinned[0] = -1;
    add_on(s, d, 4, 1);
    REQUIRE(cudaMemcpyAsync(pinned, d, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(pinned[0] == -1);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(pinned[0] == 8);

    // Pageable sources are staged when queued; pinned ones are read when the copy runs.
    int src[4] = {1, 1, 1, 1};
    REQUIRE(cudaMemcpyAsync(d, src, sizeof src, cudaMemcpyHostToDevice, s) == cudaSuccess);
    src[0] = 100;                                    // after the call: the copy has its own bytes
    REQUIRE(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(host[0] == 1);
    pinned[0] = 3;
    REQUIRE(cudaMemcpyAsync(d, pinned, sizeof host, cudaMemcpyHostToDevice, s) == cudaSuccess);
    pinned[0] = 4;                                   // before it runs: the copy reads this
    REQUIRE(cudaMemcpyAsync(host, d, sizeof host, cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(host[0] == 4);

    // A device pointer passed as host memory (or the other way round) is refused.
    CHECK(cudaMemcpyAsync(d, d, 4, cudaMemcpyHostToDevice, s) == cudaErrorInvalidValue);
    CHECK(cudaMemcpyAsync(host, host, 4, cudaMemcpyDeviceToHost, s) == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaErrorInvalidValue);
    CHECK(cudaGetLastError() == cudaSuccess);       // read and reset

    CHECK(cudaFreeHost(pinned) == cudaSuccess);
    CHECK(cudaFree(d) == cudaSuccess);
    CHECK(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("emulated cuda: events order one stream after another, and only where waited for") {
    fresh_device();
    cudaStream_t copy = stream(), compute = stream();
    int* d = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)) == cudaSuccess);
    int* pinned = nullptr;
    REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(int), cudaHostAllocPortable) == cudaSuccess);
    *pinned = 10;
    REQUIRE(cudaMemcpyAsync(d, pinned, sizeof(int), cudaMemcpyHostToDevice, copy) == cudaSuccess);
    cudaEvent_t landed = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaEventRecord(landed, copy) == cudaSuccess);

    // Without a wait, the compute stream's kernel runs before the copy it did not wait for.
    int seen_early = -1;
    cm::submit(compute, [&, d] { seen_early = *d; }, {});
    REQUIRE(cudaStreamSynchronize(compute) == cudaSuccess);
    CHECK(seen_early != 10);

    // With one, the copy stream runs up to the event first.
    int seen = -1;
    REQUIRE(cudaStreamWaitEvent(compute, landed, 0) == cudaSuccess);
    cm::submit(compute, [&, d] { seen = *d; }, {});
    REQUIRE(cudaStreamSynchronize(compute) == cudaSuccess);
    CHECK(seen == 10);
    CHECK(cudaEventQuery(landed) == cudaSuccess);

    // A query while the event's work is still queued says not ready (what a poll sees of a copy in
    // flight); the work runs, and the next query finds the event complete.
    add_on(copy, d, 1, 5);
    REQUIRE(cudaEventRecord(landed, copy) == cudaSuccess);
    CHECK(cudaEventQuery(landed) == cudaErrorNotReady);
    CHECK(cudaGetLastError() == cudaSuccess);   // not a recorded error
    CHECK(cudaEventQuery(landed) == cudaSuccess);

    cudaEventDestroy(landed);
    cudaFree(d);
    cudaFreeHost(pinned);
    cudaStreamDestroy(copy);
    cudaStreamDestroy(compute);
}

TEST_CASE("emulated cuda: device memory is not host memory (a host read faults), and starts as 0xff") {
    fresh_device();
    cudaStream_t s = stream();
    float* d = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), 64 * sizeof(float)) == cudaSuccess);
    float first = 0;
    cm::submit(s, [&, d] { first = d[0]; }, {});
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(first != first);                          // 0xffffffff: a NaN

    // In a child, so the fault ends only it.
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        const int null = open("/dev/null", O_WRONLY);   // no crash report from the child's doctest or ASan
        dup2(null, 1);
        dup2(null, 2);
        signal(SIGSEGV, SIG_DFL);
        volatile float v = d[0];                     // the host reading device memory
        (void)v;
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    const bool faulted = WIFSIGNALED(status) ? WTERMSIG(status) == SIGSEGV : WEXITSTATUS(status) != 0;   // ASan reports it and exits 1
    CHECK(faulted);

    size_t free_b = 0, total_b = 0;
    REQUIRE(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
    CHECK(total_b == size_t(16) << 20);
    CHECK(free_b == total_b - 256);                  // one 256-byte aligned allocation
    cudaPointerAttributes a{};
    REQUIRE(cudaPointerGetAttributes(&a, d + 3) == cudaSuccess);
    CHECK(a.type == cudaMemoryTypeDevice);
    REQUIRE(cudaPointerGetAttributes(&a, &first) == cudaSuccess);
    CHECK(a.type == cudaMemoryTypeUnregistered);
    void* too_big = nullptr;
    CHECK(cudaMalloc(&too_big, size_t(32) << 20) == cudaErrorMemoryAllocation);
    cudaGetLastError();
    cudaFree(d);
    REQUIRE(cudaMemGetInfo(&free_b, &total_b) == cudaSuccess);
    CHECK(free_b == total_b);
    cudaStreamDestroy(s);
}

TEST_CASE("emulated cuda: stream capture records work, refuses what a capture refuses, and graphs update and replay") {
    fresh_device();
    cudaStream_t s = stream();
    int* d = nullptr;
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&d), sizeof(int)) == cudaSuccess);
    int* pinned = nullptr;
    REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(int), cudaHostAllocPortable) == cudaSuccess);
    *pinned = 0;
    REQUIRE(cudaMemcpyAsync(d, pinned, sizeof(int), cudaMemcpyHostToDevice, s) == cudaSuccess);

    auto capture_add = [&](int v) {
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        add_on(s, d, 1, v);
        REQUIRE(cudaMemcpyAsync(pinned, d, sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
        cudaGraph_t g = nullptr;
        REQUIRE(cudaStreamEndCapture(s, &g) == cudaSuccess);
        return g;
    };
    cudaGraph_t g1 = capture_add(3);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(*pinned == 0);                             // captured, not run
    cudaGraphExec_t exec = nullptr;
    REQUIRE(cudaGraphInstantiate(&exec, g1, 0) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(*pinned == 6);                             // replayed twice

    // The same kernels and shapes with other parameters: the instantiated graph takes them.
    cudaGraph_t g2 = capture_add(10);
    cudaGraphExecUpdateResultInfo info{};
    REQUIRE(cudaGraphExecUpdate(exec, g2, &info) == cudaSuccess);
    REQUIRE(cudaGraphLaunch(exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    CHECK(*pinned == 16);
    // Another shape (here one more kernel) cannot be updated into it.
    REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    add_on(s, d, 1, 1);
    add_on(s, d, 1, 1);
    cudaGraph_t g3 = nullptr;
    REQUIRE(cudaStreamEndCapture(s, &g3) == cudaSuccess);
    CHECK(cudaGraphExecUpdate(exec, g3, &info) == cudaErrorGraphExecUpdateFailure);
    CHECK(info.result == cudaGraphExecUpdateError);
    cudaGetLastError();

    // What a capture refuses: a synchronize, an allocation, a copy into pageable memory, a wait
    // on work outside it. Each invalidates the capture, whose end then fails.
    int host = 0;
    cudaStream_t other = stream();
    cudaEvent_t outside = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming) == cudaSuccess);
    add_on(other, d, 1, 0);
    REQUIRE(cudaEventRecord(outside, other) == cudaSuccess);
    for (int what = 0; what < 4; ++what) {
        INFO("refused call ", what);
        REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
        add_on(s, d, 1, 1000);
        void* p = nullptr;
        const cudaError_t e = what == 0   ? cudaStreamSynchronize(s)
                              : what == 1 ? cudaMalloc(&p, 16)
                              : what == 2 ? cudaMemcpyAsync(&host, d, sizeof(int), cudaMemcpyDeviceToHost, s)
                                          : cudaStreamWaitEvent(s, outside, 0);
        CHECK(e != cudaSuccess);
        cudaStreamCaptureStatus st{};
        REQUIRE(cudaStreamIsCapturing(s, &st) == cudaSuccess);
        CHECK(st == cudaStreamCaptureStatusInvalidated);
        cudaGraph_t g = nullptr;
        CHECK(cudaStreamEndCapture(s, &g) == cudaErrorStreamCaptureInvalidated);
        CHECK(g == nullptr);
        cudaGetLastError();
    }
    REQUIRE(cudaMemcpyAsync(&host, d, sizeof(int), cudaMemcpyDeviceToHost, s) == cudaSuccess);
    CHECK(host == 16);                               // nothing of the refused captures ran

    cudaEventDestroy(outside);
    cudaGraphExecDestroy(exec);
    for (cudaGraph_t g : {g1, g2, g3}) cudaGraphDestroy(g);
    cudaFree(d);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
    cudaStreamDestroy(other);
}
