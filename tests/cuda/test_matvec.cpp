// The decode matvec kernel (src/backend/cuda/matvec.cu) in CPU mode, for every weight type it
// has, against two references:
//  - exact: the CPU's exact dequantization (traits().to_float) dotted in double. The kernel keeps
//    fp32 activations, so the only error is fp32 summation: |err| <= 1e-5 * sum |w x| + 1e-6.
//    A wrongly decoded nibble, scale or sign moves a dot by far more.
//  - the CPU backend's matmul, which first rounds the activations to the weight type's vec_dot
//    format (Q8_0 / Q8_K: steps of amax/127 per block of 32 / 256, fp16 scale; F16 / BF16: the
//    weight type itself). Per element that rounding is at most 0.57 * amax/127 (Q8_0: half a
//    step plus the fp16 scale's 2^-11 relative error over 127 steps), |x| 2^-11 (F16) or
//    |x| 2^-8 (BF16); the bound is the sum of |w| times that, plus the fp32 noise above.
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/types.h"

#include <algorithm>
#include <string>

using namespace kinfer;
using kinfer::cuda::testing::act_rounding;
using kinfer::cuda::testing::randn;

namespace {

struct Case {
    quant::Type type;
    int64_t cols;
};

// n = 1 is the decode kernel; n = 5 the several-token one (4 tokens a block: the second block
// has one).
void check_type(const Case& c, int64_t n) {
    const quant::Traits& tr = quant::traits(c.type);
    const int64_t rows = 37, cols = c.cols;   // 37 rows: the last block (16 rows) and warp (4) are partial
    INFO("type ", tr.name, " cols ", cols, " tokens ", n);
    const std::vector<float> wf = randn(size_t(rows * cols), 1000 + uint32_t(c.type));
    const size_t rb = quant::row_size(tr, cols);
    std::vector<uint8_t> W(rb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) tr.quantize(wf.data() + r * cols, W.data() + size_t(r) * rb, cols);
    const std::vector<float> x = randn(size_t(n * cols), 77);

    std::vector<float> y(size_t(n * rows), -1.0f);
    cuda::emu::matvec(c.type, W.data(), rb, rows, cols, x.data(), 0, n, y.data(), 0, nullptr);

    // Exact reference.
    std::vector<float> deq(static_cast<size_t>(cols)), exact(size_t(n * rows)), exact_tol(size_t(n * rows));
    std::vector<float> cpu_tol(size_t(n * rows));
    for (int64_t r = 0; r < rows; ++r) {
        tr.to_float(W.data() + size_t(r) * rb, deq.data(), cols);
        for (int64_t t = 0; t < n; ++t) {
            const float* xt = x.data() + t * cols;
            const std::vector<double> act = act_rounding(c.type, xt, cols);
            double s = 0, mag = 0, rounding = 0;
            for (int64_t i = 0; i < cols; ++i) {
                s += double(deq[size_t(i)]) * double(xt[i]);
                mag += std::fabs(double(deq[size_t(i)]) * double(xt[i]));
                rounding += std::fabs(double(deq[size_t(i)])) * act[size_t(i)];
            }
            exact[size_t(t * rows + r)] = float(s);
            exact_tol[size_t(t * rows + r)] = float(1e-5 * mag + 1e-6);
            cpu_tol[size_t(t * rows + r)] = float(rounding + 1e-5 * mag + 1e-6);
        }
    }
    std::vector<float> cpu_y(size_t(n * rows), 0.0f);
    const backend::Mat M{c.type, cols, rows, W.data(), rb, 0, "test_weight"};
    cuda::testing::cpu().matmul(M, x.data(), n, cpu_y.data(), 0, 0);

    int bad_exact = 0, bad_cpu = 0;
    double worst_exact = 0, worst_cpu = 0;
    for (size_t i = 0; i < y.size(); ++i) {
        const double e1 = std::fabs(double(y[i]) - double(exact[i])), e2 = std::fabs(double(y[i]) - double(cpu_y[i]));
        bad_exact += !(e1 <= exact_tol[i]);
        bad_cpu += !(e2 <= cpu_tol[i]);
        worst_exact = std::max(worst_exact, e1 / exact_tol[i]);
        worst_cpu = std::max(worst_cpu, e2 / cpu_tol[i]);
    }
    INFO("worst error / bound: exact ", worst_exact, ", cpu backend ", worst_cpu);
    CHECK(bad_exact == 0);
    CHECK(bad_cpu == 0);
}

}  // namespace

TEST_CASE("cuda matvec (cpu mode): the first five types against the exact dot and the CPU backend") {
    for (const Case& c : {Case{quant::Type::F32, 516}, Case{quant::Type::Q8_0, 512}, Case{quant::Type::Q4_K, 512},
                          Case{quant::Type::MXFP4, 512}, Case{quant::Type::Q6_K, 512}})
        for (int64_t n : {1, 5}) check_type(c, n);
}

TEST_CASE("cuda matvec (cpu mode): the other seven types against the exact dot and the CPU backend") {
    for (const Case& c : {Case{quant::Type::F16, 516}, Case{quant::Type::BF16, 516}, Case{quant::Type::Q4_0, 512},
                          Case{quant::Type::Q5_0, 512}, Case{quant::Type::Q5_K, 512}, Case{quant::Type::IQ4_NL, 512},
                          Case{quant::Type::IQ4_XS, 512}})
        for (int64_t n : {1, 5}) check_type(c, n);
}

TEST_CASE("cuda matvec (cpu mode): every type it claims, and a clear refusal of the others") {
    for (uint32_t id = 0; id < 40; ++id) {
        const quant::Traits* t = quant::traits_or_null(id);
        if (!t || cuda::emu::matvec_supported(t->type)) continue;
        float x[256] = {}, y[1] = {};
        std::vector<uint8_t> w(t->type_size * 256);
        CHECK_THROWS_WITH_AS(cuda::emu::matvec(t->type, w.data(), t->type_size, 1, t->block_size, x, 0, 1, y, 0, nullptr),
                             doctest::Contains(t->name), std::invalid_argument);
    }
    CHECK(cuda::emu::matvec_supported(quant::Type::MXFP4));
    CHECK(!cuda::emu::matvec_supported(quant::Type::Q2_K));
}
