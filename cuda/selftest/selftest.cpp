// Checks the CUDA Q8_0 dequantization against a CPU computation of the same blocks.
#include "cuda/dequant.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

static float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) bits = sign;
        else { float f = std::ldexp(float(man), -24); std::memcpy(&bits, &f, 4); bits |= sign; }
    } else if (exp == 31) bits = sign | 0x7f800000 | (man << 13);
    else bits = sign | ((exp + 112) << 23) | (man << 13);
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

int main() {
    const int64_t n = 32 * 1024;
    std::vector<uint8_t> blocks(size_t(n / 32) * 34);
    uint32_t s = 1;
    for (auto& b : blocks) { s = s * 1664525u + 1013904223u; b = uint8_t(s >> 24); }
    for (size_t b = 0; b < blocks.size(); b += 34) { blocks[b] = 0x00; blocks[b + 1] = 0x3c; }  // d = 1.0
    std::vector<float> gpu(n);
    if (int rc = kinfer::cuda::dequant_q8_0(blocks.data(), gpu.data(), n)) {
        std::printf("cuda selftest: no device or CUDA error (%d)\n", rc);
        return 1;
    }
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
        const uint8_t* blk = &blocks[size_t(i / 32) * 34];
        const float d = half_to_float(uint16_t(blk[0] | blk[1] << 8));
        const float ref = d * float(int8_t(blk[2 + i % 32]));
        bad += gpu[i] != ref;
    }
    std::printf("cuda dequant_q8_0: %lld values, %d mismatches\n", (long long)n, bad);
    return bad ? 1 : 0;
}
