// Which namespace the kernels and their launchers are compiled into: kinfer::cuda::gpu under
// nvcc, kinfer::cuda::emu for the host compiler's CPU execution mode (compat.h). Host code that
// calls the nvcc-built launchers (cuda_backend.cpp) defines KINFER_CUDA_NS as gpu before
// including kernels.h.
#pragma once

#ifndef KINFER_CUDA_NS
#if defined(__CUDACC__)
#define KINFER_CUDA_NS gpu
#else
#define KINFER_CUDA_NS emu
#endif
#endif
