// K-quant x Q8_K prefill tiles for AVX-512 VNNI (Q4_K and Q6_K; Q2_K, Q3_K and Q5_K, whose AVX2
// path is vec_dot_multi): two weight rows x up to 16 activation rows per pass, with the
// activations repacked once per 64 of a call's rows so that the inner loop is 512-bit loads and
// multiply-adds only.
//
// Bit equality. q4_K_tile (vec_dot_simd.inc), like ggml's AVX2 kernel, forms per super-block
// eight exact int32 lanes (lane l: the scaled sums of bytes 4l..4l+3 of each 32-byte chunk),
// converts them to float and adds d_w * d_y times them into an 8-lane FMA chain, and the min
// terms' four int32 lanes times -d_y * dmin_w into a 4-lane one; after the last super-block it
// reduces both. Every lane is its own chain of roundings, so nothing requires a lane to sit in
// its own register:
//   - a zmm here holds the 8 lanes of two activation rows (t, t + 1) of one weight row: the
//     weights' 32 bytes are broadcast to both halves and the activations of the two rows are
//     packed side by side. The integer lanes are q4_K_tile's integers (the same products,
//     summed in another order: exact);
//   - the min terms of four activation rows share one zmm (4 x 4 lanes);
//   - the scale products d_y * d_w and -d_y * dmin_w are the same float multiplies, done 16 at
//     a time.
// The final reductions are q4_K_tile's (hsum_f32, hsum_f32x4), so every output equals
// vec_dot_q4_K_q8_K bit for bit (tests/quant). Q6_K follows q6_K_tile the same way: its lanes
// less 32 * (the bsums times the scales, two rows per zmm), times d_y * d_w, into one chain. The
// other three follow their vec_dot the same way; each tile<> says how (the min terms of Q2_K and
// Q5_K, Q3_K's unsigned levels).
//
// Why: prefill on a Q4_K_M model is these products (80 + 10 % of k3-wide's pp256), and the
// 1 x 4 tiles spend half their instructions on loads, broadcasts and the per-super-block float
// step. Here those are shared by 2 x 16 outputs. Zen 5, one thread, Q4_K 512 x 7168 x 64: 1.7x.
//
// GCC 12 reports the deliberately undefined pass-through operand of its own 512-bit intrinsics
// as maybe-uninitialized once inlined here (cvtepi32_ps included), and as uninitialized for the
// plain broadcasts and extracts: those take their maskz forms.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <bit>
#include <chrono>

#include <algorithm>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/matmul.h"
#include "quant/types.h"

namespace kinfer::quant::avx512 {

namespace {

#include "quant/vec_dot_simd_prims.inc"

constexpr int kMaxActs = 16;   // activation rows of one packed block (tiled() takes up to kGroupBlocks at once)
constexpr int kMinActs = 4;    // below this vec_dot_multi's 1 x 3 (or fewer) kernel

// One call's activations, per super-block i: for each row pair p, the eight 32-byte pieces k
// (bytes 32k..32k+31: for Q4_K chunk k / 2's low-nibble partners at even k, high at odd; for Q6_K
// half k / 4, quarter k % 4) as [row 2p | row 2p + 1], then [d of row 2p x 8 | d of row 2p+1 x 8]
// and [bsums of row 2p | of row 2p + 1]; after the pairs, for each row quad q (Q4_K's min terms),
// the pair sums of bsums (8 int16 per row, k4_bsum_pairs) and [-d x 4 per row]; then, in a
// pack for Q5_K only (kQ5Extra), its min terms' operands one lane per activation row (16 lanes
// whatever the pack's size): four vectors m of the bsum pair sums 2m and 2m + 1 as the two words
// of each dword, then -d; or, in a pack for Q3_K only, four vectors a pair (step J: for each
// of its two rows and each lane l, -4 x the sum of activation bytes 4l..4l+3 of piece 2J in the
// dword's low word, of piece 2J + 1 in its high word: the offset of Q3_K's unsigned levels).
// Rows past ny repeat the last one (their results are not stored).
constexpr int kPerPair = 10;
constexpr int kQ5Extra = 5;
constexpr int kQ3PerPair = 4;
enum class PackExtra { none, q3, q5 };
struct Vec {
    __m512i v;   // a struct: std::vector<__m512i> would drop the type's attributes (GCC warns)
};
struct ActPack {
    int pairs = 0;
    int extra = 0;   // kQ5Extra in a Q5_K pack, kQ3PerPair x pairs in a Q3_K one
    std::vector<Vec> v;
    size_t per_sb() const { return size_t(pairs) * kPerPair + size_t(pairs / 2) * 2 + size_t(extra); }
    // Super-block i's vectors after the pairs and the quads: Q5_K's min-term operands, or Q3_K's
    // offsets (kQ3PerPair a pair; the Q3_K statement finds them at that place by itself, KQ3_OFF).
    const Vec* after_quads(int64_t i) const { return sb(i) + size_t(pairs) * kPerPair + size_t(pairs / 2) * 2; }
    const Vec* sb(int64_t i) const { return v.data() + size_t(i) * per_sb(); }
};

void pack_acts(const uint8_t* y, size_t y_stride, int ny, int padded, int64_t nb, ActPack& a,
               PackExtra extra = PackExtra::none) {
    a.pairs = padded / 2;
    a.extra = extra == PackExtra::q5 ? kQ5Extra : extra == PackExtra::q3 ? kQ3PerPair * a.pairs : 0;
    a.v.resize(size_t(nb) * a.per_sb());
    auto row = [&](int t) { return reinterpret_cast<const block_q8_K*>(y + size_t(std::min(t, ny - 1)) * y_stride); };
    for (int64_t i = 0; i < nb; ++i) {
        Vec* o = a.v.data() + size_t(i) * a.per_sb();
        for (int p = 0; p < a.pairs; ++p) {
            const block_q8_K& y0 = row(2 * p)[i];
            const block_q8_K& y1 = row(2 * p + 1)[i];
            // 32-byte pieces k = 2j (bytes 64j.., the low nibbles' partners) and 2j + 1 (the high ones').
            for (int k = 0; k < 8; ++k) {
                alignas(64) int8_t both[64];
                std::memcpy(both, y0.qs + 32 * k, 32);
                std::memcpy(both + 32, y1.qs + 32 * k, 32);
                o[p * kPerPair + k].v = _mm512_load_si512(both);
            }
            alignas(64) float d[16];
            for (int l = 0; l < 8; ++l) d[l] = y0.d, d[8 + l] = y1.d;
            o[p * kPerPair + 8].v = _mm512_castps_si512(_mm512_load_ps(d));
            alignas(64) int16_t bs[32];
            std::memcpy(bs, y0.bsums, 32);
            std::memcpy(bs + 16, y1.bsums, 32);
            o[p * kPerPair + 9].v = _mm512_load_si512(bs);
        }
        Vec* oq = o + size_t(a.pairs) * kPerPair;
        for (int q = 0; q < a.pairs / 2; ++q) {
            alignas(64) int16_t hb[32];
            alignas(64) float dn[16];
            for (int k = 0; k < 4; ++k) {
                const block_q8_K& yt = row(4 * q + k)[i];
                _mm_store_si128(reinterpret_cast<__m128i*>(hb + 8 * k), k4_bsum_pairs(yt.bsums));
                for (int l = 0; l < 4; ++l) dn[4 * k + l] = -yt.d;
            }
            oq[2 * q].v = _mm512_load_si512(hb);
            oq[2 * q + 1].v = _mm512_castps_si512(_mm512_load_ps(dn));
        }
        if (extra == PackExtra::q5) {
            Vec* o5 = oq + size_t(a.pairs / 2) * 2;
            alignas(64) uint32_t bp[4][kMaxActs];
            alignas(64) float nd[kMaxActs];
            for (int t = 0; t < kMaxActs; ++t) {
                const block_q8_K& yt = row(t)[i];
                for (int m = 0; m < 4; ++m) {
                    const int lo = yt.bsums[4 * m] + yt.bsums[4 * m + 1], hi = yt.bsums[4 * m + 2] + yt.bsums[4 * m + 3];
                    bp[m][t] = uint32_t(uint16_t(lo)) | uint32_t(uint16_t(hi)) << 16;
                }
                nd[t] = -yt.d;
            }
            for (int m = 0; m < 4; ++m) o5[m].v = _mm512_load_si512(bp[m]);
            o5[4].v = _mm512_castps_si512(_mm512_load_ps(nd));
        }
        if (extra == PackExtra::q3) {
            Vec* o3 = oq + size_t(a.pairs / 2) * 2;
            for (int p = 0; p < a.pairs; ++p)
                for (int j = 0; j < 4; ++j) {
                    alignas(64) uint32_t w[16];
                    for (int h = 0; h < 2; ++h) {
                        const int8_t* qs = row(2 * p + h)[i].qs;
                        for (int l = 0; l < 8; ++l) {
                            int lo = 0, hi = 0;
                            for (int b = 0; b < 4; ++b) lo += qs[64 * j + 4 * l + b], hi += qs[64 * j + 32 + 4 * l + b];
                            w[8 * h + l] = uint32_t(uint16_t(-4 * lo)) | uint32_t(uint16_t(-4 * hi)) << 16;
                        }
                    }
                    o3[kQ3PerPair * p + j].v = _mm512_load_si512(w);
                }
        }
    }
}

#include "quant/vec_dot_k_tiles_asm_avx512.inc"

// Pieces shared by the tiles' intrinsics (a product's lone last weight row, NR == 1) and their ends.
// Q4_K's and Q5_K's lone row: chunk j's low nibbles pair with scale 2j, high with 2j + 1 (each lane's
// four products of each by vpdpbusd, exact, |sum| <= 4 * 31 * 128 an int16, joined as the two
// words of the lane, one multiply-add applying the scale pair: three multiplies where two maddubs
// and two multiply-adds were four, Zen 4, Q4_K 512 x 7168 x 16: 3.8 -> 3.5 ns); high(k) gives the
// bits above the nibbles of piece k (Q5_K's fifth bits, zero for Q4_K). sc: the 8 scales as words
// in every 128-bit lane.
template <int NP, class High>
void lone_row_nibbles(const Vec* A, const uint8_t* qs, __m512i sc, High high, __m512i (&sum)[NP]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
        const __m512i q = _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * j)));
        const __m512i lo = _mm512_or_si512(_mm512_and_si512(q, m4), high(2 * j));
        const __m512i hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(q, 4), m4), high(2 * j + 1));
        // Every dword: scale 2j in its low word, 2j + 1 in its high word.
        const __m512i s_pair = _mm512_shuffle_epi8(sc, _mm512_set1_epi32(int32_t(0x03020100u + 0x04040404u * uint32_t(j))));
        for (int p = 0; p < NP; ++p) {
            const __m512i dl = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, A[p * kPerPair + 2 * j].v);
            const __m512i dh = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, A[p * kPerPair + 2 * j + 1].v);
            const __m512i w = _mm512_mask_blend_epi16(0xAAAAAAAAu, dl, _mm512_slli_epi32(dh, 16));
            sum[p] = _mm512_dpwssd_epi32(sum[p], w, s_pair);
        }
    }
}
// Q2_K's and Q3_K's lone row: the scaled products of its eight pieces against NP pairs: levels(k) gives piece
// k's unsigned levels in both halves, sc the row's 16 group scales as words (Q6_K's group pattern,
// which Q2_K and Q3_K share), summed into sum[p] by maddubs and vpdpwssd.
template <int NP, class Levels>
void lone_row_pieces(const Vec* A, __m512i sc, Levels levels, __m512i (&sum)[NP]) {
    for (int k = 0; k < 8; ++k) {
        const __m512i u = levels(k);
        const __m512i s = _mm512_permutexvar_epi16(_mm512_load_si512(kQ6ScalePairs.singles[k / 2][k % 2]), sc);
        for (int p = 0; p < NP; ++p) sum[p] = _mm512_dpwssd_epi32(sum[p], _mm512_maddubs_epi16(u, A[p * kPerPair + k].v), s);
    }
}
// acc[p] = (d_y * d_w) * float(sum[p]) + acc[p], the float step of a super-block (d_y from the pack).
template <int NP>
void chain_step(const Vec* A, float xd, const __m512i (&sum)[NP], float (*acc)[16]) {
    const __m512 d_w = _mm512_set1_ps(xd);
    for (int p = 0; p < NP; ++p) {
        const __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(A[p * kPerPair + 8].v), d_w);   // d_y * d_w
        _mm512_store_ps(acc[p], _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(sum[p]), _mm512_load_ps(acc[p])));
    }
}
// Each output, for the activation rows that were real: the reduction of its eight lanes (hsum_f32),
// plus min(r, t) when given (a type's min terms: adding a zero instead would turn -0 into +0).
template <int NR, int NP, class Mins = std::nullptr_t>
void store_chains(const float (&acc)[NR][8][16], int ny_valid, float* const* out, size_t os, Mins mins = nullptr) {
    for (int r = 0; r < NR; ++r)
        for (int p = 0; p < NP; ++p) {
            const __m512 v = _mm512_load_ps(acc[r][p]);
            const __m256 halves[2] = {_mm512_maskz_extractf32x8_ps(0xff, v, 0), _mm512_maskz_extractf32x8_ps(0xff, v, 1)};
            for (int h = 0; h < 2; ++h) {
                const int t = 2 * p + h;
                if (t >= ny_valid) break;
                if constexpr (std::is_null_pointer_v<Mins>) out[r][size_t(t) * os] = hsum_f32(halves[h]);
                else out[r][size_t(t) * os] = hsum_f32(halves[h]) + mins(r, t);
            }
        }
}


// NR weight rows x 2 NP packed activation rows (NP even), all nb super-blocks; out[t * os + r]
// for the t < ny_valid that were real rows.
template <int NR, int NP, Form F>
void tile(int64_t nb, const block_q4_K* const* x, const ActPack& a, int ny_valid, float* const* out, size_t os) {
    constexpr int NQ = NP / 2;
    // The float chains live in memory, where the asm statements update them once per super-block
    // (as registers they would crowd out the integer sums); eight pairs' and four quads' room per
    // row whatever NP, as those statements address row 1. The one-row path shares the storage.
    alignas(64) float acc[NR][8][16], acc_m[NR][4][16];
    for (int r = 0; r < NR; ++r) {
        for (int p = 0; p < NP; ++p) _mm512_store_ps(acc[r][p], _mm512_setzero_ps());
        for (int q = 0; q < NQ; ++q) _mm512_store_ps(acc_m[r][q], _mm512_setzero_ps());
    }
    for (int64_t i = 0; i < nb; ++i) {
        const Vec* A = a.sb(i);
        const Vec* AQ = A + size_t(a.pairs) * kPerPair;
        __m512i sc[NR], sum[NR][NP];
        __m128i mn[NR];
        for (int r = 0; r < NR; ++r) {
            const K4ScalesMins k = k4_unpack(x[r][i].scales);
            sc[r] = _mm512_maskz_broadcast_i32x4(0xffff, _mm256_castsi256_si128(k.sc));
            mn[r] = k.mn16;
        }
        if constexpr (NR == 2) {   // two rows: the same steps in assembly (above)
            assert(a.pairs == NP);   // the statement finds the min terms after exactly NP pairs
            const uint8_t* const q[2] = {x[0][i].qs, x[1][i].qs};
            const float xd[2] = {h2f(x[0][i].d), h2f(x[1][i].d)}, xm[2] = {h2f(x[0][i].dmin), h2f(x[1][i].dmin)};
            q4k_superblock<NP, F>(q, sc, mn, xd, xm, A, acc[0][0], acc_m[0][0]);
        } else {   // the lone last weight row (NR == 1): intrinsics
            for (int r = 0; r < NR; ++r) {
                for (int p = 0; p < NP; ++p) sum[r][p] = _mm512_setzero_si512();
                lone_row_nibbles(A, x[r][i].qs, sc[r], [](int) { return _mm512_setzero_si512(); }, sum[r]);
                chain_step(A, h2f(x[r][i].d), sum[r], acc[r]);
            }
            for (int r = 0; r < NR; ++r) {
                const __m512 xdmin = _mm512_set1_ps(h2f(x[r][i].dmin));
                const __m512i mn4 = _mm512_maskz_broadcast_i32x4(0xffff, mn[r]);
                for (int q = 0; q < NQ; ++q) {
                    const __m512 dmin = _mm512_mul_ps(_mm512_castsi512_ps(AQ[2 * q + 1].v), xdmin);   // -d_y * dmin_w
                    const __m512i prod = _mm512_madd_epi16(mn4, AQ[2 * q].v);
                    _mm512_store_ps(acc_m[r][q], _mm512_fmadd_ps(dmin, _mm512_cvtepi32_ps(prod), _mm512_load_ps(acc_m[r][q])));
                }
            }
        }
    }
    store_chains<NR, NP>(acc, ny_valid, out, os, [&](int r, int t) { return hsum_f32x4(_mm_load_ps(&acc_m[r][t / 4][4 * (t % 4)])); });
}

// Q5_K as q5_K_rows computes it, in the Q4_K tile's layout: the same integer lanes with the
// fifth bits (the asm statement, or the intrinsics for a lone last weight row), and the same float
// chains; the min terms, which q5_K_rows keeps in a scalar chain per activation row (summs +=
// (-d_y * dmin_w) * float(mins . bsum pair sums), a multiply and an add), as one 16-lane vector
// a weight row, lane t doing activation row t's scalar operations. The integer dot of the mins
// with the bsum pair sums is exact however it is summed: four vpdpwssd against the pack's
// transposed pair sums.
template <int NR, int NP, Form F>
void tile(int64_t nb, const block_q5_K* const* x, const ActPack& a, int ny_valid, float* const* out, size_t os) {
    alignas(64) float acc[NR][8][16];   // in memory, eight pairs' room a row, as in the Q4_K tile
    __m512 summs[NR];
    for (int r = 0; r < NR; ++r) {
        for (int p = 0; p < NP; ++p) _mm512_store_ps(acc[r][p], _mm512_setzero_ps());
        summs[r] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < nb; ++i) {
        const Vec* A = a.sb(i);
        __m512i sc[NR];
        __m128i mn[NR];
        for (int r = 0; r < NR; ++r) {
            const K4ScalesMins k = k4_unpack(x[r][i].scales);
            sc[r] = _mm512_maskz_broadcast_i32x4(0xffff, _mm256_castsi256_si128(k.sc));
            mn[r] = k.mn16;
        }
        if constexpr (NR == 2) {   // two rows: the assembly statement
            const uint8_t* const q[2] = {x[0][i].qs, x[1][i].qs};
            const uint8_t* const h[2] = {x[0][i].qh, x[1][i].qh};
            const float xd[2] = {h2f(x[0][i].d), h2f(x[1][i].d)};
            q5k_superblock<NP, F>(q, h, sc, xd, A, acc[0][0]);
        } else {   // the lone last weight row: Q4_K's intrinsics with the fifth bits
            for (int r = 0; r < NR; ++r) {
                __m512i sum[NP];
                for (int p = 0; p < NP; ++p) sum[p] = _mm512_setzero_si512();
                const __m512i qh = _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qh)));
                lone_row_nibbles(A, x[r][i].qs, sc[r], [&](int k) {   // bit k of qh as 16
                    const __m512i bit = _mm512_and_si512(qh, _mm512_set1_epi8(char(1 << k)));
                    return k < 4 ? _mm512_slli_epi16(bit, unsigned(4 - k)) : _mm512_srli_epi16(bit, unsigned(k - 4));
                }, sum);
                chain_step(A, h2f(x[r][i].d), sum, acc[r]);
            }
        }
        const Vec* B = a.after_quads(i);
        for (int r = 0; r < NR; ++r) {
            __m512i isum = _mm512_dpwssd_epi32(_mm512_setzero_si512(), B[0].v, _mm512_set1_epi32(_mm_extract_epi32(mn[r], 0)));
            isum = _mm512_dpwssd_epi32(isum, B[1].v, _mm512_set1_epi32(_mm_extract_epi32(mn[r], 1)));
            isum = _mm512_dpwssd_epi32(isum, B[2].v, _mm512_set1_epi32(_mm_extract_epi32(mn[r], 2)));
            isum = _mm512_dpwssd_epi32(isum, B[3].v, _mm512_set1_epi32(_mm_extract_epi32(mn[r], 3)));
            const __m512 dmin = _mm512_mul_ps(_mm512_castsi512_ps(B[4].v), _mm512_set1_ps(h2f(x[r][i].dmin)));   // -d_y * dmin_w
            summs[r] = _mm512_add_ps(summs[r], _mm512_mul_ps(dmin, _mm512_cvtepi32_ps(isum)));
        }
    }
    alignas(64) float sm[NR][16];
    for (int r = 0; r < NR; ++r) _mm512_store_ps(sm[r], summs[r]);
    store_chains<NR, NP>(acc, ny_valid, out, os, [&](int r, int t) { return sm[r][t]; });
}

// Q2_K as ggml's AVX2 kernel computes it, in the Q4_K tile's layout: per super-block first the min
// terms (the 16 mins against the 16 bsums, madd lane-wise, times -d_y * dmin_w: ggml's (-d_y) *
// dmin_w, the same bits) into each pair's chains, then the scaled products (the asm statement, or
// intrinsics for a lone last weight row) times d_y * d_w into the same chains.
template <int NR, int NP, Form F>
void tile(int64_t nb, const block_q2_K* const* x, const ActPack& a, int ny_valid, float* const* out, size_t os) {
    const __m128i m4 = _mm_set1_epi8(0x0f);
    alignas(64) float acc[NR][8][16];   // in memory, eight pairs' room a row, as in the Q4_K tile
    for (int r = 0; r < NR; ++r)
        for (int p = 0; p < NP; ++p) _mm512_store_ps(acc[r][p], _mm512_setzero_ps());
    for (int64_t i = 0; i < nb; ++i) {
        const Vec* A = a.sb(i);
        __m512i sc[NR];
        for (int r = 0; r < NR; ++r) {
            const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][i].scales));
            sc[r] = _mm512_maskz_broadcast_i64x4(0xff, _mm256_cvtepu8_epi16(_mm_and_si128(sc8, m4)));
            const __m512i mins = _mm512_maskz_broadcast_i64x4(0xff, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc8, 4), m4)));
            const __m512 ndmin = _mm512_set1_ps(-h2f(x[r][i].dmin));
            for (int p = 0; p < NP; ++p) {
                const __m512i prod = _mm512_madd_epi16(mins, A[p * kPerPair + 9].v);   // both rows' bsums
                const __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(A[p * kPerPair + 8].v), ndmin);
                _mm512_store_ps(acc[r][p], _mm512_fmadd_ps(d, _mm512_cvtepi32_ps(prod), _mm512_load_ps(acc[r][p])));
            }
        }
        if constexpr (NR == 2) {   // two rows: the assembly statement
            const uint8_t* const q[2] = {x[0][i].qs, x[1][i].qs};
            const float xd[2] = {h2f(x[0][i].d), h2f(x[1][i].d)};
            q2k_superblock<NP, F>(q, sc, xd, A, acc[0][0]);
        } else {   // the lone last weight row: piece k is field k % 4 of qs[32 (k / 4) + b]
            for (int r = 0; r < NR; ++r) {
                __m512i sum[NP];
                for (int p = 0; p < NP; ++p) sum[p] = _mm512_setzero_si512();
                lone_row_pieces(A, sc[r], [&](int k) {
                    const __m512i q = _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qs + 32 * (k / 4))));
                    return _mm512_and_si512(_mm512_srli_epi16(q, unsigned(2 * (k % 4))), _mm512_set1_epi8(3));
                }, sum);
                chain_step(A, h2f(x[r][i].d), sum, acc[r]);
            }
        }
    }
    store_chains<NR, NP>(acc, ny_valid, out, os);
}

// Q3_K as ggml's AVX2 kernel computes it (one chain of d_y * d_w times the lanes), in the Q4_K
// tile's layout, with its levels kept unsigned: u = q + 4 (two bits | the hmask bit as 4), the
// scaled products of u as every K-quant tile forms them, and each lane's offset, the scales
// times -4 x its four activation bytes (from the pack, two pieces to a dword), added by vpdpwssd
// against the scale pairs. The integers are ggml's (exact), so the bits are.
template <int NR, int NP, Form F>
void tile(int64_t nb, const block_q3_K* const* x, const ActPack& a, int ny_valid, float* const* out, size_t os) {
    alignas(64) float acc[NR][8][16];   // in memory, eight pairs' room a row, as in the Q4_K tile
    for (int r = 0; r < NR; ++r)
        for (int p = 0; p < NP; ++p) _mm512_store_ps(acc[r][p], _mm512_setzero_ps());
    for (int64_t i = 0; i < nb; ++i) {
        const Vec* A = a.sb(i);
        const Vec* C = a.after_quads(i);   // the offsets, kQ3PerPair a pair
        __m512i sc[NR];
        for (int r = 0; r < NR; ++r) {
            // The 16 scales less 32 as words in both halves.
            sc[r] = _mm512_maskz_broadcast_i64x4(0xff, _mm256_cvtepi8_epi16(q3_K_scales(x[r][i].scales)));
        }
        if constexpr (NR == 2) {   // two rows: the assembly statement
            assert(a.pairs == NP && a.extra == kQ3PerPair * NP);   // it finds the offsets after exactly NP pairs
            const uint8_t* const q[2] = {x[0][i].qs, x[1][i].qs};
            const uint8_t* const hm[2] = {x[0][i].hmask, x[1][i].hmask};
            const float xd[2] = {h2f(x[0][i].d), h2f(x[1][i].d)};
            q3k_superblock<NP, F>(q, hm, sc, xd, A, acc[0][0]);
        } else {   // the lone last weight row: piece k is field k % 4 of qs[32 (k / 4) + b], hmask bit k
            for (int r = 0; r < NR; ++r) {
                __m512i sum[NP];
                for (int p = 0; p < NP; ++p) sum[p] = _mm512_setzero_si512();
                const __m512i hm = _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].hmask)));
                lone_row_pieces(A, sc[r], [&](int k) {
                    const __m512i q = _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qs + 32 * (k / 4))));
                    const __m512i two = _mm512_and_si512(_mm512_srli_epi16(q, unsigned(2 * (k % 4))), _mm512_set1_epi8(3));
                    const __m512i bit = _mm512_and_si512(hm, _mm512_set1_epi8(char(1 << k)));
                    return _mm512_or_si512(two, k < 2 ? _mm512_slli_epi16(bit, unsigned(2 - k)) : _mm512_srli_epi16(bit, unsigned(k - 2)));
                }, sum);
                for (int j = 0; j < 4; ++j) {   // the offsets
                    const __m512i pair = _mm512_permutexvar_epi16(_mm512_load_si512(kQ6ScalePairs.pairs[j]), sc[r]);
                    for (int p = 0; p < NP; ++p) sum[p] = _mm512_dpwssd_epi32(sum[p], C[kQ3PerPair * p + j].v, pair);
                }
                chain_step(A, h2f(x[r][i].d), sum, acc[r]);
            }
        }
    }
    store_chains<NR, NP>(acc, ny_valid, out, os);
}

// q6_K_tile<NR, 2 NP> in the same layout: the 6-bit levels (stored + 32) of piece k of a row in
// both halves, bytes 0..15 with scale 8 (k / 4) + 2 (k % 4), 16..31 with the next one.
template <int NR, int NP, Form F>
void tile(int64_t nb, const block_q6_K* const* x, const ActPack& a, int ny_valid, float* const* out, size_t os) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    alignas(64) float acc[NR][8][16];   // in memory, eight pairs' room a row, as in the Q4_K tile
    for (int r = 0; r < NR; ++r)
        for (int p = 0; p < NP; ++p) _mm512_store_ps(acc[r][p], _mm512_setzero_ps());
    for (int64_t i = 0; i < nb; ++i) {
        const Vec* A = a.sb(i);
        __m512i sc[NR], sum[NR][NP];
        for (int r = 0; r < NR; ++r)
            sc[r] = _mm512_maskz_broadcast_i64x4(0xff, _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[r][i].scales))));
        if constexpr (NR == 2) {   // two rows: the same steps in assembly
            const uint8_t* const ql[2] = {x[0][i].ql, x[1][i].ql};
            const uint8_t* const qh[2] = {x[0][i].qh, x[1][i].qh};
            const float xd[2] = {h2f(x[0][i].d), h2f(x[1][i].d)};
            q6k_superblock<NP, F>(ql, qh, sc, xd, A, acc[0][0]);
        } else {   // the lone last weight row (NR == 1): intrinsics
            for (int r = 0; r < NR; ++r)
                for (int p = 0; p < NP; ++p) sum[r][p] = _mm512_setzero_si512();
            for (int k = 0; k < 2; ++k) {
                __m512i sck[NR], H[NR];
                for (int r = 0; r < NR; ++r) {
                    // Scales 8k..8k+7 in every 128-bit lane (q6_K_tile's permute2x128, four times).
                    sck[r] = k ? _mm512_shuffle_i64x2(sc[r], sc[r], 0x55) : _mm512_shuffle_i64x2(sc[r], sc[r], 0x00);
                    H[r] = _mm512_maskz_broadcast_i64x4(0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].qh + 32 * k)));
                }
                for (int quarter = 0; quarter < 4; ++quarter) {
                    __m512i q[NR], s[NR];
                    for (int r = 0; r < NR; ++r) {
                        const __m512i L = _mm512_maskz_broadcast_i64x4(
                            0xff, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[r][i].ql + 64 * k + 32 * (quarter & 1))));
                        const __m512i lq = _mm512_and_si512(quarter < 2 ? L : _mm512_srli_epi16(L, 4), m4);
                        const __m512i hb = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(H[r], 2 * quarter), m2), 4);
                        q[r] = _mm512_or_si512(lq, hb);
                        const __m512i sa = _mm512_shuffle_epi8(sck[r], _mm512_set1_epi16(int16_t((4 * quarter) | ((4 * quarter + 1) << 8))));
                        const __m512i sb = _mm512_shuffle_epi8(sck[r], _mm512_set1_epi16(int16_t((4 * quarter + 2) | ((4 * quarter + 3) << 8))));
                        s[r] = _mm512_mask_blend_epi32(0xf0f0, sa, sb);
                    }
                    for (int p = 0; p < NP; ++p) {
                        const __m512i yq = A[p * kPerPair + 4 * k + quarter].v;
                        for (int r = 0; r < NR; ++r) sum[r][p] = _mm512_dpwssd_epi32(sum[r][p], _mm512_maddubs_epi16(q[r], yq), s[r]);
                    }
                }
            }
            for (int r = 0; r < NR; ++r) {
                const __m512 xd = _mm512_set1_ps(h2f(x[r][i].d));
                for (int p = 0; p < NP; ++p) {
                    // Lane-wise 32 * sum(y) * scale for both rows, the offset of the stored levels.
                    const __m512i corr = _mm512_slli_epi32(_mm512_madd_epi16(A[p * kPerPair + 9].v, sc[r]), 5);
                    const __m512 d = _mm512_mul_ps(_mm512_castsi512_ps(A[p * kPerPair + 8].v), xd);   // d_y * d_w
                    const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(sum[r][p], corr));
                    _mm512_store_ps(acc[r][p], _mm512_fmadd_ps(d, f, _mm512_load_ps(acc[r][p])));
                }
            }
        }
    }
    store_chains<NR, NP>(acc, ny_valid, out, os);
}

// Every weight row against one packed block, two rows per tile (tile() of the row's block type).
template <class Block, int NP, Form F>
void rows(int64_t nb, const uint8_t* xb, size_t xs, int nx, const ActPack& a, int ny, float* out, size_t os) {
    auto at = [&](int r) { return reinterpret_cast<const Block*>(xb + size_t(r) * xs); };
    int r = 0;
    for (; r + 2 <= nx; r += 2) {
        const Block* x[2] = {at(r), at(r + 1)};
        float* o[2] = {out + r, out + r + 1};
        tile<2, NP, F>(nb, x, a, ny, o, os);
    }
    if (r < nx) {
        const Block* x[1] = {at(r)};
        float* o[1] = {out + r};
        tile<1, NP, F>(nb, x, a, ny, o, os);
    }
}

// The whole product in blocks of kMaxActs activation rows: blocks of kMinActs or more rows are
// packed and tiled, fewer rows go to the type's 1 x 3 (or fewer) kernel (multi), and so does a
// block's one row past a multiple of four (5, 9, 13 rows): padded to the next four, the tile
// would compute three rows for nothing (5 rows: 4.34 ns per 256 weights and row against multi's
// 4.19; 4 tiled + 1 by multi: about 3.8).
//
// Cache blocking: up to kGroupBlocks blocks are packed at once, and the weight rows go past them
// in chunks of about kChunkBytes, each chunk against every block of the group while it sits in
// L2. Block by block over all rows (as before), a prefill product streamed its weights from
// memory once per 16 activation rows, and the tiles ran 20 % slower on weights from memory than
// from cache (Zen 4, Q4_K 16384 x 7168 x 16: 3.0-3.4 ns per 256 weights and row, 2.56 at 512
// rows). The outputs are the same bits: each is still one tile's sum over all super-blocks.
constexpr int kGroupBlocks = 4;                 // 64 activation rows, 0.6 MiB of packs at K = 7168
constexpr size_t kChunkBytes = size_t(256) << 10;   // with one pack (158 KiB at K = 7168) in a 1 MiB L2
constexpr int kChunkRowsMax = 256;   // at small K: the chunk's staged outputs (below) stay small

template <class Block>
void tiled(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny, float* out, size_t os,
           VecDotMultiFn multi) {
    const int64_t nb = n / QK_K;
    const auto* xb = static_cast<const uint8_t*>(x);
    const auto* yb = static_cast<const uint8_t*>(y);
    thread_local ActPack packs[kGroupBlocks];
    // Weight rows r0 .. r0 + rn - 1 x m < 4 activation rows by multi (same bits), into ot[t * ostride + r - r0].
    auto by_multi = [&](int r0, int rn, const uint8_t* yt, int m, float* ot, size_t ostride) {
        for (int r = 0; r < rn; ++r) {
            float o[kMinActs];
            multi(n, xb + size_t(r0 + r) * xs, yt, ys, m, o);
            for (int t = 0; t < m; ++t) ot[size_t(t) * ostride + size_t(r)] = o[t];
        }
    };
    // A block of the group: its first activation row, the rows the tile takes (0: all by multi),
    // and whether one more row goes to multi after them.
    struct Blk {
        int t0, m, tiled;
        bool lone;
    };
    // Rows a chunk, even so that only the product's last row takes the one-row tile.
    const int chunk = std::min(kChunkRowsMax, std::max(2, int(kChunkBytes / xs) & ~1));
    // A chunk's outputs are staged (staged[t * ss + r - r0]) and copied to out when the chunk is
    // done. Written straight to out, a tile's 16 activation rows land os floats apart, and os is
    // the weight's row count: a multiple of 1024 in every real model (7168, 3072, 2048 ...), so
    // the 16 lines fall in one set of the 8-way L1 and evict each other before the next row pair
    // writes beside them. Kernel lab, Q4_K x 64 activation rows, 2048 rows against 2000 (the same
    // work, another stride): 6.23 against 4.52 ns per 256 weights and row at K = 256, 2.88 against
    // 2.71 at K = 2304. The staging stride is the chunk rounded up plus 16 floats, never a
    // multiple of 1024 bytes.
    size_t ss = (size_t(chunk) + 15) / 16 * 16 + 16;
    if (ss % 256 == 0) ss += 16;
    thread_local std::vector<float> staged;
    staged.resize(ss * size_t(kGroupBlocks * kMaxActs));
    // The tiles of a block's padded row count in form F.
    auto by_size = [&]<Form F>(int padded, const uint8_t* xc, int rn, const ActPack& a, int ny_t, float* st) {
        if (padded == 4) rows<Block, 2, F>(nb, xc, xs, rn, a, ny_t, st, ss);
        else if (padded == 8) rows<Block, 4, F>(nb, xc, xs, rn, a, ny_t, st, ss);
        else if (padded == 12) rows<Block, 6, F>(nb, xc, xs, rn, a, ny_t, st, ss);
        else rows<Block, 8, F>(nb, xc, xs, rn, a, ny_t, st, ss);
    };
    // The form measured for this machine (quant::k_tile_form): the same bits either way.
    const Form form = k_tile_form() == KTileForm::maddubs ? Form::maddubs : Form::dpbusd;
    for (int g0 = 0; g0 < ny; g0 += kGroupBlocks * kMaxActs) {
        const int g_rows = std::min(ny - g0, kGroupBlocks * kMaxActs);
        Blk blk[kGroupBlocks];
        int nblk = 0;
        for (int t0 = g0; t0 < ny && nblk < kGroupBlocks; t0 += kMaxActs) {
            Blk& b = blk[nblk];
            b.t0 = t0;
            b.m = std::min(kMaxActs, ny - t0);
            b.tiled = b.m < kMinActs ? 0 : b.m - (b.m % 4 == 1);
            b.lone = b.tiled && b.tiled < b.m;
            // Whole quads for Q4_K's min terms.
            if (b.tiled)
                pack_acts(yb + size_t(t0) * ys, ys, b.tiled, (b.tiled + 3) / 4 * 4, nb, packs[nblk],
                          std::is_same_v<Block, block_q5_K>   ? PackExtra::q5
                          : std::is_same_v<Block, block_q3_K> ? PackExtra::q3
                                                               : PackExtra::none);
            ++nblk;
        }
        for (int r0 = 0; r0 < nx; r0 += chunk) {
            const int rn = std::min(chunk, nx - r0);
            const uint8_t* xc = xb + size_t(r0) * xs;
            for (int k = 0; k < nblk; ++k) {
                const Blk& b = blk[k];
                const uint8_t* yt = yb + size_t(b.t0) * ys;
                float* st = staged.data() + size_t(b.t0 - g0) * ss;
                if (!b.tiled) {
                    by_multi(r0, rn, yt, b.m, st, ss);
                    continue;
                }
                if (b.lone) by_multi(r0, rn, yt + size_t(b.tiled) * ys, 1, st + size_t(b.tiled) * ss, ss);
                const int padded = (b.tiled + 3) / 4 * 4;
                if (form == Form::maddubs) by_size.template operator()<Form::maddubs>(padded, xc, rn, packs[k], b.tiled, st);
                else by_size.template operator()<Form::dpbusd>(padded, xc, rn, packs[k], b.tiled, st);
            }
            for (int t = 0; t < g_rows; ++t)
                std::memcpy(out + size_t(g0 + t) * os + size_t(r0), staged.data() + size_t(t) * ss, size_t(rn) * sizeof(float));
        }
    }
}

// ns per 256 weights and activation row of form F on one 2 x 16 tile of nb super-blocks of block
// type Block: the best of `rounds` timings of `reps` calls each.
template <class Block, Form F>
double time_tile(int64_t nb, const Block* const* x, const ActPack& a, int reps) {
    alignas(64) float o[2][16 * 2];
    float* out[2] = {o[0], o[1]};
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < reps; ++k) tile<2, 8, F>(nb, x, a, 16, out, 2);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    asm volatile("" : : "r"(o) : "memory");   // the outputs are used
    return s * 1e9 / double(reps) / double(nb * 2 * 16);
}

}  // namespace

void measure_k_tile_forms(double& dpbusd_ns, double& maddubs_ns) {
    // Two weight rows and 16 activation rows of 8 super-blocks (K = 2048) of each of the five
    // types: the packs and weights sit in L1 / L2, so the timings are the core's instruction
    // throughput, which is what the forms differ in. Any bytes are valid quants; the scales are
    // set to small normal values so that no float step meets an infinity (timing only, nothing is
    // compared).
    constexpr int64_t nb = 8;
    constexpr int kRounds = 7, kReps = 48;
    uint32_t seed = 0x9e3779b9u;
    auto fill = [&](void* p, size_t bytes) {
        auto* b = static_cast<uint8_t*>(p);
        for (size_t i = 0; i < bytes; ++i) {
            seed = seed * 1664525u + 1013904223u;
            b[i] = uint8_t(seed >> 24);
        }
    };
    std::vector<block_q8_K> y(16 * nb);
    fill(y.data(), y.size() * sizeof(block_q8_K));
    for (auto& b : y) b.d = 0.01f;
    ActPack plain, q3, q5;
    const auto* yb = reinterpret_cast<const uint8_t*>(y.data());
    pack_acts(yb, nb * sizeof(block_q8_K), 16, 16, nb, plain);
    pack_acts(yb, nb * sizeof(block_q8_K), 16, 16, nb, q3, PackExtra::q3);
    pack_acts(yb, nb * sizeof(block_q8_K), 16, 16, nb, q5, PackExtra::q5);
    // Each type's best of kRounds rounds over both forms (a drifting clock slows them alike); the
    // types' times added, so the form kept is the faster over all of them.
    dpbusd_ns = maddubs_ns = 0;
    auto time_type = [&]<class Block>(const ActPack& a) {
        std::vector<Block> w(2 * nb);
        fill(w.data(), w.size() * sizeof(Block));
        for (Block& b : w) {
            b.d = 0x2c00;   // 1/16 as fp16
            if constexpr (requires { b.dmin; }) b.dmin = 0x2c00;
        }
        const Block* r[2] = {w.data(), w.data() + nb};
        double best[2] = {1e30, 1e30};
        for (int round = 0; round < kRounds; ++round) {
            best[0] = std::min(best[0], time_tile<Block, Form::dpbusd>(nb, r, a, kReps));
            best[1] = std::min(best[1], time_tile<Block, Form::maddubs>(nb, r, a, kReps));
        }
        dpbusd_ns += best[0];
        maddubs_ns += best[1];
    };
    time_type.template operator()<block_q2_K>(plain);
    time_type.template operator()<block_q3_K>(q3);
    time_type.template operator()<block_q4_K>(plain);
    time_type.template operator()<block_q5_K>(q5);
    time_type.template operator()<block_q6_K>(plain);
}

// The exported tiles: each type's tiled(), its vec_dot_multi for blocks of fewer than four rows.
#define KINFER_K_TILE(t)                                                                                          \
    void vec_dot_tile_##t##_q8_K(int64_t n, const void* x, size_t xs, int nx, const void* y, size_t ys, int ny,   \
                                 float* out, size_t os) {                                                         \
        tiled<block_##t>(n, x, xs, nx, y, ys, ny, out, os, vec_dot_multi_##t##_q8_K);                              \
    }
KINFER_K_TILE(q2_K)
KINFER_K_TILE(q3_K)
KINFER_K_TILE(q4_K)
KINFER_K_TILE(q5_K)
KINFER_K_TILE(q6_K)
#undef KINFER_K_TILE

}  // namespace kinfer::quant::avx512
