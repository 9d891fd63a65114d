// Per-format dot products of a piece of one weight block with fp32 activations, for the decode
// matvec (matvec.cu). The formats are quant/blocks.h's, decoded with its KINFER_HD helpers.
//
// Every format is cut into kChunks pieces per block, each piece a few contiguous bytes of the
// block's quants (4 bytes of nibbles, 8 int8, 16 bytes of floats ...). Lane i of a warp takes
// piece i, i + 32, ... of the row, so the 32 lanes of a warp read 32 neighbouring pieces: one
// contiguous stretch of the row per step (coalesced), and the row is read exactly once.
//   kElems   elements per block        kBytes  bytes per block
//   kChunks  pieces per block          dot(b, c, x): sum over the elements of piece c of block b
//                                      of w * x, x pointing at the block's first activation.
#pragma once
#include "backend/cuda/compat.h"
#include "quant/blocks.h"
#include "quant/fp16.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace kinfer::cuda::KINFER_CUDA_NS {

namespace bq = kinfer::quant;

// The byte offsets the decoders below read at, tied to quant/blocks.h's structs: a layout change
// there stops the build here instead of mis-decoding (the pieces read bytes, not struct fields,
// because the quant arrays are unaligned inside a row).
static_assert(offsetof(bq::block_q8_0, qs) == 2 && offsetof(bq::block_q4_0, qs) == 2 &&
              offsetof(bq::block_iq4_nl, qs) == 2 && offsetof(bq::block_mxfp4, qs) == 1);
static_assert(offsetof(bq::block_q5_0, qh) == 2 && offsetof(bq::block_q5_0, qs) == 6);
static_assert(offsetof(bq::block_q4_1, m) == 2 && offsetof(bq::block_q4_1, qs) == 4 &&
              offsetof(bq::block_q5_1, m) == 2 && offsetof(bq::block_q5_1, qh) == 4 &&
              offsetof(bq::block_q5_1, qs) == 8);
static_assert(offsetof(bq::block_q4_K, dmin) == 2 && offsetof(bq::block_q4_K, scales) == 4 &&
              offsetof(bq::block_q4_K, qs) == 16);
static_assert(offsetof(bq::block_q5_K, scales) == 4 && offsetof(bq::block_q5_K, qh) == 16 &&
              offsetof(bq::block_q5_K, qs) == 48);
static_assert(offsetof(bq::block_q6_K, qh) == 128 && offsetof(bq::block_q6_K, scales) == 192 &&
              offsetof(bq::block_q6_K, d) == 208);
static_assert(offsetof(bq::block_iq4_xs, scales_h) == 2 && offsetof(bq::block_iq4_xs, scales_l) == 4 &&
              offsetof(bq::block_iq4_xs, qs) == 8);

__device__ __forceinline__ uint32_t load_u32(const uint8_t* p) {
    // The quant arrays are only 1- or 2-byte aligned inside a row: byte loads, combined.
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) { return uint16_t(p[0] | p[1] << 8); }
// PTX prmt in its generic mode: byte k of the result is byte (c >> 4k) & 7 of the 8 bytes
// {b : a} (a the low four), or, when bit 3 of that selector nibble is set, that byte's top bit
// copied into all eight. Inline PTX: CUDA documents __byte_perm with 3-bit selectors only.
__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__CUDACC__)
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
#else
    const uint64_t both = uint64_t(a) | uint64_t(b) << 32;
    uint32_t r = 0;
    for (int k = 0; k < 4; ++k) {
        const uint32_t sel = (c >> (4 * k)) & 0xf;
        uint32_t byte = uint32_t(both >> (8 * (sel & 7))) & 0xff;
        if (sel & 8) byte = byte & 0x80 ? 0xff : 0x00;
        r |= byte << (8 * k);
    }
    return r;
#endif
}

// Loads of bytes the caller knows to be aligned (2, 4 and 16 bytes): one instruction each on the
// GPU, where a misaligned one faults; the CPU mode checks the alignment so that the tests do too.
template <class T>   // uint16_t, uint32_t, uint4
__device__ __forceinline__ T load_aligned(const uint8_t* p) {
#if defined(__CUDACC__)
    return *reinterpret_cast<const T*>(p);
#else
    if (reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0)
        throw std::logic_error("cuda cpu mode: a " + std::to_string(sizeof(T)) + "-byte aligned load from a misaligned address");
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
#endif
}

// The stores that go with them (mmq.cu's shared-memory tiles), checked the same way in CPU mode.
template <class T>   // uint32_t, uint4
__device__ __forceinline__ void store_aligned(uint8_t* p, T v) {
#if defined(__CUDACC__)
    *reinterpret_cast<T*>(p) = v;
#else
    if (reinterpret_cast<uintptr_t>(p) % sizeof(T) != 0)
        throw std::logic_error("cuda cpu mode: a " + std::to_string(sizeof(T)) + "-byte aligned store to a misaligned address");
    std::memcpy(p, &v, sizeof(T));
#endif
}

// Blocked formats have no element access: a row is whole blocks.
struct Blocked {
    static constexpr bool kUnblocked = false;
    __device__ static float elem(const uint8_t*, int64_t) { return 0; }
};

// Unblocked types: "blocks" of 8 elements (a row tail shorter than 8 goes through elem()).
struct DotF32 {
    static constexpr bool kUnblocked = true;
    static constexpr int kElems = 8, kBytes = 32, kChunks = 1;
    __device__ static float elem(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
    __device__ static float dot(const uint8_t* b, int, const float* x) {
        const float* w = reinterpret_cast<const float*>(b);
        float s = 0;
        for (int i = 0; i < 8; ++i) s += w[i] * x[i];
        return s;
    }
};
struct DotF16 {
    static constexpr bool kUnblocked = true;
    static constexpr int kElems = 8, kBytes = 16, kChunks = 1;
    __device__ static float elem(const uint8_t* row, int64_t i) { return bq::fp16_to_fp32(load_u16(row + 2 * i)); }
    __device__ static float dot(const uint8_t* b, int, const float* x) {
        float s = 0;
        for (int i = 0; i < 8; ++i) s += bq::fp16_to_fp32(load_u16(b + 2 * i)) * x[i];
        return s;
    }
};
struct DotBF16 {
    static constexpr bool kUnblocked = true;
    static constexpr int kElems = 8, kBytes = 16, kChunks = 1;
    __device__ static float elem(const uint8_t* row, int64_t i) { return bq::bf16_to_fp32(load_u16(row + 2 * i)); }
    __device__ static float dot(const uint8_t* b, int, const float* x) {
        float s = 0;
        for (int i = 0; i < 8; ++i) s += bq::bf16_to_fp32(load_u16(b + 2 * i)) * x[i];
        return s;
    }
};

// Q8_0: 4 pieces of 8 int8.
struct DotQ8_0 : Blocked {
    static constexpr int kElems = bq::QK8_0, kBytes = sizeof(bq::block_q8_0), kChunks = 4;
    __device__ static float dot(const uint8_t* b, int c, const float* x) {
        const auto* q = reinterpret_cast<const int8_t*>(b + 2) + 8 * c;
        x += 8 * c;
        float s = 0;
        for (int i = 0; i < 8; ++i) s += float(q[i]) * x[i];
        return bq::fp16_to_fp32(load_u16(b)) * s;
    }
};

// The 32-element nibble formats (Q4_0, Q5_0, IQ4_NL, MXFP4): 4 pieces of 4 quant bytes; byte j
// holds element j (low nibble) and j + 16 (high nibble).
template <class Level, int kQsOffset>
struct DotNibble32 : Blocked {
    static constexpr int kElems = 32, kBytes = kQsOffset + 16, kChunks = 4;
    __device__ static float dot(const uint8_t* b, int c, const float* x) {
        const uint32_t q = load_u32(b + kQsOffset + 4 * c);
        float lo = 0, hi = 0;
        for (int i = 0; i < 4; ++i) {
            const int j = 4 * c + i;
            lo += float(Level::value(b, j, int(q >> (8 * i)) & 0xf)) * x[j];
            hi += float(Level::value(b, j + 16, int(q >> (8 * i + 4)) & 0xf)) * x[j + 16];
        }
        return Level::scale(b) * (lo + hi);
    }
};
struct LevelQ4_0 {
    __device__ static int value(const uint8_t*, int, int q) { return q - 8; }
    __device__ static float scale(const uint8_t* b) { return bq::fp16_to_fp32(load_u16(b)); }
};
struct LevelQ5_0 {
    // Bit 4 of element j is bit j of the little-endian qh word (bytes 2..5).
    __device__ static int value(const uint8_t* b, int j, int q) { return (q | int((load_u32(b + 2) >> j) & 1) << 4) - 16; }
    __device__ static float scale(const uint8_t* b) { return bq::fp16_to_fp32(load_u16(b)); }
};
struct LevelIQ4_NL {
    __device__ static int value(const uint8_t*, int, int q) { return bq::iq4nl_level(q); }
    __device__ static float scale(const uint8_t* b) { return bq::fp16_to_fp32(load_u16(b)); }
};
struct LevelMXFP4 {
    __device__ static int value(const uint8_t*, int, int q) { return bq::mxfp4_level(q); }
    __device__ static float scale(const uint8_t* b) { return bq::e8m0_to_fp32_half(b[0]); }
};
using DotQ4_0 = DotNibble32<LevelQ4_0, 2>;
using DotQ5_0 = DotNibble32<LevelQ5_0, 6>;
using DotIQ4_NL = DotNibble32<LevelIQ4_NL, 2>;
using DotMXFP4 = DotNibble32<LevelMXFP4, 1>;
static_assert(DotQ4_0::kBytes == sizeof(bq::block_q4_0) && DotQ5_0::kBytes == sizeof(bq::block_q5_0) &&
              DotIQ4_NL::kBytes == sizeof(bq::block_iq4_nl) && DotMXFP4::kBytes == sizeof(bq::block_mxfp4));

// Q4_1 / Q5_1 (ggml's Q4_K_M and Q5_K_M write Q5_1 for rows that are not a multiple of 256
// elements): the nibble layout above with a minimum, x = d q + m, and for Q5_1 bit 4 of element j
// in bit j of the qh word at byte 4. The piece's dot is d * sum(q x) + m * sum(x).
template <bool kFive>
struct DotNibbleMin32 : Blocked {
    static constexpr int kQsOffset = kFive ? 8 : 4;
    static constexpr int kElems = 32, kBytes = kQsOffset + 16, kChunks = 4;
    __device__ static int level(const uint8_t* b, int j, int q) {
        return kFive ? q | int((load_u32(b + 4) >> j) & 1) << 4 : q;
    }
    __device__ static float dot(const uint8_t* b, int c, const float* x) {
        const uint32_t q = load_u32(b + kQsOffset + 4 * c);
        float sq = 0, sx = 0;
        for (int i = 0; i < 4; ++i) {
            const int j = 4 * c + i;
            sq += float(level(b, j, int(q >> (8 * i)) & 0xf)) * x[j] + float(level(b, j + 16, int(q >> (8 * i + 4)) & 0xf)) * x[j + 16];
            sx += x[j] + x[j + 16];
        }
        return bq::fp16_to_fp32(load_u16(b)) * sq + bq::fp16_to_fp32(load_u16(b + 2)) * sx;
    }
};
using DotQ4_1 = DotNibbleMin32<false>;
using DotQ5_1 = DotNibbleMin32<true>;
static_assert(DotQ4_1::kBytes == sizeof(bq::block_q4_1) && DotQ5_1::kBytes == sizeof(bq::block_q5_1));

// Q4_K / Q5_K: 32 pieces of 4 quant bytes. Piece c is in 64-element group g = c / 8; its bytes
// l0.. l0 + 3 (l0 = 4 (c % 8)) of the group hold elements 64 g + l (low nibble, sub-block 2 g)
// and 64 g + 32 + l (high nibble, sub-block 2 g + 1); x = d sc q - dmin m.
template <bool kFive>
struct DotQK45 : Blocked {
    static constexpr int kElems = bq::QK_K, kChunks = 32;
    static constexpr int kBytes = kFive ? int(sizeof(bq::block_q5_K)) : int(sizeof(bq::block_q4_K));
    static constexpr int kQs = kFive ? 4 + 12 + 32 : 4 + 12;   // offset of qs in the block
    __device__ static float dot(const uint8_t* b, int c, const float* x) {
        const int g = c / 8, l0 = 4 * (c % 8);
        uint8_t sc0, m0, sc1, m1;
        bq::scale_min_k4(2 * g, b + 4, sc0, m0);
        bq::scale_min_k4(2 * g + 1, b + 4, sc1, m1);
        const uint32_t q = load_u32(b + kQs + 32 * g + l0);
        uint32_t qh = 0;
        if constexpr (kFive) qh = load_u32(b + 16 + l0);   // qh[l], l = l0..l0+3
        const float* xl = x + 64 * g + l0;
        float dot0 = 0, dot1 = 0, sum0 = 0, sum1 = 0;
        for (int i = 0; i < 4; ++i) {
            int q0 = int(q >> (8 * i)) & 0xf, q1 = int(q >> (8 * i + 4)) & 0xf;
            if constexpr (kFive) {
                const uint32_t h = qh >> (8 * i);
                q0 |= int((h >> (2 * g)) & 1) << 4;
                q1 |= int((h >> (2 * g + 1)) & 1) << 4;
            }
            dot0 += float(q0) * xl[i];
            sum0 += xl[i];
            dot1 += float(q1) * xl[32 + i];
            sum1 += xl[32 + i];
        }
        const float d = bq::fp16_to_fp32(load_u16(b)), dmin = bq::fp16_to_fp32(load_u16(b + 2));
        return d * (float(sc0) * dot0 + float(sc1) * dot1) - dmin * (float(m0) * sum0 + float(m1) * sum1);
    }
};
using DotQ4_K = DotQK45<false>;
using DotQ5_K = DotQK45<true>;
static_assert(DotQ4_K::kBytes == sizeof(bq::block_q4_K) && DotQ5_K::kBytes == sizeof(bq::block_q5_K));

// Q6_K: 16 pieces. The block is two halves of 128 elements (64 ql bytes, 32 qh bytes, 8 scales
// each); piece c covers l = l0 .. l0 + 3 (l0 = 4 (c % 8)) of half c / 8, i.e. elements l, l + 32,
// l + 64 and l + 96 of that half, built from ql[l], ql[l + 32] and qh[l].
struct DotQ6_K : Blocked {
    static constexpr int kElems = bq::QK_K, kBytes = sizeof(bq::block_q6_K), kChunks = 16;
    __device__ static float dot(const uint8_t* b, int c, const float* x) {
        const int half = c / 8, l0 = 4 * (c % 8);
        const uint8_t* ql = b + 64 * half;
        const uint8_t* qh = b + 128 + 32 * half;
        const auto* sc = reinterpret_cast<const int8_t*>(b + 192) + 8 * half + l0 / 16;
        const uint32_t a = load_u32(ql + l0), a32 = load_u32(ql + l0 + 32), h = load_u32(qh + l0);
        const float* xl = x + 128 * half + l0;
        float s[4] = {0, 0, 0, 0};
        for (int i = 0; i < 4; ++i) {
            const int lo = int(a >> (8 * i)), lo32 = int(a32 >> (8 * i)), hh = int(h >> (8 * i));
            s[0] += float(((lo & 0xf) | ((hh & 3) << 4)) - 32) * xl[i];
            s[1] += float(((lo32 & 0xf) | (((hh >> 2) & 3) << 4)) - 32) * xl[32 + i];
            s[2] += float((((lo >> 4) & 0xf) | (((hh >> 4) & 3) << 4)) - 32) * xl[64 + i];
            s[3] += float((((lo32 >> 4) & 0xf) | (((hh >> 6) & 3) << 4)) - 32) * xl[96 + i];
        }
        const float d = bq::fp16_to_fp32(load_u16(b + 208));
        return d * (float(sc[0]) * s[0] + float(sc[2]) * s[1] + float(sc[4]) * s[2] + float(sc[6]) * s[3]);
    }
};

// IQ4_XS: 32 pieces of 4 quant bytes; sub-block ib = c / 4 (32 elements, 16 qs bytes, a 6-bit
// scale ls - 32 from scales_l / scales_h); byte j holds elements j (low) and j + 16 (high).
struct DotIQ4_XS : Blocked {
    static constexpr int kElems = bq::QK_K, kBytes = sizeof(bq::block_iq4_xs), kChunks = 32;
    __device__ static float dot(const uint8_t* b, int c, const float* x) {
        const int ib = c / 4, j0 = 4 * (c % 4);
        const int scales_h = load_u16(b + 2);
        const int ls = ((b[4 + ib / 2] >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
        const uint32_t q = load_u32(b + 8 + 16 * ib + j0);
        const float* xb = x + 32 * ib + j0;
        float s = 0;
        for (int i = 0; i < 4; ++i) {
            s += float(bq::iq4nl_level(int(q >> (8 * i)) & 0xf)) * xb[i];
            s += float(bq::iq4nl_level(int(q >> (8 * i + 4)) & 0xf)) * xb[16 + i];
        }
        return bq::fp16_to_fp32(load_u16(b)) * float(ls - 32) * s;
    }
};

}  // namespace kinfer::cuda::KINFER_CUDA_NS
