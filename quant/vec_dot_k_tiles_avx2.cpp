// Q4_K x Q8_K prefill tile for AVX2: one weight row x up to NT activation rows per pass, with the
// activations repacked once per call so that a 64-weight chunk costs one multiply-add pair, one
// 16-bit add and one scale multiply-add per activation row (q4_K_rows: two multiply-adds, two
// blends, a shuffle and the scale multiply-add).
//
// Bit equality. ggml's AVX2 kernel forms per super-block eight exact int32 lanes, lane m of
// 128-bit half h holding, over the four 32-byte chunks j, scale(2j) * (low nibbles of bytes
// 16h + 4m .. 16h + 4m + 3 times their activations) + scale(2j + 1) * (the high nibbles likewise),
// converts them to float and adds d_y * d_w times them into an 8-lane FMA chain; the min terms go
// into a 4-lane chain; both are reduced after the last super-block (q4_K_rows in
// vec_dot_simd.inc). Here the same lanes are formed another way, exact integers all along:
//   - a chunk's bytes have their 16-bit words reordered even-first within each half (w0 w2 w4 w6
//     w1 w3 w5 w7), then low and high nibbles are interleaved by 16-bit words: register A's int32
//     lane m = [lo 4m, lo 4m+1, hi 4m, hi 4m+1] and B's = [lo 4m+2, lo 4m+3, hi 4m+2, hi 4m+3];
//   - the activations are packed the same way (their bytes 64j + b pair with the low nibble of byte
//     b, 64j + 32 + b with the high one), so maddubs(A, YA) + maddubs(B, YB) holds in word 2m the
//     low nibbles' sum of lane m and in word 2m + 1 the high nibbles' (|sum| <= 4 * 15 * 128, no
//     overflow), and one madd with the scale pair [s(2j), s(2j+1)] gives ggml's lane m exactly.
// The float steps and reductions are q4_K_rows', so every output equals vec_dot_q4_K_q8_K bit for
// bit (tests/quant: vec_dot_tile).
#include <immintrin.h>

#include <cstdint>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/types.h"

namespace kinfer::quant::avx2 {

namespace {

#include "quant/vec_dot_simd_prims.inc"

constexpr int kMaxActs = 16;   // activation rows packed per pass (quant::gemm passes 16)

// One activation row's super-block, packed: the chunks' pieces YA_j, YB_j, the bsums' pair sums
// (k4_bsum_pairs) and the scale.
struct PackedSb {
    int8_t q[8][32];   // [2j] = YA_j, [2j + 1] = YB_j
    int16_t bpairs[8];
    float d;
    float pad[3];
};

// Even 16-bit words first within each 128-bit half.
__m256i even_words_first(__m256i v) {
    const __m256i idx = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    return _mm256_shuffle_epi8(v, idx);
}

void pack_row(const block_q8_K* y, int64_t nb, PackedSb* out) {
    for (int64_t i = 0; i < nb; ++i) {
        for (int j = 0; j < 4; ++j) {
            const __m256i lo = even_words_first(load32(y[i].qs + 64 * j));
            const __m256i hi = even_words_first(load32(y[i].qs + 64 * j + 32));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[i].q[2 * j]), _mm256_unpacklo_epi16(lo, hi));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[i].q[2 * j + 1]), _mm256_unpackhi_epi16(lo, hi));
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i].bpairs), k4_bsum_pairs(y[i].bsums));
        out[i].d = y[i].d;
    }
}

// One weight row x NT packed activation rows (a[t] of nb super-blocks each). The float steps are
// vector multiplies of broadcast operands (the scalar products' bits in every lane), and the min
// chains of two activation rows share a register ([row t | row t + 1], four lanes each).
template <int NT>
void row(int64_t nb, const block_q4_K* x, const PackedSb* const* a, float* out) {
    constexpr int NP = NT / 2;   // row pairs; an odd last row keeps a 4-lane chain of its own
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    __m256 acc[NT], acc_m2[NP > 0 ? NP : 1];
    __m128 acc_m1 = _mm_setzero_ps();
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
    for (int p = 0; p < NP; ++p) acc_m2[p] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; ++i) {
        const block_q4_K& b = x[i];
        const K4Bytes kb = k4_bytes(b.scales);
        const __m256i sc = kb.sc;
        const __m128i mn16 = kb.mn16;
        const __m256 xd = _mm256_set1_ps(h2f(b.d));
        // -d_y * dmin_w as d_y * -dmin_w: the same product (rounding is symmetric in sign).
        const __m256 nxdmin = _mm256_set1_ps(-h2f(b.dmin));
        for (int p = 0; p < NP; ++p) {
            const PackedSb &p0 = a[2 * p][i], &p1 = a[2 * p + 1][i];
            const __m256i bp = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1.bpairs),
                                                   reinterpret_cast<const __m128i*>(p0.bpairs));
            const __m256i prod = _mm256_madd_epi16(_mm256_set_m128i(mn16, mn16), bp);
            const __m256 dy = _mm256_set_m128(_mm_broadcast_ss(&p1.d), _mm_broadcast_ss(&p0.d));
            acc_m2[p] = _mm256_fmadd_ps(_mm256_mul_ps(dy, nxdmin), _mm256_cvtepi32_ps(prod), acc_m2[p]);
        }
        if constexpr (NT % 2 == 1) {
            const PackedSb& p = a[NT - 1][i];
            const __m128i prod = _mm_madd_epi16(mn16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.bpairs)));
            acc_m1 = _mm_fmadd_ps(_mm_mul_ps(_mm_broadcast_ss(&p.d), _mm256_castps256_ps128(nxdmin)),
                                  _mm_cvtepi32_ps(prod), acc_m1);
        }
        __m256i sumi[NT];
        for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            const __m256i q = even_words_first(load32(b.qs + 32 * j));
            const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            const __m256i wa = _mm256_unpacklo_epi16(lo, hi), wb = _mm256_unpackhi_epi16(lo, hi);
            const __m256i s = k4_scale_pair(sc, 2 * j);
            for (int t = 0; t < NT; ++t) {
                const __m256i pa = _mm256_maddubs_epi16(wa, load32(a[t][i].q[2 * j]));
                const __m256i pb = _mm256_maddubs_epi16(wb, load32(a[t][i].q[2 * j + 1]));
                sumi[t] = _mm256_add_epi32(sumi[t], _mm256_madd_epi16(_mm256_add_epi16(pa, pb), s));
            }
        }
        for (int t = 0; t < NT; ++t)
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&a[t][i].d), xd), _mm256_cvtepi32_ps(sumi[t]), acc[t]);
    }
    for (int t = 0; t < NT; ++t) {
        const __m128 m = t == NT - 1 && NT % 2 == 1 ? acc_m1
                         : t % 2 == 0 ? _mm256_castps256_ps128(acc_m2[t / 2]) : _mm256_extractf128_ps(acc_m2[t / 2], 1);
        out[t] = hsum_f32(acc[t]) + hsum_f32x4(m);
    }
}

}  // namespace

void vec_dot_tile_q4_K_q8_K(int64_t n, const void* vx, size_t xs, int nx, const void* vy, size_t ys, int ny, float* out,
                            size_t os) {
    const int64_t nb = n / QK_K;
    thread_local std::vector<PackedSb> pack;   // per thread: the matmul threads call this at once
    const auto* xb = static_cast<const uint8_t*>(vx);
    const auto* yb = static_cast<const uint8_t*>(vy);
    for (int a0 = 0; a0 < ny; a0 += kMaxActs) {
        const int na = ny - a0 < kMaxActs ? ny - a0 : kMaxActs;
        pack.resize(size_t(nb) * size_t(na));
        const PackedSb* rows[kMaxActs];
        for (int t = 0; t < na; ++t) {
            PackedSb* p = pack.data() + size_t(t) * size_t(nb);
            pack_row(reinterpret_cast<const block_q8_K*>(yb + size_t(a0 + t) * ys), nb, p);
            rows[t] = p;
        }
        for (int r = 0; r < nx; ++r) {
            const auto* x = reinterpret_cast<const block_q4_K*>(xb + size_t(r) * xs);
            // The weight row stays in L1 for its four passes. (Passes outer, weight rows inner
            // streams the weights four times and keeps the 4-row activation panel nearer: k3-wide
            // Q4_K_M pp256 was 4 % slower that way on Zen 3.)
            for (int t0 = 0; t0 < na; t0 += 4) {
                float o[4];
                const int k = na - t0 < 4 ? na - t0 : 4;
                if (k == 4) row<4>(nb, x, rows + t0, o);
                else if (k == 3) row<3>(nb, x, rows + t0, o);
                else if (k == 2) row<2>(nb, x, rows + t0, o);
                else row<1>(nb, x, rows + t0, o);
                for (int q = 0; q < k; ++q) out[size_t(a0 + t0 + q) * os + size_t(r)] = o[q];
            }
        }
    }
}

}  // namespace kinfer::quant::avx2
