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
#include <cstring>
#include <stdexcept>
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

TEST_CASE("cuda matvec (cpu mode): the other nine types against the exact dot and the CPU backend") {
    for (const Case& c : {Case{quant::Type::F16, 516}, Case{quant::Type::BF16, 516}, Case{quant::Type::Q4_0, 512},
                          Case{quant::Type::Q5_0, 512}, Case{quant::Type::Q4_1, 512}, Case{quant::Type::Q5_1, 512},
                          Case{quant::Type::Q5_K, 512}, Case{quant::Type::IQ4_NL, 512}, Case{quant::Type::IQ4_XS, 512}})
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

// The grouped launch (matvec_group: MoE experts, projections sharing an input) must give each
// task exactly what matvec gives it alone, bit for bit: the same per-block code runs either way.
// Tasks of different row counts (partial blocks and warps), token counts (decode's 1, a chunk's
// few, a zero that is skipped), input and output strides, in one launch; all-decode groups take
// the one-token form.
TEST_CASE("cuda matvec_group (cpu mode): every task bit-equal to its own matvec, every type") {
    const auto& types = kinfer::cuda::testing::kKernelTypes;
    struct Task {
        int64_t rows, n, ldx_pad, ldy_pad;
    };
    const std::vector<Task> mixed = {{37, 1, 0, 0}, {16, 5, 3, 0}, {3, 2, 0, 7}, {0, 3, 0, 0}, {20, 0, 0, 0}, {64, 4, 1, 2}};
    const std::vector<Task> decode = {{37, 1, 0, 0}, {5, 1, 0, 0}, {33, 1, 0, 0}};
    for (const quant::Type type : types) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t cols = tr.block_size > 1 ? 512 : 260;
        const size_t rb = quant::row_size(tr, cols);
        for (const auto* tasks : {&mixed, &decode}) {
            INFO("type ", tr.name, tasks == &mixed ? " mixed tokens" : " decode");
            std::vector<std::vector<uint8_t>> W;
            std::vector<std::vector<float>> x, y_group, y_alone;
            cuda::emu::MatvecGroup g;
            for (size_t i = 0; i < tasks->size(); ++i) {
                const Task& t = (*tasks)[i];
                const int64_t ldx = cols + t.ldx_pad, ldy = t.rows + t.ldy_pad;
                const std::vector<float> wf = randn(size_t(std::max<int64_t>(t.rows, 1) * cols), 2000 + uint32_t(i));
                W.emplace_back(rb * size_t(std::max<int64_t>(t.rows, 1)));
                for (int64_t r = 0; r < t.rows; ++r) tr.quantize(wf.data() + r * cols, W.back().data() + size_t(r) * rb, cols);
                x.push_back(randn(size_t(std::max<int64_t>(t.n, 1) * ldx), 3000 + uint32_t(i)));
                // At least one element, so a task of no rows still has a buffer to compare.
                y_group.emplace_back(size_t(std::max<int64_t>(t.n, 1) * std::max<int64_t>(ldy, 1)), -7.0f);
                y_alone.emplace_back(y_group.back().size(), -7.0f);
                g.task[g.n_tasks++] = cuda::emu::MatvecTask{W.back().data(), x.back().data(), y_group.back().data(), t.rows,
                                                            t.n, ldx, ldy};
            }
            cuda::emu::matvec_group(type, rb, cols, g, nullptr);
            for (size_t i = 0; i < tasks->size(); ++i) {
                const Task& t = (*tasks)[i];
                cuda::emu::matvec(type, W[i].data(), rb, t.rows, cols, x[i].data(), cols + t.ldx_pad, t.n,
                                  y_alone[i].data(), t.rows + t.ldy_pad, nullptr);
                INFO("task ", i);
                CHECK(std::memcmp(y_group[i].data(), y_alone[i].data(), y_group[i].size() * sizeof(float)) == 0);
                if (t.rows > 0 && t.n > 0) CHECK(y_group[i][0] != -7.0f);   // written (the gaps between rows stay)
            }
        }
    }
    cuda::emu::MatvecGroup too_many;
    too_many.n_tasks = cuda::emu::kMatvecGroupMax + 1;
    CHECK_THROWS_AS(cuda::emu::matvec_group(quant::Type::F32, 16, 4, too_many, nullptr), std::invalid_argument);
}

// matvec_id (MoE by slot, the ids read on the device) must give each slot exactly what matvec
// gives its expert alone on its input row, every type: 5 experts of 37 rows (partial blocks),
// 3 tokens x 4 slots reading token s / 4 (gate / up) and 12 slots reading their own row (down),
// repeated and unused experts; an id out of range gives a NaN row and leaves the others alone.
TEST_CASE("cuda matvec_id (cpu mode): every slot bit-equal to its expert's own matvec, every type") {
    const auto& types = kinfer::cuda::testing::kKernelTypes;
    const int64_t E = 5, rows = 37, K = 4, n = 3, slots = n * K;
    const std::vector<int32_t> sel = {4, 0, 2, 1, 2, 4, 0, 3, 1, 1, 0, 4};   // expert 1 twice for token 2
    for (const quant::Type type : types) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t cols = tr.block_size > 1 ? 512 : 260;
        const size_t rb = quant::row_size(tr, cols), slice = rb * size_t(rows);
        INFO("type ", std::string(tr.name));
        const std::vector<float> wf = randn(size_t(E * rows * cols), 4000 + uint32_t(type));
        std::vector<uint8_t> W(slice * size_t(E));
        for (int64_t r = 0; r < E * rows; ++r) tr.quantize(wf.data() + r * cols, W.data() + size_t(r) * rb, cols);
        for (const int64_t x_div : {K, int64_t(1)}) {
            const std::vector<float> x = randn(size_t((slots / x_div) * cols), 5000 + uint32_t(x_div));
            std::vector<float> y(size_t(slots * rows), -1.0f);
            cuda::emu::matvec_id(type, W.data(), rb, slice, E, rows, cols, sel.data(), slots, x.data(), x_div, y.data(),
                                 nullptr);
            int differ = 0;
            for (int64_t s = 0; s < slots; ++s) {
                std::vector<float> alone(size_t(rows), -2.0f);
                cuda::emu::matvec(type, W.data() + size_t(sel[size_t(s)]) * slice, rb, rows, cols,
                                  x.data() + (s / x_div) * cols, 0, 1, alone.data(), 0, nullptr);
                differ += std::memcmp(alone.data(), y.data() + s * rows, size_t(rows) * sizeof(float)) != 0;
            }
            CHECK_MESSAGE(differ == 0, "x_div ", x_div);
        }
    }
    // A bad id: its slot's rows are NaN, the slot beside it is computed.
    const quant::Traits& tr = quant::traits(quant::Type::Q8_0);
    const int64_t cols = 64;
    const size_t rb = quant::row_size(tr, cols);
    std::vector<uint8_t> W(rb * 2 * 20);
    const std::vector<float> wf = randn(size_t(2 * 20 * cols), 6000), x = randn(size_t(2 * cols), 6001);
    for (int64_t r = 0; r < 40; ++r) tr.quantize(wf.data() + r * cols, W.data() + size_t(r) * rb, cols);
    const int32_t bad[2] = {7, 1};
    std::vector<float> y(40, 0.0f);
    cuda::emu::matvec_id(quant::Type::Q8_0, W.data(), rb, rb * 20, 2, 20, cols, bad, 2, x.data(), 1, y.data(), nullptr);
    CHECK(std::all_of(y.begin(), y.begin() + 20, [](float v) { return std::isnan(v); }));
    CHECK(std::none_of(y.begin() + 20, y.end(), [](float v) { return std::isnan(v); }));
    CHECK_THROWS_AS(cuda::emu::matvec_id(quant::Type::Q8_0, W.data(), rb, rb * 20, 2, 20, cols, bad, 2, x.data(), 0,
                                         y.data(), nullptr),
                    std::invalid_argument);
}
