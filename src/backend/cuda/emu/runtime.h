// The CUDA runtime API as the CUDA backend's host code uses it (cuda_backend.cpp,
// cuda_expert_device.cpp), emulated on the CPU: with it and the CPU execution mode of the kernels
// (cpu_mode.h), `CudaBackend` itself runs on a machine without a GPU (emu/cuda_backend_emu.cpp:
// `--device emu-cuda`), so its memory handling, streams, events, copies, scratch buffers and CUDA
// graphs are exercised by the same tests as the other backends, not only on a lent GPU.
//
// The emulation keeps what a GPU makes true and host code can get wrong:
//   - Streams are queues. Work (kernels, copies, cuBLAS calls) runs when the host waits for it
//     (cudaStreamSynchronize, cudaEventSynchronize / Query, a copy to
//     pageable host memory, cudaFree), in stream order; a stream that waits on an event first
//     runs the other stream up to that event's record. So host code that reads a result it did
//     not wait for, or a stream that reads what another stream writes without an event between
//     them, sees stale bytes in the tests as it could on a GPU. The legacy default stream
//     (nullptr) runs at once: kinfer's streams are non-blocking, so it is ordered with none.
//   - Device memory is not host memory: each device is an address range of its own that is
//     inaccessible (PROT_NONE) except while queued work runs, so a host read or write of device
//     memory faults at once. cudaMalloc'd bytes start as 0xff (a NaN as a float): a GPU does not
//     zero them either.
//   - Copies from pageable host memory read it when queued (as the driver stages them); from
//     pinned memory (cudaHostAlloc) when they run, so a pinned buffer reused too early shows.
//   - Stream capture: what a capture records, what it refuses (allocation, synchronization,
//     pageable copies, waits on uncaptured work: the capture is then invalidated), instantiation,
//     update of an instantiated graph (CUDA's rule: the same kernels and copy kinds in the same
//     order, launch shapes and arguments free), launch.
// Not emulated: concurrency between streams beyond those orderings, timing, peer access rights.
//
// Everything is in namespace kinfer::cuda::emu_rt (C++ names, so a binary may also link the real
// runtime); the emulated backend's translation unit brings it in with a using-directive, so
// cuda_backend.cpp calls it exactly as it calls CUDA's.
#pragma once

#include "backend/cuda/cpu_mode.h"   // cudaStream_t, dim3

#include <cstddef>
#include <cstdint>

namespace kinfer::cuda::emu_rt {

enum cudaError_t : int {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNotReady = 600,
    cudaErrorPeerAccessAlreadyEnabled = 704,
    cudaErrorStreamCaptureUnsupported = 900,
    cudaErrorStreamCaptureInvalidated = 901,
    cudaErrorStreamCaptureIsolation = 905,
    cudaErrorCapturedEvent = 907,
    cudaErrorStreamCaptureWrongThread = 908,
    cudaErrorGraphExecUpdateFailure = 910,
};
using cudaError = cudaError_t;

enum cudaMemcpyKind : int {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4,
};
enum cudaMemoryType : int { cudaMemoryTypeUnregistered = 0, cudaMemoryTypeHost = 1, cudaMemoryTypeDevice = 2 };
enum cudaStreamCaptureMode : int {
    cudaStreamCaptureModeGlobal = 0,
    cudaStreamCaptureModeThreadLocal = 1,
    cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus : int {
    cudaStreamCaptureStatusNone = 0,
    cudaStreamCaptureStatusActive = 1,
    cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaGraphExecUpdateResult : int { cudaGraphExecUpdateSuccess = 0, cudaGraphExecUpdateError = 1 };

inline constexpr unsigned cudaStreamNonBlocking = 1;
inline constexpr unsigned cudaEventDisableTiming = 2;
inline constexpr unsigned cudaHostAllocPortable = 1;

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    int major, minor;
    int multiProcessorCount;
};
struct cudaPointerAttributes {
    cudaMemoryType type;
    int device;
    void* devicePointer;
    void* hostPointer;
};
struct cudaGraphExecUpdateResultInfo {
    cudaGraphExecUpdateResult result;
};

struct EmuEvent;
struct EmuGraph;
struct EmuGraphExec;
using cudaEvent_t = EmuEvent*;
using cudaGraph_t = EmuGraph*;
using cudaGraphExec_t = EmuGraphExec*;

// ---- the emulation's own controls ----
// A new emulated device of `bytes` of memory; returns its index (cudaSetDevice's argument).
int emu_add_device(size_t bytes);
// Whether cudaEventQuery runs the work before the event (the default: a query then reports
// cudaErrorNotReady once, and the work is done, so code that polls moves on). Off, a query
// runs nothing and reports cudaErrorNotReady for as long as the work is pending: only the
// host's waits run it, so a pinned buffer refilled after a mere query, before its copy ran,
// shows (code that only polls would wait forever: for tests of code that waits). Returns the
// previous setting.
bool emu_set_query_runs_work(bool runs);
// How many cudaPointerGetAttributes calls there have been (tests: CudaBackend::owns answers its
// own allocations without one).
uint64_t emu_pointer_queries();

// ---- the runtime API subset ----
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetLastError();

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t s);
// Peer access between two distinct devices: always possible here; enabled once per direction
// (again: cudaErrorPeerAccessAlreadyEnabled). Copies work either way, as with CUDA, where
// without it they are staged through the host.
cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer);
cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned flags);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t s);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* g);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphGetNodes(cudaGraph_t g, void** nodes, size_t* count);   // nodes must be nullptr: the count
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t g, unsigned long long flags);
cudaError_t cudaGraphExecUpdate(cudaGraphExec_t exec, cudaGraph_t g, cudaGraphExecUpdateResultInfo* info);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphDestroy(cudaGraph_t g);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);

}  // namespace kinfer::cuda::emu_rt
