// Per-format decoding of one piece of a weight block to fp32 values, for the prefill GEMM's
// dequantization (gemm.cu). The pieces are block_dot.cuh's (the same kElems / kBytes / kChunks,
// byte offsets and level tables); what differs is that each element is produced on its own,
// with the float operations of quant/dequantize.cpp in the same order, so a decoded value is the
// CPU's bit for bit. Where the CPU computes a * b - c, the device uses __fmul_rn / __fsub_rn so
// that nvcc does not fuse them into one FMA (a different rounding); the CPU-mode build of this
// file is compiled with -ffp-contract=off for the same reason, as quant/ is.
//   Dec::decode(b, c, put): calls put(j, v) for every element j (0 .. kElems - 1, the index in
//   the block) of piece c of block b, v its value.
#pragma once
#include "backend/cuda/block_dot.cuh"
#include "quant/type_facts.h"
#include "quant/types.h"

#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

// Q8_0: 4 pieces of 8 int8; v = q * d.
struct DecQ8_0 : DotQ8_0 {
    template <class Put>
    __device__ static void decode(const uint8_t* b, int c, Put& put) {
        const float d = bq::fp16_to_fp32(load_u16(b));
        const auto* q = reinterpret_cast<const int8_t*>(b + 2) + 8 * c;
        for (int i = 0; i < 8; ++i) put(8 * c + i, float(q[i]) * d);
    }
};

// The 32-element nibble formats: piece c is quant bytes 4c .. 4c + 3, byte j holding element j
// (low nibble) and j + 16 (high). v = level * scale (the CPU's products, whichever side each
// factor is on: one rounded multiply either way).
template <class Level, int kQsOffset>
struct DecNibble32 : DotNibble32<Level, kQsOffset> {
    template <class Put>
    __device__ static void decode(const uint8_t* b, int c, Put& put) {
        const float d = Level::scale(b);
        const uint32_t q = load_u32(b + kQsOffset + 4 * c);
        for (int i = 0; i < 4; ++i) {
            const int j = 4 * c + i;
            put(j, float(Level::value(b, j, int(q >> (8 * i)) & 0xf)) * d);
            put(j + 16, float(Level::value(b, j + 16, int(q >> (8 * i + 4)) & 0xf)) * d);
        }
    }
};
using DecQ4_0 = DecNibble32<LevelQ4_0, 2>;
using DecQ5_0 = DecNibble32<LevelQ5_0, 6>;
using DecIQ4_NL = DecNibble32<LevelIQ4_NL, 2>;
using DecMXFP4 = DecNibble32<LevelMXFP4, 1>;

// Q4_1 / Q5_1: v = q * d + m, as the CPU's two roundings (not fused).
template <bool kFive>
struct DecNibbleMin32 : DotNibbleMin32<kFive> {
    using Base = DotNibbleMin32<kFive>;
    template <class Put>
    __device__ static void decode(const uint8_t* b, int c, Put& put) {
        const float d = bq::fp16_to_fp32(load_u16(b)), m = bq::fp16_to_fp32(load_u16(b + 2));
        const uint32_t q = load_u32(b + Base::kQsOffset + 4 * c);
        for (int i = 0; i < 4; ++i) {
            const int j = 4 * c + i;
            put(j, __fadd_rn(__fmul_rn(float(Base::level(b, j, int(q >> (8 * i)) & 0xf)), d), m));
            put(j + 16, __fadd_rn(__fmul_rn(float(Base::level(b, j + 16, int(q >> (8 * i + 4)) & 0xf)), d), m));
        }
    }
};
using DecQ4_1 = DecNibbleMin32<false>;
using DecQ5_1 = DecNibbleMin32<true>;

// Q4_K / Q5_K: piece c of group g = c / 8 holds elements 64 g + l (sub-block 2 g) and
// 64 g + 32 + l (sub-block 2 g + 1) for l = l0 .. l0 + 3. The CPU: d1 = d * sc, m1 = dmin * m,
// v = d1 * q - m1 (two roundings, then the subtraction's).
template <bool kFive>
struct DecQK45 : DotQK45<kFive> {
    using Base = DotQK45<kFive>;
    template <class Put>
    __device__ static void decode(const uint8_t* b, int c, Put& put) {
        const int g = c / 8, l0 = 4 * (c % 8);
        uint8_t sc0, m0, sc1, m1;
        bq::scale_min_k4(2 * g, b + 4, sc0, m0);
        bq::scale_min_k4(2 * g + 1, b + 4, sc1, m1);
        const float d = bq::fp16_to_fp32(load_u16(b)), dmin = bq::fp16_to_fp32(load_u16(b + 2));
        const float d0 = d * float(sc0), dm0 = dmin * float(m0), d1 = d * float(sc1), dm1 = dmin * float(m1);
        const uint32_t q = load_u32(b + Base::kQs + 32 * g + l0);
        uint32_t qh = 0;
        if constexpr (kFive) qh = load_u32(b + 16 + l0);
        for (int i = 0; i < 4; ++i) {
            int q0 = int(q >> (8 * i)) & 0xf, q1 = int(q >> (8 * i + 4)) & 0xf;
            if constexpr (kFive) {
                const uint32_t h = qh >> (8 * i);
                q0 += int((h >> (2 * g)) & 1) << 4;
                q1 += int((h >> (2 * g + 1)) & 1) << 4;
            }
            put(64 * g + l0 + i, __fsub_rn(__fmul_rn(d0, float(q0)), dm0));
            put(64 * g + 32 + l0 + i, __fsub_rn(__fmul_rn(d1, float(q1)), dm1));
        }
    }
};
using DecQ4_K = DecQK45<false>;
using DecQ5_K = DecQK45<true>;

// Q6_K: piece c covers l = l0 .. l0 + 3 of half c / 8: elements l, l + 32, l + 64, l + 96 of the
// half. The CPU: v = d * sc * q, left to right (two roundings).
struct DecQ6_K : DotQ6_K {
    template <class Put>
    __device__ static void decode(const uint8_t* b, int c, Put& put) {
        const int half = c / 8, l0 = 4 * (c % 8);
        const uint8_t* ql = b + 64 * half;
        const uint8_t* qh = b + 128 + 32 * half;
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + l0 / 16;
        const float d = bq::fp16_to_fp32(load_u16(b + 208));
        const float s0 = d * float(sc[0]), s1 = d * float(sc[2]), s2 = d * float(sc[4]), s3 = d * float(sc[6]);
        const uint32_t a = load_u32(ql + l0), a32 = load_u32(ql + l0 + 32), h = load_u32(qh + l0);
        const int e = 128 * half + l0;
        for (int i = 0; i < 4; ++i) {
            const int lo = int(a >> (8 * i)), lo32 = int(a32 >> (8 * i)), hh = int(h >> (8 * i));
            put(e + i, s0 * float(((lo & 0xf) | ((hh & 3) << 4)) - 32));
            put(e + 32 + i, s1 * float(((lo32 & 0xf) | (((hh >> 2) & 3) << 4)) - 32));
            put(e + 64 + i, s2 * float((((lo >> 4) & 0xf) | (((hh >> 4) & 3) << 4)) - 32));
            put(e + 96 + i, s3 * float((((lo32 >> 4) & 0xf) | (((hh >> 6) & 3) << 4)) - 32));
        }
    }
};

// IQ4_XS: sub-block ib = c / 4, bytes j0 .. j0 + 3 of its 16: elements 32 ib + j (low nibble)
// and 32 ib + 16 + j (high). The CPU: dl = d * (ls - 32), v = dl * level.
struct DecIQ4_XS : DotIQ4_XS {
    template <class Put>
    __device__ static void decode(const uint8_t* b, int c, Put& put) {
        const int ib = c / 4, j0 = 4 * (c % 4);
        const int scales_h = load_u16(b + 2);
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
        const float dl = bq::fp16_to_fp32(load_u16(b)) * float(ls - 32);
        const uint32_t q = load_u32(b + 8 + 16 * ib + j0);
        for (int i = 0; i < 4; ++i) {
            put(32 * ib + j0 + i, dl * float(bq::iq4nl_level(int(q >> (8 * i)) & 0xf)));
            put(32 * ib + 16 + j0 + i, dl * float(bq::iq4nl_level(int(q >> (8 * i + 4)) & 0xf)));
        }
    }
};

// Calls f(Dec{}) with the decoder of weight type t, or throws naming `what` and the type when there
// is none: the one type switch of the CUDA kernels' launchers. A Dec is its block_dot.cuh Dot
// (dot() for the matvec) plus decode() (the plain types' Dots give element access instead).
template <class F>
void with_dec(quant::Type t, const char* what, F&& f) {
    using quant::Type;
    switch (t) {
        case Type::F32: return f(DotF32{});
        case Type::F16: return f(DotF16{});
        case Type::BF16: return f(DotBF16{});
        case Type::Q8_0: return f(DecQ8_0{});
        case Type::Q4_0: return f(DecQ4_0{});
        case Type::Q5_0: return f(DecQ5_0{});
        case Type::Q4_1: return f(DecQ4_1{});
        case Type::Q5_1: return f(DecQ5_1{});
        case Type::IQ4_NL: return f(DecIQ4_NL{});
        case Type::MXFP4: return f(DecMXFP4{});
        case Type::Q4_K: return f(DecQ4_K{});
        case Type::Q5_K: return f(DecQ5_K{});
        case Type::Q6_K: return f(DecQ6_K{});
        case Type::IQ4_XS: return f(DecIQ4_XS{});
        default: break;
    }
    const char* name = quant::type_facts(t).name;
    throw std::invalid_argument(std::string("cuda ") + what + ": no decoder for weight type " + (name ? name : "?"));
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
