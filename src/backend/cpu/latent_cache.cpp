#include "backend/cpu/latent_cache.h"

#include "quant/kernels.h"

#include <cstring>

namespace kinfer::backend::cpu {

void latent_store(const LatentPages& c, int64_t j0, int64_t n, const float* rows, int64_t ld) {
    if (ld == 0) ld = c.R;
    for (int64_t j = 0; j < n; ++j) {
        const float* x = rows + j * ld;
        uint8_t* dst = c.row(j0 + j);
        switch (c.type) {
            case CacheType::f32: std::memcpy(dst, x, size_t(c.R) * sizeof(float)); break;
            case CacheType::f16: quant::quantize_row_f16(x, dst, c.R); break;
            case CacheType::q8_0: quant::quantize_row_q8_0_ref(x, dst, c.R); break;
        }
    }
}

void latent_load(const LatentPages& c, int64_t j0, int64_t n, float* rows) {
    // Runs of rows within one page are contiguous: one conversion call per run.
    for (int64_t j = 0; j < n;) {
        const int64_t at = j0 + j, in_page = c.page_rows - at % c.page_rows, run = std::min(in_page, n - j);
        const uint8_t* src = c.row(at);
        float* y = rows + j * c.R;
        switch (c.type) {
            case CacheType::f32: std::memcpy(y, src, size_t(run * c.R) * sizeof(float)); break;
            case CacheType::f16: quant::dequantize_row_f16(src, y, run * c.R); break;
            case CacheType::q8_0: quant::dequantize_row_q8_0(src, y, run * c.R); break;
        }
        j += run;
    }
}

}  // namespace kinfer::backend::cpu
