// Dot products (SIMD vs scalar reference, and vs the dequantized float dot), activation
// quantizers, fp16/bf16 conversion, the round-trip error table and the gemm helper.
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/matmul.h"
#include "quant/types.h"
#include "quant_test_util.h"

using namespace kinfer::quant;
using namespace kinfer::quant::testing;

namespace {

const Type kWeightTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1,   Type::Q5_0,
                             Type::Q5_1, Type::Q8_0, Type::Q2_K, Type::Q3_K, Type::Q4_K,   Type::Q5_K,
                             Type::Q6_K, Type::IQ4_NL, Type::IQ4_XS, Type::MXFP4};

std::vector<uint8_t> quantize(Type t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_size(traits(t), int64_t(x.size())));
    traits(t).quantize(x.data(), q.data(), int64_t(x.size()));
    return q;
}

std::vector<float> dequantize(Type t, const void* q, int64_t n) {
    std::vector<float> y(static_cast<size_t>(n));
    traits(t).to_float(q, y.data(), n);
    return y;
}

// Sum of |w_i * a_i| over the dequantized operands: the scale float rounding errors live on.
double abs_dot(Type w, const void* wq, const void* aq, int64_t n) {
    const auto wd = dequantize(w, wq, n);
    const auto ad = dequantize(traits(w).vec_dot_type, aq, n);
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += std::fabs(double(wd[size_t(i)]) * ad[size_t(i)]);
    return s;
}

// body(isa, w, kernel, single) for each ISA level this CPU runs and each weight type that
// lookup(w, isa) has a kernel for there; single is that level's one-row vec_dot, the bits to match.
template <class Lookup, class Body>
void for_each_kernel(Lookup lookup, Body body) {
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
        if (!cpu_supports(isa)) continue;
        for (Type w : kWeightTypes) {
            const auto kernel = lookup(w, isa);
            if (!kernel) continue;
            INFO(std::string(isa_name(isa)), " ", std::string(traits(w).name));
            body(isa, w, kernel, vec_dot_for(w, isa));
        }
    }
}

// The instruction forms a tile is to be run in: both for the AVX-512 K-quant tiles (the same bits
// either way, quant::k_tile_form), else the one there is.
std::vector<KTileForm> tile_forms(Type w, Isa isa) {
    if (isa == Isa::avx512 && (w == Type::Q2_K || w == Type::Q3_K || w == Type::Q4_K || w == Type::Q5_K || w == Type::Q6_K))
        return {KTileForm::dpbusd, KTileForm::maddubs};
    return {KTileForm::automatic};
}
// Puts the measured form back in force when a test that set one ends.
struct TileFormGuard {
    ~TileFormGuard() { set_k_tile_form(KTileForm::automatic); }
};

}  // namespace

TEST_CASE("vec_dot: scalar reference equals the dequantized dot product") {
    for (Type w : kWeightTypes) {
        INFO("type ", std::string(traits(w).name));
        const int64_t n = 1024;
        const auto x = random_row(n, 7), a = random_row(n, 8);
        const auto wq = quantize(w, x);
        std::vector<uint8_t> aq(act_row_size(w, n));
        quantize_acts(w, a.data(), 1, n, aq.data());
        const auto wd = dequantize(w, wq.data(), n);
        const auto ad = dequantize(traits(w).vec_dot_type, aq.data(), n);
        double exact = 0;
        for (int64_t i = 0; i < n; ++i) exact += double(wd[size_t(i)]) * ad[size_t(i)];
        const float got = traits(w).vec_dot_ref(n, wq.data(), aq.data());
        double tol = 2e-6 * abs_dot(w, wq.data(), aq.data(), n);
        if (traits(w).vec_dot_type == Type::Q8_1) {
            // Like ggml, the min term uses Q8_1's s = d * sum(q) stored as fp16 (rel. error 2^-11).
            const auto* yb = reinterpret_cast<const block_q8_1*>(aq.data());
            const auto* wb = wq.data();
            for (int64_t b = 0; b < n / 32; ++b) {
                fp16_t m;  // Q4_1 and Q5_1 both start with fp16 d, fp16 m
                std::memcpy(&m, wb + size_t(b) * traits(w).type_size + 2, 2);
                tol += std::fabs(fp16_to_fp32(m) * fp16_to_fp32(yb[b].s)) * 1e-3;
            }
        }
        CHECK(std::fabs(got - exact) <= tol);
    }
}

TEST_CASE("vec_dot: AVX2 and AVX-512 kernels equal the scalar reference within 1e-6 relative") {
    int compared = 0;
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
        if (!cpu_supports(isa)) {
            kinfer::test::skip_case(kinfer::test::SkipKind::machine, "CPU lacks " + std::string(isa_name(isa)));
            continue;
        }
        for (Type w : kWeightTypes) {
            const VecDotFn simd = vec_dot_for(w, isa);
            if (!simd) continue;  // this type uses the scalar kernel at every level
            INFO(std::string(isa_name(isa)), " ", std::string(traits(w).name));
            for (int64_t n : {int64_t(256), int64_t(512), int64_t(4096), int64_t(7168)}) {
                for (uint32_t seed = 1; seed <= 8; ++seed) {
                    const auto x = random_row(n, seed * 31 + uint32_t(n), seed % 3 == 0 ? 10.0f : 1.0f);
                    const auto a = random_row(n, seed * 77 + uint32_t(n));
                    const auto wq = quantize(w, x);
                    std::vector<uint8_t> aq(act_row_size(w, n));
                    quantize_acts(w, a.data(), 1, n, aq.data());
                    const float r = traits(w).vec_dot_ref(n, wq.data(), aq.data());
                    const float s = simd(n, wq.data(), aq.data());
                    const double scale = std::max(double(std::fabs(r)), abs_dot(w, wq.data(), aq.data(), n));
                    CHECK(std::fabs(double(s) - r) <= 1e-6 * scale);
                    ++compared;
                }
            }
        }
        // Odd lengths for the float kernel's tail handling.
        if (const VecDotFn f = vec_dot_for(Type::F32, isa)) {
            for (int64_t n : {1, 7, 15, 17, 33, 100}) {
                const auto x = random_row(n, 3), y = random_row(n, 4);
                const float r = ref::vec_dot_f32_f32(n, x.data(), y.data());
                double scale = 0;
                for (int64_t i = 0; i < n; ++i) scale += std::fabs(double(x[size_t(i)]) * y[size_t(i)]);
                CHECK(std::fabs(double(f(n, x.data(), y.data())) - r) <= 1e-6 * scale);
            }
        }
    }
    MESSAGE("SIMD vs scalar comparisons: ", compared);
}

TEST_CASE("vec_dot_multi: several activation rows give vec_dot's bits exactly") {
    int compared = 0;
    for_each_kernel(vec_dot_multi_for, [&](Isa, Type w, VecDotMultiFn multi, VecDotFn single) {
        const int64_t n = 2304;  // 9 super-blocks, 72 blocks of 32: odd block counts
        const auto x = random_row(n, 17);
        const auto wq = quantize(w, x);
        for (int ny : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16}) {   // 8 + 4 + 1, two eights (AVX-512 grids)
            const auto a = random_row(n * ny, 100 + uint32_t(ny));
            const size_t ab = act_row_size(w, n);
            std::vector<uint8_t> aq(ab * size_t(ny));
            quantize_acts(w, a.data(), ny, n, aq.data());
            std::vector<float> out(static_cast<size_t>(ny));
            multi(n, wq.data(), aq.data(), ab, ny, out.data());
            for (int t = 0; t < ny; ++t) CHECK(out[size_t(t)] == single(n, wq.data(), aq.data() + size_t(t) * ab));
            ++compared;
        }
    });
    MESSAGE("multi-row calls compared: ", compared);
}

TEST_CASE("vec_dot_rows: several weight rows give vec_dot's bits exactly, in every decode stream layout") {
    int compared = 0;
    // Each layout (quant::set_decode_streams) groups other rows together; every row must still
    // come out with the one-row kernel's bits, and every row must be written.
    for_each_kernel(vec_dot_rows_for, [&](Isa, Type w, VecDotRowsFn rows, VecDotFn single) {
        // 37 blocks of 32: an odd count, so the two-chain formats take their scalar last block.
        for (int64_t n : {int64_t(256), int64_t(768), int64_t(2304), int64_t(37 * 32)}) {
            if (n % traits(w).block_size != 0) continue;
            const auto a = random_row(n, 7);
            std::vector<uint8_t> aq(act_row_size(w, n));
            quantize_acts(w, a.data(), 1, n, aq.data());
            for (int nx : {1, 2, 3, 4, 5, 7, 8, 9, 17, 31}) {
                const auto x = random_row(n * nx, 200 + uint32_t(nx));
                const auto wq = quantize(w, x);
                const size_t rb = wq.size() / size_t(nx);
                for (int streams : {0, 1, 2, 4, 8}) {
                    INFO("streams ", streams, ", ", nx, " rows of ", n);
                    std::vector<float> out(static_cast<size_t>(nx), std::nanf(""));
                    set_decode_streams(streams);
                    rows(n, wq.data(), rb, nx, aq.data(), out.data());
                    set_decode_streams(0);
                    for (int r = 0; r < nx; ++r) CHECK(out[size_t(r)] == single(n, wq.data() + size_t(r) * rb, aq.data()));
                    ++compared;
                }
            }
        }
    });
    MESSAGE("several-weight-row calls compared: ", compared);
    CHECK(compared > 0);
}

TEST_CASE("vec_dot_tile: weight-row x activation-row tiles give vec_dot's bits exactly") {
    int compared = 0, compared_avx2 = 0;
    for (Isa isa : {Isa::avx2, Isa::avx512})
    for (Type w : kWeightTypes) {
        const VecDotTileFn tile = vec_dot_tile_for(w, isa);
        if (!tile) continue;
        INFO(std::string(traits(w).name) << " at " << isa_name(isa));
        const VecDotFn single = vec_dot_for(w, isa);
        // 37 blocks: an odd count, so the two-chain formats take their scalar last block; the
        // K-quants (256-element blocks) take 768, 2304 and K3's 7168.
        for (int64_t n : {int64_t(32), int64_t(37 * 32), int64_t(768), int64_t(2304), int64_t(7168)}) {
            if (n % traits(w).block_size != 0) continue;
            // Decode takes its rows from up to 8 places of the range: 15 and 31 rows make uneven groups.
            for (int nx : {1, 3, 4, 5, 9, 15, 31}) {
                auto x = random_row(n * nx, 300 + uint32_t(nx));
                auto wq = quantize(w, x);
                const size_t rb = wq.size() / size_t(nx);
                if (w == Type::Q8_0 && n == 32 * 37) {
                    // Every byte value a file can hold, -128 included (ggml's quantizer stops at -127).
                    for (size_t r = 0; r < size_t(nx); ++r)
                        for (int64_t b = 0; b < n / 32; ++b)
                            for (int j = 0; j < 32; ++j) wq[r * rb + size_t(b) * 34 + 2 + size_t(j)] = uint8_t(b * 32 + j + int(r));
                }
                // The K-quant tiles pack 4 / 8 / 12 / 16 rows (6, 7, 10, 11, 14, 15 padded; 5, 9, 13,
                // 17 tile one row fewer and give it to multi; below 4 multi alone).
                for (int ny : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}) {
                    const auto a = random_row(n * ny, 400 + uint32_t(ny));
                    const size_t ab = act_row_size(w, n);
                    std::vector<uint8_t> aq(ab * size_t(ny));
                    quantize_acts(w, a.data(), ny, n, aq.data());
                    const size_t os = size_t(nx) + 2;   // a padded output stride
                    const TileFormGuard restore;
                    for (const KTileForm form : tile_forms(w, isa)) {
                        INFO("tile form ", k_tile_form_name(form));
                        if (form != KTileForm::automatic) set_k_tile_form(form);
                        std::vector<float> out(os * size_t(ny), -1.0f);
                        tile(n, wq.data(), rb, nx, aq.data(), ab, ny, out.data(), os);
                        for (int t = 0; t < ny; ++t)
                            for (int r = 0; r < nx; ++r)
                                CHECK(out[size_t(t) * os + size_t(r)] == single(n, wq.data() + size_t(r) * rb, aq.data() + size_t(t) * ab));
                        for (int t = 0; t < ny; ++t) CHECK(out[size_t(t) * os + size_t(nx)] == -1.0f);   // padding untouched
                        ++compared;
                        if (isa == Isa::avx2) ++compared_avx2;
                    }
                }
            }
        }
    }
    MESSAGE("tiled calls compared: ", compared, " (AVX2: ", compared_avx2, ")");
    if (cpu_supports(Isa::avx512)) CHECK(compared > compared_avx2);
    if (cpu_supports(Isa::avx2)) CHECK(compared_avx2 > 0);
}

// Decode through the tiles (one activation row: the AVX-512 Q8_0 family and the AVX2 tiles) in
// every stream layout: 8- and 4-row tiles take rows from S segments, S / R tiles in turn or R / S
// adjacent rows from each; the rows no layout fills (fewer than 8) go side by side. Every row
// keeps vec_dot's bits and is written once, nothing past the rows is.
TEST_CASE("vec_dot_tile: decode gives vec_dot's bits in every stream layout, uneven row counts included") {
    int compared = 0;
    for_each_kernel(vec_dot_tile_for, [&](Isa, Type w, VecDotTileFn tile, VecDotFn single) {
        const int64_t n = traits(w).block_size == 32 ? 37 * 32 : 768;
        const auto a = random_row(n, 11);
        std::vector<uint8_t> aq(act_row_size(w, n));
        quantize_acts(w, a.data(), 1, n, aq.data());
        for (int nx : {1, 3, 4, 7, 8, 9, 12, 16, 17, 23, 32, 33, 63, 64, 71}) {
            const auto x = random_row(n * nx, 500 + uint32_t(nx));
            const auto wq = quantize(w, x);
            const size_t rb = wq.size() / size_t(nx);
            for (int streams : {0, 1, 2, 4, 8}) {
                INFO("streams ", streams, ", ", nx, " rows");
                std::vector<float> out(size_t(nx) + 1, std::nanf(""));
                out[size_t(nx)] = -1.0f;
                set_decode_streams(streams);
                tile(n, wq.data(), rb, nx, aq.data(), aq.size(), 1, out.data(), size_t(nx));
                set_decode_streams(0);
                for (int r = 0; r < nx; ++r) CHECK(out[size_t(r)] == single(n, wq.data() + size_t(r) * rb, aq.data()));
                CHECK(out[size_t(nx)] == -1.0f);
                ++compared;
            }
        }
    });
    MESSAGE("decode tile calls compared: ", compared);
    CHECK(compared > 0);
}

TEST_CASE("vec_dot_tile: a whole prefill product in one call, across the cache blocks' edges") {
    // quant::gemm passes all activation rows at once; the AVX-512 K-quant tiles pack up to 64 of
    // them and take the weight rows in chunks of about 256 KiB (64 Q4_K rows of 7168, at most 256
    // rows), staging each chunk's outputs, and the Q8_0-family tiles pack 64 at a time. 131 rows
    // (two chunks and an odd row) x 33..130 activation rows (one group, a group and 1 / 6 more,
    // two groups and a 2-row block).
    int compared = 0;
    for (Isa isa : {Isa::avx2, Isa::avx512}) {
        if (!cpu_supports(isa)) continue;
        for (Type w : kWeightTypes) {
            const VecDotTileFn tile = vec_dot_tile_for(w, isa);
            if (!tile) continue;
            INFO(std::string(traits(w).name) << " at " << isa_name(isa));
            const VecDotFn single = vec_dot_for(w, isa);
            // K = 768: the chunk is capped at 256 rows (600 rows: two chunks and 88).
            // (No structured binding: clang refuses one named in INFO's capturing lambda.)
            for (const std::pair<int64_t, int>& shape : {std::pair<int64_t, int>{7168, 131}, std::pair<int64_t, int>{768, 600}}) {
                const int64_t n = shape.first;
                const int nx = shape.second;
                const auto wq = quantize(w, random_row(n * nx, 700));
                const size_t rb = wq.size() / size_t(nx);
                for (int ny : {33, 64, 65, 70, 130}) {
                    const auto a = random_row(n * ny, 800 + uint32_t(ny));
                    const size_t ab = act_row_size(w, n);
                    std::vector<uint8_t> aq(ab * size_t(ny));
                    quantize_acts(w, a.data(), ny, n, aq.data());
                    const size_t os = size_t(nx) + 1;
                    const TileFormGuard restore;
                    for (const KTileForm form : tile_forms(w, isa)) {
                        if (form != KTileForm::automatic) set_k_tile_form(form);
                        std::vector<float> out(os * size_t(ny), -1.0f);
                        tile(n, wq.data(), rb, nx, aq.data(), ab, ny, out.data(), os);
                        int bad = 0;
                        for (int t = 0; t < ny; ++t) {
                            for (int r = 0; r < nx; ++r)
                                bad += out[size_t(t) * os + size_t(r)] != single(n, wq.data() + size_t(r) * rb, aq.data() + size_t(t) * ab);
                            bad += out[size_t(t) * os + size_t(nx)] != -1.0f;   // padding untouched
                        }
                        INFO(ny, " activation rows, K = ", n, ", tile form ", k_tile_form_name(form));
                        CHECK(bad == 0);
                        ++compared;
                    }
                }
            }
        }
    }
    MESSAGE("whole products compared: ", compared);
    if (cpu_supports(Isa::avx2)) CHECK(compared > 0);
}

TEST_CASE("K-quant tiles and decode rows: both tile forms at the extreme bytes, and the form measured") {
    // The maddubs form sums byte products in pairs as int16 (saturating): at most 2 * 63 * 128 =
    // 16128 for Q6_K's levels, 2 * 31 * 128 for Q5_K's, 2 * 15 * 128 for Q4_K's, 2 * 3 * 128 for
    // Q2_K's, 2 * 7 * 128 for Q3_K's unsigned ones (the dpbusd form's sums of four, shifted into a
    // word, twice those; Q3_K's offsets 4 * 4 * 128 a word). Here every weight is at its largest
    // level and the activations alternate between -128 and 127 (and all -128), where a mistake in
    // that bound or in a scale's lane would show. (Every qh / hmask bit is set here: which bit a
    // piece takes is checked by the random tiles above. The lone-row paths have one form: the loop
    // runs them twice alike.) The decode kernels (vec_dot_rows: four rows of 512-bit registers,
    // Q2_K / Q3_K levels times 4 in half of them) run on the same bytes.
    if (!cpu_supports(Isa::avx512)) {
        MESSAGE("skipped: no AVX-512 on this CPU");
        return;
    }
    const TileFormGuard restore;
    const int64_t n = 2304, nb = n / QK_K;
    const int nx = 5, ny = 16;
    int compared = 0, rows_compared = 0;
    for (Type w : {Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K}) {
        const VecDotTileFn tile = vec_dot_tile_for(w, Isa::avx512);
        const VecDotRowsFn rows = vec_dot_rows_for(w, Isa::avx512);
        const VecDotFn single = vec_dot_for(w, Isa::avx512);
        REQUIRE(bool(tile));
        auto wq = quantize(w, random_row(n * nx, 91));
        const size_t rb = wq.size() / size_t(nx);
        for (int r = 0; r < nx; ++r)
            for (int64_t b = 0; b < nb; ++b) {
                uint8_t* blk = wq.data() + size_t(r) * rb + size_t(b) * traits(w).type_size;
                if (w == Type::Q2_K) {
                    auto* q = reinterpret_cast<block_q2_K*>(blk);
                    std::memset(q->qs, 0xff, sizeof q->qs);           // every level 3
                    std::memset(q->scales, 0xff, sizeof q->scales);   // scales and mins 15
                } else if (w == Type::Q3_K) {
                    auto* q = reinterpret_cast<block_q3_K*>(blk);
                    std::memset(q->qs, 0xff, sizeof q->qs);
                    std::memset(q->hmask, 0xff, sizeof q->hmask);     // every level 3 (u = 7)
                    std::memset(q->scales, r % 2 ? 0x00 : 0xff, sizeof q->scales);   // scales -32 or 31
                } else if (w == Type::Q4_K) {
                    auto* q = reinterpret_cast<block_q4_K*>(blk);
                    std::memset(q->qs, 0xff, sizeof q->qs);
                    std::memset(q->scales, 0xff, sizeof q->scales);   // scales and mins 63
                } else if (w == Type::Q5_K) {
                    auto* q = reinterpret_cast<block_q5_K*>(blk);
                    std::memset(q->qs, 0xff, sizeof q->qs);
                    std::memset(q->qh, 0xff, sizeof q->qh);           // every level 31
                    std::memset(q->scales, 0xff, sizeof q->scales);
                } else {
                    auto* q = reinterpret_cast<block_q6_K*>(blk);
                    std::memset(q->ql, 0xff, sizeof q->ql);
                    std::memset(q->qh, 0xff, sizeof q->qh);
                    for (int k = 0; k < 16; ++k) q->scales[k] = int8_t(k % 2 ? 127 : -128);
                }
            }
        for (int pattern = 0; pattern < 2; ++pattern) {
            std::vector<uint8_t> aq(act_row_size(w, n) * size_t(ny));
            quantize_acts(w, random_row(n * ny, 92).data(), ny, n, aq.data());
            auto* y = reinterpret_cast<block_q8_K*>(aq.data());
            for (int64_t b = 0; b < nb * ny; ++b) {
                for (int j = 0; j < QK_K; ++j) y[b].qs[j] = int8_t(pattern == 0 && j % 2 ? 127 : -128);
                for (int k = 0; k < QK_K / 16; ++k) {
                    int sum = 0;
                    for (int j = 0; j < 16; ++j) sum += y[b].qs[16 * k + j];
                    y[b].bsums[k] = int16_t(sum);
                }
            }
            const size_t ab = act_row_size(w, n);
            for (const KTileForm form : {KTileForm::dpbusd, KTileForm::maddubs}) {
                INFO(traits(w).name, ", activation pattern ", pattern, ", form ", k_tile_form_name(form));
                set_k_tile_form(form);
                std::vector<float> out(size_t(nx * ny));
                tile(n, wq.data(), rb, nx, aq.data(), ab, ny, out.data(), size_t(nx));
                int bad = 0;
                for (int t = 0; t < ny; ++t)
                    for (int r = 0; r < nx; ++r)
                        bad += out[size_t(t * nx + r)] != single(n, wq.data() + size_t(r) * rb, aq.data() + size_t(t) * ab);
                CHECK(bad == 0);
                ++compared;
            }
            for (int t = 0; t < 2; ++t) {
                INFO(traits(w).name, ", activation pattern ", pattern, ", decode of activation row ", t);
                std::vector<float> out(static_cast<size_t>(nx));
                rows(n, wq.data(), rb, nx, aq.data() + size_t(t) * ab, out.data());
                int bad = 0;
                for (int r = 0; r < nx; ++r) bad += out[size_t(r)] != single(n, wq.data() + size_t(r) * rb, aq.data() + size_t(t) * ab);
                CHECK(bad == 0);
                ++rows_compared;
            }
        }
    }
    CHECK(compared == 20);
    CHECK(rows_compared == 20);
    // Automatic: measured once, both forms timed, the one in force one of them.
    set_k_tile_form(KTileForm::automatic);
    if (active_isa() == Isa::avx512) {
        const KTileForm f = k_tile_form();
        CHECK((f == KTileForm::dpbusd || f == KTileForm::maddubs));
        const KTileTimes t = k_tile_times();
        CHECK(t.dpbusd_ns > 0);
        CHECK(t.maddubs_ns > 0);
        CHECK(k_tile_form() == f);   // not measured again
    } else {
        CHECK(k_tile_form() == KTileForm::automatic);   // these tiles do not run at this level
    }
}

TEST_CASE("activations: Q8_K and x86 Q8_0 / Q8_1 against ggml's reference quantizers") {
    // Q8_K: ggml-cpu on x86 runs the reference, so the bytes must be identical.
    const auto x = random_row(QK_K * 64, 11, 3.0f);
    std::vector<uint8_t> a(x.size() / QK_K * sizeof(block_q8_K)), b(a.size());
    quantize_row_q8_K(x.data(), a.data(), int64_t(x.size()));
    quantize_row_q8_K_ref(x.data(), b.data(), int64_t(x.size()));
    CHECK(a == b);
    // The SIMD Q8_K quantizer on the cases that trip a vector version: a zero block, the largest
    // magnitude twice with both signs (the first one sets the sign of the scale), exact
    // half-level ties (-127/max * x = k + 0.5 rounds to even), tiny and huge magnitudes.
    {
        std::vector<float> e(QK_K * 6, 0.0f);
        float* b1 = e.data() + QK_K;                      // block 0 stays zero
        for (int j = 0; j < QK_K; ++j) b1[j] = float(j % 17) - 8.0f;
        b1[40] = -127.0f, b1[200] = 127.0f;
        float* b2 = e.data() + 2 * QK_K;
        b2[3] = 127.0f, b2[9] = -127.0f;
        for (int j = 10; j < QK_K; ++j) b2[j] = -(float(j % 127) + 0.5f);   // iscale = -1: ties
        float* b3 = e.data() + 3 * QK_K;
        for (int j = 0; j < QK_K; ++j) b3[j] = float(j) * 1e-30f;
        float* b4 = e.data() + 4 * QK_K;
        for (int j = 0; j < QK_K; ++j) b4[j] = (j % 2 ? 1.0f : -1.0f) * float(j) * 1e30f;
        float* b5 = e.data() + 5 * QK_K;
        for (int j = 0; j < QK_K; ++j) b5[j] = float(j % 5) * 0.25f;
        std::vector<uint8_t> ea(6 * sizeof(block_q8_K)), eb(ea.size());
        quantize_row_q8_K(e.data(), ea.data(), int64_t(e.size()));
        quantize_row_q8_K_ref(e.data(), eb.data(), int64_t(e.size()));
        for (int k = 0; k < 6; ++k) {
            CAPTURE(k);
            CHECK(std::memcmp(ea.data() + k * sizeof(block_q8_K), eb.data() + k * sizeof(block_q8_K), sizeof(block_q8_K)) == 0);
        }
    }
    // Q8_0: the AVX2 path scales by 127/amax and rounds half to even; the reference multiplies by
    // 1/(amax/127) and rounds half away from zero. Count how often a byte differs (by one level).
    std::vector<block_q8_0> p(x.size() / QK8_0), q(p.size());
    quantize_row_q8_0(x.data(), p.data(), int64_t(x.size()));
    quantize_row_q8_0_ref(x.data(), q.data(), int64_t(x.size()));
    int diff = 0, worst = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        CHECK(p[i].d == q[i].d);
        for (int j = 0; j < QK8_0; ++j) {
            diff += p[i].qs[j] != q[i].qs[j];
            worst = std::max(worst, std::abs(p[i].qs[j] - q[i].qs[j]));
        }
    }
    MESSAGE("q8_0 x86 activation quantizer vs _ref: ", diff, " of ", x.size(), " quants differ (max 1 level)");
    CHECK(worst <= 1);
    // On the golden LCG input (multiples of 1/250) they agree exactly.
    const auto g = lcg_input();
    std::vector<block_q8_0> g1(g.size() / QK8_0), g2(g1.size());
    quantize_row_q8_0(g.data(), g1.data(), int64_t(g.size()));
    quantize_row_q8_0_ref(g.data(), g2.data(), int64_t(g.size()));
    CHECK(std::memcmp(g1.data(), g2.data(), g1.size() * sizeof(block_q8_0)) == 0);
    // A tie: 0.5 * 127/amax hits exactly x.5 -> even (x86) vs away (ref).
    float t[QK8_0] = {};
    t[0] = 127.0f;
    t[1] = 2.5f;
    block_q8_0 te, tr;
    quantize_row_q8_0(t, &te, QK8_0);
    quantize_row_q8_0_ref(t, &tr, QK8_0);
    CHECK(te.qs[1] == 2);
    CHECK(tr.qs[1] == 3);
    // The x86 Q8_0 form written out in scalar (127/amax, ties to even) against the quantizer in
    // use (AVX2 where the CPU has it) on random rows and on zero / tie / tiny / huge blocks.
    {
        std::vector<float> e = random_row(QK8_0 * 64, 12, 3.0f);
        std::vector<float> edge(QK8_0 * 4, 0.0f);                                       // block 0: zeros
        edge[QK8_0] = 127.0f;                                                             // id = 1, so
        for (int j = 1; j < QK8_0; ++j) edge[size_t(QK8_0 + j)] = float(j) - 15.5f;     // k.5 are ties
        for (int j = 0; j < QK8_0; ++j) edge[size_t(2 * QK8_0 + j)] = float(j) * 1e-30f;
        for (int j = 0; j < QK8_0; ++j) edge[size_t(3 * QK8_0 + j)] = (j % 2 ? -1.0f : 1.0f) * float(j) * 1e30f;
        e.insert(e.end(), edge.begin(), edge.end());
        std::vector<block_q8_0> got(e.size() / QK8_0);
        quantize_row_q8_0(e.data(), got.data(), int64_t(e.size()));
        for (size_t i = 0; i < got.size(); ++i) {
            CAPTURE(i);
            float amax = 0;
            for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(e[i * QK8_0 + size_t(j)]));
            const float id = amax != 0.0f ? 127.f / amax : 0.0f;
            CHECK(got[i].d == fp32_to_fp16(amax / 127.f));
            for (int j = 0; j < QK8_0; ++j) CHECK(int(got[i].qs[j]) == int(std::nearbyint(e[i * QK8_0 + size_t(j)] * id)));
        }
    }
    // Q8_1 carries s = d * sum(qs).
    std::vector<block_q8_1> s1(x.size() / QK8_1);
    quantize_row_q8_1(x.data(), s1.data(), int64_t(x.size()));
    for (size_t i = 0; i < 4; ++i) {
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) sum += s1[i].qs[j];
        float amax = 0;
        for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[i * QK8_1 + size_t(j)]));
        CHECK(s1[i].s == fp32_to_fp16(amax / 127.f * float(sum)));
    }
}

#if defined(__x86_64__)
__attribute__((target("f16c"))) static uint16_t hw_fp16(float f) { return uint16_t(_cvtss_sh(f, 0)); }
__attribute__((target("f16c"))) static float hw_fp32(uint16_t h) { return _cvtsh_ss(h); }
#endif

TEST_CASE("fp16 / bf16 / e8m0 conversions") {
    // fp16 -> fp32 -> fp16 is the identity for every non-NaN code.
    for (uint32_t h = 0; h < 65536; ++h) {
        const float f = fp16_to_fp32(uint16_t(h));
        if (std::isnan(f)) {
            CHECK((fp32_to_fp16(f) & 0x7fff) == 0x7e00);
            continue;
        }
        if (fp32_to_fp16(f) != h) { CHECK(fp32_to_fp16(f) == h); break; }
    }
#if defined(__x86_64__)
    unsigned cpuid_a = 0, cpuid_b = 0, cpuid_c = 0, cpuid_d = 0;   // F16C: CPUID.1:ECX bit 29 (clang 14 has no "f16c" builtin name)
    if (__get_cpuid(1, &cpuid_a, &cpuid_b, &cpuid_c, &cpuid_d) && (cpuid_c & (1u << 29))) {
        // Against the F16C instruction (round to nearest even) on random and boundary bit patterns.
        std::mt19937 rng(5);
        int bad = 0;
        for (int i = 0; i < 2000000; ++i) {
            uint32_t u = rng();
            if (i % 4 == 1) u = (u & 0x80000000u) | (0x33000000u + (u % 0x14800000u));  // fp16 range
            float f;
            std::memcpy(&f, &u, 4);
            if (std::isnan(f)) continue;
            bad += hw_fp16(f) != fp32_to_fp16(f);
        }
        for (uint32_t h = 0; h < 65536; ++h) {
            const float f = hw_fp32(uint16_t(h));
            const float g = fp16_to_fp32(uint16_t(h));
            if (!std::isnan(f)) bad += std::memcmp(&f, &g, 4) != 0;
        }
        CHECK(bad == 0);
    }
#endif
    CHECK(fp32_to_fp16(65504.0f) == 0x7bff);
    CHECK(fp32_to_fp16(65520.0f) == 0x7c00);
    CHECK(fp32_to_fp16(5.9604644775390625e-8f) == 0x0001);
    CHECK(fp32_to_fp16(2.98023223876953125e-8f) == 0x0000);  // exactly half the smallest: even
    CHECK(fp32_to_bf16(1.0f) == 0x3f80);
    CHECK(fp32_to_bf16(f32_from_bits(0x3f808000)) == 0x3f80);  // tie -> even
    CHECK(fp32_to_bf16(f32_from_bits(0x3f818000)) == 0x3f82);
    CHECK(fp32_to_bf16(f32_from_bits(0x7f800001)) == 0x7fc0);  // NaN forced quiet
    CHECK(e8m0_to_fp32(127) == 1.0f);
    CHECK(e8m0_to_fp32_half(127) == 0.5f);
    CHECK(e8m0_to_fp32_half(1) == e8m0_to_fp32(0));
}

TEST_CASE("round trip: rmse of quantize -> dequantize per type (N(0,1) input)") {
    // Upper bounds ~1.3x the measured values: catch a broken quantizer, not tune one.
    struct Bound { Type t; double max_rmse; };
    const Bound bounds[] = {
        {Type::F32, 0.0},     {Type::F16, 2.8e-4},  {Type::BF16, 2.2e-3}, {Type::Q8_0, 7e-3},
        {Type::Q6_K, 2.4e-2}, {Type::Q5_K, 4.8e-2}, {Type::Q5_0, 5.6e-2}, {Type::Q5_1, 5e-2},
        {Type::Q4_K, 9.5e-2}, {Type::IQ4_NL, 1e-1}, {Type::IQ4_XS, 1e-1}, {Type::Q4_0, 1.12e-1},
        {Type::Q4_1, 1.02e-1}, {Type::MXFP4, 1.5e-1}, {Type::Q3_K, 2e-1},  {Type::Q2_K, 3.9e-1},
    };
    const int64_t n = 256 * 64;
    const auto x = random_row(n, 99);
    std::string table = "\n  type     rmse        bits/weight\n";
    for (const Bound& b : bounds) {
        const auto q = quantize(b.t, x);
        const auto y = dequantize(b.t, q.data(), n);
        double se = 0;
        for (int64_t i = 0; i < n; ++i) se += double(x[size_t(i)] - y[size_t(i)]) * (x[size_t(i)] - y[size_t(i)]);
        const double rmse = std::sqrt(se / double(n));
        char line[96];
        std::snprintf(line, sizeof line, "  %-8s %.3e   %.3f\n", traits(b.t).name, rmse,
                      8.0 * double(q.size()) / double(n));
        table += line;
        INFO(std::string(traits(b.t).name));
        CHECK(rmse <= b.max_rmse);
    }
    MESSAGE(table);
}

TEST_CASE("gemm: row ranges and several activation rows equal per-row dots") {
    const int64_t n = 512, rows = 24, m = 7;
    for (Type w : {Type::Q4_K, Type::Q8_0, Type::MXFP4, Type::F32, Type::Q6_K, Type::Q4_0, Type::Q3_K, Type::BF16}) {
        INFO(std::string(traits(w).name));
        const auto wf = random_row(n * rows, 1234);
        const size_t rb = row_size(traits(w), n);
        std::vector<uint8_t> W(rb * size_t(rows));
        for (int64_t r = 0; r < rows; ++r) traits(w).quantize(wf.data() + r * n, W.data() + size_t(r) * rb, n);
        const auto x = random_row(n * m, 4321);
        std::vector<uint8_t> xq(act_row_size(w, n) * size_t(m));
        quantize_acts(w, x.data(), m, n, xq.data());
        std::vector<float> y(size_t(m * rows), -1.0f);
        gemm(w, W.data(), rb, n, xq.data(), m, y.data(), rows, 0, 10);   // two "threads"
        gemm(w, W.data(), rb, n, xq.data(), m, y.data(), rows, 10, rows);
        for (int64_t t = 0; t < m; ++t) {
            for (int64_t r = 0; r < rows; ++r) {
                const float want = traits(w).vec_dot(n, W.data() + size_t(r) * rb, xq.data() + size_t(t) * act_row_size(w, n));
                CHECK(y[size_t(t * rows + r)] == want);
            }
        }
        std::vector<float> g(static_cast<size_t>(rows));
        gemv(w, W.data(), rb, n, xq.data(), g.data(), 0, rows);
        for (int64_t r = 0; r < rows; ++r) CHECK(g[size_t(r)] == y[size_t(r)]);
    }
}

TEST_CASE("dequantize_row_f16: every fp16 code (NaNs included) gives fp16_to_fp32's bits, at any offset and length") {
    std::vector<uint16_t> codes(65536 + 40);
    for (size_t i = 0; i < codes.size(); ++i) codes[i] = uint16_t(i * 40503u);   // odd step: every code, shuffled
    for (const size_t off : {size_t(0), size_t(1), size_t(7), size_t(17)}) {
        for (const int64_t n : {int64_t(65536), int64_t(15), int64_t(33)}) {
            CAPTURE(off);
            CAPTURE(n);
            std::vector<float> y(static_cast<size_t>(n));
            kinfer::quant::dequantize_row_f16(codes.data() + off, y.data(), n);
            int64_t bad = 0;
            for (int64_t i = 0; i < n; ++i) {
                const float want = kinfer::quant::fp16_to_fp32(codes[off + size_t(i)]);
                bad += std::memcmp(&want, &y[size_t(i)], sizeof want) != 0;
            }
            CHECK(bad == 0);
        }
    }
}
