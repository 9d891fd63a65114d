// cp.async (sm_80 on): a copy from global to shared memory that goes around the registers and
// lets the thread go on, so a block can start its loads, do other work (the fused GEMM decodes
// its weights) and wait only when it needs the bytes. A copy is visible to its own thread after
// cp_async_wait_all, and to the block after that and a __syncthreads. A GPU makes the copy at any
// point in between; the CPU mode makes it at the wait under its forward schedules and at the call
// under the reverse ones (cpu_mode.h async_copy), so a kernel that reads the destination too
// early, or copies into a buffer other threads still read, goes wrong in the tests too.
#pragma once
#include "backend/cuda/compat.h"

#include <cstdint>
#include <stdexcept>

namespace kinfer::cuda::KINFER_CUDA_NS {

// 16 bytes from src (global) to dst (shared), both 16-byte aligned (the CPU mode checks).
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#error "cp.async needs sm_80 or newer (the build targets sm_90)"
#elif defined(__CUDA_ARCH__)
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(src) : "memory");
#elif defined(__CUDACC__)
    (void)dst, (void)src;   // nvcc's host pass, which never runs a kernel
#else
    if (reinterpret_cast<uintptr_t>(dst) % 16 != 0 || reinterpret_cast<uintptr_t>(src) % 16 != 0)
        throw std::logic_error("cuda cpu mode: cp.async of 16 bytes from or to an address that is not 16-byte aligned");
    ::kinfer::cuda::cpu_mode::async_copy(dst, src, 16);
#endif
}

// Waits for every cp.async the calling thread has issued.
__device__ __forceinline__ void cp_async_wait_all() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_all;" ::: "memory");
#elif !defined(__CUDACC__)
    ::kinfer::cuda::cpu_mode::async_wait();
#endif
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
