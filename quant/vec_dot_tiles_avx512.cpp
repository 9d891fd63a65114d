// Register-tiled products of the formats dotted against Q8_0 activations (Q8_0, Q4_0, Q5_0,
// IQ4_NL, MXFP4) for AVX-512 VNNI: RM weight rows x RN activation rows per pass, so every weight
// block is decoded once for RN activation rows and every activation block is loaded once for RM
// weight rows.
//
// Bit equality with ggml. ggml's x86 kernels form each block's eight int32 lanes (sums of four
// byte products), convert them to float and add d_w * d_y times them into one FMA chain (two
// alternating chains for IQ4_NL / MXFP4), then reduce the eight lanes. The lanes here are the
// same integers, reached differently: vpdpbusd multiplies *unsigned* by signed bytes, so the
// weights are offset to u = w + 128 (an xor for Q8_0, folded into the lookup table for the 4-bit
// codebooks) and each lane starts from -128 * (its four activation bytes), which cancels the
// offset exactly: sum (w + 128) y - 128 sum y = sum w y. ggml instead moves w's sign onto y with
// two vpsignb per product, which this saves; the float chains, their order and the final
// reduction are unchanged, so every output equals vec_dot's bit for bit (tests/quant).
//
// Prefill (4+ activation rows) packs the activations once per call, lanes already in zmm order
// with their offset shares and scales beside them (tile512_packed, tile512_packed_chains), so the
// loop per weight row and activation row pair is a register copy, vpdpbusd, the scale multiply,
// the convert and the FMA: Zen 4, 3072 x 7168 x 16: Q8_0 5.0 -> 4.1, MXFP4 5.0 -> 4.25, Q4_0
// 5.4 -> 4.1, IQ4_NL 5.2 -> 4.4 ns per 256 weights and activation row against the joins and
// broadcasts per block that the 512-bit tiles did before.
//
// Decode (one activation row) is memory-bound instead: there the tile's rows are spread over the
// range so that the core reads from several places at once (see tiles()).

// GCC 12 reports its own 512-bit insert / broadcast / extract intrinsics (their deliberately
// undefined pass-through operand) as maybe-uninitialized, or uninitialized, once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <bit>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/matmul.h"

namespace kinfer::quant::avx512 {

namespace {

#include "quant/vec_dot_simd_prims.inc"

// Weight rows of a prefill tile: 4, or 2 for the two-chain formats (see kPackedUnits).
template <int Chains>
constexpr int kRowsPerTile = Chains == 1 ? 4 : 2;
// Activation rows of a 256-bit tile, which only sees fewer than kPackedFrom rows: 3, or 2 for
// the two-chain formats (two accumulators per pair).
template <int Chains>
constexpr int kTileActs = Chains == 1 ? 3 : 2;
constexpr int kDecodeStreams = 8;   // weight rows of a decode tile (halved for two-chain formats)
constexpr int kPackedFrom = 4;      // activation rows from which prefill packs them (tile512_packed*)
constexpr size_t kChunkBytes = size_t(256) << 10;   // weight rows a prefill pass keeps in L2
constexpr int kSlabActs = 64;       // activation rows packed at once (0.9 MiB of pack at K = 7168)
// Row pairs (one-chain) or rows (two-chain) of a packed tile. The two-chain formats take 8 rows
// against 2 weight rows: their weight blocks decode through a table (about ten operations per
// row and block pair), which 8 activation rows share where 4 did.
template <int Chains>
constexpr int kPackedUnits = Chains == 1 ? 4 : 8;


// The activations' share of the weight offset, -128 x (each lane's four bytes): vpdpbusd from
// it gives sum (w + 128) y - 128 sum y = sum w y.
__m256i offset_share(__m256i yq) {
    return _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(char(0x80)), yq));
}
__m512i offset_share(__m512i yq) {
    return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), yq));
}
// A 16-entry code book (IQ4_NL, MXFP4) plus 128: the offset bytes vpdpbusd takes.
__m128i codebook16_plus_128(const int8_t* values) {
    return _mm_add_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values)), _mm_set1_epi8(char(0x80)));
}
// The dwords of a and b interleaved: a0 b0 a1 b1 ... (the packed tiles' order).
__m512i interleave_dwords(__m256i a, __m256i b) {
    return _mm512_permutex2var_epi32(_mm512_castsi256_si512(a), _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0),
                                     _mm512_castsi256_si512(b));
}
// And back: the even dwords to the low half, the odd ones to the high half.
__m512 split_even_odd(__m512 v) {
    return _mm512_maskz_permutexvar_ps(0xffff, _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0), v);
}

// One tile: out_r[r][t * out_stride] for r < RM, t < RN over all nb blocks. decode_u(r, b) gives
// block b of weight row r as 32 unsigned bytes w + 128, scale_w(r, b) its float scale; dy[t][b]
// are the activation blocks' scales (converted once per call).
template <int RM, int RN, int Chains, class DecodeU, class ScaleW>
void tile(int64_t nb, DecodeU decode_u, ScaleW scale_w, const block_q8_0* const* y, const float* const* dy,
          float* const* out_r, size_t out_stride) {
    __m256 acc[Chains][RM][RN];
    for (int c = 0; c < Chains; ++c)
        for (int r = 0; r < RM; ++r)
            for (int t = 0; t < RN; ++t) acc[c][r][t] = _mm256_setzero_ps();
    const int64_t nb_chained = Chains == 2 ? nb & ~int64_t(1) : nb;
    for (int64_t i = 0; i < nb_chained; i += Chains) {
        for (int c = 0; c < Chains; ++c) {
            const int64_t b = i + c;
            __m256i u[RM];
            __m256 sw[RM];
            for (int r = 0; r < RM; ++r) {
                u[r] = decode_u(r, b);
                sw[r] = _mm256_set1_ps(scale_w(r, b));
            }
            for (int t = 0; t < RN; ++t) {
                const __m256i yq = load32(y[t][b].qs);
                // -128 * (sum of each lane's four activation bytes): the offset's share.
                const __m256i base = offset_share(yq);
                const __m256 sy = _mm256_broadcast_ss(dy[t] + b);
                for (int r = 0; r < RM; ++r) {
                    // The scale product rounds like ggml's scalar d_w * d_y.
                    const __m256 d = _mm256_mul_ps(sw[r], sy);
                    acc[c][r][t] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(base, u[r], yq)), acc[c][r][t]);
                }
            }
        }
    }
    for (int r = 0; r < RM; ++r) {
        for (int t = 0; t < RN; ++t) {
            float s = hsum_f32(Chains == 2 ? _mm256_add_ps(acc[0][r][t], acc[Chains - 1][r][t]) : acc[0][r][t]);
            if (Chains == 2 && nb_chained < nb) {
                // ggml adds an odd last block of the two-chain formats as a scalar.
                const int64_t b = nb_chained;
                const __m256i yq = load32(y[t][b].qs);
                s += (scale_w(r, b) * dy[t][b]) * float(hsum_i32(_mm256_dpbusd_epi32(offset_share(yq), decode_u(r, b), yq)));
            }
            out_r[r][size_t(t) * out_stride] = s;
        }
    }
}

// Prefill of the one-chain formats from activations packed once per call. For each block b and
// activation row pair p: the two rows' 32 bytes interleaved by dword (row 2p in the even dwords,
// 2p + 1 in the odd ones), their offset's share -128 * (each lane's four bytes) in the same order,
// and the two rows' scales as one 8-byte pair. A zmm then holds one weight row against a row pair
// with no joins, broadcasts or offset sums left in the loop: per weight row and pair, a register
// copy, vpdpbusd, a broadcast of the two scale products (formed per block, one multiply per weight
// row), the convert and the FMA. Each dword is the same lane of the same chain as in tile(), so
// the bits are unchanged; the lanes are put back in order at the end.
struct Vec512 {
    __m512i v;   // a struct: std::vector<__m512i> would drop the type's attributes (GCC warns)
};
// One call's packed activations. A unit is a row pair (one-chain formats: [b * units + p]) or,
// for the two-chain formats, one row's block pair ([bp * units + t]).
struct PairPack {
    int units = 0;
    std::vector<Vec512> q, base;   // the unit's 64 bytes interleaved by dword, and their offset share
    std::vector<double> d;         // the unit's two scales, as 8 bytes
    void resize(size_t n) {
        q.resize(n);
        base.resize(n);
        d.resize(n);
    }
    void set(size_t at, const int8_t* q0, const int8_t* q1, float d0, float d1) {
        q[at].v = interleave_dwords(load32(q0), load32(q1));
        base[at].v = offset_share(q[at].v);
        const float pair[2] = {d0, d1};
        std::memcpy(&d[at], pair, 8);
    }
};

void pack_pairs(const block_q8_0* const* yrow, const float* const* dyrow, int ny, int64_t nb, PairPack& a) {
    a.units = (ny + 1) / 2;
    a.resize(size_t(nb) * size_t(a.units));
    for (int64_t b = 0; b < nb; ++b)
        for (int p = 0; p < a.units; ++p) {
            const int t0 = 2 * p, t1 = std::min(2 * p + 1, ny - 1);   // a lone last row pairs with itself
            a.set(size_t(b) * size_t(a.units) + size_t(p), yrow[t0][b].qs, yrow[t1][b].qs, dyrow[t0][b], dyrow[t1][b]);
        }
}

// RM weight rows x NP row pairs (from pair p0) over all nb blocks. decode_u(r, b): block b of
// weight row r as 32 bytes w + 128; dw[r][b] its float scale.
// next (when not null): the next row group's first row, its rows x_stride apart, blocks of
// block_bytes; the tile asks for block b of each of those 4 rows into L2 as it goes, so that the
// next group's scale conversion (the first to touch those rows) finds them there. (Without,
// that conversion took the misses of the weight stream, one block at a time: 18 % of a 16-row
// Q8_0 product from L3.)
template <int RM, int NP, class DecodeU>
void tile512_packed(int64_t nb, DecodeU decode_u, const float* const* dw, const PairPack& a, int p0, int ny_valid,
                    float* const* out_r, size_t out_stride, const uint8_t* next = nullptr, size_t x_stride = 0,
                    size_t block_bytes = 0) {
    static_assert(NP <= 4, "a block's scale products of one weight row are one 8-lane vector");
    // Every loop over the chains is unrolled (#pragma GCC unroll): GCC 12 left some of them rolled,
    // and an array indexed by a loop variable lives in memory, so the chains were stored at every block.
    __m512 acc[RM][NP];
#pragma GCC unroll 4
    for (int r = 0; r < RM; ++r)
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
    // Dword g of a weight block into dwords 2g and 2g + 1: both rows of a pair see it.
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    for (int64_t b = 0; b < nb; ++b) {
        if (next)
            for (int r = 0; r < kRowsPerTile<1>; ++r)
                _mm_prefetch(reinterpret_cast<const char*>(next + size_t(r) * x_stride + size_t(b) * block_bytes), _MM_HINT_T1);
        __m512i u[RM];
        for (int r = 0; r < RM; ++r) u[r] = _mm512_permutexvar_epi32(dup, _mm512_castsi256_si512(decode_u(r, b)));
        const size_t at = size_t(b) * size_t(a.units) + size_t(p0);
        // All RM x 2 NP scale products d_w * d_y of the block (each the multiply ggml rounds),
        // a row's in one 8-lane multiply: the loop below takes each pair of them with a
        // broadcast load instead of a multiply on the FMA pipes.
        alignas(64) float dprod[RM][8];
        {
            // A masked load: NP < 4 pairs copied into a zeroed vector went through the stack, and
            // the 32-byte reload of two partial stores stalled store forwarding (4-6 rows 1.5x slower).
            const __m256 dy8 = _mm256_maskz_loadu_ps(__mmask8((1u << (2 * NP)) - 1), &a.d[at]);
            for (int r = 0; r < RM; ++r) _mm256_store_ps(dprod[r], _mm256_mul_ps(_mm256_set1_ps(dw[r][b]), dy8));
        }
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            __m512i yq = a.q[at + size_t(p)].v;
            const __m512i base = a.base[at + size_t(p)].v;
            // In a register for the RM rows: GCC folded the load into every row's vpdpbusd (four
            // 64-byte loads where one does; Zen 4 loads one such vector a cycle).
            asm("" : "+v"(yq));
#pragma GCC unroll 4
            for (int r = 0; r < RM; ++r) {
                // The pair as a broadcast load. As intrinsics, GCC 12 forwarded the stores above
                // into extracts and register broadcasts (Q8_0 3.40 -> 3.30 ns).
                using PairBits = double __attribute__((may_alias));
                __m512 d;
                asm("vbroadcastsd %1, %0" : "=v"(d) : "m"(*reinterpret_cast<const PairBits*>(&dprod[r][2 * p])));
                acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u[r], yq)), acc[r][p]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RM; ++r) {
#pragma GCC unroll 4
        for (int p = 0; p < NP; ++p) {
            // Row 2p's lanes to the low half, 2p + 1's to the high half. (maskz extracts: GCC 12
            // warns of the plain ones' undefined pass-through operand.)
            const __m512 v = split_even_odd(acc[r][p]);
            const int t = 2 * (p0 + p);
            out_r[r][size_t(t) * out_stride] = hsum_f32(_mm512_maskz_extractf32x8_ps(0xff, v, 0));
            if (t + 1 < ny_valid) out_r[r][size_t(t + 1) * out_stride] = hsum_f32(_mm512_maskz_extractf32x8_ps(0xff, v, 1));
        }
    }
}

// The two-chain formats (IQ4_NL, MXFP4) the same way: per block pair bp and activation row t,
// blocks 2bp and 2bp + 1 interleaved by dword (the even chain's lanes in the even dwords, the odd
// chain's in the odd ones), their offset share, and their two scales as one 8-byte pair. A zmm is
// one (weight row, activation row) with both of ggml's chains; they add and reduce as there, and
// an odd last block is added as a scalar afterwards, as there.
void pack_block_pairs(const block_q8_0* const* yrow, const float* const* dyrow, int ny, int64_t nb, PairPack& a) {
    a.units = ny;
    const int64_t nbp = nb / 2;
    a.resize(size_t(nbp) * size_t(ny));
    for (int64_t bp = 0; bp < nbp; ++bp)
        for (int t = 0; t < ny; ++t) {
            const int64_t b = 2 * bp;
            a.set(size_t(bp) * size_t(ny) + size_t(t), yrow[t][b].qs, yrow[t][b + 1].qs, dyrow[t][b], dyrow[t][b + 1]);
        }
}

// RM weight rows x RN activation rows (from row t0) over all block pairs, plus the odd last block.
// next, x_stride, block_bytes: as tile512_packed's (here block 2bp of each row, per block pair:
// the pair's two 17-18-byte blocks share their lines but for a row's last one).
template <int RM, int RN, class DecodeU>
void tile512_packed_chains(int64_t nb, DecodeU decode_u, const float* const* dw, const PairPack& a, int t0,
                           const block_q8_0* const* yrow, const float* const* dyrow, float* const* out_r, size_t out_stride,
                           const uint8_t* next = nullptr, size_t x_stride = 0, size_t block_bytes = 0) {
    __m512 acc[RM][RN];   // every loop over them unrolled (tile512_packed says why)
#pragma GCC unroll 8
    for (int r = 0; r < RM; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) acc[r][t] = _mm512_setzero_ps();
    const int64_t nbp = nb / 2;
    for (int64_t bp = 0; bp < nbp; ++bp) {
        const int64_t b = 2 * bp;
        if (next)
            for (int r = 0; r < kRowsPerTile<2>; ++r)
                _mm_prefetch(reinterpret_cast<const char*>(next + size_t(r) * x_stride + size_t(b) * block_bytes), _MM_HINT_T1);
        __m512i u[RM];
        __m512 sw[RM];
        for (int r = 0; r < RM; ++r) {
            u[r] = interleave_dwords(decode_u(r, b), decode_u(r, b + 1));
            double pair;
            std::memcpy(&pair, dw[r] + b, 8);
            sw[r] = _mm512_castpd_ps(_mm512_set1_pd(pair));
        }
        const size_t at = size_t(bp) * size_t(a.units) + size_t(t0);
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) {
            const __m512i yq = a.q[at + size_t(t)].v, base = a.base[at + size_t(t)].v;
            const __m512 sy = _mm512_castpd_ps(_mm512_set1_pd(a.d[at + size_t(t)]));
#pragma GCC unroll 8
            for (int r = 0; r < RM; ++r) {
                const __m512 d = _mm512_mul_ps(sw[r], sy);   // d_w * d_y, per block as ggml's scalar
                acc[r][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u[r], yq)), acc[r][t]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < RM; ++r) {
#pragma GCC unroll 8
        for (int t = 0; t < RN; ++t) {
            const __m512 v = split_even_odd(acc[r][t]);   // the even blocks' chain low, the odd ones' high
            float s = hsum_f32(_mm256_add_ps(_mm512_maskz_extractf32x8_ps(0xff, v, 0), _mm512_maskz_extractf32x8_ps(0xff, v, 1)));
            if (2 * nbp < nb) {
                const int64_t b = 2 * nbp;
                const __m256i yq = load32(yrow[t0 + t][b].qs);
                s += (dw[r][b] * dyrow[t0 + t][b]) * float(hsum_i32(_mm256_dpbusd_epi32(offset_share(yq), decode_u(r, b), yq)));
            }
            out_r[r][size_t(t0 + t) * out_stride] = s;
        }
    }
}

// f.template operator()<N>() for n in 1..4: the packed tiles' row and unit counts.
static_assert(kRowsPerTile<1> <= 4 && kPackedUnits<1> <= 4 && kRowsPerTile<2> <= 8 && kPackedUnits<2> <= 8,
              "for_count names instances up to Max");
template <int Max, class F>
void for_count(int n, F&& f) {
    switch (n) {
        case 8: if constexpr (Max >= 8) { f.template operator()<8>(); break; } [[fallthrough]];
        case 7: if constexpr (Max >= 7) { f.template operator()<7>(); break; } [[fallthrough]];
        case 6: if constexpr (Max >= 6) { f.template operator()<6>(); break; } [[fallthrough]];
        case 5: if constexpr (Max >= 5) { f.template operator()<5>(); break; } [[fallthrough]];
        case 4: if constexpr (Max >= 4) { f.template operator()<4>(); break; } [[fallthrough]];
        case 3: if constexpr (Max >= 3) { f.template operator()<3>(); break; } [[fallthrough]];
        case 2: if constexpr (Max >= 2) { f.template operator()<2>(); break; } [[fallthrough]];
        default: f.template operator()<1>(); break;
    }
}

// The (RM, RN) instance for a remainder tile.
template <int Chains, int RN, class... A>
void tile_rm(int rm, A... a) {
    switch (rm) {
        case 8: if constexpr (RN == 1) { tile<8, RN, Chains>(a...); break; } [[fallthrough]];
        case 7: if constexpr (RN == 1) { tile<7, RN, Chains>(a...); break; } [[fallthrough]];
        case 6: if constexpr (RN == 1) { tile<6, RN, Chains>(a...); break; } [[fallthrough]];
        case 5: if constexpr (RN == 1) { tile<5, RN, Chains>(a...); break; } [[fallthrough]];
        case 4: tile<4, RN, Chains>(a...); break;
        case 3: tile<3, RN, Chains>(a...); break;
        case 2: tile<2, RN, Chains>(a...); break;
        default: tile<1, RN, Chains>(a...); break;
    }
}

template <int Chains, class... A>
void tile_any(int rm, int rn, A... a) {
    switch (rn) {
        case 3: if constexpr (kTileActs<Chains> >= 3) { tile_rm<Chains, 3>(rm, a...); break; } [[fallthrough]];
        case 2: tile_rm<Chains, 2>(rm, a...); break;
        default: tile_rm<Chains, 1>(rm, a...); break;
    }
}

// Decode of MXFP4 (a two-chain format), RM weight rows x one activation row, in 512-bit
// registers: a zmm holds blocks 2p and 2p + 1 of a row, the even chain's eight lanes in its low half
// and the odd chain's in its high half, which is where tile<RM, 1, 2> keeps them in two ymm
// accumulators; each lane sees the same convert, scale product and FMA in the same order, and
// the halves add before the reduction as ggml's two accumulators do. Per row and block pair the
// 256-bit tile spends two nibble splits, two lookups, two broadcasts of the scale, two multiplies,
// two vpdpbusd, two converts and two FMAs; here one of each, with the two blocks' 16 code bytes
// brought together by a broadcast and a masked broadcast (lanes [q_2p, q_2p, q_2p+1, q_2p+1], the
// high nibbles shifted down in lanes 1 and 3) and the activation pair, its offset share and its
// scale pair formed once for the RM rows. The odd last block of an odd row is added afterwards
// as in tile(), from decode_u (its 32 offset bytes). scale(block) is the weight scale. One core,
// 256 x 7168: 8.5 -> 7.3 ns per 256 weights. IQ4_NL stays on tile(): its fp16 scale converted per
// block made the 512-bit form no faster (11.2 against 11.5 ns).
template <int RM, class DecodeU, class Scale>
void decode_chains512(int64_t nb, const block_mxfp4* const* x, const block_q8_0* y, const float* dy, DecodeU decode_u,
                      Scale scale, float* const* out) {
    const __m512i table = _mm512_broadcast_i32x4(codebook16_plus_128(kvalues_mxfp4)), m4 = _mm512_set1_epi8(0x0f);
    __m512 acc[RM];
    for (int r = 0; r < RM; ++r) acc[r] = _mm512_setzero_ps();
    const int64_t nb2 = nb & ~int64_t(1);
    for (int64_t b = 0; b < nb2; b += 2) {
        const __m512i yq = _mm512_inserti64x4(_mm512_castsi256_si512(load32(y[b].qs)), load32(y[b + 1].qs), 1);
        const __m512i base = offset_share(yq);
        const __m512 sy = _mm512_mask_mov_ps(_mm512_set1_ps(dy[b]), 0xff00, _mm512_set1_ps(dy[b + 1]));
#pragma GCC unroll 8
        for (int r = 0; r < RM; ++r) {
            prefetch_ahead(x[r] + b);
            prefetch_ahead(x[r] + b + 1);
            __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][b].qs)));
            q = _mm512_mask_broadcast_i32x4(q, 0xff00, _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][b + 1].qs)));
            const __m512i idx = _mm512_and_si512(_mm512_mask_srli_epi16(q, 0xff00ff00u, q, 4), m4);
            const __m512i u = _mm512_shuffle_epi8(table, idx);
            const __m512 sw = _mm512_mask_mov_ps(_mm512_set1_ps(scale(x[r][b])), 0xff00, _mm512_set1_ps(scale(x[r][b + 1])));
            // The scale product rounds like ggml's scalar d_w * d_y.
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(sw, sy), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u, yq)), acc[r]);
        }
    }
    for (int r = 0; r < RM; ++r) {
        float s = hsum_f32(_mm256_add_ps(_mm512_castps512_ps256(acc[r]),
                                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[r]), 1))));
        if (nb2 < nb) {   // ggml's scalar last block, as tile() adds it
            const int64_t b = nb2;
            const __m256i yq = load32(y[b].qs);
            s += (scale(x[r][b]) * dy[b]) * float(hsum_i32(_mm256_dpbusd_epi32(offset_share(yq), decode_u(x[r][b]), yq)));
        }
        *out[r] = s;
    }
}

// Decode of the one-chain formats (Q8_0, Q4_0, Q5_0, each block's scale its fp16 d), 8 weight rows
// x one activation row, two rows a 512-bit register: row 2p's block in the low half, row 2p + 1's
// in the high half, each half its own row's FMA chain with tile<8, 1, 1>'s operations in its order
// (vpdpbusd from the offset share, the scale product, the convert, the FMA). The eight rows' fp16
// scales are put together in two general registers and convert in one instruction, their
// products with the activation's scale in one multiply; so a row and block cost half of an
// insert, a vpdpbusd, a convert, an FMA and a scale permute, where the 256-bit tile spent a whole
// one of each and four operations turning one fp16 into a broadcast float. (A gather of the eight
// scales was no faster than the 256-bit tile; eight 2-byte stores read back as one load were in
// between.) One core, 256 x 7168: Q8_0 9.1 -> 7.0 ns per 256 weights, Q4_0 10.1 -> 9.3.
template <class Block, class DecodeU>
void decode_one_chain512(int64_t nb, const Block* const* x, const block_q8_0* y, const float* dy, DecodeU decode_u,
                         float* const* out) {
    // The weight scale is read as the block's fp16 d here, not through tiles()' scale(): true of
    // these three formats only.
    static_assert(std::is_same_v<Block, block_q8_0> || std::is_same_v<Block, block_q4_0> || std::is_same_v<Block, block_q5_0>,
                  "decode_one_chain512 reads each block's scale as its fp16 d");
    // [scale of row 2p x 8 | row 2p + 1 x 8] from the eight products.
    const __m512i i_pair[4] = {_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                               _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3),
                               _mm512_setr_epi32(4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5),
                               _mm512_setr_epi32(6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7)};
    __m512 acc[4];
    for (int p = 0; p < 4; ++p) acc[p] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const __m512i yq = _mm512_broadcast_i64x4(load32(y[b].qs));
        const __m512i base = offset_share(yq);
        const uint64_t lo = pack_u16x4(&x[0][b].d, &x[1][b].d, &x[2][b].d, &x[3][b].d);
        const uint64_t hi = pack_u16x4(&x[4][b].d, &x[5][b].d, &x[6][b].d, &x[7][b].d);
        const __m128i d16 = _mm_insert_epi64(_mm_cvtsi64_si128(int64_t(lo)), int64_t(hi), 1);
        // The scale products round like ggml's scalar d_w * d_y.
        const __m512 dw = _mm512_castps256_ps512(_mm256_mul_ps(_mm256_cvtph_ps(d16), _mm256_broadcast_ss(dy + b)));
#pragma GCC unroll 4
        for (int p = 0; p < 4; ++p) {
            prefetch_ahead(x[2 * p] + b);
            prefetch_ahead(x[2 * p + 1] + b);
            const __m512i u = _mm512_inserti64x4(_mm512_castsi256_si512(decode_u(x[2 * p][b])), decode_u(x[2 * p + 1][b]), 1);
            acc[p] = _mm512_fmadd_ps(_mm512_permutexvar_ps(i_pair[p], dw), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u, yq)),
                                     acc[p]);
        }
    }
    for (int p = 0; p < 4; ++p) {
        *out[2 * p] = hsum_f32(_mm512_castps512_ps256(acc[p]));
        *out[2 * p + 1] = hsum_f32(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p]), 1)));
    }
}

// Decode (one activation row): memory-bound. A tile computes R rows (8; 4 for the two-chain
// formats), and the layout (quant::decode_streams(), calibrated per machine: see quant/matmul.h)
// says from how many places S of the range a core reads at once: with S >= R, S / R tiles in turn
// take one row from each of S segments (rows i, i + seg, i + 2 seg, ...); with S < R, each tile
// takes R / S adjacent rows from each of S segments, so S = 1 reads its rows side by side. A
// Sapphire-Rapids-class Xeon reads fastest from several places, a Zen 4 EPYC from one (membw:
// 44.2 GB/s from one stream a thread, 27.7 from eight), so this is measured, not fixed: these
// kernels were the one decode path the calibrated layout did not reach (always S = R).
// The ISA's default layout (0, or 4: the K-quant kernels' group) is S = R here: on the Xeon VM
// k3-wide MXFP4_MOE decode read 26.0-27.7 GB/s with S = 8 against 24.5-25.8 with 4 segments of
// two adjacent rows (three alternating rounds), while the K-quants read fastest from 4. Rows that
// fill no whole layout go R at a time, side by side. Each row's arithmetic is the same in every
// tile (bit-equal). The scales convert in the loop, which keeps those reads interleaved too. (A
// function of its own: inlined into tiles() beside the packed prefill tiles, GCC compiled this
// loop 15 % slower.)
template <class Block, int Chains, class DecodeU, class Scale>
[[gnu::noinline]] void decode_tiles(int64_t nb, const uint8_t* xb, size_t x_stride, int nx, const block_q8_0* const* yrow,
                                    const float* const* dyrow, float* out, size_t out_stride, DecodeU decode_u, Scale scale) {
    const Block* xrow[kDecodeStreams] = {};
    float* orow[kDecodeStreams] = {};
    auto sc = [&](int r, int64_t b) { return scale(xrow[r][b]); };
    // And each row asks for its bytes decode_prefetch() ahead (prefetch_ahead, the shared
    // primitives say why; one line per block: they are 17-34 bytes).
    auto du_ahead = [&](int r, int64_t b) {
        prefetch_ahead(xrow[r] + b);
        return decode_u(xrow[r][b]);
    };
    constexpr int R = kDecodeStreams / Chains;   // two-chain formats: registers for 4
    auto put = [&](int k, int r) {
        xrow[k] = reinterpret_cast<const Block*>(xb + size_t(r) * x_stride);
        orow[k] = out + r;
    };
    auto run = [&](int rm) {
        if constexpr (std::is_same_v<Block, block_mxfp4>) {
            if (rm == R) return decode_chains512<R>(nb, xrow, yrow[0], dyrow[0], decode_u, scale, orow);
        } else if constexpr (Chains == 1) {
            if (rm == R) return decode_one_chain512(nb, xrow, yrow[0], dyrow[0], decode_u, orow);
        }
        tile_any<Chains>(rm, 1, nb, du_ahead, sc, yrow, dyrow, orow, out_stride);
    };
    // 1, 4 or 8 (decode_stream_layouts); 2 works too, and a value between them rounds down.
    const int want = decode_streams();
    const int S = want <= 0 || want == weight_rows_per_group() ? R : int(std::bit_floor(unsigned(std::min(want, kDecodeStreams))));
    int done = 0;
    if (S >= R) {
        const int seg = nx / S;
        for (int i = 0; i < seg; ++i)
            for (int g = 0; g < S; g += R) {
                for (int k = 0; k < R; ++k) put(k, i + (g + k) * seg);
                run(R);
            }
        done = seg * S;
    } else {
        const int adj = R / S;   // adjacent rows from each segment
        const int seg = nx / S / adj * adj;
        for (int i = 0; i < seg; i += adj) {
            for (int s = 0, k = 0; s < S; ++s)
                for (int a = 0; a < adj; ++a, ++k) put(k, i + s * seg + a);
            run(R);
        }
        done = seg * S;
    }
    for (int r0 = done; r0 < nx; r0 += R) {
        const int rm = std::min(R, nx - r0);
        for (int k = 0; k < rm; ++k) put(k, r0 + k);
        run(rm);
    }
}

// Every tile of an nx x ny product. Block is the weight block type, decode_u(block) its 32
// offset bytes, scale(block) its float scale.
// decode_scale: the scale as decode's loop reads it. MXFP4's comes from a table there (1.35x
// faster decode on Zen 4); given to the prefill tiles as well, the same table made GCC's 2- and
// 3-row MXFP4 tiles 1.25x / 1.14x slower (kernel lab, 3072 x 7168, four alternating runs), for a
// reason in the generated code that was not pinned down, so prefill computes the scale.
template <class Block, int Chains, class DecodeU, class Scale, class DecodeScale>
void tiles_slab(int64_t n, const void* vx, size_t x_stride, int nx, const void* vy, size_t y_stride, int ny, float* out,
                size_t out_stride, DecodeU decode_u, Scale scale, DecodeScale decode_scale) {
    constexpr int RN = kTileActs<Chains>;
    const int64_t nb = n / QK8_0;
    const auto* xb = static_cast<const uint8_t*>(vx);
    const auto* yb = static_cast<const uint8_t*>(vy);
    const auto xrow_at = [&](int r) { return reinterpret_cast<const Block*>(xb + size_t(r) * x_stride); };
    // Activation scales as floats once per call: the tile loop broadcasts them from memory.
    thread_local std::vector<float> sy, sw;
    const int ny_max = std::min(ny, kSlabActs);   // tiles() passes at most kSlabActs rows
    sy.resize(size_t(ny_max) * size_t(nb));
    const block_q8_0* yrow[kSlabActs];
    const float* dyrow[kSlabActs];
    for (int t = 0; t < ny_max; ++t) {
        yrow[t] = reinterpret_cast<const block_q8_0*>(yb + size_t(t) * y_stride);
        dyrow[t] = sy.data() + size_t(t * nb);
        for (int64_t b = 0; b < nb; ++b) sy[size_t(t * nb + b)] = h2f(yrow[t][b].d);
    }
    const Block* xrow[kDecodeStreams];
    float* orow[kDecodeStreams];
    auto du = [&](int r, int64_t b) { return decode_u(xrow[r][b]); };
    if (ny_max == 1) {
        decode_tiles<Block, Chains>(nb, xb, x_stride, nx, yrow, dyrow, out, out_stride, decode_u, decode_scale);
    } else {
        // Prefill, blocked for the cache: the weight rows in chunks of about kChunkBytes (whole
        // row groups), each chunk against every activation unit group while it sits in L2, the
        // chunk's weight scales as floats once. Row group by row group against all 64 packed
        // rows instead, a tile read the whole pack (0.9 MiB at K = 7168) from beyond L2 for every
        // 2-4 weight rows.
        constexpr int RPT = kRowsPerTile<Chains>, KPU = kPackedUnits<Chains>;
        const int chunk = std::max(RPT, int(kChunkBytes / x_stride) / RPT * RPT);
        sw.resize(size_t(std::min(chunk, nx)) * size_t(nb));
        thread_local PairPack pairs;
        const bool packed = ny_max >= kPackedFrom;
        if (packed) {
            if (Chains == 1) pack_pairs(yrow, dyrow, ny_max, nb, pairs);
            else pack_block_pairs(yrow, dyrow, ny_max, nb, pairs);
        }
        const float* dwrow[kDecodeStreams];   // rm <= RPT; sized for every tile instance
        auto sc = [&](int r, int64_t b) { return dwrow[r][b]; };
        for (int c0 = 0; c0 < nx; c0 += chunk) {
            const int c1 = std::min(nx, c0 + chunk);
            for (int r = c0; r < c1; ++r) {
                const Block* x = xrow_at(r);
                float* d = sw.data() + size_t(r - c0) * size_t(nb);
                for (int64_t b = 0; b < nb; ++b) d[b] = scale(x[b]);
            }
            auto group = [&](int r0) {   // row group r0: its rows, scales; returns its size
                const int rm = std::min(RPT, c1 - r0);
                for (int r = 0; r < rm; ++r) {
                    xrow[r] = xrow_at(r0 + r);
                    dwrow[r] = sw.data() + size_t(r0 + r - c0) * size_t(nb);
                }
                return rm;
            };
            if (!packed) {   // below kPackedFrom rows, 256-bit register tiles
                for (int r0 = c0; r0 < c1; r0 += RPT) {
                    const int rm = group(r0);
                    for (int t0 = 0; t0 < ny_max; t0 += RN) {
                        for (int r = 0; r < rm; ++r) orow[r] = out + size_t(t0) * out_stride + size_t(r0 + r);
                        tile_any<Chains>(rm, std::min(RN, ny_max - t0), nb, du, sc, yrow + t0, dyrow + t0, orow, out_stride);
                    }
                }
                continue;
            }
            // KPU packed units a tile: rows (two-chain formats) or row pairs (one-chain).
            const int units = pairs.units;
            for (int u0 = 0; u0 < units; u0 += KPU) {
                for (int r0 = c0; r0 < c1; r0 += RPT) {
                    const int rm = group(r0);
                    for (int r = 0; r < rm; ++r) orow[r] = out + size_t(r0 + r);
                    // The first unit group asks for the same rows of the next chunk, so that its
                    // scale conversion (the first to touch them) finds them in L2.
                    const uint8_t* next = u0 == 0 && r0 + chunk + RPT <= nx
                                              ? reinterpret_cast<const uint8_t*>(xrow_at(r0 + chunk))
                                              : nullptr;
                    for_count<KPU>(std::min(KPU, units - u0), [&]<int KP>() {
                        for_count<RPT>(rm, [&]<int RM>() {
                            if constexpr (Chains == 1)
                                tile512_packed<RM, KP>(nb, du, dwrow, pairs, u0, ny_max, orow, out_stride, next, x_stride,
                                                       sizeof(Block));
                            else
                                tile512_packed_chains<RM, KP>(nb, du, dwrow, pairs, u0, yrow, dyrow, orow, out_stride, next,
                                                              x_stride, sizeof(Block));
                        });
                    });
                }
            }
        }
    }
}

// The whole product, kSlabActs activation rows at a time (quant::gemm passes all of a chunk's).
template <class Block, int Chains, class DecodeU, class Scale, class DecodeScale>
void tiles(int64_t n, const void* vx, size_t x_stride, int nx, const void* vy, size_t y_stride, int ny, float* out,
           size_t out_stride, DecodeU decode_u, Scale scale, DecodeScale decode_scale) {
    const auto* yb = static_cast<const uint8_t*>(vy);
    for (int t0 = 0; t0 < ny; t0 += kSlabActs)
        tiles_slab<Block, Chains>(n, vx, x_stride, nx, yb + size_t(t0) * y_stride, y_stride, std::min(kSlabActs, ny - t0),
                                  out + size_t(t0) * out_stride, out_stride, decode_u, scale, decode_scale);
    // Leave the upper halves clean: the legacy-SSE code of callers otherwise pays a transition
    // penalty on every instruction (measured: glibc expf and the KDA loop 5-10x slower).
    _mm256_zeroupper();
}

template <class Block, int Chains, class DecodeU, class Scale>
void tiles(int64_t n, const void* vx, size_t x_stride, int nx, const void* vy, size_t y_stride, int ny, float* out,
           size_t out_stride, DecodeU decode_u, Scale scale) {
    tiles<Block, Chains>(n, vx, x_stride, nx, vy, y_stride, ny, out, out_stride, decode_u, scale, scale);
}

__m256i table_plus_128(const int8_t* values) { return _mm256_broadcastsi128_si256(codebook16_plus_128(values)); }

}  // namespace

void vec_dot_tile_q8_0_q8_0(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out,
                            size_t os) {
    tiles<block_q8_0, 1>(n, x, xs, nx, y, ys, ny, out, os,
                         [](const block_q8_0& b) { return _mm256_xor_si256(load32(b.qs), _mm256_set1_epi8(char(0x80))); },
                         [](const block_q8_0& b) { return h2f(b.d); });
}

void vec_dot_tile_q4_0_q8_0(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out,
                            size_t os) {
    // Levels q - 8 offset by 128: q + 120.
    tiles<block_q4_0, 1>(n, x, xs, nx, y, ys, ny, out, os,
                         [](const block_q4_0& b) { return _mm256_add_epi8(nibbles_32(b.qs), _mm256_set1_epi8(120)); },
                         [](const block_q4_0& b) { return h2f(b.d); });
}

void vec_dot_tile_q5_0_q8_0(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out,
                            size_t os) {
    tiles<block_q5_0, 1>(n, x, xs, nx, y, ys, ny, out, os,
                         [](const block_q5_0& b) { return _mm256_xor_si256(q5_0_levels(b), _mm256_set1_epi8(char(0x80))); },
                         [](const block_q5_0& b) { return h2f(b.d); });
}

void vec_dot_tile_iq4_nl_q8_0(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out,
                              size_t os) {
    tiles<block_iq4_nl, 2>(n, x, xs, nx, y, ys, ny, out, os,
                           [](const block_iq4_nl& b) { return _mm256_shuffle_epi8(table_plus_128(kvalues_iq4nl), nibbles_32(b.qs)); },
                           [](const block_iq4_nl& b) { return h2f(b.d); });
}

void vec_dot_tile_mxfp4_q8_0(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out,
                             size_t os) {
    tiles<block_mxfp4, 2>(n, x, xs, nx, y, ys, ny, out, os,
                          [](const block_mxfp4& b) { return _mm256_shuffle_epi8(table_plus_128(kvalues_mxfp4), nibbles_32(b.qs)); },
                          [](const block_mxfp4& b) { return e8m0_to_fp32_half(b.e); },
                          [](const block_mxfp4& b) { return e8m0_half(b.e); });
}

}  // namespace kinfer::quant::avx512
