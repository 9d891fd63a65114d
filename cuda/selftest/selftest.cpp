// Checks the CUDA Q8_0 dequantization against a CPU computation of the same blocks.
#include "cuda/dequant.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

#include <cstdint>
#include <cstdio>
#include <vector>

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
        const auto* blk = reinterpret_cast<const kinfer::quant::block_q8_0*>(&blocks[size_t(i / 32) * 34]);
        const float ref = kinfer::quant::fp16_to_fp32(blk->d) * float(blk->qs[i % 32]);
        bad += gpu[i] != ref;
    }
    std::printf("cuda dequant_q8_0: %lld values, %d mismatches\n", (long long)n, bad);
    return bad ? 1 : 0;
}
