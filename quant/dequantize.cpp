// Exact dequantization of every block format: the float each stored code stands for, computed
// with the same float operations as ggml's dequantize_row_* (so values match bit for bit).
#include <cassert>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/types.h"

namespace kinfer::quant {

void dequantize_row_q4_0(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q4_0*>(vx);
    for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            y[j] = ((x[i].qs[j] & 0xf) - 8) * d;
            y[j + QK4_0 / 2] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_row_q4_1(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q4_1*>(vx);
    for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
        const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            y[j] = (x[i].qs[j] & 0xf) * d + m;
            y[j + QK4_1 / 2] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

void dequantize_row_q5_0(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q5_0*>(vx);
    for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
        const float d = fp16_to_fp32(x[i].d);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = (((x[i].qs[j] & 0xf) | h0) - 16) * d;
            y[j + QK5_0 / 2] = (((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void dequantize_row_q5_1(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q5_1*>(vx);
    for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
        const float d = fp16_to_fp32(x[i].d), m = fp16_to_fp32(x[i].m);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            y[j] = ((x[i].qs[j] & 0xf) | h0) * d + m;
            y[j + QK5_1 / 2] = ((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void dequantize_row_q8_0(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q8_0*>(vx);
    for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_0; ++j) y[j] = x[i].qs[j] * d;
    }
}

void dequantize_row_q8_1(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q8_1*>(vx);
    for (int64_t i = 0; i < n / QK8_1; ++i, y += QK8_1) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK8_1; ++j) y[j] = x[i].qs[j] * d;
    }
}

void dequantize_row_q2_K(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q2_K*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part) {  // 16 elements per sub-scale
                    const uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 0xf), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * part] >> shift) & 3) - ml;
                }
            }
        }
    }
}

void dequantize_row_q3_K(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q3_K*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d_all = fp16_to_fp32(x[i].d);
        int8_t sc[16];
        for (int j = 0; j < 16; ++j) {
            const int lo = j < 8 ? x[i].scales[j] & 0xf : x[i].scales[j - 8] >> 4;
            sc[j] = int8_t((lo | (((x[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
        }
        const uint8_t* q = x[i].qs;
        int is = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int part = 0; part < 2; ++part) {
                    const float dl = d_all * sc[is++];
                    for (int l = 16 * part; l < 16 * part + 16; ++l) {
                        // A clear high bit means the level is 4 lower (levels -4..3).
                        *y++ = dl * (int8_t((q[l] >> shift) & 3) - ((x[i].hmask[l] & m) ? 0 : 4));
                    }
                }
            }
        }
    }
}

void dequantize_row_q4_K(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q4_K*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* q = x[i].qs;
        for (int j = 0; j < QK_K / 64; ++j, q += 32) {
            uint8_t sc, m;
            scale_min_k4(2 * j, x[i].scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(2 * j + 1, x[i].scales, sc, m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xf) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

void dequantize_row_q5_K(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q5_K*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        const uint8_t* ql = x[i].qs;
        const uint8_t* qh = x[i].qh;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K / 64; ++j, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            scale_min_k4(2 * j, x[i].scales, sc, m);
            const float d1 = d * sc, m1 = dmin * m;
            scale_min_k4(2 * j + 1, x[i].scales, sc, m);
            const float d2 = d * sc, m2 = dmin * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

void dequantize_row_q6_K(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q6_K*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        for (int k = 0; k < QK_K / 128; ++k, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

void dequantize_row_q8_K(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_q8_K*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * x[i].qs[j];
    }
}

void dequantize_row_iq4_nl(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_iq4_nl*>(vx);
    for (int64_t i = 0; i < n / QK4_NL; ++i, y += QK4_NL) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < QK4_NL / 2; ++j) {
            y[j] = d * kvalues_iq4nl[x[i].qs[j] & 0xf];
            y[j + QK4_NL / 2] = d * kvalues_iq4nl[x[i].qs[j] >> 4];
        }
    }
}

void dequantize_row_iq4_xs(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_iq4_xs*>(vx);
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const float d = fp16_to_fp32(x[i].d);
        const uint8_t* qs = x[i].qs;
        for (int ib = 0; ib < QK_K / 32; ++ib, y += 32, qs += 16) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * kvalues_iq4nl[qs[j] & 0xf];
                y[j + 16] = dl * kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

void dequantize_row_mxfp4(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const block_mxfp4*>(vx);
    for (int64_t i = 0; i < n / QK_MXFP4; ++i, y += QK_MXFP4) {
        const float d = e8m0_to_fp32_half(x[i].e);
        for (int j = 0; j < QK_MXFP4 / 2; ++j) {
            y[j] = kvalues_mxfp4[x[i].qs[j] & 0xf] * d;
            y[j + QK_MXFP4 / 2] = kvalues_mxfp4[x[i].qs[j] >> 4] * d;
        }
    }
}

void dequantize_row_f16_scalar(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const fp16_t*>(vx);
    for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_fp32(x[i]);
}

void dequantize_row_f16_avx2(const void* vx, float* y, int64_t n);   // dequantize_avx2.cpp: F16C

void dequantize_row_f16(const void* vx, float* y, int64_t n) {
    static const bool simd = active_isa() != Isa::scalar;
    if (simd) return dequantize_row_f16_avx2(vx, y, n);
    dequantize_row_f16_scalar(vx, y, n);
}

void dequantize_row_bf16(const void* vx, float* y, int64_t n) {
    const auto* x = static_cast<const bf16_t*>(vx);
    for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_fp32(x[i]);
}

void dequantize_row_f32(const void* x, float* y, int64_t n) { std::memcpy(y, x, size_t(n) * sizeof(float)); }

}  // namespace kinfer::quant
