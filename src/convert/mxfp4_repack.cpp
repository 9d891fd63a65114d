// See mxfp4_repack.h.
#include "convert/mxfp4_repack.h"

namespace kinfer::convert {

void repack_mxfp4(const uint8_t* packed, const uint8_t* scale, int64_t rows, int64_t cols, uint8_t* dst) {
    const int64_t nb = cols / 32;
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t* src = packed + r * (cols / 2) + b * 16;   // 32 codes, two per byte
            uint8_t* out = dst + (r * nb + b) * kMxfp4BlockBytes;
            out[0] = scale[r * nb + b];
            uint8_t code[32];
            for (int i = 0; i < 16; ++i) {
                code[2 * i] = src[i] & 0x0f;
                code[2 * i + 1] = src[i] >> 4;
            }
            for (int j = 0; j < 16; ++j) out[1 + j] = uint8_t(code[j] | (code[j + 16] << 4));
        }
    }
}

}  // namespace kinfer::convert
