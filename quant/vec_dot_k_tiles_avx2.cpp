// Q4_K and Q6_K x Q8_K prefill tiles for AVX2. The activations are repacked once per call so that
// a 64-weight chunk costs one multiply-add pair, one 16-bit add and one scale multiply-add per
// activation row; each weight super-block is prepared once for every activation row of the call;
// and the loops are blocked so that the activations stay in L1 (see rows_blocked).
//
// Bit equality. ggml's AVX2 kernels form per super-block eight exact int32 lanes and add
// d_y * d_w times them, converted to float, into an 8-lane FMA chain that is reduced after the
// last super-block (Q4_K's min terms go into a 4-lane chain of their own). For Q4_K lane m of
// 128-bit half h holds, over the four 32-byte chunks j, scale(2j) * (low nibbles of bytes
// 16h + 4m .. 16h + 4m + 3 times their activations) + scale(2j + 1) * (the high nibbles
// likewise) (q4_K_rows in vec_dot_simd.inc); Q6_K's lanes are the same sums over its eight
// 32-weight quarters, bytes 0..15 of a quarter with one 16-weight scale and 16..31 with the next,
// less 32 * scale * sum(y) lane-wise (q6_K_tile). Here the same lanes are formed another way,
// exact integers all along:
//   - two 32-weight pieces (Q4_K: a chunk's low and high nibbles; Q6_K: quarters 2jj and 2jj + 1
//     of a half, the pieces that multiply activations 64j .. 64j + 31 and 64j + 32 .. 64j + 63)
//     have their 16-bit words reordered even-first within each half (w0 w2 w4 w6 w1 w3 w5 w7) and
//     are interleaved by 16-bit words: register A's int32 lane m = [a 4m, a 4m+1, b 4m, b 4m+1]
//     and B's = [a 4m+2, a 4m+3, b 4m+2, b 4m+3];
//   - the activations are packed the same way, so maddubs(A, YA) + maddubs(B, YB) holds in word
//     2m piece a's sum of lane m and in word 2m + 1 piece b's (|sum| <= 4 * 63 * 128, no
//     overflow), and one madd with the scale pair [s_a, s_b] of each half gives ggml's lane m.
// The float steps and reductions are those of the one-row kernels, so every output equals
// vec_dot_q4_K_q8_K / vec_dot_q6_K_q8_K bit for bit (tests/quant: vec_dot_tile).
#include <immintrin.h>

#include <bit>

#include <cstdint>
#include <vector>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/types.h"

namespace kinfer::quant::avx2 {

namespace {

#include "quant/vec_dot_simd_prims.inc"

constexpr int kMaxActs = 16;   // activation rows packed per pass (tile() takes a call's rows 16 at a time)

// One activation row's super-block, packed: the chunks' pieces YA_j, YB_j, the scale, and what
// the weight format's offset terms need: Q4_K the bsums' pair sums (k4_bsum_pairs), Q6_K the bsums.
struct PackedQ4K {
    int8_t q[8][32];   // [2j] = YA_j, [2j + 1] = YB_j
    int16_t bpairs[8];
    float d;
    float pad[3];
};
struct PackedQ6K {
    int8_t q[8][32];
    int16_t bsums[16];
    float d;
    float pad[7];
};

// Even 16-bit words first within each 128-bit half.
__m256i even_words_first(__m256i v) {
    const __m256i idx = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                         0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
    return _mm256_shuffle_epi8(v, idx);
}

// Registers A and B of two reordered pieces (the header's layout).
struct PiecePair {
    __m256i a, b;
};
PiecePair interleave(__m256i pa, __m256i pb) {
    const __m256i x = even_words_first(pa), y = even_words_first(pb);
    return {_mm256_unpacklo_epi16(x, y), _mm256_unpackhi_epi16(x, y)};
}

void pack_q(const block_q8_K& y, int8_t (*q)[32]) {
    for (int j = 0; j < 4; ++j) {
        const PiecePair p = interleave(load32(y.qs + 64 * j), load32(y.qs + 64 * j + 32));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q[2 * j]), p.a);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q[2 * j + 1]), p.b);
    }
}
void pack_row(const block_q8_K* y, int64_t nb, PackedQ4K* out) {
    for (int64_t i = 0; i < nb; ++i) {
        pack_q(y[i], out[i].q);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out[i].bpairs), k4_bsum_pairs(y[i].bsums));
        out[i].d = y[i].d;
    }
}
void pack_row(const block_q8_K* y, int64_t nb, PackedQ6K* out) {
    for (int64_t i = 0; i < nb; ++i) {
        pack_q(y[i], out[i].q);
        __builtin_memcpy(out[i].bsums, y[i].bsums, sizeof out[i].bsums);
        out[i].d = y[i].d;
    }
}

// Sum over the four piece pairs: lane m of ggml's int32 lanes (before any offset term).
inline __m256i pair_sums(const __m256i* w, const __m256i* sp, const int8_t (*q)[32]) {
    __m256i sumi = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w[0], load32(q[0])),
                                                      _mm256_maddubs_epi16(w[1], load32(q[1]))), sp[0]);
    for (int j = 1; j < 4; ++j)
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w[2 * j], load32(q[2 * j])),
                                                                          _mm256_maddubs_epi16(w[2 * j + 1], load32(q[2 * j + 1]))),
                                                         sp[j]));
    return sumi;
}

// One weight super-block against na packed activation rows; acc (and acc_m) hold each activation
// row's float chains, touched once per super-block in the one-row kernel's order.
struct Q4KStep {
    using Block = block_q4_K;
    using Packed = PackedQ4K;
    static constexpr bool kMinChain = true;
    static constexpr int kBlockedFrom = 12;   // fewer activation rows take few_rows (below)
    static void run(const block_q4_K& b, const PackedQ4K* const* a, int64_t i, int na, __m256* acc, __m128* acc_m) {
        const __m256i m4 = _mm256_set1_epi8(0x0f);
        const K4Bytes kb = k4_bytes(b.scales);
        const __m256 xd = _mm256_set1_ps(h2f(b.d));
        // -d_y * dmin_w as d_y * -dmin_w: the same product (rounding is symmetric in sign).
        const __m128 nxdmin = _mm_set1_ps(-h2f(b.dmin));
        __m256i w[8], sp[4];
        for (int j = 0; j < 4; ++j) {
            const __m256i q = load32(b.qs + 32 * j);
            const PiecePair p = interleave(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            w[2 * j] = p.a;
            w[2 * j + 1] = p.b;
            sp[j] = k4_scale_pair(kb.sc, 2 * j);
        }
        for (int t = 0; t < na; ++t) {
            const PackedQ4K& p = a[t][i];
            const __m256i sumi = pair_sums(w, sp, p.q);
            acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_broadcast_ss(&p.d), xd), _mm256_cvtepi32_ps(sumi), acc[t]);
        }
        // The min chains two activation rows at a time: acc_m[t], acc_m[t + 1] are adjacent, and
        // every lane takes the same operations as alone.
        const __m256i mn2 = _mm256_set_m128i(kb.mn16, kb.mn16);
        const __m256 nxdmin2 = _mm256_set_m128(nxdmin, nxdmin);
        int t = 0;
        for (; t + 1 < na; t += 2) {
            const PackedQ4K &p0 = a[t][i], &p1 = a[t + 1][i];
            const __m256i bp = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1.bpairs),
                                                   reinterpret_cast<const __m128i*>(p0.bpairs));
            const __m256 dy = _mm256_set_m128(_mm_broadcast_ss(&p1.d), _mm_broadcast_ss(&p0.d));
            float* m = reinterpret_cast<float*>(acc_m + t);
            _mm256_storeu_ps(m, _mm256_fmadd_ps(_mm256_mul_ps(dy, nxdmin2), _mm256_cvtepi32_ps(_mm256_madd_epi16(mn2, bp)),
                                                _mm256_loadu_ps(m)));
        }
        if (t < na) {
            const PackedQ4K& p = a[t][i];
            const __m128i prod = _mm_madd_epi16(kb.mn16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.bpairs)));
            acc_m[t] = _mm_fmadd_ps(_mm_mul_ps(_mm_broadcast_ss(&p.d), nxdmin), _mm_cvtepi32_ps(prod), acc_m[t]);
        }
    }
};

struct Q6KStep {
    using Block = block_q6_K;
    using Packed = PackedQ6K;
    static constexpr bool kMinChain = false;
    static constexpr int kBlockedFrom = 0;   // rows_blocked at every count
    static void run(const block_q6_K& b, const PackedQ6K* const* a, int64_t i, int na, __m256* acc, __m128*) {
        const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
        const float xd = h2f(b.d);
        __m256i w[8], sp[4];
        for (int k = 0; k < 2; ++k) {
            const __m256i L0 = load32(b.ql + 64 * k), L1 = load32(b.ql + 64 * k + 32), H = load32(b.qh + 32 * k);
            // Quarter q of the half: a nibble of ql (low for quarters 0-1) and bits 2q, 2q + 1 of qh.
            auto quarter = [&](int q) {
                const __m256i L = q & 1 ? L1 : L0;
                const __m256i lq = _mm256_and_si256(q < 2 ? L : _mm256_srli_epi16(L, 4), m4);
                return _mm256_or_si256(lq, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(H, 2 * q), m2), 4));
            };
            // The half's 8 scales in both 128-bit lanes; pair jj takes words 4jj, 4jj + 2 in the low
            // lane (bytes 0..15 of quarters 2jj, 2jj + 1) and 4jj + 1, 4jj + 3 in the high one.
            const __m256i sck = k ? _mm256_permute2x128_si256(sc16, sc16, 0x11) : _mm256_permute2x128_si256(sc16, sc16, 0x00);
            for (int jj = 0; jj < 2; ++jj) {
                const PiecePair p = interleave(quarter(2 * jj), quarter(2 * jj + 1));
                w[2 * (2 * k + jj)] = p.a;
                w[2 * (2 * k + jj) + 1] = p.b;
                const char l0 = char(8 * jj), h0 = char(8 * jj + 2);
                const __m256i idx = _mm256_setr_epi8(l0, l0 + 1, l0 + 4, l0 + 5, l0, l0 + 1, l0 + 4, l0 + 5,
                                                     l0, l0 + 1, l0 + 4, l0 + 5, l0, l0 + 1, l0 + 4, l0 + 5,
                                                     h0, h0 + 1, h0 + 4, h0 + 5, h0, h0 + 1, h0 + 4, h0 + 5,
                                                     h0, h0 + 1, h0 + 4, h0 + 5, h0, h0 + 1, h0 + 4, h0 + 5);
                sp[2 * k + jj] = _mm256_shuffle_epi8(sck, idx);
            }
        }
        for (int t = 0; t < na; ++t) {
            const PackedQ6K& p = a[t][i];
            const __m256i sumi = pair_sums(w, sp, p.q);
            // Lane-wise 32 * sum(y) * scale, the offset of the stored levels (as q6_K_tile).
            const __m256i corr = _mm256_slli_epi32(_mm256_madd_epi16(load32(p.bsums), sc16), 5);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(p.d * xd), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi, corr)), acc[t]);
        }
    }
};

// Few activation rows (a routed expert's share of a prefill chunk): one weight row x NT <= 4
// packed rows with every chain in registers, the weight row reused from L1 for each group of 4.
// Below 12 rows this beats rows_blocked, whose chains live in memory (one core, 1024 x 2304: 4.7
// vs 5.6 ns at 4 rows, 4.8 vs 5.1 at 8; 4.7 vs 4.25 at 16). The float steps are vector multiplies
// of broadcast operands (the scalar products' bits in every lane), and the min chains of two
// activation rows share a register ([row t | row t + 1], four lanes each).
template <int NT>
void row(int64_t nb, const block_q4_K* x, const PackedQ4K* const* a, float* out) {
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
            const PackedQ4K &p0 = a[2 * p][i], &p1 = a[2 * p + 1][i];
            const __m256i bp = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(p1.bpairs),
                                                   reinterpret_cast<const __m128i*>(p0.bpairs));
            const __m256i prod = _mm256_madd_epi16(_mm256_set_m128i(mn16, mn16), bp);
            const __m256 dy = _mm256_set_m128(_mm_broadcast_ss(&p1.d), _mm_broadcast_ss(&p0.d));
            acc_m2[p] = _mm256_fmadd_ps(_mm256_mul_ps(dy, nxdmin), _mm256_cvtepi32_ps(prod), acc_m2[p]);
        }
        if constexpr (NT % 2 == 1) {
            const PackedQ4K& p = a[NT - 1][i];
            const __m128i prod = _mm_madd_epi16(mn16, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p.bpairs)));
            acc_m1 = _mm_fmadd_ps(_mm_mul_ps(_mm_broadcast_ss(&p.d), _mm256_castps256_ps128(nxdmin)),
                                  _mm_cvtepi32_ps(prod), acc_m1);
        }
        __m256i sumi[NT];
        for (int t = 0; t < NT; ++t) sumi[t] = _mm256_setzero_si256();
        for (int j = 0; j < 4; ++j) {
            const __m256i q = load32(b.qs + 32 * j);
            const PiecePair w = interleave(_mm256_and_si256(q, m4), _mm256_and_si256(_mm256_srli_epi16(q, 4), m4));
            const __m256i wa = w.a, wb = w.b;
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

void few_rows(int64_t nb, const uint8_t* xb, size_t xs, int nx, const PackedQ4K* const* rows, int na, float* out,
                   size_t os) {
    for (int r = 0; r < nx; ++r) {
        const auto* x = reinterpret_cast<const block_q4_K*>(xb + size_t(r) * xs);
        for (int t0 = 0; t0 < na; t0 += 4) {
            float o[4];
            const int k = na - t0 < 4 ? na - t0 : 4;
            if (k == 4) row<4>(nb, x, rows + t0, o);
            else if (k == 3) row<3>(nb, x, rows + t0, o);
            else if (k == 2) row<2>(nb, x, rows + t0, o);
            else row<1>(nb, x, rows + t0, o);
            for (int q = 0; q < k; ++q) out[size_t(t0 + q) * os + size_t(r)] = o[q];
        }
    }
}

// Weight rows in groups of kRowGroup, one super-block of each in turn: the packed activations of
// that super-block (16 rows x 288 or 320 bytes) stay in L1 while the group's rows pass over them.
// Without the blocking each weight row read every activation row from L2, about 300 bytes per
// super-block and activation row, which bound the kernel (14 cycles for each on Zen 3; one core,
// 512 x 7168 Q4_K from L3: 4.5 -> 3.8 ns per 256 weights and activation row with it). The group's
// rows are read in 144-byte steps (210 for Q6_K), more streams than the hardware prefetchers
// follow, so each step prefetches the same step of the next group's row into L2: from memory
// (8192 x 3584) 4.6 ns with the rows prefetched 4 super-blocks ahead into L1, 4.25 with this,
// 5.4 with neither.
constexpr int kRowGroup = 16;
template <class Step>
void rows_blocked(int64_t nb, const uint8_t* xb, size_t xs, int nx, const typename Step::Packed* const* a, int na,
                  float* out, size_t os) {
    using Block = typename Step::Block;
    __m256 acc[kRowGroup][kMaxActs];
    __m128 acc_m[kRowGroup][kMaxActs];
    for (int r0 = 0; r0 < nx; r0 += kRowGroup) {
        const int nr = nx - r0 < kRowGroup ? nx - r0 : kRowGroup;
        for (int r = 0; r < nr; ++r)
            for (int t = 0; t < na; ++t) {
                acc[r][t] = _mm256_setzero_ps();
                if constexpr (Step::kMinChain) acc_m[r][t] = _mm_setzero_ps();
            }
        for (int64_t i = 0; i < nb; ++i)
            for (int r = 0; r < nr; ++r) {
                const auto* x = reinterpret_cast<const Block*>(xb + size_t(r0 + r) * xs);
                if (r0 + kRowGroup + r < nx) {
                    const char* next = reinterpret_cast<const char*>(x + i) + size_t(kRowGroup) * xs;
                    for (size_t o = 0; o < sizeof(Block); o += 64) _mm_prefetch(next + o, _MM_HINT_T1);
                }
                Step::run(x[i], a, i, na, acc[r], acc_m[r]);
            }
        // Activation row by activation row, so each output line is written in one go: os is the
        // weight's row count, a multiple of 1024 in every real model, so the na lines share one set
        // of the 8-way L1, and written weight row by weight row they evicted each other between
        // every store (kernel lab, Q4_K x 64, 2048 rows against 2000: K = 2304 3.97 against 3.77 ns).
        for (int t = 0; t < na; ++t)
            for (int r = 0; r < nr; ++r)
                out[size_t(t) * os + size_t(r0 + r)] =
                    Step::kMinChain ? hsum_f32(acc[r][t]) + hsum_f32x4(acc_m[r][t]) : hsum_f32(acc[r][t]);
    }
}

template <class Step>
void tile(int64_t n, const void* vx, size_t xs, int nx, const void* vy, size_t ys, int ny, float* out, size_t os) {
    using Packed = typename Step::Packed;
    const int64_t nb = n / QK_K;
    thread_local std::vector<Packed> pack;   // per thread: the matmul threads call this at once
    const auto* xb = static_cast<const uint8_t*>(vx);
    const auto* yb = static_cast<const uint8_t*>(vy);
    for (int a0 = 0; a0 < ny; a0 += kMaxActs) {
        const int na = ny - a0 < kMaxActs ? ny - a0 : kMaxActs;
        pack.resize(size_t(nb) * size_t(na));
        const Packed* rows[kMaxActs];
        for (int t = 0; t < na; ++t) {
            Packed* p = pack.data() + size_t(t) * size_t(nb);
            pack_row(reinterpret_cast<const block_q8_K*>(yb + size_t(a0 + t) * ys), nb, p);
            rows[t] = p;
        }
        if constexpr (Step::kBlockedFrom > 0)   // Q4_K only: few_rows takes its packed rows
            if (na < Step::kBlockedFrom) {
                few_rows(nb, xb, xs, nx, rows, na, out + size_t(a0) * os, os);
                continue;
            }
        rows_blocked<Step>(nb, xb, xs, nx, rows, na, out + size_t(a0) * os, os);
    }
}

}  // namespace

void vec_dot_tile_q4_K_q8_K(int64_t n, const void* vx, size_t xs, int nx, const void* vy, size_t ys, int ny, float* out,
                            size_t os) {
    tile<Q4KStep>(n, vx, xs, nx, vy, ys, ny, out, os);
}

void vec_dot_tile_q6_K_q8_K(int64_t n, const void* vx, size_t xs, int nx, const void* vy, size_t ys, int ny, float* out,
                            size_t os) {
    tile<Q6KStep>(n, vx, xs, nx, vy, ys, ny, out, os);
}

}  // namespace kinfer::quant::avx2
