// What every kernel source (src/backend/cuda/*.cu) includes first. Under nvcc: the CUDA runtime.
// Under the host compiler: the CPU execution mode (cpu_mode.h), so the same source builds and
// runs as host code for the CPU-mode tests. Kernels stay plain CUDA C++; the two places where
// the syntax itself differs are spelled with a macro:
//   KINFER_LAUNCH(kernel, grid, block, shmem, stream, args...)   kernel<<<grid, block, shmem, stream>>>(args...)
//     (a templated kernel goes through a function pointer: auto* k = &kern<T, 4>;)
//   KINFER_DYNAMIC_SHARED(T, name);                              extern __shared__ T name[]
// Kernels and launchers live in namespace kinfer::cuda::KINFER_CUDA_NS (gpu / emu, see
// kernels.h), so both builds can be linked into one test binary without clashing.
#pragma once

#include "backend/cuda/kernel_ns.h"

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#define KINFER_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<(grid), (block), (shmem), (stream)>>>(__VA_ARGS__)
#define KINFER_DYNAMIC_SHARED(T, name)                                   \
    extern __shared__ __align__(16) unsigned char kinfer_dynamic_smem_[]; \
    T* name = reinterpret_cast<T*>(kinfer_dynamic_smem_)

#else
#include "backend/cuda/cpu_mode.h"

#define KINFER_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    ::kinfer::cuda::cpu_mode::launch((stream), (kernel), (grid), (block), (shmem) __VA_OPT__(, ) __VA_ARGS__)
#define KINFER_DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::kinfer::cuda::cpu_mode::dynamic_shared())

#endif

namespace kinfer::cuda {
inline constexpr unsigned kFullMask = 0xffffffffu;
// Shared memory a block may take without opting in (cudaFuncSetAttribute), static and dynamic
// together, and with an opt-in (sm_90).
inline constexpr size_t kSharedNoOptIn = 48 * 1024;
inline constexpr size_t kSharedOptInMax = 227 * 1024;
// Every kernel's static shared memory is at most this: what nvcc puts in its window (1 KiB on
// sm_90 even for a kernel that declares none) and its own __shared__ arrays (block_reduce's
// slots, route's lists), 1-1.5 KiB today. tests/cuda/static_smem.sh reads each kernel's from the
// cubins when nvcc exists. The CPU mode cannot see static __shared__ bytes, so the launch bounds
// below leave this much room for them, and the launchers and the CPU mode (cpu_mode.cpp) use
// those: a launch the CPU mode accepts fits a GPU's bound whatever the kernel's static bytes.
inline constexpr size_t kStaticSharedBudget = 2 * 1024;
// Dynamic shared memory a launch may ask without opting in, and at most (opted in).
inline constexpr size_t kDynamicNoOptIn = kSharedNoOptIn - kStaticSharedBudget;
inline constexpr size_t kDynamicOptInMax = kSharedOptInMax - kStaticSharedBudget;
// The launchers take their stream as void* (kernels.h is plain C++).
inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
}
