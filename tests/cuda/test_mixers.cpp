// The mixer kernels (kda.cu, mla.cu) in CPU mode against the CPU backend's ops.
//  - KDA recurrent: same operations in the same order per state row; only the dot products'
//    summation order differs (lanes and a butterfly vs the CPU's), so state and outputs agree
//    to 2e-5 of max(1, |value|) after several tokens.
//  - MLA absorbed: the kernels sum exp * c unnormalised per piece of positions (the grouped one
//    also rescales between its tiles of 16 rows) and rescale when they combine the pieces; the
//    CPU normalises first. 1e-5 relative + 1e-6 absolute.
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

#include <cmath>
#include <utility>

using namespace kinfer;
using kinfer::cuda::testing::check_close;
using kinfer::cuda::testing::cpu;
using kinfer::cuda::testing::randn;

namespace {

void l2_rows(std::vector<float>& x, int64_t D) {
    for (size_t r = 0; r < x.size() / size_t(D); ++r) {
        double s = 0;
        for (int64_t i = 0; i < D; ++i) s += double(x[r * size_t(D) + size_t(i)]) * x[r * size_t(D) + size_t(i)];
        for (int64_t i = 0; i < D; ++i) x[r * size_t(D) + size_t(i)] /= float(std::sqrt(s));
    }
}

}  // namespace

TEST_CASE("cuda kda_recurrent (cpu mode): outputs and state after several tokens match the CPU recurrence") {
    struct Shape {
        int64_t n, H, D;
    };
    for (const Shape s : {Shape{4, 3, 64}, Shape{1, 2, 128}, Shape{3, 1, 32}}) {
        INFO("n ", s.n, " H ", s.H, " D ", s.D);
        const int64_t di = s.H * s.D;
        std::vector<float> q = randn(size_t(s.n * di), 10), k = randn(size_t(s.n * di), 11);
        l2_rows(q, s.D);
        l2_rows(k, s.D);
        const std::vector<float> v = randn(size_t(s.n * di), 12);
        std::vector<float> g = randn(size_t(s.n * di), 13, 0.5f), beta = randn(size_t(s.n * s.H), 14);
        for (float& x : g) x = -std::fabs(x) * 0.3f;                      // log-decay <= 0
        for (float& b : beta) b = 1.0f / (1.0f + std::exp(-b));           // (0, 1)
        const std::vector<float> state0 = randn(size_t(s.H * s.D * s.D), 15, 0.2f);
        std::vector<float> state = state0, want_state = state0;
        std::vector<float> o(size_t(s.n * di), -1.0f), want_o(o.size(), -2.0f);
        cuda::emu::kda_recurrent(q.data(), k.data(), v.data(), g.data(), beta.data(), state.data(), o.data(), s.n, s.H,
                                 s.D, nullptr);
        backend::KdaScan scan;
        scan.q = q.data();
        scan.k = k.data();
        scan.v = v.data();
        scan.g = g.data();
        scan.beta = beta.data();
        scan.state = want_state.data();
        scan.o = want_o.data();
        scan.n = s.n;
        scan.H = s.H;
        scan.D = s.D;
        cpu().kda_scan(scan);
        check_close(o, want_o, 2e-5, 2e-5, "kda outputs");
        check_close(state, want_state, 2e-5, 2e-5, "kda state");
    }
    CHECK_THROWS_AS(cuda::emu::kda_recurrent(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, 1, 48, nullptr),
                    std::invalid_argument);
}

TEST_CASE("cuda mla_attend_absorbed (cpu mode): both pass-1 kernels, split over positions and combined, against the CPU op") {
    struct Shape {
        int64_t n, pos0, H, r, dr, split;
    };
    // The grouped kernel's edges: 17 heads (a second group of one, a warp with one live head),
    // K3's r 512 + 64 (two latent dims a thread), pieces that end mid-tile, the automatic split.
    for (const Shape s : {Shape{2, 40, 3, 64, 16, 16}, Shape{1, 100, 2, 32, 8, 256}, Shape{3, 0, 2, 32, 8, 2},
                          Shape{2, 70, 17, 512, 64, 0}, Shape{1, 45, 16, 96, 32, 20}}) {
        const int64_t R = s.r + s.dr;
        const std::vector<float> cache = randn(size_t((s.pos0 + s.n) * R), 20), Q = randn(size_t(s.n * s.H * R), 21);
        const float scale = 1.0f / std::sqrt(float(R));
        backend::MlaShape ms;
        ms.n = s.n, ms.pos0 = s.pos0, ms.H = s.H, ms.r = s.r, ms.dr = s.dr, ms.scale = scale;
        std::vector<float> want(size_t(s.n * s.H * s.r), -2.0f);
        cpu().mla_attend_absorbed(cache.data(), Q.data(), want.data(), ms);
        // The grouped kernel also on TF32 tensor cores (mla_mma.cuh): 3xTF32 at the fp32 kernels'
        // bound; single TF32 (11 bits of each operand) at 1e-2 relative, 1e-3 absolute.
        using cuda::emu::F32Math;
        using cuda::emu::MlaKernel;
        const std::pair<MlaKernel, F32Math> forms[] = {{MlaKernel::per_head, F32Math::fp32},
                                                       {MlaKernel::grouped, F32Math::fp32},
                                                       {MlaKernel::grouped, F32Math::tf32x3},
                                                       {MlaKernel::grouped, F32Math::tf32}};
        for (const auto& [kernel, math] : forms) {
            cuda::emu::MlaArgs a;
            a.n = s.n, a.pos0 = s.pos0, a.H = s.H, a.r = s.r, a.dr = s.dr, a.scale = scale, a.split = s.split;
            a.kernel = kernel;
            a.math = math;
            const bool is_grouped = kernel == MlaKernel::grouped;
            const int math_id = int(math);
            INFO("n ", s.n, " pos0 ", s.pos0, " H ", s.H, " r ", s.r, " split ", cuda::emu::mla_split(a), " grouped ",
                 is_grouped, " math ", math_id);
            CHECK(cuda::emu::mla_grouped(a) == is_grouped);
            std::vector<float> scratch(cuda::emu::mla_scratch_floats(a)), lat(want.size(), -1.0f);
            cuda::emu::mla_attend_absorbed(cache.data(), Q.data(), lat.data(), a, scratch.data(), nullptr);
            if (math == F32Math::tf32) check_close(lat, want, 1e-2, 1e-3, "mla latent output, single TF32");
            else check_close(lat, want, 1e-5, 1e-6, "mla latent output");
        }
    }
    // Automatic: grouped where it fits and there is more than one head; the split it picks for
    // K3 at 1M positions keeps the pieces (and the scratch) bounded.
    cuda::emu::MlaArgs k3;
    k3.n = 1, k3.pos0 = (int64_t(1) << 20) - 1, k3.H = 64, k3.r = 512, k3.dr = 64;
    CHECK(cuda::emu::mla_grouped(k3));
    CHECK(cuda::emu::mla_split(k3) % 16 == 0);
    CHECK(cuda::emu::mla_scratch_floats(k3) <= size_t(64 * 600 * 514));
    k3.H = 1;
    CHECK_FALSE(cuda::emu::mla_grouped(k3));
    CHECK(cuda::emu::mla_split(k3) == 256);
    k3.H = 64, k3.r = 1024;
    CHECK_FALSE(cuda::emu::mla_grouped(k3));
    k3.kernel = cuda::emu::MlaKernel::grouped;                 // asked for, but r is too wide: refused
    k3.pos0 = 0;
    const std::vector<float> c1(size_t(k3.r + k3.dr)), q1(size_t(k3.H * (k3.r + k3.dr)));
    std::vector<float> lat1(size_t(k3.H * k3.r)), scr(cuda::emu::mla_scratch_floats(k3));
    CHECK_THROWS_AS(cuda::emu::mla_attend_absorbed(c1.data(), q1.data(), lat1.data(), k3, scr.data(), nullptr),
                    std::invalid_argument);
}

TEST_CASE("cuda kda_decay (cpu mode): the K3 and the Kimi Linear gate, within 1e-6 relative") {
    const int64_t n = 3, H = 4, D = 32, di = H * D;
    const std::vector<float> g0 = randn(size_t(n * di), 40, 4.0f), dt = randn(size_t(di), 41);
    std::vector<float> a = randn(size_t(H), 42);
    for (float& v : a) v = -std::exp(v);                 // -exp(A_log)
    for (const backend::KdaGate gate : {backend::KdaGate{true, -5.0f}, backend::KdaGate{false, 0}}) {
        INFO("lower_bound ", gate.lower_bound);
        std::vector<float> g = g0, want = g0;
        cuda::emu::kda_decay(g.data(), dt.data(), a.data(), n, H, D, gate.lower_bound, gate.lb, nullptr);
        cpu().kda_decay(want.data(), dt.data(), a.data(), n, H, D, gate);
        check_close(g, want, 1e-6, 1e-7, "kda_decay");
    }
}

TEST_CASE("cuda conv_silu (cpu mode): outputs and the carried state match the CPU op over two calls") {
    const int64_t channels = 300, W = 4;
    const std::vector<float> taps = randn(size_t(channels * W), 43), state0 = randn(size_t(channels * (W - 1)), 44);
    std::vector<float> state = state0, want_state = state0;
    for (int64_t n : {5, 1, 2}) {                         // a prefill, then decode steps on the carried state
        INFO("n ", n);
        std::vector<float> x = randn(size_t(n * channels), 45 + uint32_t(n)), want = x;
        cuda::emu::conv_silu(x.data(), n, channels, W, taps.data(), state.data(), nullptr);
        cpu().conv_silu(want.data(), n, channels, W, taps.data(), want_state.data());
        check_close(x, want, 1e-5, 1e-6, "conv_silu outputs");
        check_close(state, want_state, 0, 0, "conv_silu state (exact: copied inputs)");
    }
}

TEST_CASE("cuda scatter_weighted (cpu mode): rows land at their index, weighted, exactly as on the CPU") {
    const int64_t cols = 50, n_dst = 9;
    const std::vector<int64_t> idx = {4, 0, 7, 2, 8};
    const std::vector<float> src = randn(idx.size() * size_t(cols), 50), w = randn(size_t(n_dst), 51);
    std::vector<float> wj(idx.size());
    for (size_t j = 0; j < idx.size(); ++j) wj[j] = w[size_t(idx[j])];
    std::vector<float> dst(size_t(n_dst * cols), 0.0f), want = dst;
    cuda::emu::scatter_weighted(src.data(), cols, idx.data(), wj.data(), int64_t(idx.size()), dst.data(), nullptr);
    cpu().scatter_weighted(src.data(), cols, idx, w.data(), want.data());
    check_close(dst, want, 0, 0, "scatter_weighted (exact)");
}

TEST_CASE("cuda gather_rows (cpu mode): each row from its index / div, exactly as on the CPU") {
    const int64_t cols = 300, n_src = 7;
    for (const int64_t div : {int64_t(1), int64_t(3)}) {
        INFO("div ", div);
        const std::vector<int64_t> idx = {6 * div, 0, 2 * div + div - 1, 6 * div + 1 % div, 3 * div, 3 * div};
        const std::vector<float> src = randn(size_t(n_src * cols), 60);
        std::vector<float> dst(idx.size() * size_t(cols), -1.0f), want(dst.size(), -2.0f);
        cuda::emu::gather_rows(src.data(), cols, idx.data(), div, int64_t(idx.size()), dst.data(), nullptr);
        cpu().gather_rows(src.data(), cols, idx, div, want.data());
        check_close(dst, want, 0, 0, "gather_rows (exact)");
    }
}

TEST_CASE("cuda attn_res_mix (cpu mode): no banked block and three of them, within 1e-5 of the CPU op") {
    const int64_t n = 3, d = 700;
    const std::vector<float> p = randn(size_t(n * d), 52), w = randn(size_t(d), 53, 0.1f);
    std::vector<std::vector<float>> blocks;
    for (uint32_t b = 0; b < 3; ++b) blocks.push_back(randn(size_t(n * d), 54 + b, 1.0f + float(b)));
    for (int m : {0, 3}) {
        INFO("banked blocks ", m);
        cuda::emu::AttnResStack st;
        std::vector<const float*> ptrs;
        for (int j = 0; j < m; ++j) {
            st.blocks[j] = blocks[size_t(j)].data();
            ptrs.push_back(blocks[size_t(j)].data());
        }
        st.m = m;
        std::vector<float> out(size_t(n * d), -1.0f), want(out.size(), -2.0f);
        cuda::emu::attn_res_mix(st, p.data(), w.data(), out.data(), n, d, 1e-6f, nullptr);
        cpu().attn_res_mix(ptrs, p.data(), w.data(), want.data(), n, d, 1e-6f);
        check_close(out, want, 1e-5, 1e-6, "attn_res_mix");
    }
}
