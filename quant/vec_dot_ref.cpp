// Scalar reference dot products, one per (weight type, activation type) pair as ggml pairs them.
// Integer sums are exact per block; each block contributes scale * sum in float, accumulated in
// block order. The SIMD kernels must agree with these up to float summation order.
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

namespace kinfer::quant::ref {

namespace {
uint32_t load_qh(const uint8_t* qh) { uint32_t v; std::memcpy(&v, qh, 4); return v; }

// blocks.h's unpacking, widened to the int the integer dot products multiply with.
void scale_min_k4(int j, const uint8_t* q, int& d, int& m) {
    uint8_t d8, m8;
    quant::scale_min_k4(j, q, d8, m8);
    d = d8;
    m = m8;
}
}  // namespace

float vec_dot_q4_0_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            s += ((x[i].qs[j] & 0xf) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
        }
        sum += float(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
    }
    return sum;
}

float vec_dot_q4_1_q8_1(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += (x[i].qs[j] & 0xf) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
        // The min term m * sum(y) comes from the precomputed s = d_y * sum(q_y).
        sum += float(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) + fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    return sum;
}

float vec_dot_q5_0_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        const uint32_t qh = load_qh(x[i].qh);
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = ((x[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4)) - 16;
            const int q1 = ((x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - 16;
            s += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += float(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
    }
    return sum;
}

float vec_dot_q5_1_q8_1(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_1*>(vx);
    const auto* y = static_cast<const block_q8_1*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_1; ++i) {
        const uint32_t qh = load_qh(x[i].qh);
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = (x[i].qs[j] & 0xf) | (((qh >> j) & 1) << 4);
            const int q1 = (x[i].qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
            s += q0 * y[i].qs[j] + q1 * y[i].qs[j + 16];
        }
        sum += float(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d)) + fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    return sum;
}

float vec_dot_q8_0_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q8_0*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int s = 0;
        for (int j = 0; j < QK8_0; ++j) s += x[i].qs[j] * y[i].qs[j];
        sum += float(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
    }
    return sum;
}

float vec_dot_iq4_nl_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_iq4_nl*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            s += kvalues_iq4nl[x[i].qs[j] & 0xf] * y[i].qs[j] + kvalues_iq4nl[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        }
        sum += float(s) * (fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d));
    }
    return sum;
}

float vec_dot_mxfp4_q8_0(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_mxfp4*>(vx);
    const auto* y = static_cast<const block_q8_0*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK8_0; ++i) {
        int s = 0;
        for (int j = 0; j < 16; ++j) {
            s += kvalues_mxfp4[x[i].qs[j] & 0xf] * y[i].qs[j] + kvalues_mxfp4[x[i].qs[j] >> 4] * y[i].qs[j + 16];
        }
        sum += float(s) * (e8m0_to_fp32_half(x[i].e) * fp16_to_fp32(y[i].d));
    }
    return sum;
}

// ---- K-quants against Q8_K: per super-block an exact integer sum over sub-blocks of
// (sub-scale * sum q*y), and for the asymmetric ones the min term from Q8_K's bsums.

float vec_dot_q2_K_q8_K(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q2_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int summs = 0;
        for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (x[i].scales[j] >> 4);
        int isum = 0, is = 0;
        const int8_t* q8 = y[i].qs;
        for (int half = 0; half < 2; ++half) {
            const uint8_t* q2 = x[i].qs + 32 * half;
            for (int shift = 0; shift < 8; shift += 2) {
                for (int part = 0; part < 2; ++part, q8 += 16) {
                    int s = 0;
                    for (int l = 0; l < 16; ++l) s += q8[l] * ((q2[16 * part + l] >> shift) & 3);
                    isum += (x[i].scales[is++] & 0xf) * s;
                }
            }
        }
        const float dall = y[i].d * fp16_to_fp32(x[i].d), dmin = y[i].d * fp16_to_fp32(x[i].dmin);
        sum += dall * float(isum) - dmin * float(summs);
    }
    return sum;
}

float vec_dot_q3_K_q8_K(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q3_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sc[16];
        for (int j = 0; j < 16; ++j) {
            const int lo = j < 8 ? x[i].scales[j] & 0xf : x[i].scales[j - 8] >> 4;
            sc[j] = (lo | (((x[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
        }
        // Decode all 256 levels first (-4..3: two low bits, minus 4 unless the hmask bit is set;
        // element 128*h + 32*s + l uses bits 2s of qs[32*h + l] and bit 4h+s of hmask[l]).
        // Decoding inside the dot loop made GCC 12's AVX512-VNNI vectoriser (-march=native)
        // emit an unsigned x signed dot product for these signed levels.
        int8_t q[QK_K];
        for (int h = 0; h < 2; ++h) {
            for (int s = 0; s < 4; ++s) {
                for (int l = 0; l < 32; ++l) {
                    const int low = (x[i].qs[32 * h + l] >> (2 * s)) & 3;
                    const int high = (x[i].hmask[l] >> (4 * h + s)) & 1;
                    q[128 * h + 32 * s + l] = int8_t(low + 4 * high - 4);
                }
            }
        }
        int isum = 0;
        for (int g = 0; g < 16; ++g) {
            int s = 0;
            for (int l = 16 * g; l < 16 * g + 16; ++l) s += q[l] * y[i].qs[l];
            isum += sc[g] * s;
        }
        sum += (y[i].d * fp16_to_fp32(x[i].d)) * float(isum);
    }
    return sum;
}

float vec_dot_q4_K_q8_K(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q4_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0, summs = 0;
        const uint8_t* q4 = x[i].qs;
        const int8_t* q8 = y[i].qs;
        for (int j = 0; j < 4; ++j, q4 += 32, q8 += 64) {
            int sc0, m0, sc1, m1;
            scale_min_k4(2 * j, x[i].scales, sc0, m0);
            scale_min_k4(2 * j + 1, x[i].scales, sc1, m1);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; ++l) {
                s0 += (q4[l] & 0xf) * q8[l];
                s1 += (q4[l] >> 4) * q8[l + 32];
            }
            isum += sc0 * s0 + sc1 * s1;
            summs += m0 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) + m1 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
        }
        const float d = y[i].d * fp16_to_fp32(x[i].d), dmin = y[i].d * fp16_to_fp32(x[i].dmin);
        sum += d * float(isum) - dmin * float(summs);
    }
    return sum;
}

float vec_dot_q5_K_q8_K(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q5_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0, summs = 0;
        const uint8_t* ql = x[i].qs;
        const int8_t* q8 = y[i].qs;
        for (int j = 0; j < 4; ++j, ql += 32, q8 += 64) {
            int sc0, m0, sc1, m1;
            scale_min_k4(2 * j, x[i].scales, sc0, m0);
            scale_min_k4(2 * j + 1, x[i].scales, sc1, m1);
            int s0 = 0, s1 = 0;
            for (int l = 0; l < 32; ++l) {
                const int h0 = (x[i].qh[l] >> (2 * j)) & 1, h1 = (x[i].qh[l] >> (2 * j + 1)) & 1;
                s0 += ((ql[l] & 0xf) | (h0 << 4)) * q8[l];
                s1 += ((ql[l] >> 4) | (h1 << 4)) * q8[l + 32];
            }
            isum += sc0 * s0 + sc1 * s1;
            summs += m0 * (y[i].bsums[4 * j] + y[i].bsums[4 * j + 1]) + m1 * (y[i].bsums[4 * j + 2] + y[i].bsums[4 * j + 3]);
        }
        const float d = y[i].d * fp16_to_fp32(x[i].d), dmin = y[i].d * fp16_to_fp32(x[i].dmin);
        sum += d * float(isum) - dmin * float(summs);
    }
    return sum;
}

float vec_dot_q6_K_q8_K(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_q6_K*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0;
        const uint8_t* ql = x[i].ql;
        const uint8_t* qh = x[i].qh;
        const int8_t* sc = x[i].scales;
        const int8_t* q8 = y[i].qs;
        for (int k = 0; k < 2; ++k, ql += 64, qh += 32, sc += 8, q8 += 128) {
            // Decode 128 six-bit levels (see dequantize_row_q6_K for the layout), then 8 groups of 16.
            int q[128];
            for (int l = 0; l < 32; ++l) {
                q[l] = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                q[l + 32] = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                q[l + 64] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                q[l + 96] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
            for (int g = 0; g < 8; ++g) {
                int s = 0;
                for (int l = 16 * g; l < 16 * g + 16; ++l) s += q[l] * q8[l];
                isum += sc[g] * s;
            }
        }
        sum += (y[i].d * fp16_to_fp32(x[i].d)) * float(isum);
    }
    return sum;
}

float vec_dot_iq4_xs_q8_K(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const block_iq4_xs*>(vx);
    const auto* y = static_cast<const block_q8_K*>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int isum = 0;
        const uint8_t* qs = x[i].qs;
        const int8_t* q8 = y[i].qs;
        for (int ib = 0; ib < QK_K / 32; ++ib, qs += 16, q8 += 32) {
            const int ls = ((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xf) | (((x[i].scales_h >> (2 * ib)) & 3) << 4);
            int s = 0;
            for (int j = 0; j < 16; ++j) s += kvalues_iq4nl[qs[j] & 0xf] * q8[j] + kvalues_iq4nl[qs[j] >> 4] * q8[j + 16];
            isum += (ls - 32) * s;
        }
        sum += (fp16_to_fp32(x[i].d) * y[i].d) * float(isum);
    }
    return sum;
}

// ---- float rows against fp32 activations. Double accumulation: these are the accuracy
// references the SIMD kernels are measured against.

float vec_dot_f32_f32(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const float*>(vx);
    const auto* y = static_cast<const float*>(vy);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(x[i]) * y[i];
    return float(s);
}

float vec_dot_f16_f32(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const fp16_t*>(vx);
    const auto* y = static_cast<const float*>(vy);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(fp16_to_fp32(x[i])) * y[i];
    return float(s);
}

float vec_dot_bf16_f32(int64_t n, const void* vx, const void* vy) {
    const auto* x = static_cast<const bf16_t*>(vx);
    const auto* y = static_cast<const float*>(vy);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(bf16_to_fp32(x[i])) * y[i];
    return float(s);
}

}  // namespace kinfer::quant::ref
