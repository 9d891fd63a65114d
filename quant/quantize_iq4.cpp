// IQ4_NL / IQ4_XS quantizers (non-linear 4-bit levels kvalues_iq4nl), byte-identical to ggml
// without an importance matrix. Per 32-element block: start from the scale that maps the
// extreme value onto the extreme level, refit it by x^2-weighted least squares, and (ntry > 0)
// also try 2*ntry+1 shifted starting scales, keeping the best fit. IQ4_XS then quantizes the
// eight block scales to 6 bits against one fp16 super-block scale and re-picks the levels.
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/kquant_search.h"

namespace kinfer::quant {

namespace {

// Index of the code-book value nearest to v (binary search; ties go to the upper neighbour).
int nearest_level(const int8_t* val, float v) {
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < val[mid]) hi = mid; else lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

// One super-block of sbs elements (32 for IQ4_NL, 256 for IQ4_XS). L persists across calls
// (ggml reuses its stack buffer; only all-zero blocks ever read stale levels).
void iq4_superblock(int sbs, const float* x, fp16_t* dh, uint8_t* q4, uint16_t* scales_h, uint8_t* scales_l,
                    uint8_t* L, int ntry) {
    const int8_t* values = kvalues_iq4nl;
    constexpr int bs = 32;
    float scales[QK_K / bs];
    float weight[bs];
    std::memset(q4, 0, size_t(sbs / 2));
    *dh = fp32_to_fp16(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < sbs / bs; ++ib) {
        const float* xb = x + ib * bs;
        uint8_t* Lb = L + ib * bs;
        for (int j = 0; j < bs; ++j) weight[j] = xb[j] * xb[j];
        float amax = 0, max = 0;
        for (int j = 0; j < bs; ++j) {
            const float ax = std::fabs(xb[j]);
            if (ax > amax) { amax = ax; max = xb[j]; }
        }
        if (amax < detail::kGroupMaxEps) {
            scales[ib] = 0;
            continue;
        }
        float d = ntry > 0 ? -max / values[0] : max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < bs; ++j) {
            const int l = nearest_level(values, id * xb[j]);
            Lb[j] = uint8_t(l);
            const float q = values[l];
            sumqx += weight[j] * q * xb[j];
            sumq2 += weight[j] * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        // Only the scale is kept from these trials; levels are re-picked below.
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < bs; ++j) {
                const float q = values[nearest_level(values, id * xb[j])];
                sumqx += weight[j] * q * xb[j];
                sumq2 += weight[j] * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        if (std::fabs(d) > amax_scale) { amax_scale = std::fabs(d); max_scale = d; }
    }
    if (sbs / bs > 1) {
        *scales_h = 0;
        const float d = -max_scale / 32;
        *dh = fp32_to_fp16(d);
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < sbs / bs; ++ib) {
            int l = detail::nearest_int(id * scales[ib]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < bs; ++j) L[ib * bs + j] = uint8_t(nearest_level(values, idl * x[ib * bs + j]));
            l += 32;
            if (ib % 2 == 0) scales_l[ib / 2] = uint8_t(l & 0xf);
            else scales_l[ib / 2] |= uint8_t((l & 0xf) << 4);
            *scales_h |= uint16_t((l >> 4) << (2 * ib));
        }
    } else {
        *dh = fp32_to_fp16(scales[0]);
        if (ntry > 0) {
            const float id = scales[0] ? 1 / scales[0] : 0;
            for (int j = 0; j < sbs; ++j) L[j] = uint8_t(nearest_level(values, id * x[j]));
        }
    }
    for (int i = 0; i < sbs / 32; ++i) {
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = uint8_t(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
    }
}

void iq4_nl_row(const float* x, void* vy, int64_t n, int ntry) {
    assert(n % QK4_NL == 0);
    auto* y = static_cast<block_iq4_nl*>(vy);
    uint8_t L[QK4_NL] = {};
    uint16_t unused_h;
    for (int64_t i = 0; i < n / QK4_NL; ++i) {
        iq4_superblock(QK4_NL, x + QK4_NL * i, &y[i].d, y[i].qs, &unused_h, nullptr, L, ntry);
    }
}

}  // namespace

void quantize_row_iq4_nl_ref(const float* x, void* y, int64_t n) { iq4_nl_row(x, y, n, -1); }
void quantize_iq4_nl(const float* x, void* y, int64_t n) { iq4_nl_row(x, y, n, 7); }

void quantize_row_iq4_xs_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_iq4_xs*>(vy);
    uint8_t L[QK_K] = {};
    for (int64_t i = 0; i < n / QK_K; ++i) {
        iq4_superblock(QK_K, x + QK_K * i, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, L, 7);
    }
}

}  // namespace kinfer::quant
