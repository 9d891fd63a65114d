// compressed-tensors "mxfp4-pack-quantized" -> ggml block_mxfp4, losslessly (bits move, values
// do not change). Source per row: `packed` [cols/2] with element 2i in the low nibble and 2i+1 in
// the high one, `scale` [cols/32] E8M0 exponents. Destination per 32-element group: the scale
// byte, then 16 bytes where byte j holds element j (low nibble) and element j+16 (high nibble).
// The e2m1 codes need no remapping: ggml's kvalues are the e2m1 values doubled and its scale is
// halved, so every element dequantizes to the same value.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kinfer::convert {

constexpr size_t kMxfp4BlockBytes = 17;   // sizeof(block_mxfp4)

// rows x cols values (cols a multiple of 32); dst holds rows * cols/32 blocks.
void repack_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols, uint8_t* dst);

}  // namespace kinfer::convert
