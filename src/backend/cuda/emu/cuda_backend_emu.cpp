// CudaBackend built against the emulated CUDA runtime (runtime.h) and the CPU-mode kernels
// (kinfer::cuda::emu): the class kinfer::backend::cuda_emu::CudaBackend, which `--device
// emu-cuda` opens. The same source as the GPU build, so the tests that run it (the golden models,
// the expert tier, CUDA graphs) exercise the host code a GPU runs, its streams and copies
// included; only the kernels' arithmetic and the runtime underneath differ.
#define KINFER_CUDA_NS emu
#define KINFER_CUDA_EMU_RUNTIME 1
#include "backend/cuda/emu/runtime.h"

// cuda_backend.cpp calls the runtime unqualified, as it calls CUDA's.
using namespace kinfer::cuda::emu_rt;

#include "backend/cuda/cuda_backend.cpp"
#include "backend/cuda/cuda_expert_device.cpp"
