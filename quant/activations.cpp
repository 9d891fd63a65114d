// Activation quantizers: what ggml-cpu applies to the fp32 input of every quantized matmul on
// x86. Matching them (not just the _ref versions) is what makes kinfer's quantized matmuls agree
// with llama.cpp bit for bit (DESIGN.md section 6).
#include <algorithm>
#include <cassert>
#include <cmath>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/kquant_search.h"
#include "quant/types.h"

namespace kinfer::quant {

namespace {

// ggml's AVX/AVX2 quantize_row_q8_0 / q8_1: id = 127/amax (one division, not 1/(amax/127)) and
// _mm256_round_ps(_MM_ROUND_NEAREST), i.e. ties to even. Same result on any ISA since the
// arithmetic is elementwise and exact-order free; written in scalar so it runs everywhere.
template <class Block>
float q8_x86_block(const float* x, Block& b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.f;
    const float id = amax != 0.0f ? 127.f / amax : 0.0f;
    b.d = fp32_to_fp16(d);
    for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(detail::nearest_int(x[j] * id));
    return d;
}

}  // namespace

void quantize_row_q8_0_avx2(const float* x, void* vy, int64_t n);
void quantize_row_q8_K_avx2(const float* x, void* vy, int64_t n);

void quantize_row_q8_0(const float* x, void* vy, int64_t n) {
    assert(n % QK8_0 == 0);
    static const bool simd = active_isa() != Isa::scalar;
    if (simd) return quantize_row_q8_0_avx2(x, vy, n);
    auto* y = static_cast<block_q8_0*>(vy);
    for (int64_t i = 0; i < n / QK8_0; ++i) q8_x86_block(x + QK8_0 * i, y[i]);
}

void quantize_row_q8_1(const float* x, void* vy, int64_t n) {
    assert(n % QK8_1 == 0);
    auto* y = static_cast<block_q8_1*>(vy);
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        const float d = q8_x86_block(x + QK8_1 * i, y[i]);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) sum += y[i].qs[j];
        y[i].s = fp32_to_fp16(d * float(sum));
    }
}

// ggml's x86 quantize_row_q8_K is the reference; the AVX2 version writes the same bytes.
void quantize_row_q8_K(const float* x, void* y, int64_t n) {
    static const bool simd = active_isa() != Isa::scalar;
    if (simd) quantize_row_q8_K_avx2(x, y, n);
    else quantize_row_q8_K_ref(x, y, n);
}

}  // namespace kinfer::quant
