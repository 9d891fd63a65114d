// CPU execution mode of the project's CUDA kernels: what the host compiler needs to build the
// same .cu sources (see compat.h) and run them, so that a machine without a GPU (CI, most
// sessions) tests every kernel against the CPU backend's op.
//
// What it provides, and how:
//   threadIdx / blockIdx / blockDim / gridDim   thread_local variables, set for each thread.
//   a block's threads                           one fiber per CUDA thread, all on
//                                               the launching host thread; the blocks of a grid
//                                               run one after another (cpu_mode.cpp says why).
//   __syncthreads / __syncwarp                  a barrier over the block's / warp's live threads:
//                                               a fiber waits there until the others arrive.
//   __shfl_sync / _xor / _down / _up, __ballot_sync, __any_sync, __all_sync
//                                               an exchange through per-lane slots (two sets
//                                               used in turn) and one barrier of the warp;
//                                               share_warp (below) moves several words a lane
//                                               in one (the tensor-core gathers, warp_sum and
//                                               warp_max).
//   __shared__                                  `static`: one block runs at a time, so a
//                                               function-local static is exactly the block's
//                                               shared array; launches are serialised.
//   dynamic shared memory                       KINFER_DYNAMIC_SHARED (compat.h) over a buffer
//                                               of the launch's size, which each block finds
//                                               filled with 0xff bytes (0x7f under the warp-by-
//                                               warp schedules; cpu_mode.cpp says why).
//   atomicAdd / atomicMax / atomicMin / atomicExch / atomicCAS   std::atomic_ref.
//   __dp4a, uint4, uint2, __float_as_int                         plain C++.
//   <<<grid, block, shmem, stream>>>            launch() (KINFER_LAUNCH in compat.h): queued on
//                                               the stream of the emulated runtime
//                                               (emu/runtime.h), or run before it returns on the
//                                               default stream (nullptr, as the kernel tests use).
// A thread that returns from the kernel leaves the block's and its warp's barriers, as an exited
// CUDA thread no longer takes part in __syncthreads; a barrier the live threads can never
// complete throws (a deadlock on a GPU).
// Like on a GPU, a shuffle or vote must be reached by every live lane of the warp; the mask
// argument is not checked.
#pragma once

#if defined(__CUDACC__)
#error "cpu_mode.h is the host compiler's stand-in for CUDA; nvcc builds the kernels natively"
#endif

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __constant__
#define __shared__ static

struct uint3 {
    unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct CUstream_st;
using cudaStream_t = CUstream_st*;

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
inline constexpr int warpSize = 32;

namespace kinfer::cuda::cpu_mode {

// Runs body once per CUDA thread of every block of grid (blocks one after another), with
// shmem bytes of dynamic shared memory. Launches from several host threads are serialised; an
// exception thrown by a kernel thread ends the launch and is rethrown here.
void run(const std::function<void()>& body, dim3 grid, dim3 block, size_t shmem);

// The calling kernel thread's dynamic shared memory (KINFER_DYNAMIC_SHARED).
unsigned char* dynamic_shared();
// Barriers of the calling thread's block and warp.
void sync_block();
void sync_warp();
// Warp exchange: every live lane puts `mine`; returns the value lane src put (src in 0..31), or
// mine when lane src does not exist (a partial last warp).
uint64_t exchange(uint64_t mine, int src);
// OR of the predicates of the warp's live lanes, lane i as bit i.
unsigned ballot(bool pred);
// Many shuffles' worth in one exchange (the plain tensor-core products' gather, mma_gather.cuh;
// warp_sum, reduce.cuh): every lane of a full warp puts n <= kShareWords words. Each shuffle is a
// pass through the warp's 32 fibers, so a gather of 16 values costs one pass instead of 16.
// What a lane gets back is read before its next exchange (shuffle, vote or share): the one after
// that writes the same slots. Two rules make `first` work: the first lane fills per_lane before
// its next barrier or exchange (fibers never preempt each other, so the others read after it),
// and every lane of the warp is in the same call, with the same n and the same use of per_lane
// (lanes in different functions would all get the first lane's result). Lanes are numbered as
// lane() numbers them: by the thread's place in the block, whatever the block's shape.
inline constexpr unsigned kShareWords = 4;
struct WarpShare {
    const uint64_t* table;   // the warp's words: lane l's at [kShareWords * l, kShareWords * l + n)
    uint64_t* per_lane;      // 32 words of this exchange's scratch, one a lane
    bool first;              // the warp's first lane back from the exchange: it may fill per_lane
                             // for all (a result every lane would otherwise compute for itself)
};
WarpShare share_warp(const uint64_t* mine, unsigned n);
// cp.async (async_copy.cuh): a GPU makes the calling thread's copy of `bytes` from src to dst at
// some point between the call and the thread's wait. Under the forward schedules it is made at
// the wait (async_wait), the latest, so a kernel that reads the destination before waiting finds
// what was there (a launch's shared memory starts filled: see dynamic shared memory above); under
// the reverse ones at the call, the earliest, so a copy into a buffer other threads still read
// spoils what they read. A thread that returns with copies it never waited for is an error.
void async_copy(void* dst, const void* src, size_t bytes);
void async_wait();
// Whether the calling thread's warp has all 32 lanes (a block's last warp may have fewer).
bool full_warp();
// This thread's lane within its warp.
int lane();

// The order in which the CPU mode runs a block's threads between barriers, and a grid's blocks.
// A GPU gives no order at all, so a kernel whose result depends on it has a race: a shared-memory
// value read without a __syncthreads after the other thread's write (or written while another
// may still read the old one), or a block that reads what a later block writes. In one order
// such a kernel may pass; for any two threads, one of forward and reverse runs the reader first.
//   forward        sweeps: every thread in turn runs to its next barrier, thread 0 first (the
//                  default). A warp barrier or shuffle then holds a warp until the sweep is
//                  over, as if it were a block barrier.
//   reverse        the same from the last thread (and the last block) down.
//   warps          warp by warp: a warp runs through its own shuffles and __syncwarps until its
//                  lanes wait at a __syncthreads or return, then the next warp. A value another
//                  warp writes and this one reads after only warp-level barriers is stale here.
//   warps-reverse  the same from the last warp and lane, and the last block, down.
// Each is a schedule a GPU may run. The environment variable KINFER_CPU_MODE_SCHEDULE sets it for
// a whole process, so that a test binary can be run every way (tests/CMakeLists.txt runs
// test_cuda's kernel cases under each).
enum class Schedule { forward, reverse, warps, warps_reverse };
void set_schedule(Schedule s);
Schedule schedule();

// What a piece of queued work is, for a graph update: CUDA updates an instantiated graph from a
// graph of the same nodes in the same order, each kernel node the same function (its launch shape
// and arguments may change), each copy node the same kind. fn: the kernel, or 0; what: kKernel,
// kBlas for a cuBLAS call (blas.cu), kCopy / kCopy2D plus its cudaMemcpyKind for the runtime's copies.
enum WorkWhat : int { kKernel = 0, kBlas = 3, kCopy = 16, kCopy2D = 32 };
struct WorkKey {
    uintptr_t fn = 0;
    int what = kKernel;
    bool operator==(const WorkKey&) const = default;
};
// Queues work on a stream of the emulated runtime (emu/runtime.h): it runs when the host waits
// for the stream, or is recorded when the stream is capturing; on the legacy default stream
// (nullptr), as in the kernel tests, it runs at once.
void submit(cudaStream_t stream, std::function<void()> work, const WorkKey& key);
// Throws std::invalid_argument for a block shape no GPU launches (checked when queued, as a GPU
// refuses the launch, and again when run).
void check_block(dim3 block);
// Throws std::invalid_argument for a launch a GPU (sm_90) refuses with an invalid configuration:
// a grid with a zero extent, x past 2^31 - 1, y or z past 65535; more than 48 KiB of dynamic
// shared memory for a kernel that did not opt in to that much (cudaFuncSetAttribute below), or
// more than 227 KiB at all; both less compat.h's kStaticSharedBudget, the room left for the
// kernel's static __shared__ bytes, which a GPU counts in the same bounds and this mode cannot see.
void check_launch(uintptr_t kernel, dim3 grid, size_t shmem);
// cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes): what the
// kernel may take from then on (check_launch).
void set_max_dynamic_shared(uintptr_t kernel, int bytes);

// kernel<<<grid, block, shmem, stream>>>(args...): the arguments are converted to the kernel's
// parameter types once, as a launch copies them, and every thread calls the kernel with those
// copies, when the stream gets to it.
template <class... P, class... A>
void launch(cudaStream_t stream, void (*kernel)(P...), dim3 grid, dim3 block, size_t shmem, A&&... args) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with the wrong number of arguments");
    check_block(block);
    check_launch(reinterpret_cast<uintptr_t>(kernel), grid, shmem);
    auto params = std::make_shared<const std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
    submit(
        stream, [kernel, params, grid, block, shmem] { run([&] { std::apply(kernel, *params); }, grid, block, shmem); },
        WorkKey{reinterpret_cast<uintptr_t>(kernel), kKernel});
}

template <class T>
uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move values of up to 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

}  // namespace kinfer::cuda::cpu_mode

// ---- the CUDA device functions the kernels use -------------------------------------------------

// The one function attribute the launchers set (the opt-in to more than 48 KiB of dynamic shared
// memory), as the runtime's cudaFuncSetAttribute; returns 0 (cudaSuccess).
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class... P>
int cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute, int value) {
    kinfer::cuda::cpu_mode::set_max_dynamic_shared(reinterpret_cast<uintptr_t>(kernel), value);
    return 0;
}

inline void __syncthreads() { kinfer::cuda::cpu_mode::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { kinfer::cuda::cpu_mode::sync_warp(); }

// Within groups of `width` lanes, as CUDA defines them: a lane outside the caller's group (or
// past the end of a partial warp) gives back the caller's own value.
template <class T>
T __shfl_sync(unsigned, T v, int src, int width = warpSize) {
    namespace cm = kinfer::cuda::cpu_mode;
    const int l = cm::lane();
    return cm::from_bits<T>(cm::exchange(cm::to_bits(v), (l / width) * width + (src % width)));
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = warpSize) {
    namespace cm = kinfer::cuda::cpu_mode;
    const int l = cm::lane(), src = l ^ mask;
    const uint64_t got = cm::exchange(cm::to_bits(v), src);
    return src / width > l / width ? v : cm::from_bits<T>(got);
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = warpSize) {
    namespace cm = kinfer::cuda::cpu_mode;
    const int l = cm::lane();
    const uint64_t got = cm::exchange(cm::to_bits(v), l + int(delta));
    return (l % width) + int(delta) >= width ? v : cm::from_bits<T>(got);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = warpSize) {
    namespace cm = kinfer::cuda::cpu_mode;
    const int l = cm::lane();
    const uint64_t got = cm::exchange(cm::to_bits(v), l - int(delta));
    return (l % width) < int(delta) ? v : cm::from_bits<T>(got);
}
inline unsigned __ballot_sync(unsigned, int pred) { return kinfer::cuda::cpu_mode::ballot(pred != 0); }
inline int __any_sync(unsigned, int pred) { return kinfer::cuda::cpu_mode::ballot(pred != 0) != 0; }
// Every live lane agrees when no live lane votes "no".
inline int __all_sync(unsigned, int pred) { return kinfer::cuda::cpu_mode::ballot(pred == 0) == 0; }

template <class T>
T atomicAdd(T* p, T v) { return std::atomic_ref<T>(*p).fetch_add(v); }
template <class T>
T atomicExch(T* p, T v) { return std::atomic_ref<T>(*p).exchange(v); }
template <class T>
T atomicCAS(T* p, T expected, T desired) {
    std::atomic_ref<T>(*p).compare_exchange_strong(expected, desired);
    return expected;   // the old value either way
}
template <class T>
T atomicMax(T* p, T v) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (old < v && !a.compare_exchange_weak(old, v)) {}
    return old;
}
template <class T>
T atomicMin(T* p, T v) {
    std::atomic_ref<T> a(*p);
    T old = a.load();
    while (v < old && !a.compare_exchange_weak(old, v)) {}
    return old;
}

template <class T>
T __ldg(const T* p) { return *p; }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
// Rounded operations that nvcc never fuses into an FMA; the host compiler does not fuse them
// either, since kinfer_cuda_emu is built with -ffp-contract=off.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline unsigned __float_as_uint(float f) { return kinfer::cuda::cpu_mode::from_bits<unsigned>(kinfer::cuda::cpu_mode::to_bits(f)); }
inline float __uint_as_float(unsigned u) { return kinfer::cuda::cpu_mode::from_bits<float>(kinfer::cuda::cpu_mode::to_bits(u)); }
inline int __float_as_int(float f) { return kinfer::cuda::cpu_mode::from_bits<int>(kinfer::cuda::cpu_mode::to_bits(f)); }
// Four signed byte products summed into c (the int8 dot-product instruction).
inline int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; ++i) c += int(int8_t(uint32_t(a) >> (8 * i))) * int(int8_t(uint32_t(b) >> (8 * i)));
    return c;
}
struct alignas(16) uint4 {
    unsigned x = 0, y = 0, z = 0, w = 0;
};
struct alignas(8) uint2 {
    unsigned x = 0, y = 0;
};
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __ffs(unsigned x) { return __builtin_ffs(int(x)); }
