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
// Decode (one activation row) is memory-bound instead: there the tile's rows are spread over the
// range so that the core reads from several places at once (see tiles()).

// GCC 12 reports its own 512-bit insert / extract intrinsics (their deliberately undefined
// pass-through operand) as maybe-uninitialized once inlined here.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"

namespace kinfer::quant::avx512 {

namespace {

#include "quant/vec_dot_simd_prims.inc"

constexpr int kRowsPerTile = 4;     // weight rows of a prefill tile
constexpr int kActsPerTile = 4;     // activation rows (halved for two-chain formats)
constexpr int kPairs = 2;           // activation row pairs of a 512-bit one-chain tile
constexpr int kDecodeStreams = 8;   // weight rows of a decode tile (halved for two-chain formats)

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
    const __m256i k128 = _mm256_set1_epi8(char(0x80));
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
                const __m256i base = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), k128, yq));
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
                const __m256i base = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), k128, yq));
                s += (scale_w(r, b) * dy[t][b]) * float(hsum_i32(_mm256_dpbusd_epi32(base, decode_u(r, b), yq)));
            }
            out_r[r][size_t(t) * out_stride] = s;
        }
    }
}

// [lo | hi] as one 512-bit register, and back.
__m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }
__m512 join(__m256 lo, __m256 hi) { return _mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1); }
__m256 high_half(__m512 v) { return _mm512_extractf32x8_ps(v, 1); }

// One-chain formats with 512-bit lanes: a zmm holds one weight row against two activation rows
// (its low half row 2p, its high half row 2p + 1). Each half is exactly the 256-bit tile's
// chain for its row: same lanes, same FMA order, same reduction.
template <int RM, int NP, class DecodeU>
void tile512(int64_t nb, DecodeU decode_u, const float* const* dw, const block_q8_0* const* y, const float* const* dy,
             float* const* out_r, size_t out_stride) {
    __m512 acc[RM][NP];
    for (int r = 0; r < RM; ++r)
        for (int p = 0; p < NP; ++p) acc[r][p] = _mm512_setzero_ps();
    const __m512i k128 = _mm512_set1_epi8(char(0x80));
    for (int64_t b = 0; b < nb; ++b) {
        __m512i u[RM];
        for (int r = 0; r < RM; ++r) {
            const __m256i h = decode_u(r, b);
            u[r] = _mm512_broadcast_i64x4(h);
        }
        for (int p = 0; p < NP; ++p) {
            const __m512i yq = join(load32(y[2 * p][b].qs), load32(y[2 * p + 1][b].qs));
            const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, yq));
            const __m512 sy = join(_mm256_broadcast_ss(dy[2 * p] + b), _mm256_broadcast_ss(dy[2 * p + 1] + b));
            for (int r = 0; r < RM; ++r) {
                const __m512 d = _mm512_mul_ps(_mm512_set1_ps(dw[r][b]), sy);
                acc[r][p] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u[r], yq)), acc[r][p]);
            }
        }
    }
    for (int r = 0; r < RM; ++r) {
        for (int p = 0; p < NP; ++p) {
            out_r[r][size_t(2 * p) * out_stride] = hsum_f32(_mm512_castps512_ps256(acc[r][p]));
            out_r[r][size_t(2 * p + 1) * out_stride] = hsum_f32(high_half(acc[r][p]));
        }
    }
}

// Two-chain formats with 512-bit lanes: a zmm holds one (weight row, activation row) pair's two
// chains, the even block's in the low half and the odd block's in the high half, so a block pair
// is one step. The halves add and reduce as ggml's two accumulators do; an odd last block is added
// as a scalar afterwards, as there.
template <int RM, int RN, class DecodeU>
void tile512_pairs(int64_t nb, DecodeU decode_u, const float* const* dw, const block_q8_0* const* y,
                   const float* const* dy, float* const* out_r, size_t out_stride) {
    __m512 acc[RM][RN];
    for (int r = 0; r < RM; ++r)
        for (int t = 0; t < RN; ++t) acc[r][t] = _mm512_setzero_ps();
    const __m512i k128 = _mm512_set1_epi8(char(0x80));
    const int64_t nb2 = nb & ~int64_t(1);
    for (int64_t b = 0; b < nb2; b += 2) {
        __m512i u[RM];
        __m512 sw[RM];
        for (int r = 0; r < RM; ++r) {
            u[r] = join(decode_u(r, b), decode_u(r, b + 1));
            sw[r] = join(_mm256_broadcast_ss(dw[r] + b), _mm256_broadcast_ss(dw[r] + b + 1));
        }
        for (int t = 0; t < RN; ++t) {
            const __m512i yq = join(load32(y[t][b].qs), load32(y[t][b + 1].qs));
            const __m512i base = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, yq));
            const __m512 sy = join(_mm256_broadcast_ss(dy[t] + b), _mm256_broadcast_ss(dy[t] + b + 1));
            for (int r = 0; r < RM; ++r) {
                const __m512 d = _mm512_mul_ps(sw[r], sy);
                acc[r][t] = _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(base, u[r], yq)), acc[r][t]);
            }
        }
    }
    const __m256i k128h = _mm256_set1_epi8(char(0x80));
    for (int r = 0; r < RM; ++r) {
        for (int t = 0; t < RN; ++t) {
            float s = hsum_f32(_mm256_add_ps(_mm512_castps512_ps256(acc[r][t]), high_half(acc[r][t])));
            if (nb2 < nb) {
                const __m256i yq = load32(y[t][nb2].qs);
                const __m256i base = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_dpbusd_epi32(_mm256_setzero_si256(), k128h, yq));
                s += (dw[r][nb2] * dy[t][nb2]) * float(hsum_i32(_mm256_dpbusd_epi32(base, decode_u(r, nb2), yq)));
            }
            out_r[r][size_t(t) * out_stride] = s;
        }
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
        case 4: if constexpr (kActsPerTile / Chains >= 4) { tile_rm<Chains, 4>(rm, a...); break; } [[fallthrough]];
        case 3: if constexpr (kActsPerTile / Chains >= 3) { tile_rm<Chains, 3>(rm, a...); break; } [[fallthrough]];
        case 2: tile_rm<Chains, 2>(rm, a...); break;
        default: tile_rm<Chains, 1>(rm, a...); break;
    }
}

// Every tile of an nx x ny product. Block is the weight block type, decode_u(block) its 32
// offset bytes, scale(block) its float scale.
template <class Block, int Chains, class DecodeU, class Scale>
void tiles(int64_t n, const void* vx, size_t x_stride, int nx, const void* vy, size_t y_stride, int ny, float* out,
           size_t out_stride, DecodeU decode_u, Scale scale) {
    constexpr int RN = kActsPerTile / Chains;
    const int64_t nb = n / QK8_0;
    const auto* xb = static_cast<const uint8_t*>(vx);
    const auto* yb = static_cast<const uint8_t*>(vy);
    const auto xrow_at = [&](int r) { return reinterpret_cast<const Block*>(xb + size_t(r) * x_stride); };
    // Activation scales as floats once per call: the tile loop broadcasts them from memory.
    thread_local std::vector<float> sy, sw;
    sy.resize(size_t(ny * nb));
    const block_q8_0* yrow[64];
    const float* dyrow[64];
    const int ny_max = std::min(ny, 64);
    for (int t = 0; t < ny_max; ++t) {
        yrow[t] = reinterpret_cast<const block_q8_0*>(yb + size_t(t) * y_stride);
        dyrow[t] = sy.data() + size_t(t * nb);
        for (int64_t b = 0; b < nb; ++b) sy[size_t(t * nb + b)] = h2f(yrow[t][b].d);
    }
    const Block* xrow[kDecodeStreams];
    float* orow[kDecodeStreams];
    auto du = [&](int r, int64_t b) { return decode_u(xrow[r][b]); };
    if (ny_max == 1) {
        // Decode: memory-bound. The rows of a tile come from `streams` segments of the range
        // (rows i, i + K, i + 2K, ...), so the core reads from that many places at once: here one
        // core reads a large matrix 1.3-1.5x faster from 4-8 streams than from one (membw). The
        // scales convert in the loop, which keeps those reads interleaved too.
        auto sc = [&](int r, int64_t b) { return scale(xrow[r][b]); };
        // And each row asks for its bytes kDecodePrefetch ahead (prefetch_ahead, the shared
        // primitives say why; one line per block: they are 17-34 bytes).
        auto du_ahead = [&](int r, int64_t b) {
            prefetch_ahead(xrow[r] + b);
            return decode_u(xrow[r][b]);
        };
        constexpr int streams = kDecodeStreams / Chains;   // two-chain formats: registers for 4
        const int seg = (nx + streams - 1) / streams;
        for (int i = 0; i < seg; ++i) {
            int rm = 0;
            for (int r = i; r < nx; r += seg, ++rm) {
                xrow[rm] = xrow_at(r);
                orow[rm] = out + r;
            }
            tile_any<Chains>(rm, 1, nb, du_ahead, sc, yrow, dyrow, orow, out_stride);
        }
    } else {
        // Prefill: weight scales as floats once per row group, reused for every activation tile.
        sw.resize(size_t(kRowsPerTile * nb));
        const float* dwrow[kRowsPerTile];
        auto sc = [&](int r, int64_t b) { return dwrow[r][b]; };
        for (int r0 = 0; r0 < nx; r0 += kRowsPerTile) {
            const int rm = std::min(kRowsPerTile, nx - r0);
            for (int r = 0; r < rm; ++r) {
                xrow[r] = xrow_at(r0 + r);
                dwrow[r] = sw.data() + size_t(r * nb);
                for (int64_t b = 0; b < nb; ++b) sw[size_t(r * nb + b)] = scale(xrow[r][b]);
            }
            int t0 = 0;
            if (rm == kRowsPerTile) {
                // Full tiles in 512-bit lanes; the rest in 256-bit ones.
                constexpr int step = Chains == 1 ? 2 * kPairs : kActsPerTile;
                for (; t0 + step <= ny_max; t0 += step) {
                    for (int r = 0; r < rm; ++r) orow[r] = out + size_t(t0) * out_stride + size_t(r0 + r);
                    if constexpr (Chains == 1) tile512<kRowsPerTile, kPairs>(nb, du, dwrow, yrow + t0, dyrow + t0, orow, out_stride);
                    else tile512_pairs<kRowsPerTile, kActsPerTile>(nb, du, dwrow, yrow + t0, dyrow + t0, orow, out_stride);
                }
            }
            for (; t0 < ny_max; t0 += RN) {
                for (int r = 0; r < rm; ++r) orow[r] = out + size_t(t0) * out_stride + size_t(r0 + r);
                tile_any<Chains>(rm, std::min(RN, ny_max - t0), nb, du, sc, yrow + t0, dyrow + t0, orow, out_stride);
            }
        }
    }
    if (ny > ny_max) {   // callers pass at most 16 rows; stay correct for more
        tiles<Block, Chains>(n, vx, x_stride, nx, yb + size_t(ny_max) * y_stride, y_stride, ny - ny_max,
                             out + size_t(ny_max) * out_stride, out_stride, decode_u, scale);
    }
    // Leave the upper halves clean: the legacy-SSE code of callers otherwise pays a transition
    // penalty on every instruction (measured: glibc expf and the KDA loop 5-10x slower).
    _mm256_zeroupper();
}

__m256i table_plus_128(const int8_t* values) {
    return _mm256_add_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(values))),
                           _mm256_set1_epi8(char(0x80)));
}

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
                          [](const block_mxfp4& b) { return e8m0_half(b.e); });
}

}  // namespace kinfer::quant::avx512
