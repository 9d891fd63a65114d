// fp16 -> fp32 rows with F16C, the MLA latent cache's load (a decode step below the tiled kernels'
// threshold converts every cached row: 2 ns an element one at a time, so 1.2 ms a layer and token
// at 1000 cached positions of K3's 576). The conversion is exact, as the scalar one is, for every
// code but a signalling NaN, which F16C quiets: a 16-code group holding an infinity or NaN takes
// the scalar path instead, so the bits are dequantize_row_f16's for every input.
#include <immintrin.h>

#include <cstdint>

namespace kinfer::quant {

void dequantize_row_f16_scalar(const void* x, float* y, int64_t n);   // dequantize.cpp

void dequantize_row_f16_avx2(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const uint16_t*>(vx);
    const __m256i exp_all = _mm256_set1_epi16(0x7c00);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi16(_mm256_and_si256(h, exp_all), exp_all)) != 0) {
            dequantize_row_f16_scalar(x + i, y + i, 16);
            continue;
        }
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_castsi256_si128(h)));
        _mm256_storeu_ps(y + i + 8, _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1)));
    }
    if (i < n) dequantize_row_f16_scalar(x + i, y + i, n - i);
}

}  // namespace kinfer::quant
