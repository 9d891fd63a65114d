// The chunked KDA kernel (kda_chunked.cu) in CPU mode against the CPU backend's recurrence
// (backend::cpu::kda_recurrent_head, head by head) and against the CUDA recurrence it hands its
// state to.
// Tolerance: 1e-4 of max(1, |value|) (relative 1e-4 plus absolute 1e-4) on outputs and state.
// The chunked form is the recurrence reassociated: the decay of a chunk is one exp of a summed
// log-decay instead of a product of per-token exps, S0 is read once a chunk, and u_t comes out of
// a C-step forward substitution; the C x C products sum keys in a rotated order. Each of these is
// a few ulps; the substitution chains up to 64 of them and the state sums them over every chunk,
// so agreement is 1e-7 to 1e-6 (each case prints its worst), and 1e-4 leaves room without hiding
// a wrong factor (a 1 % error in the decayed keys fails it by 7x, a missing beta by 27x).
#include "backend/cpu/kda_kernels.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

TEST_CASE("cuda kda_chunked (cpu mode): outputs and state equal the CPU recurrence, n around the chunk") {
    struct Shape {
        int64_t H, D;
        int chunk, slices;
    };
    // D = 128 at C = 64 is the K3 head at the largest chunk (165 KiB of shared memory on a GPU);
    // D = 64 with 2 slices splits the value columns over two blocks, and D = 256 takes the
    // default slices (2) and one column a group.
    for (const Shape s : {Shape{2, 32, 16, 1}, Shape{3, 64, 32, 1}, Shape{2, 64, 16, 2}, Shape{2, 128, 64, 1},
                          Shape{2, 32, 64, 1}, Shape{1, 256, 16, 0}}) {
        const int64_t C = s.chunk;
        // Each n with its own gate, so that every shape runs each gate and both product forms.
        struct Run {
            int64_t n;
            Gate gate;
        };
        for (const Run run : {Run{1, Gate::k3}, Run{C - 1, Gate::kimi_linear}, Run{C, Gate::strong},
                              Run{2 * C + 3, Gate::k3}, Run{2 * C + 3, Gate::kimi_linear}}) {
            const int64_t n = run.n;
            if (s.D >= 128 && n == C - 1) continue;   // CPU-mode time; the other runs cover both forms
            INFO("H ", s.H, " D ", s.D, " chunk ", C, " slices ", s.slices, " n ", n, " gate ", int(run.gate));
            const KdaInputs in = make_inputs(n, s.H, s.D, uint32_t(100 + n + s.D + C), run.gate);
            std::vector<float> state = in.state, want_state = in.state;
            std::vector<float> o(size_t(n * s.H * s.D), -1.0f);
            cuda::emu::kda_chunked(in.q.data(), in.k.data(), in.v.data(), in.g.data(), in.beta.data(), state.data(),
                                   o.data(), n, s.H, s.D, nullptr, s.chunk, s.slices);
            const std::vector<float> want = cpu_recurrent(in, want_state);
            std::printf("kda_chunked H %lld D %lld C %lld slices %d n %lld gate %d: "
                        "max err/max(1,|x|) out %.2e state %.2e\n",
                        (long long)s.H, (long long)s.D, (long long)C, s.slices, (long long)n, int(run.gate),
                        max_rel_err(o, want), max_rel_err(state, want_state));
            check_close(o, want, kTol, kTol, "kda_chunked outputs");
            check_close(state, want_state, kTol, kTol, "kda_chunked state");
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
    float* none = nullptr;
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 48, nullptr),
                    std::invalid_argument);
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 64, nullptr, 24),
                    std::invalid_argument);
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 256, nullptr, 64),
                    std::invalid_argument);
    CHECK_THROWS_AS(cuda::emu::kda_chunked(none, none, none, none, none, none, none, 1, 1, 64, nullptr, 16, 3),
                    std::invalid_argument);
}
