// The CPU backend's element-wise decode ops split over the pool (conv_silu by channels, SiTU /
// SwiGLU by blocks of 256, the KDA decay by heads, the gate, AttnRes by sources and elements):
// with three threads, every output is bit for bit what one thread computes, which is the op's
// unsplit form. Every shape is big enough to be split (the pool is only used from a few thousand
// elements; a smaller one would run the same code on both sides), some leaving a partial vector
// or block at the end.
#include "test_util.h"

#include "backend/cpu_backend.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

using namespace kinfer;

using kinfer::test::randn;

namespace {

// Equal bit patterns, naming the first element that differs.
void check_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
    REQUIRE(got.size() == want.size());
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < got.size(); ++i)
        if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ == 0) first = i;
    INFO(what, ": ", bad, " of ", got.size(), " differ, first at ", first, " (", got[first], " vs ", want[first], ")");
    CHECK(bad == 0);
}

// conv_silu's operands: n tokens of di channels, W taps a channel, the state of W - 1 inputs
// (random, from seeds seed..seed + 2).
struct ConvCase {
    std::vector<float> x, taps, state;
    ConvCase(int64_t n, int64_t di, int64_t W, uint32_t seed)
        : x(randn(size_t(n * di), seed)), taps(randn(size_t(di * W), seed + 1, 0.5f)),
          state(randn(size_t(di * (W - 1)), seed + 2)) {}
};

backend::CpuBackend& one() {
    static backend::CpuBackend be(1);
    return be;
}
backend::CpuBackend& three() {
    static backend::CpuBackend be(3);
    return be;
}

}  // namespace

TEST_CASE("parallel decode ops: conv_silu split by channels gives one thread's outputs and state") {
    for (const int64_t di : {int64_t(12288), int64_t(2056)}) {
        for (const int64_t n : {int64_t(1), int64_t(3)}) {
            CAPTURE(di);
            CAPTURE(n);
            const int64_t W = 4;
            const ConvCase c(n, di, W, 1);
            std::vector<float> x1 = c.x, s1 = c.state, x3 = c.x, s3 = c.state;
            for (int call = 0; call < 2; ++call) {   // the second call starts from the carried state
                one().conv_silu(x1.data(), n, di, W, c.taps.data(), s1.data());
                three().conv_silu(x3.data(), n, di, W, c.taps.data(), s3.data());
            }
            check_bits(x3, x1, "outputs");
            check_bits(s3, s1, "state");
        }
    }
}

// Decode's one-token form of the convolution (conv_step_avx2.cpp) against the general form:
// a prompt of three tokens in one call, and the same tokens one call each, give the same outputs
// and the same final state, bit for bit.
TEST_CASE("parallel decode ops: conv_silu one token a call gives the bits of one call over the tokens") {
    // The one-token form is the models' 4 taps at the AVX2 level and up (at the scalar level both
    // sides run the general form).
    const int64_t n = 3, W = 4;
    for (const int64_t di : {int64_t(1024), int64_t(2056), int64_t(37)}) {
            CAPTURE(di);
            const ConvCase c(n, di, W, 4);
            std::vector<float> xa = c.x, sa = c.state, xb = c.x, sb = c.state;
            one().conv_silu(xa.data(), n, di, W, c.taps.data(), sa.data());
            for (int64_t t = 0; t < n; ++t) one().conv_silu(xb.data() + t * di, 1, di, W, c.taps.data(), sb.data());
            check_bits(xb, xa, "outputs");
            check_bits(sb, sa, "state");
        }
}

TEST_CASE("parallel decode ops: SwiGLU / SiTU-GLU split in blocks gives one thread's bits, one row or several") {
    for (const int64_t rows : {int64_t(1), int64_t(3)}) {
    for (const int64_t ff : {int64_t(9216), int64_t(3000)}) {
        for (const backend::Glu act : {backend::Glu{}, backend::Glu{true, 4.0f, 0.0f}, backend::Glu{true, 4.0f, 8.0f}}) {
            CAPTURE(rows);
            CAPTURE(ff);
            CAPTURE(act.situ);
            CAPTURE(act.linear_beta);
            const std::vector<float> u = randn(size_t(rows * ff), 5, 3.0f);
            std::vector<float> g1 = randn(size_t(rows * ff), 4, 3.0f), g3 = g1;
            one().glu(g1.data(), u.data(), rows, ff, act);
            three().glu(g3.data(), u.data(), rows, ff, act);
            check_bits(g3, g1, "glu");
        }
    }
    }
}

TEST_CASE("parallel decode ops: the KDA decay by heads and the sigmoid gate give one thread's bits") {
    struct Shape {
        int64_t n, H, D;
    };
    for (const Shape s : {Shape{1, 96, 128}, Shape{2, 40, 32}}) {
        for (const backend::KdaGate gate : {backend::KdaGate{true, -5.0f}, backend::KdaGate{}}) {
            CAPTURE(s.n);
            CAPTURE(s.H);
            CAPTURE(gate.lower_bound);
            const int64_t di = s.H * s.D;
            const std::vector<float> bias = randn(size_t(di), 7), a = randn(size_t(s.H), 8);
            std::vector<float> g1 = randn(size_t(s.n * di), 6, 2.0f), g3 = g1;
            one().kda_decay(g1.data(), bias.data(), a.data(), s.n, s.H, s.D, gate);
            three().kda_decay(g3.data(), bias.data(), a.data(), s.n, s.H, s.D, gate);
            check_bits(g3, g1, "decay");
        }
    }
    for (const int64_t n : {int64_t(12288 + 5)}) {
        CAPTURE(n);
        const std::vector<float> gate = randn(size_t(n), 10, 4.0f);
        std::vector<float> y1 = randn(size_t(n), 9), y3 = y1;
        one().mul_sigmoid(y1.data(), gate.data(), n);
        three().mul_sigmoid(y3.data(), gate.data(), n);
        check_bits(y3, y1, "mul_sigmoid");
    }
}

TEST_CASE("parallel decode ops: AttnRes split by sources, elements or tokens gives one thread's bits") {
    struct Shape {
        int64_t n, d, m;
    };
    for (const Shape s : {Shape{1, 7168, 0}, Shape{1, 7168, 3}, Shape{5, 1024, 2}}) {
        CAPTURE(s.n);
        CAPTURE(s.d);
        CAPTURE(s.m);
        std::vector<std::vector<float>> banks;
        std::vector<const float*> stack;
        for (int64_t j = 0; j < s.m; ++j) banks.push_back(randn(size_t(s.n * s.d), uint32_t(20 + j)));
        for (const auto& b : banks) stack.push_back(b.data());
        const std::vector<float> p = randn(size_t(s.n * s.d), 11), w = randn(size_t(s.d), 12, 0.1f);
        std::vector<float> out1(size_t(s.n * s.d), -1.0f), out3(out1.size(), -2.0f);
        one().attn_res_mix(stack, p.data(), w.data(), out1.data(), s.n, s.d, 1e-6f);
        three().attn_res_mix(stack, p.data(), w.data(), out3.data(), s.n, s.d, 1e-6f);
        check_bits(out3, out1, "attn_res_mix");
    }
}
