// Reference quantizers of the 32-element formats (Q4_0 ... Q8_1, MXFP4) and plain float rows.
// They reproduce ggml's quantize_row_*_ref bit for bit: the same float operations in the same
// order (this folder builds with -ffp-contract=off so no FMA can merge a multiply and an add),
// the same truncating casts and the same fp16 rounding of the scales.
#include <algorithm>
#include <cassert>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

namespace kinfer::quant {

namespace {

// The signed value of largest magnitude (the first one on ties): symmetric formats map it to
// the most negative level so the full code range is used on that side.
float signed_absmax(const float* x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; ++j) {
        if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
    }
    return max;
}

void min_max(const float* x, int n, float& mn, float& mx) {
    mn = FLT_MAX; mx = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        if (x[j] < mn) mn = x[j];
        if (x[j] > mx) mx = x[j];
    }
}

float absmax(const float* x, int n) {
    float amax = 0.0f;
    for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    return amax;
}

}  // namespace

void quantize_row_q4_0_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK4_0 == 0);
    auto* y = static_cast<block_q4_0*>(vy);
    for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
        const float d = signed_absmax(x, QK4_0) / -8;  // the extreme lands on level 0 (= -8)
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            // +8.5 then truncate: round half up into 0..16, with 16 folded to 15.
            const int q0 = std::min(15, int(int8_t(x[j] * id + 8.5f)));
            const int q1 = std::min(15, int(int8_t(x[j + QK4_0 / 2] * id + 8.5f)));
            y[i].qs[j] = uint8_t(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q4_1_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK4_1 == 0);
    auto* y = static_cast<block_q4_1*>(vy);
    for (int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
        float mn, mx;
        min_max(x, QK4_1, mn, mx);
        const float d = (mx - mn) / 15;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(mn);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const int q0 = std::min(15, int(int8_t((x[j] - mn) * id + 0.5f)));
            const int q1 = std::min(15, int(int8_t((x[j + QK4_1 / 2] - mn) * id + 0.5f)));
            y[i].qs[j] = uint8_t(q0 | (q1 << 4));
        }
    }
}

void quantize_row_q5_0_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK5_0 == 0);
    auto* y = static_cast<block_q5_0*>(vy);
    for (int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
        const float d = signed_absmax(x, QK5_0) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int q0 = std::min(31, int(int8_t(x[j] * id + 16.5f)));
            const int q1 = std::min(31, int(int8_t(x[j + QK5_0 / 2] * id + 16.5f)));
            y[i].qs[j] = uint8_t((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= uint32_t(q0 >> 4) << j;                 // fifth bits, element order
            qh |= uint32_t(q1 >> 4) << (j + QK5_0 / 2);
        }
        std::memcpy(y[i].qh, &qh, 4);
    }
}

void quantize_row_q5_1_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK5_1 == 0);
    auto* y = static_cast<block_q5_1*>(vy);
    for (int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
        float mn, mx;
        min_max(x, QK5_1, mn, mx);
        const float d = (mx - mn) / 31;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(mn);
        uint32_t qh = 0;
        for (int j = 0; j < QK5_1 / 2; ++j) {
            // ggml does not clamp here: (x - min) * id + 0.5 stays below 32 (max maps to 31).
            const unsigned q0 = uint8_t((x[j] - mn) * id + 0.5f);
            const unsigned q1 = uint8_t((x[j + QK5_1 / 2] - mn) * id + 0.5f);
            y[i].qs[j] = uint8_t((q0 & 0xf) | ((q1 & 0xf) << 4));
            qh |= ((q0 & 0x10u) >> 4) << j;
            qh |= ((q1 & 0x10u) >> 4) << (j + QK5_1 / 2);
        }
        std::memcpy(y[i].qh, &qh, 4);
    }
}

void quantize_row_q8_0_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK8_0 == 0);
    auto* y = static_cast<block_q8_0*>(vy);
    for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
        const float d = absmax(x, QK8_0) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));  // half away from 0
    }
}

void quantize_row_q8_1_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK8_1 == 0);
    auto* y = static_cast<block_q8_1*>(vy);
    for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
        const float d = absmax(x, QK8_1) / 127;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            y[i].qs[j] = int8_t(std::round(x[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = fp32_to_fp16(float(sum) * d);
    }
}

namespace {
// Nearest E2M1 level (first index on ties, so +0 beats -0) for scale e.
int nearest_mxfp4(float x, float e) {
    int best = 0;
    float best_err = std::fabs(kvalues_mxfp4[0] * e - x);
    for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(kvalues_mxfp4[i] * e - x);
        if (err < best_err) { best = i; best_err = err; }
    }
    return best;
}
}  // namespace

void quantize_row_mxfp4_ref(const float* x, void* vy, int64_t n) {
    assert(n % QK_MXFP4 == 0);
    auto* y = static_cast<block_mxfp4*>(vy);
    for (int64_t i = 0; i < n / QK_MXFP4; ++i, x += QK_MXFP4) {
        float amax = 0.0f;
        for (int j = 0; j < QK_MXFP4; ++j) amax = std::fabs(x[j]) > amax ? std::fabs(x[j]) : amax;
        // Shared exponent floor(log2(amax)) - 2: E2M1 tops out at 6 = 1.5 * 2^2, so amax lands in
        // the top binade of the code. Computed in float exactly as ggml does (libm log2f).
        const uint8_t e = amax > 0.0f ? uint8_t(std::floor(std::log2(amax)) - 2 + 127) : 0;
        const float d = e8m0_to_fp32_half(e);
        y[i].e = e;
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            y[i].qs[j] = uint8_t(nearest_mxfp4(x[j], d) | (nearest_mxfp4(x[j + QK_MXFP4 / 2], d) << 4));
        }
    }
}

void quantize_row_f16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<fp16_t*>(vy);
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_fp16(x[i]);
}

void quantize_row_bf16(const float* x, void* vy, int64_t n) {
    auto* y = static_cast<bf16_t*>(vy);
    for (int64_t i = 0; i < n; ++i) y[i] = fp32_to_bf16(x[i]);
}

void quantize_row_f32(const float* x, void* y, int64_t n) { std::memcpy(y, x, size_t(n) * sizeof(float)); }

}  // namespace kinfer::quant
