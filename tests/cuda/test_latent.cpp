// The paged latent cache kernels (latent.cu) and the absorbed attention over pages (mla.cu) in
// CPU mode, against the CPU backend's cache and its tiled attention. A store must give the CPU's
// bytes exactly (the same conversions), a load the same floats; the attention sums in another
// order than the CPU's tiles, within 1e-5 relative.
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

#include "quant/fp16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <utility>

using namespace kinfer;
using kinfer::cuda::testing::check_close;
using kinfer::cuda::testing::cpu;
using kinfer::cuda::testing::randn;
using Pages = kinfer::cuda::testing::HostPages;

namespace {

const backend::CacheType kTypes[] = {backend::CacheType::f32, backend::CacheType::f16, backend::CacheType::q8_0};

}  // namespace

TEST_CASE("cuda latent_store / latent_load (cpu mode): the CPU cache's bytes, across pages, rows ld apart") {
    static_assert(cuda::emu::kLatentF32 == int(backend::CacheType::f32) && cuda::emu::kLatentF16 == int(backend::CacheType::f16) &&
                  cuda::emu::kLatentQ8_0 == int(backend::CacheType::q8_0));
    const int64_t R = 96, page_rows = 7, n_rows = 40, ld = 100, j0 = 5, n = 30;   // rows 5..34 span pages 0..4
    std::vector<float> x = randn(size_t(n * ld), 30, 3.0f);
    x[3] = 0.0f;
    for (int64_t i = 0; i < 32; ++i) x[size_t(ld + i)] = 0.0f;    // an all-zero q8_0 block: scale 0
    x[size_t(2 * ld + 7)] = 70000.0f;                               // beyond f16: inf, as the CPU rounds it
    for (const auto t : kTypes) {
        INFO("cache type ", backend::cache_type_name(t));
        Pages gpu(t, R, page_rows, n_rows), want(t, R, page_rows, n_rows);
        cuda::emu::latent_store(gpu.args(), j0, n, x.data(), ld, nullptr);
        cpu().mla_cache_store(want.c, j0, n, x.data(), ld);
        CHECK(gpu.same_bytes(want));   // bit for bit, untouched rows included
        std::vector<float> got(size_t(n * R), -1.0f), back(size_t(n * R), -2.0f);
        cuda::emu::latent_load(gpu.args(), j0, n, got.data(), nullptr);
        cpu().mla_cache_load(want.c, j0, n, back.data());
        CHECK(std::memcmp(got.data(), back.data(), got.size() * sizeof(float)) == 0);
    }
    Pages odd(backend::CacheType::f32, 40, 8, 8);   // q8_0 needs R % 32 == 0
    auto a = odd.args();
    a.type = cuda::emu::kLatentQ8_0;
    CHECK_THROWS_AS(cuda::emu::latent_store(a, 0, 1, x.data(), 0, nullptr), std::invalid_argument);
}

TEST_CASE("cuda mla_attend_paged (cpu mode): absorbed attention through the pages == the CPU's tiled op, every type") {
    struct Shape {
        int64_t n, pos0, H, r, dr, split, page_rows;
    };
    // Both pass-1 kernels (mla.cu); the last shape is the grouped kernel's: K3's r 512 + 64, 18
    // heads (two groups), pages of 7 rows that cut its 16-row tiles, the automatic split.
    for (const Shape s : {Shape{1, 700, 2, 64, 32, 256, 256}, Shape{3, 90, 3, 64, 32, 16, 7}, Shape{5, 0, 2, 32, 32, 4, 3},
                          Shape{2, 50, 18, 512, 64, 0, 7}}) {
        const int64_t R = s.r + s.dr, n_kv = s.pos0 + s.n;
        const std::vector<float> rows = randn(size_t(n_kv * R), 31), Q = randn(size_t(s.n * s.H * R), 32);
        const float scale = 1.0f / std::sqrt(float(R));
        for (const auto t : kTypes) {
            Pages p(t, R, s.page_rows, n_kv);
            cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
            backend::MlaShape ms;
            ms.n = s.n, ms.pos0 = s.pos0, ms.H = s.H, ms.r = s.r, ms.dr = s.dr, ms.scale = scale;
            std::vector<float> want(size_t(s.n * s.H * s.r), -2.0f);
            cpu().mla_attend_tiled(p.c, Q.data(), want.data(), ms);
            // The grouped kernel also as 3xTF32 on tensor cores (mla_mma.cuh), at the same bound, and
            // over the f16 cache on fp16 ones (mla_mma_f16.cuh): the split at the same bound, single
            // fp16 (2^-11 of q and p) at single TF32's. Over the other caches f16x2 is 3xTF32, bit
            // for bit.
            using cuda::emu::F32Math;
            using cuda::emu::MlaKernel;
            auto attend = [&](MlaKernel kernel, F32Math math) {
                cuda::emu::MlaArgs a;
                a.n = s.n, a.pos0 = s.pos0, a.H = s.H, a.r = s.r, a.dr = s.dr, a.scale = scale, a.split = s.split;
                a.kernel = kernel;
                a.math = math;
                std::vector<float> scratch(cuda::emu::mla_scratch_floats(a)), lat(want.size(), -1.0f);
                cuda::emu::mla_attend_paged(p.args(), Q.data(), lat.data(), a, scratch.data(), nullptr);
                return lat;
            };
            const std::pair<MlaKernel, F32Math> forms[] = {
                {MlaKernel::per_head, F32Math::fp32}, {MlaKernel::grouped, F32Math::fp32}, {MlaKernel::grouped, F32Math::tf32x3},
                {MlaKernel::grouped, F32Math::f16x2}, {MlaKernel::grouped, F32Math::f16}};
            for (const auto& [kernel, math] : forms) {
                const bool is_grouped = kernel == MlaKernel::grouped;
                const int math_id = int(math);
                INFO("n ", s.n, " pos0 ", s.pos0, " H ", s.H, " split ", s.split, " page_rows ", s.page_rows, " type ",
                     backend::cache_type_name(t), " grouped ", is_grouped, " math ", math_id);
                const bool fp16 = math == F32Math::f16x2 || math == F32Math::f16;
                if (fp16 && t != backend::CacheType::f16) {
                    if (math == F32Math::f16x2) CHECK(attend(kernel, math) == attend(kernel, F32Math::tf32x3));
                    continue;
                }
                const std::vector<float> lat = attend(kernel, math);
                if (math == F32Math::f16) check_close(lat, want, 1e-2, 1e-3, "paged mla latent output, single fp16");
                else check_close(lat, want, 1e-5, 1e-6, "paged mla latent output");
            }
        }
    }
    Pages p(backend::CacheType::f16, 64, 8, 8);
    cuda::emu::MlaArgs a;
    a.n = 1, a.H = 1, a.r = 64, a.dr = 32;   // R = 96, the pages hold 64
    std::vector<float> scratch(cuda::emu::mla_scratch_floats(a) + 1), out(64), q(96);
    CHECK_THROWS_AS(cuda::emu::mla_attend_paged(p.args(), q.data(), out.data(), a, scratch.data(), nullptr), std::invalid_argument);
}

// ---- mma_f16.cuh and the fp16 form of the grouped kernel (mla_mma_f16.cuh) ----

namespace latent_test {

float f16_host(float x) { return quant::fp16_to_fp32(quant::fp32_to_fp16(x)); }

}  // namespace latent_test

// The plain form of m16n8k16 against a host product of the fp16-rounded operands (products exact,
// fp32 sums: 1e-6 of sum |a b|), and the loaders' layout element by element: with A the identity,
// output (r, c) is B's k = r of column c, for every r and c, with B's fragments loaded from its
// columns (f16_frag_b_rows), from its rows (f16_frag_b_cols), and two n tiles at once by ldmatrix's
// layout from its rows (f16_frag_b_cols_x2) and its columns (f16_frag_b_rows_x2), the second tile
// holding B's columns reversed, and two k16 steps at once from its columns (f16_frag_b_rows_k2,
// the second step's columns reversed); A by ldmatrix (f16_frag_a). In CPU mode mma_f16 is the plain form,
// so this checks the loaders against the plain form's layout; kinfer_gpu_check holds the tensor
// cores (and ldmatrix) to the same.
TEST_CASE("cuda mma_f16 (cpu mode): the m16n8k16 fragments and fp16 rounding") {
    using latent_test::f16_host;
    std::mt19937 rng(616);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (int trial = 0; trial < 3; ++trial) {
        INFO("trial ", trial);
        std::vector<float> A(16 * 16), B(8 * 16);   // B: column c's 16 k values at 16 c
        for (auto& a : A) a = nd(rng);
        for (auto& b : B) b = nd(rng) * 300.0f;
        std::vector<float> out(9 * 128, 7.0f);
        cuda::emu::mma_f16_check(A.data(), B.data(), out.data(), nullptr);
        int bad = 0;
        for (int r = 0; r < 16; ++r)
            for (int c = 0; c < 8; ++c) {
                double rounded = 0, mag = 0;
                for (int k = 0; k < 16; ++k) {
                    const double a = f16_host(A[size_t(16 * r + k)]), b = f16_host(B[size_t(16 * c + k)]);
                    rounded += a * b;
                    mag += std::fabs(a * b);
                }
                for (int f = 0; f < 9; ++f) bad += !(std::fabs(out[size_t(128 * f + 8 * r + c)] - rounded) <= 1e-6 * mag);
            }
        CHECK(bad == 0);
    }
    std::vector<float> A(16 * 16, 0.0f), B(8 * 16);
    for (int r = 0; r < 16; ++r) A[size_t(16 * r + r)] = 1.0f;
    for (int i = 0; i < 8 * 16; ++i) B[size_t(i)] = float(i) + 0.25f * float(i % 3);   // distinct, fp16-exact
    std::vector<float> out(9 * 128);
    cuda::emu::mma_f16_check(A.data(), B.data(), out.data(), nullptr);
    int misplaced = 0;
    for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 8; ++c)
            for (int f : {0, 2, 3, 4, 5, 6, 7, 8}) misplaced += out[size_t(128 * f + 8 * r + c)] != B[size_t(16 * c + r)];
    CHECK(misplaced == 0);
    // Rounding to nearest even, as cvt.rn.f16.f32: 1 + 2^-11 and 1 + 3 * 2^-11 are ties, to 1 and
    // to 1 + 2^-9 (the even neighbours).
    std::fill(B.begin(), B.end(), 0.0f);
    B[0] = 1.0f + 0x1p-11f, B[1] = 1.0f + 3 * 0x1p-11f;
    cuda::emu::mma_f16_check(A.data(), B.data(), out.data(), nullptr);
    CHECK(out[0] == 1.0f);
    CHECK(out[8] == 1.0f + 0x1p-9f);
}

// The split form at the fp32 bound where its scalings matter:
//  - q: heads whose rows differ by 2^30 in magnitude against cache values near 2^12, so that a
//    head with q ~ 2^-12 has scores near 1 (unscaled, such a q would keep 11 bits in fp16 and its
//    remainder none), from flat softmaxes (q ~ 2^-27) to a single position (q ~ 2^3);
//  - the probabilities: one position scores 14 above the 151 others (each e^-14 ~ 8e-7, under
//    fp16's normal range unscaled: 0.3 % off) and holds zeros, so the output is those small ones'.
// K3's 512 + 64 over pages of 5 rows. And rows of R = 40 and 42 floats (the tile's zero columns
// past R; at 42, the copy element by element where 16-byte pieces do not fit the rows). And that
// the fp16 kernel is the one taken: single fp16 and single TF32 keep the same 11 bits of q, p and
// the f16 cache and add in the same order, so they differ only where they round (fp16 to nearest
// even, TF32 ties away from zero): q = 1 + 2^-11 everywhere is a tie for both.
TEST_CASE("cuda mla_attend_paged f16x2 (cpu mode): fp32 accuracy over q's range and small probabilities") {
    const int64_t pos0 = 151, H = 18, r = 512, dr = 64, R = r + dr, n_kv = pos0 + 2;
    const float scale = 1.0f / std::sqrt(192.0f);
    // abs: 1e-6 of the rows' scale (the outputs are weighted means of rows near 2^12, which cancel).
    auto run = [&](const char* what, const std::vector<float>& rows, const std::vector<float>& Q, int64_t n, double abs,
                   int64_t split) {
        INFO(what);
        Pages p(backend::CacheType::f16, R, 5, n_kv);
        cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
        backend::MlaShape ms;
        ms.n = n, ms.pos0 = pos0, ms.H = H, ms.r = r, ms.dr = dr, ms.scale = scale;
        std::vector<float> want(size_t(n * H * r));
        cpu().mla_attend_tiled(p.c, Q.data(), want.data(), ms);
        cuda::emu::MlaArgs a;
        a.n = n, a.pos0 = pos0, a.H = H, a.r = r, a.dr = dr, a.scale = scale, a.split = split;
        a.kernel = cuda::emu::MlaKernel::grouped;
        a.math = cuda::emu::F32Math::f16x2;
        std::vector<float> scratch(cuda::emu::mla_scratch_floats(a)), lat(want.size(), -1.0f);
        cuda::emu::mla_attend_paged(p.args(), Q.data(), lat.data(), a, scratch.data(), nullptr);
        check_close(lat, want, 1e-5, abs, what);
    };
    {
        std::vector<float> rows = randn(size_t(n_kv * R), 41, 4096.0f), Q = randn(size_t(2 * H * R), 42);
        for (int64_t t = 0; t < 2; ++t)
            for (int64_t h = 0; h < H; ++h)
                for (int64_t i = 0; i < R; ++i) Q[size_t((t * H + h) * R + i)] *= std::ldexp(1.0f, int(h % 7) * 5 - 27);
        for (int64_t i = 0; i < R; ++i) Q[size_t(3 * R + i)] = 0.0f;   // token 0, head 3: all zero (scale 1, a flat softmax)
        run("q over 2^30", rows, Q, 2, 4096 * 1e-6, 48);   // pieces that end mid-tile
    }
    {
        std::vector<float> rows = randn(size_t(n_kv * R), 43, 4096.0f), Q(size_t(H * R), 0.0f);
        for (int64_t i = 0; i < R; ++i) rows[size_t(i)] = i < r ? 0.0f : 1.0f;   // position 0: c = 0, k_pe = 1
        for (int64_t j = 1; j < n_kv; ++j)
            for (int64_t i = r; i < R; ++i) rows[size_t(j * R + i)] = 0.0f;        // the others: k_pe = 0
        for (int64_t h = 0; h < H; ++h)                                             // scores 14 (+ h / 4) and 0
            for (int64_t i = r; i < R; ++i) Q[size_t(h * R + i)] = (14.0f + 0.25f * float(h)) / (float(dr) * scale);
        run("probabilities near e^-14", rows, Q, 1, 1e-6, n_kv);   // one piece; terms near 4096 e^-14: 3e-3
    }
    {
        std::vector<float> rows = randn(size_t(n_kv * R), 46), Q(size_t(H * R), 1.0f + 0x1p-11f);
        Pages p(backend::CacheType::f16, R, 5, n_kv);
        cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
        std::vector<float> lat[2];
        for (const auto math : {cuda::emu::F32Math::f16, cuda::emu::F32Math::tf32}) {
            cuda::emu::MlaArgs a;
            a.n = 1, a.pos0 = pos0, a.H = H, a.r = r, a.dr = dr, a.scale = scale;
            a.kernel = cuda::emu::MlaKernel::grouped;
            a.math = math;
            std::vector<float> scratch(cuda::emu::mla_scratch_floats(a));
            lat[math == cuda::emu::F32Math::tf32].assign(size_t(H * r), -1.0f);
            cuda::emu::mla_attend_paged(p.args(), Q.data(), lat[math == cuda::emu::F32Math::tf32].data(), a, scratch.data(), nullptr);
        }
        CHECK(lat[0] != lat[1]);
    }
    for (const int64_t r2 : {int64_t(32), int64_t(34)}) {   // R = 40, 42
        const int64_t R2 = r2 + 8, n2 = 3, pos2 = 37;
        const std::vector<float> rows = randn(size_t((pos2 + n2) * R2), 44), Q = randn(size_t(n2 * 5 * R2), 45);
        Pages p(backend::CacheType::f16, R2, 6, pos2 + n2);
        cpu().mla_cache_store(p.c, 0, pos2 + n2, rows.data(), 0);
        backend::MlaShape ms;
        ms.n = n2, ms.pos0 = pos2, ms.H = 5, ms.r = r2, ms.dr = 8, ms.scale = 1.0f / std::sqrt(float(R2));
        std::vector<float> want(size_t(n2 * 5 * r2));
        cpu().mla_attend_tiled(p.c, Q.data(), want.data(), ms);
        cuda::emu::MlaArgs a;
        a.n = n2, a.pos0 = pos2, a.H = 5, a.r = r2, a.dr = 8, a.scale = ms.scale, a.split = 16;
        a.kernel = cuda::emu::MlaKernel::grouped;
        a.math = cuda::emu::F32Math::f16x2;
        std::vector<float> scratch(cuda::emu::mla_scratch_floats(a)), lat(want.size(), -1.0f);
        cuda::emu::mla_attend_paged(p.args(), Q.data(), lat.data(), a, scratch.data(), nullptr);
        INFO("R ", R2);
        check_close(lat, want, 1e-5, 1e-6, "f16x2, R not a multiple of 16");
    }
}
