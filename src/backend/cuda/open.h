// What the backend registry needs of the CUDA backends without their classes: opening a device,
// listing GPUs, and a device's expert tier. Two builds of the same backend (cuda_backend.cpp):
//   kinfer::backend::cuda      on the CUDA runtime and the nvcc-built kernels (KINFER_HAVE_CUDA);
//   kinfer::backend::cuda_emu  on the emulated runtime and the CPU-mode kernels (emu/runtime.h),
//                              always built: `--device emu-cuda[:SIZE]`, a GPU's host code run on
//                              the CPU, for tests.
#pragma once
#include "backend/backend.h"
#include "runtime/device.h"

#include <memory>
#include <string>
#include <vector>

namespace kinfer::backend::cuda {
// One --list-devices line per CUDA device (name, memory, free memory, compute capability), or
// one line saying why there is none (no driver, no device).
std::vector<std::string> list_devices();
// The backend a --device value "cudaN" names; nullptr, with *why set, when this machine has no
// such device (no GPU at run time: the caller says so in one line and runs on the CPU). A
// malformed spec throws kinfer::Error.
std::unique_ptr<Backend> open_device(const std::string& spec, std::string* why);
// be's expert tier (made on first use) when be is a CudaBackend, else nullptr.
runtime::Device* expert_device(Backend& be);
}  // namespace kinfer::backend::cuda

namespace kinfer::backend::cuda_emu {
// "emu-cuda" or "emu-cuda:SIZE" (default 2GiB): a new emulated device of SIZE bytes, named
// emu-cudaN. A malformed spec throws kinfer::Error.
std::unique_ptr<Backend> open_device(const std::string& spec, std::string* why);
runtime::Device* expert_device(Backend& be);
}  // namespace kinfer::backend::cuda_emu
