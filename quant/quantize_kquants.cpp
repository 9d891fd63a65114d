// Reference quantizers of the K-quants (Q2_K ... Q6_K) and of Q8_K, byte-identical to ggml's
// quantize_row_*_ref. Each one: (1) search a scale (and min) per sub-block, (2) quantize those
// sub-block scales against one fp16 super-block scale, (3) re-quantize every element with the
// scale as it will be decoded (fp16 d times the integer sub-scale), (4) pack the bits.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/kquant_search.h"

namespace kinfer::quant {

using detail::nearest_int;

namespace {

int clampi(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Q4_K / Q5_K scale+min layout: 8 six-bit scales and 8 six-bit mins in 12 bytes. Sub-blocks
// 0..3 keep both in bytes 0..7; 4..7 store their low nibbles in bytes 8..11 and their top two
// bits in the spare high bits of bytes 0..7.
void pack_scale_min_k4(int j, uint8_t ls, uint8_t lm, uint8_t* s) {
    if (j < 4) {
        s[j] = ls;
        s[j + 4] = lm;
    } else {
        s[j + 4] = uint8_t((ls & 0xf) | ((lm & 0xf) << 4));
        s[j - 4] |= uint8_t((ls >> 4) << 6);
        s[j] |= uint8_t((lm >> 4) << 6);
    }
}

// Two-bit levels of 128 elements into 32 bytes: byte l holds elements l, l+32, l+64, l+96.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
    for (int j = 0; j < QK_K; j += 128) {
        for (int l = 0; l < 32; ++l) {
            qs[j / 4 + l] = uint8_t(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
        }
    }
}

// Shared by Q4_K and Q5_K: per 32-element sub-block a (scale, min) pair from make_qkx2_quants
// with weights av_x + |x|, then both quantized to 6 bits against fp16 d / dmin.
template <int nmax>
void kquant_scales_mins(const float* x, uint8_t* L, uint8_t* scales12, fp16_t& d16, fp16_t& dmin16,
                        float rmin, int nstep) {
    float scales[QK_K / 32], mins[QK_K / 32], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;  // scales and (negated) mins are >= 0 here
    for (int j = 0; j < QK_K / 32; ++j) {
        float sum_x2 = 0;
        for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
        const float av_x = std::sqrt(sum_x2 / 32);
        for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
        scales[j] = detail::make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux,
                                             rmin, 0.1f, nstep, false);
        if (scales[j] > max_scale) max_scale = scales[j];
        if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    std::memset(scales12, 0, K_SCALE_SIZE);
    for (int j = 0; j < QK_K / 32; ++j) {
        const uint8_t ls = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
        const uint8_t lm = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
        pack_scale_min_k4(j, ls, lm, scales12);
    }
    d16 = fp32_to_fp16(max_scale / 63.f);
    dmin16 = fp32_to_fp16(max_min / 63.f);
    // Re-quantize against the scales as decoded; sub-blocks with a zero scale keep the search's levels.
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        if (j < 4) {
            sc = scales12[j] & 63; m = scales12[j + 4] & 63;
        } else {
            sc = uint8_t((scales12[j + 4] & 0xf) | ((scales12[j - 4] >> 6) << 4));
            m = uint8_t((scales12[j + 4] >> 4) | ((scales12[j] >> 6) << 4));
        }
        const float d = fp16_to_fp32(d16) * sc;
        if (!d) continue;
        const float dm = fp16_to_fp32(dmin16) * m;
        for (int ii = 0; ii < 32; ++ii) {
            L[32 * j + ii] = uint8_t(clampi(nearest_int((x[32 * j + ii] + dm) / d), 0, nmax));
        }
    }
}

}  // namespace

void quantize_row_q2_K_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_q2_K*>(vy);
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = detail::make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux,
                                                 -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        // Low nibble: sub-block scale / d; high nibble: sub-block min / dmin.
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
            y[i].d = fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = fp32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * (y[i].scales[j] & 0xf);
            if (!d) continue;
            const float dm = fp16_to_fp32(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = uint8_t(clampi(nearest_int((x[16 * j + ii] + dm) / d), 0, 3));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

void quantize_row_q3_K_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_q3_K*>(vy);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float max_scale = 0, amax = 0;  // signed scale of largest magnitude
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = detail::make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
            const float a = std::fabs(scales[j]);
            if (a > amax) { amax = a; max_scale = scales[j]; }
        }
        // 16 six-bit signed sub-scales (+32): low nibbles in bytes 0..7, top two bits in 8..11.
        std::memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int8_t l = int8_t(nearest_int(iscale * scales[j]));
                l = int8_t(clampi(l, -32, 31) + 32);
                if (j < 8) y[i].scales[j] = uint8_t(l & 0xf);
                else y[i].scales[j - 8] |= uint8_t((l & 0xf) << 4);
                l = int8_t(l >> 4);
                y[i].scales[j % 4 + 8] |= uint8_t(l << (2 * (j / 4)));
            }
            y[i].d = fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = fp32_to_fp16(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sc = j < 8 ? y[i].scales[j] & 0xf : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = fp16_to_fp32(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = int8_t(clampi(nearest_int(x[16 * j + ii] / d), -4, 3) + 4);
            }
        }
        // High bit of level j goes to hmask[j % 32], bit j / 32; the low two bits pack like Q2_K.
        std::memset(y[i].hmask, 0, QK_K / 8);
        uint8_t low[QK_K];
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) y[i].hmask[j % 32] |= uint8_t(1 << (j / 32));
            low[j] = uint8_t(L[j] & 3);
        }
        pack_2bit(low, y[i].qs);
    }
}

void quantize_row_q4_K_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_q4_K*>(vy);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        kquant_scales_mins<15>(x, L, y[i].scales, y[i].d, y[i].dmin, -1.f, 20);
        // 64 elements per 32 bytes: low nibbles are the first 32, high nibbles the next 32.
        uint8_t* q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32) {
            for (int l = 0; l < 32; ++l) q[l] = uint8_t(L[j + l] | (L[j + l + 32] << 4));
        }
    }
}

void quantize_row_q5_K_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_q5_K*>(vy);
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        kquant_scales_mins<31>(x, L, y[i].scales, y[i].d, y[i].dmin, -0.5f, 15);
        // Low nibbles as Q4_K; the fifth bit of element 64*k + j (+32) is bit 2k (2k+1) of qh[j].
        std::memset(y[i].qh, 0, QK_K / 8);
        uint8_t* ql = y[i].qs;
        for (int k = 0; k < QK_K / 64; ++k, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                const int l1 = L[64 * k + j], l2 = L[64 * k + j + 32];
                if (l1 > 15) y[i].qh[j] |= uint8_t(1 << (2 * k));
                if (l2 > 15) y[i].qh[j] |= uint8_t(2 << (2 * k));
                ql[j] = uint8_t((l1 & 0xf) | ((l2 & 0xf) << 4));
            }
        }
    }
}

void quantize_row_q6_K_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_q6_K*>(vy);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            scales[ib] = detail::make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
            const float a = std::fabs(scales[ib]);
            if (a > max_abs_scale) { max_abs_scale = a; max_scale = scales[ib]; }
        }
        if (max_abs_scale < detail::kGroupMaxEps) {
            std::memset(&y[i], 0, sizeof(block_q6_K));
            continue;
        }
        // int8 sub-scales against d = max_scale / -128.
        const float iscale = -128.f / max_scale;
        y[i].d = fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                L[16 * j + ii] = int8_t(clampi(nearest_int(x[16 * j + ii] / d), -32, 31) + 32);
            }
        }
        // Per 128 elements: ql holds low nibbles (bytes l and l+32 carry elements l/l+64 and
        // l+32/l+96), qh[l] the two high bits of elements l, l+32, l+64, l+96.
        uint8_t* ql = y[i].ql;
        uint8_t* qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const int q1 = L[j + l], q2 = L[j + l + 32], q3 = L[j + l + 64], q4 = L[j + l + 96];
                ql[l] = uint8_t((q1 & 0xf) | ((q3 & 0xf) << 4));
                ql[l + 32] = uint8_t((q2 & 0xf) | ((q4 & 0xf) << 4));
                qh[l] = uint8_t((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
    }
}

void quantize_row_q8_K_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_K == 0);
    auto* y = static_cast<block_q8_K*>(vy);
    for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            // ggml leaves bsums unwritten here; zero is what they would sum to.
            std::memset(&y[i], 0, sizeof(block_q8_K));
            continue;
        }
        // -127 (not -128) so the extreme is +-127 and negation never overflows int8.
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[16 * j + ii];
            y[i].bsums[j] = int16_t(sum);
        }
        y[i].d = 1 / iscale;
    }
}

}  // namespace kinfer::quant
