// The paged latent cache kernels (latent.cu) and the absorbed attention over pages (mla.cu) in
// CPU mode, against the CPU backend's cache and its tiled attention. A store must give the CPU's
// bytes exactly (the same conversions), a load the same floats; the attention sums in another
// order than the CPU's tiles, within 1e-5 relative.
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

#include <cstring>
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
            // The grouped kernel also as 3xTF32 on tensor cores (mla_mma.cuh), at the same bound.
            using cuda::emu::F32Math;
            using cuda::emu::MlaKernel;
            const std::pair<MlaKernel, F32Math> forms[] = {
                {MlaKernel::per_head, F32Math::fp32}, {MlaKernel::grouped, F32Math::fp32}, {MlaKernel::grouped, F32Math::tf32x3}};
            for (const auto& [kernel, math] : forms) {
                const bool is_grouped = kernel == MlaKernel::grouped;
                const int math_id = int(math);
                INFO("n ", s.n, " pos0 ", s.pos0, " H ", s.H, " split ", s.split, " page_rows ", s.page_rows, " type ",
                     backend::cache_type_name(t), " grouped ", is_grouped, " math ", math_id);
                cuda::emu::MlaArgs a;
                a.n = s.n, a.pos0 = s.pos0, a.H = s.H, a.r = s.r, a.dr = s.dr, a.scale = scale, a.split = s.split;
                a.kernel = kernel;
                a.math = math;
                std::vector<float> scratch(cuda::emu::mla_scratch_floats(a)), lat(want.size(), -1.0f);
                cuda::emu::mla_attend_paged(p.args(), Q.data(), lat.data(), a, scratch.data(), nullptr);
                check_close(lat, want, 1e-5, 1e-6, "paged mla latent output");
            }
        }
    }
    Pages p(backend::CacheType::f16, 64, 8, 8);
    cuda::emu::MlaArgs a;
    a.n = 1, a.H = 1, a.r = 64, a.dr = 32;   // R = 96, the pages hold 64
    std::vector<float> scratch(cuda::emu::mla_scratch_floats(a) + 1), out(64), q(96);
    CHECK_THROWS_AS(cuda::emu::mla_attend_paged(p.args(), q.data(), out.data(), a, scratch.data(), nullptr), std::invalid_argument);
}
