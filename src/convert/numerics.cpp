// See numerics.h.
#include "convert/numerics.h"

#include "common/error.h"
#include "quant/fp16.h"

#include <cmath>
#include <cstring>

namespace kinfer::convert {

uint16_t fp32_to_fp16_numpy(float f) {
    const uint32_t x = quant::f32_bits(f);
    const uint32_t ax = x & 0x7fffffff;
    if (ax > 0x7f800000) {
        // numpy's npy_floatbits_to_halfbits: keep the top 10 payload bits, never become inf.
        const uint16_t sign = uint16_t((x >> 16) & 0x8000);
        uint16_t r = uint16_t(0x7c00 + ((x & 0x7fffff) >> 13));
        if (r == 0x7c00) ++r;
        return uint16_t(sign | r);
    }
    return quant::fp32_to_fp16(f);   // identical rounding for every non-NaN input
}

// SLEEF xexpf (u10) as compiled for torch's AVX2 Vectorized<float>::exp: every multiply-add is
// a fused FMA. The constants are SLEEF's.
float torch_expf(float d) {
    const float R_LN2f = 1.442695040888963407359924681001892137426645954152985934135449407f;
    const float L2Uf = 0.693145751953125f;
    const float L2Lf = 1.428606765330187045e-06f;
    const int q = int(std::nearbyint(d * R_LN2f));
    float s = std::fma(float(q), -L2Uf, d);
    s = std::fma(float(q), -L2Lf, s);
    float u = 0.000198527617612853646278381f;
    u = std::fma(u, s, 0.00139304355252534151077271f);
    u = std::fma(u, s, 0.00833336077630519866943359f);
    u = std::fma(u, s, 0.0416664853692054748535156f);
    u = std::fma(u, s, 0.166666671633720397949219f);
    u = std::fma(u, s, 0.5f);
    u = 1.0f + std::fma(s * s, u, s);
    // ldexp2k: scale by 2^q in two steps so that q near the exponent limits does not overflow.
    const int m = q >> 1;
    u = u * quant::f32_from_bits(uint32_t(m + 127) << 23) * quant::f32_from_bits(uint32_t(q - m + 127) << 23);
    if (d < -104.0f) u = 0.0f;
    if (d > 104.0f || std::isinf(d)) u = INFINITY;
    if (std::isnan(d)) u = NAN;
    return u;
}

size_t encode_f32(quant::Type t, const float* src, int64_t n, uint8_t* dst) {
    switch (t) {
        case quant::Type::F32: std::memcpy(dst, src, size_t(n) * 4); return size_t(n) * 4;
        case quant::Type::F16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = fp32_to_fp16_numpy(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return size_t(n) * 2;
        case quant::Type::BF16:
            for (int64_t i = 0; i < n; ++i) {
                const uint16_t h = quant::fp32_to_bf16(src[i]);
                std::memcpy(dst + 2 * i, &h, 2);
            }
            return size_t(n) * 2;
        default: {
            const quant::Traits& tr = quant::traits(t);
            if (!tr.from_float_ref) fail("no quantizer for type {}", tr.name);
            if (n % tr.block_size) fail("{} elements are not a multiple of the {} block size", n, tr.name);
            tr.from_float_ref(src, dst, n);
            return quant::row_size(tr, n);
        }
    }
}

}  // namespace kinfer::convert
