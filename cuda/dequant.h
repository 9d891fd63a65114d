// Host entry points of the CUDA dequantization kernels. Return 0 on success, negative on a CUDA
// error (no device, allocation failure).
#pragma once
#include <cstdint>

namespace kinfer::cuda {
int dequant_q8_0(const void* host_blocks, float* host_out, int64_t n);
}
