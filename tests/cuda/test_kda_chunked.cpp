// The chunked KDA kernel (kda_chunked.cu) in CPU mode against the CPU backend's recurrence
// (backend::cpu::kda_recurrent_head, head by head) and against the CUDA recurrence it hands its
// state to.
// Tolerance: 1e-4 of max(1, |value|) (relative 1e-4 plus absolute 1e-4) on outputs and state.
// The chunked form is the recurrence reassociated: the decay of a chunk is one exp of a summed
// log-decay instead of a product of per-token exps, S0 is read once a chunk, and u_t comes out of
// a C-step forward substitution (in the tensor-core kernels a product with the chunk's inverse,
// invert_chunk); the C x C products sum keys in a rotated order. Each of these is
// a few ulps; the substitution chains up to 64 of them and the state sums them over every chunk,
// so agreement is 1e-7 to 1e-6 (each case prints its worst), and 1e-4 leaves room without hiding
// a wrong factor (a 1 % error in the decayed keys fails it by 7x, a missing beta by 27x).
#include "backend/cpu/kda_kernels.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

using namespace kinfer;
using kinfer::cuda::testing::check_close;
using kinfer::cuda::testing::randn;

// Named, not anonymous: test_cuda is a unity build, and test_mixers.cpp has its own normalize_heads.
namespace kda_chunked_test {

struct KdaInputs {
    int64_t n = 0, H = 0, D = 0;
    std::vector<float> q, k, v, g, beta, state;
};

void normalize_heads(std::vector<float>& x, int64_t D) {
    for (size_t r = 0; r < x.size() / size_t(D); ++r) {
        double s = 0;
        for (int64_t i = 0; i < D; ++i) s += double(x[r * size_t(D) + size_t(i)]) * x[r * size_t(D) + size_t(i)];
        for (int64_t i = 0; i < D; ++i) x[r * size_t(D) + size_t(i)] /= float(std::sqrt(s));
    }
}

// Gates as the model makes them. K3: lb * sigmoid(x) with lb = -5, values in (-5, 0), many near
// the bound; Kimi Linear: -a * softplus(x), small; and a strong decay (-3 .. -12 a token, Kimi
// Linear's gate is unbounded below) that makes every chunk size take the pairwise products.
// These K3 gates average about -3 a token: C = 16 chunks factor, full C = 32 / 64 chunks decay
// past 80 and go pairwise; Kimi Linear's small gates factor at every C; n = 1 and the 3-token
// tail of 2C + 3 factor too. So every chunk size runs both forms.
enum class Gate { k3, kimi_linear, strong };

KdaInputs make_inputs(int64_t n, int64_t H, int64_t D, uint32_t seed, Gate gate) {
    KdaInputs in;
    in.n = n;
    in.H = H;
    in.D = D;
    const size_t nd = size_t(n * H * D);
    in.q = randn(nd, seed);
    in.k = randn(nd, seed + 1);
    normalize_heads(in.q, D);
    normalize_heads(in.k, D);
    in.v = randn(nd, seed + 2);
    in.g = randn(nd, seed + 3, 2.0f);
    for (float& x : in.g) {
        switch (gate) {
            case Gate::k3: x = -5.0f / (1.0f + std::exp(-x - 1.0f)); break;
            case Gate::kimi_linear: x = -0.3f * std::log1p(std::exp(x - 2.0f)); break;
            case Gate::strong: x = -3.0f - 9.0f / (1.0f + std::exp(-x)); break;
        }
    }
    in.beta = randn(size_t(n * H), seed + 4);
    for (float& b : in.beta) b = 1.0f / (1.0f + std::exp(-b));
    in.state = randn(size_t(H * D * D), seed + 5, 0.3f);
    return in;
}

// The CPU recurrence over every head: outputs [n][H*D], and the state advanced in place.
std::vector<float> cpu_recurrent(const KdaInputs& in, std::vector<float>& state) {
    const int64_t di = in.H * in.D;
    std::vector<float> o(size_t(in.n * di), -3.0f);
    for (int64_t h = 0; h < in.H; ++h)
        backend::cpu::kda_recurrent_head(in.D, in.n, in.q.data() + h * in.D, in.k.data() + h * in.D,
                                         in.v.data() + h * in.D, in.g.data() + h * in.D, in.beta.data() + h, di, in.H,
                                         state.data() + h * in.D * in.D, o.data() + h * in.D, di);
    return o;
}

double max_rel_err(const std::vector<float>& got, const std::vector<float>& want) {
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
        worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / std::max(1.0, std::fabs(double(want[i]))));
    return worst;
}

constexpr double kTol = 1e-4;

}  // namespace kda_chunked_test

using namespace kda_chunked_test;

// The chunked kernels: kda_chunked.cu (fp32), kda_chunked_mma.cu as 3xTF32 and as f16x3
// (kda_chunked_mma_f16.cuh) (worst seen over these runs: 6.6e-7 of max(1, |x|) for each; each
// run prints its own). The tensor-core forms are held to 5e-6, below what single TF32 or fp16
// products give (1.3e-5 in the case after this), so a split lost in any of their products fails
// here too; the strong gate's chunks take f16x3's row scaling from e^-80 and below.
TEST_CASE("cuda kda_chunked (cpu mode): outputs and state equal the CPU recurrence, n around the chunk, fp32, "
          "3xTF32 and f16x3") {
    struct Shape {
        int64_t H, D;
        int chunk, slices;
    };
    // D = 128 at C = 64 is the K3 head at the largest chunk (162 / 204 KiB of shared memory on a
    // GPU), and at C = 16 the K3 head at the default chunk (the fp16 kernel's D = 128 code); D = 64
    // with 2 slices splits the value columns over two blocks, and D = 256 takes the default slices
    // (2) and one column a group (the fp32 kernel). D = 64 in 4 slices of 16 columns is the
    // tensor-core kernel's alone: a block of one warp, fewer threads than C = 64. The tensor-core
    // kernels' C x C products (chunk_products_tf32) cut their keys in 2 parts at D = 64, C = 16 in
    // one slice (4 warps), in 4 at D = 128 and 256 (8 warps), and in none elsewhere.
    // D = 128 at C = 32 is the tensor-core kernels' K3 head at their middle chunk.
    for (const Shape s : {Shape{2, 32, 16, 1}, Shape{3, 64, 32, 1}, Shape{2, 64, 16, 2}, Shape{1, 64, 16, 1},
                          Shape{2, 128, 64, 1}, Shape{1, 128, 16, 1}, Shape{2, 32, 64, 1}, Shape{1, 256, 16, 0},
                          Shape{1, 64, 64, 4}, Shape{1, 128, 32, 1}}) {
        const int64_t C = s.chunk;
        // Each n with its own gate, so that every shape runs each gate and both product forms. The
        // last is one partial chunk, C / 2 + 4 tokens, that decays too much to factor (the strong
        // gate: over 80 in 12 tokens), a launch's first: its C x C products are pairwise and form
        // only its rows, so the rows past it hold what the shared memory held (the CPU mode: NaNs
        // or 3.4e38s), which the tensor-core kernels' products must keep out (at C = 32 and 64, of
        // the inverse's off-diagonal blocks, invert_chunk: at C = 64, 36 rows, the 32 x 32 block's).
        struct Run {
            int64_t n;
            Gate gate;
        };
        for (const Run run : {Run{1, Gate::k3}, Run{C - 1, Gate::kimi_linear}, Run{C, Gate::strong},
                              Run{2 * C + 3, Gate::k3}, Run{2 * C + 3, Gate::kimi_linear}, Run{C / 2 + 4, Gate::strong}}) {
            const int64_t n = run.n;
            if (s.D >= 128 && n == C - 1) continue;   // CPU-mode time; the other runs cover both forms
            const KdaInputs in = make_inputs(n, s.H, s.D, uint32_t(100 + n + s.D + C), run.gate);
            std::vector<float> want_state = in.state;
            const std::vector<float> want = cpu_recurrent(in, want_state);
            using cuda::emu::F32Math;
            for (const F32Math math : {F32Math::fp32, F32Math::tf32x3, F32Math::f16x3}) {
                const bool tc = math != F32Math::fp32;
                if (!tc && s.slices > 0 && (s.D / s.slices) % 32 != 0) continue;   // the fp32 kernel's groups
                // Under the sanitizers (this file is built at -O0 there) the tensor-core forms'
                // emulated products take most of the case's time: their D >= 128 shapes run in the
                // Release suites only; the smaller ones take every code path of the kernels.
                if (tc && s.D >= 128 && sanitized()) continue;
                // f16x3 has no C = 64 at D = 128 (its Zt takes the shared memory; the next case
                // checks the refusal); D = 256 in two slices runs K3's 128 columns a block at C = 16.
                if (math == F32Math::f16x3 && s.D == 128 && C == 64) continue;
                const char* name = math == F32Math::fp32 ? "" : math == F32Math::tf32x3 ? "_mma 3xTF32" : "_mma f16x3";
                INFO("H ", s.H, " D ", s.D, " chunk ", C, " slices ", s.slices, " n ", n, " gate ", int(run.gate),
                     " form ", std::string(name));
                std::vector<float> state = in.state, o(size_t(n * s.H * s.D), -1.0f);
                cuda::emu::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), state.data(),
                                       o.data(), n, s.H, s.D, nullptr, s.chunk, s.slices, math);
                std::printf("kda_chunked%s H %lld D %lld C %lld slices %d n %lld gate %d: "
                            "max err/max(1,|x|) out %.2e state %.2e\n",
                            name, (long long)s.H, (long long)s.D, (long long)C, s.slices,
                            (long long)n, int(run.gate), max_rel_err(o, want), max_rel_err(state, want_state));
                const double tol = tc ? 5e-6 : kTol;
                check_close(o, want, tol, tol, "kda_chunked outputs");
                check_close(state, want_state, tol, tol, "kda_chunked state");
            }
        }
    }
}

// A log-decay that rises and then falls inside each chunk. No model's gate is positive, but the
// C x C products do not assume g <= 0: here G climbs to +64 and falls back to -64 in every
// 16-token chunk, both ends inside +-80 and a span of 128. finish_chunk's span test sends these
// chunks pairwise; testing the ends alone factored them, where the tensor-core products' weighted
// operands (exp(G_t - G_L / 2) k) overflow to inf (exp(96)). The values grow by e^64 inside a
// chunk and the chunked form's reassociation loses more there (worst seen: fp32 1.9e-4, 3xTF32
// 8.5e-5), so the bound is 1e-3. f16x3 is not run: its update scales U^T's rows and Z's columns
// into fp16 (kda_chunked_mma_f16.cuh), which holds only while G falls.
// The other runs are one partial chunk each, 20 at C = 32 and 36 and 52 at C = 64, pairwise, as a
// launch's first: their A rows from 20 / 36 / 52 on were never written (the CPU mode fills shared
// memory with NaNs or 3.4e38s), which the tensor-core kernels' inverse must keep out of its
// off-diagonal blocks (invert_chunk). At C = 64, 36 rows leave the third 16-row block partial and
// the fourth unused; 52 the fourth partial, under the third's off-diagonal block and the 32 x 32
// one.
TEST_CASE("cuda kda_chunked (cpu mode): a log-decay that rises and falls inside a chunk, fp32 and 3xTF32") {
    const int64_t H = 1, D = 32;
    for (const std::pair<int64_t, int>& run : {std::pair<int64_t, int>{35, 16}, {20, 32}, {36, 64}, {52, 64}}) {
        const int64_t n = run.first;   // (no structured binding: clang cannot capture one in INFO)
        const int chunk = run.second;
        KdaInputs in = make_inputs(n, H, D, 77, Gate::kimi_linear);
        for (int64_t t = 0; t < n; ++t)
            for (int64_t i = 0; i < D; ++i) in.g[size_t(t * D + i)] = t % 16 < 8 ? 8.0f : -16.0f;
        std::vector<float> want_state = in.state;
        const std::vector<float> want = cpu_recurrent(in, want_state);
        using cuda::emu::F32Math;
        for (const F32Math math : {F32Math::fp32, F32Math::tf32x3}) {
            INFO("form ", int(math), " n ", (long long)n, " chunk ", chunk);
            std::vector<float> state = in.state, o(size_t(n * H * D), -1.0f);
            cuda::emu::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), state.data(),
                                   o.data(), n, H, D, nullptr, chunk, 1, math);
            std::printf("kda_chunked rising and falling G, n %lld, C %d, form %d: max err/max(1,|x|) out %.2e "
                        "state %.2e\n",
                        (long long)n, chunk, int(math), max_rel_err(o, want), max_rel_err(state, want_state));
            check_close(o, want, 1e-3, 1e-3, "kda_chunked outputs");
            check_close(state, want_state, 1e-3, 1e-3, "kda_chunked state");
        }
    }
}

TEST_CASE("cuda kda_chunked (cpu mode): a prefill in chunks, then kda_recurrent decode steps, equals the recurrence "
          "over all tokens") {
    const int64_t H = 2, D = 64, n_pre = 37, n_dec = 3, n = n_pre + n_dec, di = H * D;
    const KdaInputs in = make_inputs(n, H, D, 7, Gate::k3);
    std::vector<float> state = in.state, want_state = in.state;
    std::vector<float> o(size_t(n * di), -1.0f);
    cuda::emu::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), state.data(), o.data(),
                           n_pre, H, D, nullptr, 16, 1);
    for (int64_t t = n_pre; t < n; ++t) {   // one decode step at a time, as the backend calls it
        const size_t off = size_t(t * di);
        cuda::emu::kda_recurrent(in.q.data() + off, in.k.data() + off, in.v.data() + off, in.g.data() + off,
                                 in.beta.data() + t * H, state.data(), o.data() + off, 1, H, D, nullptr);
    }
    const std::vector<float> want = cpu_recurrent(in, want_state);
    check_close(o, want, kTol, kTol, "prefill + decode outputs");
    check_close(state, want_state, kTol, kTol, "prefill + decode state");
}

TEST_CASE("cuda kda_chunked (cpu mode): the default chunk runs, and unsupported shapes throw") {
    CHECK(cuda::emu::kda_chunked_default_chunk(128) == 16);
    const int64_t H = 1, D = 32, n = 5;
    const KdaInputs in = make_inputs(n, H, D, 9, Gate::kimi_linear);
    std::vector<float> state = in.state, want_state = in.state, o(size_t(n * D));
    cuda::emu::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), state.data(), o.data(),
                           n, H, D, nullptr);
    check_close(o, cpu_recurrent(in, want_state), kTol, kTol, "default chunk outputs");
    // Refused by both forms: a head dim, a chunk, C = 64 at D = 256 (shared memory), 3 slices.
    float* none = nullptr;
    using cuda::emu::F32Math;
    for (const F32Math math : {F32Math::fp32, F32Math::tf32x3, F32Math::f16x3}) {
        INFO("math ", int(math));
        auto call = [&](int64_t D, int chunk, int slices) {
            cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, D, nullptr, chunk, slices, math);
        };
        CHECK_THROWS_AS(call(48, 0, 0), std::invalid_argument);
        CHECK_THROWS_AS(call(64, 24, 0), std::invalid_argument);
        CHECK_THROWS_AS(call(256, 64, 0), std::invalid_argument);
        CHECK_THROWS_AS(call(64, 16, 3), std::invalid_argument);
    }
    // 8 columns a block: less than the tensor-core form's warp of 16.
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 32, nullptr, 16, 4, F32Math::tf32x3),
                    std::invalid_argument);
    // f16x3 at C = 64 only up to D = 64 (shared memory); f16x2 is the MLA's form, not the KDA's.
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 128, nullptr, 64, 0, F32Math::f16x3),
                    std::invalid_argument);
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 32, nullptr, 16, 0, F32Math::f16x2),
                    std::invalid_argument);
}

// ---- kda_chunked_mma.cu: the state products on TF32 tensor cores (mma_tf32.cuh) ----

namespace kda_chunked_test {

// x rounded to TF32 as cvt.rna.tf32.f32 does (nearest, ties away from zero), on the host.
float tf32_host(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xffffe000u;
    std::memcpy(&x, &u, 4);
    return x;
}

}  // namespace kda_chunked_test

// Tolerances: a TF32 product keeps 11 bits of each operand, so the single form is off from the
// product of the rounded operands only by fp32 summation (1e-6 of sum |a b|), and 3xTF32 from
// the exact product by about 2^-21 of each |a b| (held to 1e-6 of sum |a b|); the single form's
// error from the exact product is about 2^-11 of each |a b|, and must be over 30x the split's.
TEST_CASE("cuda mma_tf32 (cpu mode): the fragments, TF32 rounding, and the 3xTF32 split") {
    std::mt19937 rng(515);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    double worst_single = 0, worst_split = 0;
    for (int trial = 0; trial < 4; ++trial) {
        INFO("trial ", trial);
        std::vector<float> A(16 * 8), B(8 * 8);   // B: column c's 8 k values at 8 c
        for (auto& a : A) a = nd(rng);
        for (auto& b : B) b = nd(rng) * 1e3f;
        std::vector<float> out(4 * 128, 7.0f);
        cuda::emu::mma_tf32_check(A.data(), B.data(), out.data(), nullptr);
        int bad = 0;
        for (int r = 0; r < 16; ++r)
            for (int c = 0; c < 8; ++c) {
                double exact = 0, rounded = 0, mag = 0;
                for (int k = 0; k < 8; ++k) {
                    const double a = A[size_t(8 * r + k)], b = B[size_t(8 * c + k)];
                    exact += a * b;
                    rounded += double(tf32_host(float(a))) * double(tf32_host(float(b)));
                    mag += std::fabs(a * b);
                }
                const size_t at = size_t(8 * r + c);
                for (int f = 0; f < 2; ++f) bad += std::fabs(out[128 * f + at] - rounded) > 1e-6 * mag;
                for (int f = 2; f < 4; ++f) bad += std::fabs(out[128 * f + at] - exact) > 1e-6 * mag;
                worst_single = std::max(worst_single, std::fabs(out[at] - exact) / mag);
                worst_split = std::max(worst_split, std::fabs(out[256 + at] - exact) / mag);
            }
        CHECK(bad == 0);
    }
    std::printf("mma_tf32: worst |err| / sum |a b| against the exact product: single %.2e, 3xTF32 %.2e\n", worst_single,
                worst_split);
    CHECK(worst_single > 30 * worst_split);
    // Rounding: A picks B's k = r % 8 into row r, so the single form's output is B rounded to TF32.
    std::vector<float> A(16 * 8, 0.0f), B(8 * 8, 0.0f);
    for (int r = 0; r < 16; ++r) A[size_t(8 * r + r % 8)] = 1.0f;
    const float tie = 1.0f + 0x1p-11f, below = 1.0f + 0x1p-11f - 0x1p-23f, kept = 1.0f + 0x1p-10f;
    const float cases[8][2] = {{tie, kept}, {-tie, -kept}, {below, 1.0f}, {-below, -1.0f},
                               {kept, kept}, {3.0f, 3.0f}, {0x1p-120f * tie, 0x1p-120f * kept}, {0.0f, 0.0f}};
    for (int k = 0; k < 8; ++k) B[size_t(k)] = cases[k][0];   // column 0
    std::vector<float> out(4 * 128);
    cuda::emu::mma_tf32_check(A.data(), B.data(), out.data(), nullptr);
    for (int r = 0; r < 16; ++r) {
        INFO("row ", r, " B ", cases[r % 8][0]);
        CHECK(out[size_t(8 * r)] == cases[r % 8][1]);
        // the split keeps 22 of the 24 bits: below's low bit goes, the others stay whole
        CHECK(std::fabs(out[size_t(256 + 8 * r)] - cases[r % 8][0]) <= std::ldexp(std::fabs(cases[r % 8][0]), -22));
    }
}

// The single forms: each state product keeps 11 bits of each operand (TF32, or fp16 after its
// scaling), so outputs and state move by a few 2^-11 of the terms' magnitudes over the sums
// (worst seen 1.3e-5: printed), held to 1e-3 of max(1, |x|); and the split forms (3xTF32, f16x3)
// must be at least 10x closer on the same inputs (the split is not a no-op).
TEST_CASE("cuda kda_chunked_mma (cpu mode): single TF32 / fp16 within their bound, 3xTF32 / f16x3 closer; prefill "
          "then decode") {
    const int64_t H = 2, D = 64, n_pre = 37, n_dec = 3, n = n_pre + n_dec, di = H * D;
    const KdaInputs in = make_inputs(n, H, D, 17, Gate::k3);
    std::vector<float> want_state = in.state;
    const std::vector<float> want = cpu_recurrent(in, want_state);
    for (const bool f16 : {false, true}) {
        double err[2] = {};
        for (const bool split : {false, true}) {
            INFO("fp16 ", f16, " split ", split);
            using cuda::emu::F32Math;
            const F32Math math = f16 ? (split ? F32Math::f16x3 : F32Math::f16) : (split ? F32Math::tf32x3 : F32Math::tf32);
            std::vector<float> state = in.state, o(size_t(n * di), -1.0f);
            cuda::emu::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), state.data(), o.data(),
                                   n_pre, H, D, nullptr, 16, 1, math);
            for (int64_t t = n_pre; t < n; ++t) {   // decode steps on the state the chunked form left
                const size_t off = size_t(t * di);
                cuda::emu::kda_recurrent(in.q.data() + off, in.k.data() + off, in.v.data() + off, in.g.data() + off,
                                         in.beta.data() + t * H, state.data(), o.data() + off, 1, H, D, nullptr);
            }
            err[split] = std::max(max_rel_err(o, want), max_rel_err(state, want_state));
            const double tol = split ? kTol : 1e-3;
            check_close(o, want, tol, tol, "prefill + decode outputs");
            check_close(state, want_state, tol, tol, "prefill + decode state");
        }
        std::printf("kda_chunked_mma prefill 37 + decode 3, worst err/max(1,|x|): %s %.2e, %s %.2e\n",
                    f16 ? "f16" : "tf32", err[0], f16 ? "f16x3" : "3xTF32", err[1]);
        CHECK(err[0] > 10 * err[1]);
    }
}

// f16x3's scaling (kda_chunked_mma_f16.cuh), with inputs whose exact results are known multiples
// of the unscaled recurrence's: the recurrence is linear in (v, S) and in q, and unchanged by
// k -> 2^b k, v -> 2^b v, beta -> 2^-2b beta (beta k k^T and beta k v^T keep their values), and
// powers of two commute with fp32 arithmetic away from its limits. So:
//   v and the initial state times 2^e: outputs and state times 2^e;
//   k and v times 2^b, beta times 2^-2b, q times 2^a: the state unchanged, outputs times 2^a.
// Each power takes some operand far outside fp16's 2^-14 .. 65504; the results times the
// inverse powers must meet the unscaled recurrence at the fp32 bound, as they do unscaled.
// Without M's or U's row scaling the state or u overflows fp16 at 2^20 (inf) and falls to its
// subnormals at 2^-20 (a few bits); without the token rows' or Z's column scaling so do the
// exp(G) k, exp(G) q and Z rows.
TEST_CASE("cuda kda_chunked_mma f16x3 (cpu mode): values far outside fp16's range, scaled into it") {
    const int64_t H = 1, D = 64, n = 37, di = H * D;
    const KdaInputs in = make_inputs(n, H, D, 23, Gate::kimi_linear);
    std::vector<float> want_state = in.state;
    const std::vector<float> want = cpu_recurrent(in, want_state);
    struct Powers {
        int vs, b, a;   // v and state; k, v and beta; q
    };
    for (const Powers p : {Powers{20, 0, 0}, Powers{-20, 0, 0}, Powers{0, -20, 20}, Powers{0, 20, -20}}) {
        INFO("v and state 2^", p.vs, ", k 2^", p.b, ", q 2^", p.a);
        KdaInputs sc = in;
        for (float& x : sc.v) x = std::ldexp(x, p.vs + p.b);
        for (float& x : sc.state) x = std::ldexp(x, p.vs);
        for (float& x : sc.k) x = std::ldexp(x, p.b);
        for (float& x : sc.beta) x = std::ldexp(x, -2 * p.b);
        for (float& x : sc.q) x = std::ldexp(x, p.a);
        std::vector<float> o(size_t(n * di), -1.0f);
        cuda::emu::kda_chunked(sc.q.data(), sc.k.data(), sc.v.data(), sc.g.data(), sc.beta.data(), sc.state.data(),
                               o.data(), n, H, D, nullptr, 16, 1, cuda::emu::F32Math::f16x3);
        for (float& x : o) x = std::ldexp(x, -(p.vs + p.a));
        for (float& x : sc.state) x = std::ldexp(x, -p.vs);
        std::printf("kda_chunked_mma f16x3, v and state 2^%d, k 2^%d, q 2^%d: max err/max(1,|x|) out %.2e state %.2e\n",
                    p.vs, p.b, p.a, max_rel_err(o, want), max_rel_err(sc.state, want_state));
        check_close(o, want, 5e-6, 5e-6, "f16x3 outputs, scaled back");
        check_close(sc.state, want_state, 5e-6, 5e-6, "f16x3 state, scaled back");
    }
}
