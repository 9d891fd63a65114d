// The row-wise, element-wise, routing and embedding kernels (rows.cu, elementwise.cu, route.cu,
// embed.cu) in CPU mode against the CPU
// backend's ops. Tolerances: the CPU sums in double where the kernels sum in fp32 (a relative
// 1e-5 covers fp32 sums of a few thousand terms), and libm's expf / tanhf against the CPU's
// vectorised ones differ by an ulp or two.
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace kinfer;
using kinfer::cuda::testing::check_close;
using kinfer::cuda::testing::cpu;
using kinfer::cuda::testing::randn;

TEST_CASE("cuda rms_norm (cpu mode): rows with and without a weight, rows ld apart, within 1e-5 relative") {
    const int64_t rows = 5, d = 1000, ld = 1030;
    const std::vector<float> x = randn(size_t(rows * ld), 3, 2.0f), w = randn(size_t(d), 4);
    for (bool with_w : {true, false}) {
        INFO("weight ", with_w);
        std::vector<float> y(x.size(), 0.0f), want(x.size(), 0.0f);
        cuda::emu::rms_norm(x.data(), with_w ? w.data() : nullptr, y.data(), rows, d, 1e-6f, ld, nullptr);
        cpu().rms_norm(x.data(), with_w ? w.data() : nullptr, want.data(), rows, d, 1e-6f, ld);
        check_close(y, want, 1e-5, 1e-7, "rms_norm");
    }
    // In place, as the forward pass calls it.
    std::vector<float> inplace = x, want(x.size(), 0.0f);
    cuda::emu::rms_norm(inplace.data(), w.data(), inplace.data(), rows, d, 1e-6f, ld, nullptr);
    cpu().rms_norm(x.data(), w.data(), want.data(), rows, d, 1e-6f, ld);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = d; i < ld; ++i) want[size_t(r * ld + i)] = x[size_t(r * ld + i)];   // gaps untouched
    check_close(inplace, want, 1e-5, 1e-7, "rms_norm in place");
}

TEST_CASE("cuda softmax_rows (cpu mode): within 1e-5 relative of the CPU op") {
    const int64_t rows = 4, n = 777;
    std::vector<float> x = randn(size_t(rows * n), 5, 3.0f), want = x;
    cuda::emu::softmax_rows(x.data(), rows, n, 0.3f, nullptr);
    cpu().softmax_rows(want.data(), rows, n, 0.3f);
    check_close(x, want, 1e-5, 1e-9, "softmax");
}

TEST_CASE("cuda glu (cpu mode): SwiGLU and SiTU-GLU (with and without the linear branch) within 1e-5") {
    const int64_t n = 1000;
    const std::vector<float> g0 = randn(size_t(n), 6, 3.0f), u = randn(size_t(n), 7, 2.0f);
    struct Act {
        bool situ;
        float beta, lb;
    };
    for (const Act a : {Act{false, 0, 0}, Act{true, 1.5f, 0}, Act{true, 1.5f, 3.0f}}) {
        INFO("situ ", a.situ, " beta ", a.beta, " linear_beta ", a.lb);
        std::vector<float> g = g0, want = g0;
        cuda::emu::glu(g.data(), u.data(), n, a.situ, a.beta, a.lb, nullptr);
        cpu().glu(want.data(), u.data(), 1, n, backend::Glu{a.situ, a.beta, a.lb});
        check_close(g, want, 1e-5, 1e-6, "glu");
    }
}

TEST_CASE("cuda route (cpu mode): the same experts as the CPU op, weights and scores within 1e-6") {
    struct Shape {
        int64_t n, E, K;
        bool norm;
        float scale;
    };
    for (const Shape s : {Shape{5, 96, 8, true, 2.5f}, Shape{3, 256, 8, true, 1.0f}, Shape{2, 384, 6, false, 1.0f}}) {
        INFO("E ", s.E, " K ", s.K);
        const std::vector<float> logits = randn(size_t(s.n * s.E), 8 + uint32_t(s.E), 2.0f);
        const std::vector<float> bias = randn(size_t(s.E), 9, 0.05f);
        std::vector<float> probs = logits, want_probs = logits;
        std::vector<int32_t> sel(size_t(s.n * s.K), -1), want_sel(sel.size(), -2);
        std::vector<float> w(sel.size()), want_w(sel.size());
        cuda::emu::route(probs.data(), bias.data(), s.n, s.E, s.K, s.norm, s.scale, sel.data(), w.data(), nullptr);
        cpu().route(want_probs.data(), bias.data(), s.n, backend::RouteParams{s.E, s.K, s.norm, s.scale},
                    want_sel.data(), want_w.data(), {});
        CHECK(sel == want_sel);
        check_close(w, want_w, 1e-6, 0, "route weights");
        check_close(probs, want_probs, 1e-6, 0, "sigmoid scores");
    }
}

// NaN logits (an overflow upstream): every token still gets K distinct experts in range (a NaN
// once left the argmax at id E: a shared-memory write past the scores, an expert E for the host).
TEST_CASE("cuda route (cpu mode): NaN scores still give K distinct experts in range") {
    const int64_t n = 3, E = 64, K = 8;
    std::vector<float> logits = randn(size_t(n * E), 77, 2.0f);
    const std::vector<float> bias(size_t(E), 0.0f);
    for (int64_t e = 0; e < E; ++e) logits[size_t(e)] = NAN;                 // token 0: all NaN
    for (int64_t e = 0; e < E; e += 2) logits[size_t(E + e)] = NAN;          // token 1: half
    logits[size_t(2 * E + 5)] = NAN;                                          // token 2: one
    std::vector<int32_t> sel(size_t(n * K), -1);
    std::vector<float> w(sel.size());
    cuda::emu::route(logits.data(), bias.data(), n, E, K, true, 1.0f, sel.data(), w.data(), nullptr);
    for (int64_t t = 0; t < n; ++t) {
        INFO("token ", t);
        std::vector<int32_t> s(sel.begin() + t * K, sel.begin() + (t + 1) * K);
        for (int32_t e : s) CHECK((e >= 0 && e < E));
        std::sort(s.begin(), s.end());
        CHECK(std::adjacent_find(s.begin(), s.end()) == s.end());
        if (t == 0) CHECK(s == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});   // all -inf: the lowest ids
        if (t == 1)
            for (int32_t e : s) CHECK(e % 2 == 1);                                 // the numbers before any NaN
        if (t == 2)
            for (int32_t e : s) CHECK(e != 5);
    }
}

TEST_CASE("cuda l2_norm, add, mul_sigmoid, sigmoid, sum_slots, scale_rows (cpu mode): against the CPU ops") {
    const int64_t rows = 3, d = 300;
    std::vector<float> x = randn(size_t(rows * d), 30), want = x;
    cuda::emu::l2_norm(x.data(), rows, d, 1e-6f, nullptr);
    cpu().l2_norm(want.data(), rows, d, 1e-6f);
    check_close(x, want, 1e-5, 1e-8, "l2_norm");

    const int64_t n = 1234;
    const std::vector<float> a = randn(size_t(n), 31), g = randn(size_t(n), 32, 3.0f), y0 = randn(size_t(n), 33);
    std::vector<float> y = y0, wy = y0;
    cuda::emu::add(y.data(), a.data(), n, nullptr);
    cpu().add(wy.data(), a.data(), n);
    check_close(y, wy, 0, 0, "add (exact)");
    y = y0;
    wy = y0;
    cuda::emu::mul_sigmoid(y.data(), g.data(), n, nullptr);
    cpu().mul_sigmoid(wy.data(), g.data(), n);
    check_close(y, wy, 1e-6, 0, "mul_sigmoid");
    y = g;
    wy = g;
    cuda::emu::sigmoid(y.data(), n, nullptr);
    cpu().sigmoid(wy.data(), n);
    check_close(y, wy, 1e-6, 0, "sigmoid");

    const int64_t t = 3, K = 5, cols = 70;
    const std::vector<float> ys = randn(size_t(t * K * cols), 34);
    std::vector<float> out(size_t(t * cols)), wout(out.size());
    cuda::emu::sum_slots(ys.data(), t, K, cols, out.data(), nullptr);
    cpu().sum_slots(ys.data(), t, K, cols, wout.data());
    check_close(out, wout, 0, 0, "sum_slots (exact: same order)");

    // scale_rows: each row times its weight, the CPU's product (exact).
    std::vector<float> sr = ys, wsr = ys;
    const std::vector<float> wr = randn(size_t(t * K), 35);
    cuda::emu::scale_rows(sr.data(), wr.data(), t * K, cols, nullptr);
    cpu().scale_rows(wsr.data(), wr.data(), t * K, cols);
    check_close(sr, wsr, 0, 0, "scale_rows (exact)");
    CHECK(sr != ys);
}

// The embedding gather (embed.cu): every table type the matvec takes, rows the CPU's embed op
// dequantizes bit for bit; 300 tokens (two launches of at most 256 ids), repeated ids; an id
// out of range refused by name before anything runs.
TEST_CASE("cuda embed_rows (cpu mode): every table type, the CPU's embed bit for bit") {
    const auto& types = kinfer::cuda::testing::kKernelTypes;
    const int64_t vocab = 11, n = 300;
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; ++t) ids[size_t(t)] = int32_t((t * 7 + t / 5) % vocab);
    for (const quant::Type type : types) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t cols = tr.block_size > 1 ? 512 : 260;
        const size_t rb = quant::row_size(tr, cols);
        INFO("type ", std::string(tr.name));
        const std::vector<float> wf = randn(size_t(vocab * cols), 7000 + uint32_t(type));
        std::vector<uint8_t> E(rb * size_t(vocab));
        for (int64_t r = 0; r < vocab; ++r) tr.quantize(wf.data() + r * cols, E.data() + size_t(r) * rb, cols);
        std::vector<float> x(size_t(n * cols), -1.0f), want(x.size(), -2.0f);
        cuda::emu::embed_rows(type, E.data(), rb, vocab, cols, ids.data(), n, x.data(), nullptr);
        const backend::Mat M{type, cols, vocab, E.data(), rb, 0, "token_embd.weight"};
        cpu().embed(M, ids.data(), n, want.data());
        CHECK(std::memcmp(x.data(), want.data(), x.size() * sizeof(float)) == 0);
    }
    std::vector<float> table(size_t(4 * 32)), out(32);
    const int32_t bad = 4;
    CHECK_THROWS_WITH_AS(cuda::emu::embed_rows(quant::Type::F32, table.data(), 128, 4, 32, &bad, 1, out.data(), nullptr),
                         doctest::Contains("token id 4"), std::invalid_argument);
}
