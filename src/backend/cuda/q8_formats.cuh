// The int8 weight formats: how each quantized type decodes a piece of a block to int8 levels and
// pairs them with int8 activations (Q8_K for the super-block types, Q8_0 / Q8_1 for the 32-element
// ones, as the CPU pairs them), and with_q8_format, the one switch over them. Shared by the dp4a
// matvecs (matvec_q8.cu, which says how the pieces are cut and why) and the tensor-core GEMM
// (mmq.cu, which stores the same levels in shared memory at the bytes of the activations they
// pair with).
// The quantized activations' layout is matvec_q8.cu's (q8_act_row_bytes, quantize_act).
#pragma once
#include "backend/cuda/block_dot.cuh"
#include "quant/type_facts.h"

#include <cstdint>
#include <type_traits>
#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

inline constexpr int64_t kQK = bq::QK_K;

// The activation format a weight type pairs with here (as on the CPU): Q8_K for the super-block
// types (Q4_K, Q5_K, Q6_K, IQ4_XS), Q8_0 for the 32-element formats.
// Q4_1 / Q5_1 pair with Q8_1 (the CPU's vec_dot type for them): Q8_0's values plus s = d * sum(q)
// per block, for their min term.
inline bool q8_1_acts(quant::Type type) { return type == quant::Type::Q4_1 || type == quant::Type::Q5_1; }
inline bool q8_k_acts(quant::Type type) {
    return type == quant::Type::Q4_K || type == quant::Type::Q5_K || type == quant::Type::Q6_K || type == quant::Type::IQ4_XS;
}

// One row of quantized activations.
struct Q8Row {
    const int8_t* qs;
    const float* d;
    const int32_t* bsum;
};
__device__ __forceinline__ Q8Row q8_row(const uint8_t* base, int64_t cols) {
    return {reinterpret_cast<const int8_t*>(base), reinterpret_cast<const float*>(base + cols),
            reinterpret_cast<const int32_t*>(base + cols + 4 * (cols / kQK))};
}

// A Q8_0 / Q8_1 activation row as quantize_act lays it out: cols int8 values, then one float
// scale d per 32, then (Q8_1) one float s = d sum(q) per 32. T: uint8_t or const uint8_t.
template <class T>
__device__ __forceinline__ auto q8_0_row_d(T* base, int64_t cols) {
    using F = std::conditional_t<std::is_const_v<T>, const float, float>;
    return reinterpret_cast<F*>(base + cols);
}
template <class T>
__device__ __forceinline__ auto q8_1_row_s(T* base, int64_t cols) {
    return q8_0_row_d(base, cols) + cols / 32;
}

// The width quantize_act takes for a weight type's activations: whole blocks of its format (256
// for Q8_K, 32 for Q8_0 / Q8_1); throws naming the kernel otherwise.
inline void check_q8_width(quant::Type type, int64_t cols, const char* what) {
    const int64_t block = q8_k_acts(type) ? kQK : 32;
    if (cols <= 0 || cols % block != 0)
        throw std::invalid_argument(std::string("cuda ") + what + ": " + std::to_string(cols) + " columns (whole blocks of " +
                                    std::to_string(block) + ")");
}

// Every byte of v less k, as int8 levels (each byte b of v at most 127, b - k at least -128):
// offset by 0x80 first, so that no byte borrows from the next.
__device__ __forceinline__ uint32_t bytes_minus(uint32_t v, uint32_t k) {
    return ((v | 0x80808080u) - k * 0x01010101u) ^ 0x80808080u;
}

// Half `half` of a format's 16 levels as a launch parameter (nullptr, for the formats without a
// table: 0).
inline uint64_t levels_word(const int8_t* levels, int half) { return levels ? bq::pack_levels8(levels + 8 * half) : 0; }

// The 6-bit scales and mins of sub-blocks 2 g and 2 g + 1 (quant's scale_min_k4 for both) from
// the 12 scale bytes held as three words, two bytes at a time and without a branch: the lanes of
// a warp take different g, and a branch on it would run both sides.
//   g < 2:  scales bytes 2g, 2g+1 of w0, mins the same bytes of w1, each & 63;
//   g >= 2: scale = low nibble of w2's byte | top two bits of w0's byte << 4, min = high nibble of
//           w2's byte | top two bits of w1's byte << 4 (bytes 2(g-2), 2(g-2)+1).
__device__ __forceinline__ void scale_min_pair(uint32_t w0, uint32_t w1, uint32_t w2, int g, int& sc_a, int& m_a,
                                               int& sc_b, int& m_b) {
    const int h = 16 * (g & 1);
    const uint32_t a0 = w0 >> h, a1 = w1 >> h, a2 = w2 >> h;
    const uint32_t sc = g < 2 ? a0 & 0x3f3fu : (a2 & 0x0f0fu) | ((a0 & 0xc0c0u) >> 2);
    const uint32_t m = g < 2 ? a1 & 0x3f3fu : ((a2 >> 4) & 0x0f0fu) | ((a1 & 0xc0c0u) >> 2);
    sc_a = int(sc & 0xff), sc_b = int((sc >> 8) & 0xff);
    m_a = int(m & 0xff), m_b = int((m >> 8) & 0xff);
}

__device__ __forceinline__ int dp4a4(uint4 w, uint4 y, int acc) {
    acc = __dp4a(int(w.x), int(y.x), acc);
    acc = __dp4a(int(w.y), int(y.y), acc);
    acc = __dp4a(int(w.z), int(y.z), acc);
    return __dp4a(int(w.w), int(y.w), acc);
}
__device__ __forceinline__ uint4 nibbles(uint4 q, int shift) {
    return {(q.x >> shift) & 0x0f0f0f0fu, (q.y >> shift) & 0x0f0f0f0fu, (q.z >> shift) & 0x0f0f0f0fu,
            (q.w >> shift) & 0x0f0f0f0fu};
}

// The super-block formats on Q8_K activations, one struct each: kLanes lanes share a super-block
// (lane k of them takes piece k), acts() loads a piece's activations once for the warp's rows, and
// dot() gives a weight row's contribution d_y (...) for its piece of super-block b.
//
// Q4_K and Q5_K: 8 lanes a super-block; piece k is the 16 nibble bytes k (64-weight group
// g = k / 2, half k % 2): weights 64 g + l0 .. + 16 (low nibbles, sub-block 2 g) and
// 64 g + 32 + l0 .. + 16 (high, 2 g + 1), so the 8 lanes read the block's 128 nibble bytes side by
// side. Q5_K's fifth bits: weight 64 g + l (32 g + l) has bit 2 g (2 g + 1) of qh[l], l < 32, so the
// piece's are bits 2 g and 2 g + 1 of qh[l0 .. l0 + 15], one 16-byte load; its levels are 0..31.
template <bool kFive>
struct SbK4 {
    static constexpr int kLanes = 8;
    static constexpr bool kSuperBlock = true;   // matvec_sb_q8_block (the 32-element ones: _b32_)
    static constexpr size_t kBytes = kFive ? sizeof(bq::block_q5_K) : sizeof(bq::block_q4_K);
    static constexpr int kQs = kFive ? 48 : 16;   // d, dmin, 12 scale bytes (and Q5_K's 32 of qh)
    struct Acts {
        uint4 lo, hi;
        float d;
        int b_lo, b_hi;
    };
    struct Weights {   // piece k of one block, decoded once for every token
        uint4 lo, hi;
        int sc_a, m_a, sc_b, m_b;
        float dw, dmin;
    };
    __device__ static Acts acts(const Q8Row& a, int64_t sb, int k) {
        const int g = k / 2, l0 = 16 * (k % 2);
        const auto* yq = reinterpret_cast<const uint8_t*>(a.qs + sb * kQK + 64 * g + l0);
        return {load_aligned<uint4>(yq), load_aligned<uint4>(yq + 32), a.d[sb], a.bsum[sb * 16 + (64 * g + l0) / 16],
                a.bsum[sb * 16 + (64 * g + 32 + l0) / 16]};
    }
    __device__ static uint4 fifth(uint4 qh, int bit) {   // bit `bit` of each byte, moved to bit 4
        return {((qh.x >> bit) & 0x01010101u) << 4, ((qh.y >> bit) & 0x01010101u) << 4, ((qh.z >> bit) & 0x01010101u) << 4,
                ((qh.w >> bit) & 0x01010101u) << 4};
    }
    __device__ static uint4 with(uint4 a, uint4 b) { return {a.x | b.x, a.y | b.y, a.z | b.z, a.w | b.w}; }
    __device__ static Weights weights(const uint8_t* b, int k) {
        const int g = k / 2, l0 = 16 * (k % 2);
        const uint4 q = load_aligned<uint4>(b + kQs + 32 * g + l0);
        const uint32_t dd = load_aligned<uint32_t>(b);
        const uint32_t w0 = load_aligned<uint32_t>(b + 4), w1 = load_aligned<uint32_t>(b + 8), w2 = load_aligned<uint32_t>(b + 12);
        Weights w;
        scale_min_pair(w0, w1, w2, g, w.sc_a, w.m_a, w.sc_b, w.m_b);
        w.lo = nibbles(q, 0), w.hi = nibbles(q, 4);
        if constexpr (kFive) {
            const uint4 qh = load_aligned<uint4>(b + 16 + l0);
            w.lo = with(w.lo, fifth(qh, 2 * g)), w.hi = with(w.hi, fifth(qh, 2 * g + 1));
        }
        w.dw = bq::fp16_to_fp32(bq::fp16_t(dd & 0xffff)), w.dmin = bq::fp16_to_fp32(bq::fp16_t(dd >> 16));
        return w;
    }
    // Rounded operations (no contraction), so that every instantiation gives the same bits.
    __device__ static float dot(const Weights& w, const Acts& y) {
        const int s_a = dp4a4(w.lo, y.lo, 0), s_b = dp4a4(w.hi, y.hi, 0);
        return __fmul_rn(y.d, __fsub_rn(__fmul_rn(w.dw, float(w.sc_a * s_a + w.sc_b * s_b)),
                                        __fmul_rn(w.dmin, float(w.m_a * y.b_lo + w.m_b * y.b_hi))));
    }
};
using SbQ4_K = SbK4<false>;
using SbQ5_K = SbK4<true>;

// Q6_K: 16 lanes a super-block; piece c: half h = c / 8 (128 weights), bytes l0 .. l0 + 3
// (l0 = 4 (c % 8)) of its ql, ql + 32 and qh, which hold elements l, l + 32, l + 64, l + 96 of the
// half (l = l0 .. l0 + 3) as 6-bit levels stored + 32: four words of levels 0..63, each dotted
// with its 4 activations, less 32 times the activations' sum (a dp4a with ones, formed once for
// the warp's rows), times its 16-element group's int8 scale.
struct SbQ6_K {
    static constexpr int kLanes = 16;
    static constexpr bool kSuperBlock = true;   // matvec_sb_q8_block (the 32-element ones: _b32_)
    static constexpr size_t kBytes = sizeof(bq::block_q6_K);
    struct Acts {
        uint32_t w[4];
        int sum32[4];
        float d;
    };
    struct Weights {   // piece c of one block, decoded once for every token
        uint32_t lv[4];
        int sc[4];
        float d;
    };
    __device__ static Acts acts(const Q8Row& a, int64_t sb, int c) {
        const int h = c / 8, l0 = 4 * (c % 8);
        const auto* yq = reinterpret_cast<const uint8_t*>(a.qs + sb * kQK + 128 * h + l0);
        Acts y;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            y.w[k] = load_aligned<uint32_t>(yq + 32 * k);
            y.sum32[k] = 32 * __dp4a(0x01010101, int(y.w[k]), 0);
        }
        y.d = a.d[sb];
        return y;
    }
    __device__ static uint32_t word2(const uint8_t* p) {
        return uint32_t(load_aligned<uint16_t>(p)) | uint32_t(load_aligned<uint16_t>(p + 2)) << 16;
    }
    __device__ static Weights weights(const uint8_t* b, int c) {
        const int h = c / 8, l0 = 4 * (c % 8);
        const uint32_t ql = word2(b + 64 * h + l0), ql32 = word2(b + 64 * h + l0 + 32), qh = word2(b + 128 + 32 * h + l0);
        Weights w;
        w.lv[0] = (ql & 0x0f0f0f0fu) | ((qh << 4) & 0x30303030u);
        w.lv[1] = (ql32 & 0x0f0f0f0fu) | ((qh << 2) & 0x30303030u);
        w.lv[2] = ((ql >> 4) & 0x0f0f0f0fu) | (qh & 0x30303030u);
        w.lv[3] = ((ql32 >> 4) & 0x0f0f0f0fu) | ((qh >> 2) & 0x30303030u);
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * h + l0 / 16;
#pragma unroll
        for (int k = 0; k < 4; ++k) w.sc[k] = int(sc[2 * k]);
        w.d = bq::fp16_to_fp32(load_aligned<uint16_t>(b + 208));
        return w;
    }
    __device__ static float dot(const Weights& w, const Acts& y) {
        int sum = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) sum += w.sc[k] * (__dp4a(int(w.lv[k]), int(y.w[k]), 0) - y.sum32[k]);
        return __fmul_rn(__fmul_rn(y.d, w.d), float(sum));
    }
};

// The levels of the 8 nibbles of a quant word q from a 16-entry int8 table (four words t0..t3),
// in nibble order (byte 0's low, byte 0's high, byte 1's low, ...): two words. A byte permute
// (prmt) takes its four selectors straight from four nibbles; their low three bits pick the
// entry within a half of the table, and bit 3 (prmt's sign-replicate bit, over a word of 0x80
// bytes: 0x80 below 8, 0xff from 8) picks the half.
__device__ __forceinline__ void nibble_levels(uint32_t q, const uint32_t* t, uint32_t& a, uint32_t& b) {
    const uint32_t q_hi = q >> 16;
    const uint32_t sa = q & 0x7777u, sb = q_hi & 0x7777u;
    uint32_t ma = prmt(0x80808080u, 0x80808080u, q & 0xffffu) ^ 0x80808080u;   // 0x7f where 8..15
    uint32_t mb = prmt(0x80808080u, 0x80808080u, q_hi) ^ 0x80808080u;
    ma |= ma << 1;                                                                    // 0xff where 8..15
    mb |= mb << 1;
    a = (prmt(t[0], t[1], sa) & ~ma) | (prmt(t[2], t[3], sa) & ma);
    b = (prmt(t[0], t[1], sb) & ~mb) | (prmt(t[2], t[3], sb) & mb);
}

// IQ4_XS on Q8_K activations: 8 lanes a super-block; piece k is sub-block k (32 elements), its 16
// quant bytes (byte i: element i in the low nibble, i + 16 in the high) read as four words
// (136-byte blocks are only 8-byte aligned), each word's low nibbles looked up as the levels of
// four consecutive elements and its high nibbles as those 16 further on (the selectors regrouped
// for nibble_levels), dotted with the activations in their own order; the 6-bit scale ls - 32
// times the exact sum.
struct SbIQ4_XS {
    static constexpr int kLanes = 8;
    static constexpr bool kSuperBlock = true;   // matvec_sb_q8_block (the 32-element ones: _b32_)
    static constexpr size_t kBytes = sizeof(bq::block_iq4_xs);
    struct Acts {
        uint4 lo, hi;   // elements 32 k .. + 15 and 32 k + 16 .. + 31
        float d;
    };
    struct Weights {
        uint32_t lv[8];   // word w's low-nibble levels at 2 w, its high-nibble ones at 2 w + 1
        int ls;
        float dw;
    };
    __device__ static Acts acts(const Q8Row& a, int64_t sb, int k) {
        const auto* yq = reinterpret_cast<const uint8_t*>(a.qs + sb * kQK + 32 * k);
        return {load_aligned<uint4>(yq), load_aligned<uint4>(yq + 16), a.d[sb]};
    }
    // The four selectors (nibbles) of x's four bytes, each below 16, as one 16-bit selector.
    __device__ static uint32_t selectors(uint32_t x) { return ((x | x >> 4) & 0xffu) | ((x >> 16 | x >> 20) & 0xffu) << 8; }
    __device__ static Weights weights(const uint8_t* b, int k) {
        constexpr int8_t v[16] = {KINFER_IQ4NL_LEVELS};
        constexpr uint64_t lo = bq::pack_levels8(v), hi = bq::pack_levels8(v + 8);
        const uint32_t t[4] = {uint32_t(lo), uint32_t(lo >> 32), uint32_t(hi), uint32_t(hi >> 32)};
        Weights w;
        const int scales_h = load_aligned<uint16_t>(b + 2);
        w.ls = ((b[4 + k / 2] >> (4 * (k % 2))) & 0xf) | (((scales_h >> (2 * k)) & 3) << 4);
        w.dw = bq::fp16_to_fp32(load_aligned<uint16_t>(b));
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const uint32_t q = load_aligned<uint32_t>(b + 8 + 16 * k + 4 * i);
            nibble_levels(selectors(q & 0x0f0f0f0fu) | selectors((q >> 4) & 0x0f0f0f0fu) << 16, t, w.lv[2 * i], w.lv[2 * i + 1]);
        }
        return w;
    }
    __device__ static float dot(const Weights& w, const Acts& y) {
        const uint4 p{w.lv[0], w.lv[2], w.lv[4], w.lv[6]}, q{w.lv[1], w.lv[3], w.lv[5], w.lv[7]};
        const int sum = dp4a4(p, y.lo, dp4a4(q, y.hi, 0));
        return __fmul_rn(__fmul_rn(y.d, w.dw), float((w.ls - 32) * sum));
    }
};

// The 32-element formats: piece c (0..3) of a block gives two words of int8 levels, which pair
// with the two activation words at byte 8c of the block's activations (Q8_0: its quant bytes
// 8c .. 8c + 7 in order; the nibble formats: quant bytes 4c .. 4c + 3, whose nibbles are elements
// 4c + i and 16 + 4c + i, against activations stored interleaved: quantize_act does so for them).
// Piece32: what every such format says of itself (matvec_b32_q8_block; no min term unless it
// says so, as PieceNibbleMin does).
struct Piece32 {
    static constexpr bool kMin = false;
    static constexpr bool kSuperBlock = false;
};
struct PieceQ8_0 : Piece32 {
    static constexpr int kBytes = sizeof(bq::block_q8_0);
    __device__ static float scale(const uint8_t* b) { return bq::fp16_to_fp32(load_aligned<uint16_t>(b)); }
    __device__ static void levels(const uint8_t* b, int c, const uint32_t*, uint32_t& lo, uint32_t& hi) {
        const uint8_t* q = b + 2 + 8 * c;
        lo = uint32_t(load_aligned<uint16_t>(q)) | uint32_t(load_aligned<uint16_t>(q + 2)) << 16;
        hi = uint32_t(load_aligned<uint16_t>(q + 4)) | uint32_t(load_aligned<uint16_t>(q + 6)) << 16;
    }
};
// Level: block_dot.cuh's (its scale; the levels come from the table the launch passes).
template <class Level, int kQs>
struct PieceNibble : Piece32 {
    static constexpr int kBytes = kQs + 16;
    __device__ static float scale(const uint8_t* b) { return Level::scale(b); }
    __device__ static void levels(const uint8_t* b, int c, const uint32_t* t, uint32_t& lo, uint32_t& hi) {
        nibble_levels(load_u32(b + kQs + 4 * c), t, lo, hi);
    }
};
// Piece c of a 5-bit block (Q5_0, Q5_1): its quant word q's nibbles with their fifth bits (element
// j's is bit j of the qh word), unsigned levels 0..31: byte k of l is element 4c + k, of h element
// 16 + 4c + k. Then lo / hi in the pieces' order, l0 h0 l1 h1 and l2 h2 l3 h3.
__device__ __forceinline__ void five_bit_levels(uint32_t q, uint32_t qh, int c, uint32_t& lo, uint32_t& hi, bool minus16) {
    uint32_t l = q & 0x0f0f0f0fu, h = (q >> 4) & 0x0f0f0f0fu;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        l |= ((qh >> (4 * c + k)) & 1u) << (8 * k + 4);
        h |= ((qh >> (16 + 4 * c + k)) & 1u) << (8 * k + 4);
    }
    if (minus16) l = bytes_minus(l, 16), h = bytes_minus(h, 16);   // -16..15 as int8
    lo = prmt(l, h, 0x5140), hi = prmt(l, h, 0x7362);
}
// Q5_0: the 5-bit levels less 16, -16..15.
struct PieceQ5_0 : Piece32 {
    static constexpr int kBytes = sizeof(bq::block_q5_0);
    __device__ static float scale(const uint8_t* b) { return bq::fp16_to_fp32(load_aligned<uint16_t>(b)); }
    __device__ static void levels(const uint8_t* b, int c, const uint32_t*, uint32_t& lo, uint32_t& hi) {
        five_bit_levels(load_u32(b + 6 + 4 * c), load_u32(b + 2), c, lo, hi, true);
    }
};
// Q4_1 / Q5_1: unsigned levels (the nibbles, Q5_1's with their fifth bits from the qh word at
// byte 4), x = d q + m: the piece's dot is d_w d_y sum(q y), and the block's min term m_w s_y is
// added once, by the block's first lane (kMin).
template <bool kFive>
struct PieceNibbleMin : Piece32 {
    static constexpr bool kMin = true;
    static constexpr int kQs = kFive ? 8 : 4;
    static constexpr int kBytes = kQs + 16;
    __device__ static float scale(const uint8_t* b) { return bq::fp16_to_fp32(load_u16(b)); }
    __device__ static float min(const uint8_t* b) { return bq::fp16_to_fp32(load_u16(b + 2)); }
    __device__ static void levels(const uint8_t* b, int c, const uint32_t*, uint32_t& lo, uint32_t& hi) {
        const uint32_t q = load_u32(b + kQs + 4 * c);
        if constexpr (kFive) {
            five_bit_levels(q, load_u32(b + 4), c, lo, hi, false);
        } else {
            const uint32_t l = q & 0x0f0f0f0fu, h = (q >> 4) & 0x0f0f0f0fu;   // elements 4c + k, 16 + 4c + k
            lo = prmt(l, h, 0x5140), hi = prmt(l, h, 0x7362);
        }
    }
};
using PieceQ4_1 = PieceNibbleMin<false>;
using PieceQ5_1 = PieceNibbleMin<true>;
static_assert(PieceQ4_1::kBytes == sizeof(bq::block_q4_1) && PieceQ5_1::kBytes == sizeof(bq::block_q5_1));
using PieceQ4_0 = PieceNibble<LevelQ4_0, 2>;
using PieceIQ4_NL = PieceNibble<LevelIQ4_NL, 2>;
using PieceMXFP4 = PieceNibble<LevelMXFP4, 1>;
static_assert(PieceQ4_0::kBytes == sizeof(bq::block_q4_0) && PieceIQ4_NL::kBytes == sizeof(bq::block_iq4_nl) &&
              PieceMXFP4::kBytes == sizeof(bq::block_mxfp4));

// Q4_0's levels q - 8 (IQ4_NL's and MXFP4's are quant/blocks.h's tables).
inline constexpr int8_t kLevelsQ4_0[16] = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};

// The one switch over the int8 formats: f(format, levels) with a value of the format's struct
// (the super-block ones on Q8_K, the 32-element ones on Q8_0 / Q8_1) and its 16 levels where a
// table lookup needs them (nullptr otherwise).
template <class F>
void with_q8_format(quant::Type type, const char* what, F&& f) {
    using quant::Type;
    switch (type) {
        case Type::Q4_K: return f(SbQ4_K{}, nullptr);
        case Type::Q5_K: return f(SbQ5_K{}, nullptr);
        case Type::Q6_K: return f(SbQ6_K{}, nullptr);
        case Type::IQ4_XS: return f(SbIQ4_XS{}, nullptr);
        case Type::Q8_0: return f(PieceQ8_0{}, nullptr);
        case Type::Q5_0: return f(PieceQ5_0{}, nullptr);
        case Type::Q4_1: return f(PieceQ4_1{}, nullptr);
        case Type::Q5_1: return f(PieceQ5_1{}, nullptr);
        case Type::Q4_0: return f(PieceQ4_0{}, kLevelsQ4_0);
        case Type::IQ4_NL: return f(PieceIQ4_NL{}, bq::kvalues_iq4nl);
        case Type::MXFP4: return f(PieceMXFP4{}, bq::kvalues_mxfp4);
        default: break;
    }
    const char* name = quant::type_facts(type).name;
    throw std::invalid_argument(std::string("cuda ") + what + ": no int8-activation kernel for weight type " + (name ? name : "?"));
}

}  // namespace kinfer::cuda::KINFER_CUDA_NS
