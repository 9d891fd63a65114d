// The prefill GEMM with the weights decoded in the kernel (src/backend/cuda/gemm_fused.cu) in CPU
// mode. Its operands are gemm_matmul's bit for bit, so the reference is exact: dequant_rows' fp16
// weights dotted in double with convert_rows_f16_scaled's fp16 activations, times each token's
// scale. The products of two fp16 values are exact in fp32; only the fp32 sums round, so |err| <= 4
// sqrt(K) 2^-24 sum |w16 x16| scale per output (four standard deviations of K roundings' walk; the
// worst case, K 2^-24, would not see one element of K = 7168 misplaced). A weight piece decoded
// into the wrong place or block, or a token's scale left out, moves an output by far more.
// Measured: at most 0.40 of the bound (a token with one value of 7e4 beside N(0, 1) ones, where the
// sum runs near that value's product), 0.13 elsewhere. In CPU mode the kernel's sums
// (mma_f16_plain: k in order, fp32) are the CPU-mode GEMM's (blas.cu: k in order, fp32), so
// gemm_matmul gives the same bits; on a GPU both orders are the hardware's.
//  - every quantized type of matvec_supported: two row tiles of 64 and two token tiles of 128,
//    both partial, widths of whole chunks of 128 and, for the 32-element types, a last chunk of
//    32, 64 or 96 (and a width below one chunk, on one partial token tile); K3's 7168 for Q4_K and
//    MXFP4; outputs ldy apart, the gaps untouched; gemm_matmul on the same inputs: the same bits;
//  - tokens past fp16's range (scaled by a power of two, multiplied back), and a workspace that
//    holds fewer tokens than the call (chunks: the same bits);
//  - fused_gemm_grouped: tasks of different rows and token counts (an empty one, one strided
//    input), each the bits of fused_gemm_matmul alone, with a workspace that holds them all, one
//    that flushes between them and one that sends the largest alone; a task past 4096 tokens;
//  - what it refuses.
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/fp16.h"
#include "quant/types.h"

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kinfer;
using kinfer::cuda::testing::randn;
namespace emu = kinfer::cuda::emu;

namespace {

constexpr quant::Type kFusedTypes[] = {quant::Type::Q8_0, quant::Type::Q4_0, quant::Type::Q5_0, quant::Type::Q4_1,
                                       quant::Type::Q5_1, quant::Type::IQ4_NL, quant::Type::MXFP4, quant::Type::Q4_K,
                                       quant::Type::Q5_K, quant::Type::Q6_K, quant::Type::IQ4_XS};

using Aligned = kinfer::cuda::testing::AlignedBytes;
using kinfer::cuda::testing::quantized_randn;

// y[t * ldy + r] = scale_t sum_i w16[r][i] x16[t][i] in double, and the bound
// 4 sqrt(K) 2^-24 scale_t sum |w16 x16| (+ 1e-30), from the operands the kernels themselves make.
struct Exact {
    std::vector<double> y, bound;
};
Exact exact(quant::Type type, const uint8_t* W, size_t rb, int64_t rows, int64_t cols, const std::vector<float>& x,
            int64_t ldx, int64_t n) {
    std::vector<uint16_t> w16(size_t(rows * cols)), x16(size_t(n * cols));
    std::vector<float> scale(static_cast<size_t>(n));
    emu::dequant_rows(type, W, rb, rows, cols, emu::Elem::F16, w16.data(), cols, nullptr);
    emu::convert_rows_f16_scaled(x.data(), ldx, n, cols, x16.data(), cols, scale.data(), nullptr);
    Exact e;
    e.y.resize(size_t(n * rows));
    e.bound.resize(size_t(n * rows));
    for (int64_t t = 0; t < n; ++t)
        for (int64_t r = 0; r < rows; ++r) {
            double s = 0, mag = 0;
            for (int64_t i = 0; i < cols; ++i) {
                const double p = double(quant::fp16_to_fp32(w16[size_t(r * cols + i)])) *
                                 double(quant::fp16_to_fp32(x16[size_t(t * cols + i)]));
                s += p, mag += std::fabs(p);
            }
            e.y[size_t(t * rows + r)] = s * scale[size_t(t)];
            e.bound[size_t(t * rows + r)] = 4 * std::sqrt(double(cols)) * std::ldexp(mag, -24) * scale[size_t(t)] + 1e-30;
        }
    return e;
}

// Outputs y (rows ldy apart) against the exact product: how many exceed the bound, the worst
// error / bound, and how many of the gaps between rows (filled with -7) were written.
struct Verdict {
    int bad = 0, gaps = 0;
    double worst = 0;
};
Verdict judge(const std::vector<float>& y, int64_t ldy, const Exact& e, int64_t rows, int64_t n) {
    Verdict v;
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t r = 0; r < rows; ++r) {
            const size_t i = size_t(t * rows + r);
            const double err = std::fabs(double(y[size_t(t * ldy + r)]) - e.y[i]);
            v.bad += !(err <= e.bound[i]);
            v.worst = std::max(v.worst, err / e.bound[i]);
        }
        for (int64_t r = rows; r < ldy; ++r) v.gaps += y[size_t(t * ldy + r)] != -7.0f;
    }
    return v;
}

std::vector<float> run_fused(quant::Type type, const uint8_t* W, size_t rb, int64_t rows, int64_t cols,
                             const std::vector<float>& x, int64_t ldx, int64_t n, int64_t ldy, size_t ws_bytes = 0) {
    if (!ws_bytes) ws_bytes = emu::fused_gemm_workspace_bytes(cols, n);
    Aligned ws(ws_bytes);
    std::vector<float> y(size_t(n * ldy), -7.0f);
    emu::fused_gemm_matmul(type, W, rb, rows, cols, x.data(), ldx, n, y.data(), ldy, ws.p, ws_bytes, nullptr);
    return y;
}

}  // namespace

TEST_CASE("cuda fused_gemm_matmul (cpu mode): every quantized type against the exact product, partial tiles") {
    std::unique_ptr<emu::Blas, void (*)(emu::Blas*)> blas(emu::blas_create(nullptr), emu::blas_destroy);
    for (const quant::Type type : kFusedTypes) {
        const quant::Traits& tr = quant::traits(type);
        const bool sb = quant::type_facts(type).block_size == quant::QK_K;
        REQUIRE(emu::fused_gemm_supported(type));
        struct Shape {
            int64_t cols, rows, n;
        };
        std::vector<Shape> shapes = {{512, 70, 131}};
        if (!sb) shapes.insert(shapes.end(), {{160, 70, 67}, {320, 70, 67}, {352, 70, 67}, {96, 70, 67}});
        if (type == quant::Type::Q4_K || type == quant::Type::MXFP4) shapes.push_back({7168, 40, 40});
        for (const Shape& shape : shapes) {
            const int64_t cols = shape.cols, rows = shape.rows, n = shape.n, ldy = rows + 3, ldx = cols + 5;
            INFO("type ", std::string(tr.name), ", cols ", cols);
            const size_t rb = quant::row_size(tr, cols);
            const Aligned W = quantized_randn(type, rows, cols, 8100 + uint32_t(type) + uint32_t(cols));
            const std::vector<float> x = randn(size_t(n * ldx), 8200 + uint32_t(cols));
            const Exact e = exact(type, W.p, rb, rows, cols, x, ldx, n);
            const std::vector<float> y = run_fused(type, W.p, rb, rows, cols, x, ldx, n, ldy);
            const Verdict v = judge(y, ldy, e, rows, n);
            INFO("fused: worst error / bound ", v.worst);
            CHECK(v.bad == 0);
            CHECK(v.gaps == 0);
            // gemm_matmul (dequantized tiles and the CPU mode's GEMM): in CPU mode the same sums.
            Aligned ws(emu::gemm_workspace_bytes(type, rows, cols, n));
            std::vector<float> g(size_t(n * ldy), -7.0f);
            emu::gemm_matmul(blas.get(), type, W.p, rb, rows, cols, x.data(), ldx, n, g.data(), ldy, ws.p,
                             emu::gemm_workspace_bytes(type, rows, cols, n), nullptr);
            CHECK(g == y);
        }
    }
}

TEST_CASE("cuda fused_gemm_matmul (cpu mode): tokens past fp16's range, and token chunks of a small workspace") {
    const quant::Type type = quant::Type::Q4_K;
    const int64_t rows = 66, cols = 256, n = 150;
    const size_t rb = quant::row_size(quant::traits(type), cols);
    const Aligned W = quantized_randn(type, rows, cols, 8300);
    std::vector<float> x = randn(size_t(n * cols), 8301);
    for (int64_t i = 0; i < cols; ++i) x[size_t(5 * cols + i)] *= 1e6f;   // token 5: past 65504, scaled by 2^-k
    x[size_t(40 * cols + 7)] = 7e4f;                                         // token 40: one value past it
    const Exact e = exact(type, W.p, rb, rows, cols, x, cols, n);
    const std::vector<float> y = run_fused(type, W.p, rb, rows, cols, x, cols, n, rows);
    const Verdict v = judge(y, rows, e, rows, n);
    INFO("worst error / bound ", v.worst);
    CHECK(v.bad == 0);
    CHECK(std::fabs(y[size_t(5 * rows)]) > 1e4f);   // the scaled token's outputs multiplied back
    // A workspace for 20 tokens: eight chunks, the same bits.
    const size_t small = emu::fused_gemm_workspace_bytes(cols, 20);
    CHECK(run_fused(type, W.p, rb, rows, cols, x, cols, n, rows, small) == y);
}

TEST_CASE("cuda fused_gemm_grouped (cpu mode): every task the bits of fused_gemm_matmul alone") {
    for (const quant::Type type : {quant::Type::Q4_K, quant::Type::Q6_K, quant::Type::MXFP4, quant::Type::Q5_1}) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t cols = 256;
        const size_t rb = quant::row_size(tr, cols);
        INFO("type ", std::string(tr.name));
        constexpr int kTasks = 5;
        const int64_t rows[kTasks] = {65, 0, 17, 64, 30}, n[kTasks] = {33, 5, 140, 1, 40};   // task 1 has no rows
        const int64_t first[kTasks] = {1, 0, 2, 9, 0}, ldx[kTasks] = {0, 0, 0, 0, cols + 3};   // task 4: its own strided input
        std::vector<Aligned> W;
        for (int i = 0; i < kTasks; ++i)
            W.push_back(quantized_randn(type, rows[i], cols, 8400 + uint32_t(i) + 10 * uint32_t(type)));
        const std::vector<float> x = randn(size_t(150 * cols), 8500), x4 = randn(size_t(40 * (cols + 3)), 8501);
        std::vector<std::vector<float>> alone(kTasks);
        std::vector<emu::GemmTask> tasks;
        for (int i = 0; i < kTasks; ++i) {
            const std::vector<float>& in = i == 4 ? x4 : x;
            const int64_t ld = ldx[i] ? ldx[i] : cols;
            const std::vector<float> xi(in.begin() + first[i] * ld, in.end());
            alone[size_t(i)] = rows[i] ? run_fused(type, W[size_t(i)].p, rb, rows[i], cols, xi, ld, n[i], rows[i] + 1)
                                       : std::vector<float>(size_t(n[i]), -7.0f);   // no rows: nothing written
            tasks.push_back({W[size_t(i)].p, rows[i], in.data() + first[i] * ld, ldx[i], n[i], nullptr, rows[i] + 1});
        }
        const size_t all = emu::fused_gemm_grouped_workspace_bytes(cols, tasks.data(), kTasks);
        // All in one launch; flushed after every task or two; the largest (140 tokens: two token
        // tiles) alone, in chunks.
        const size_t for40 = emu::fused_gemm_workspace_bytes(cols, 40), for33 = emu::fused_gemm_workspace_bytes(cols, 33);
        for (const size_t ws_bytes : {all, for40, for33}) {
            INFO("workspace ", ws_bytes, " of ", all);
            std::vector<std::vector<float>> y(kTasks);
            for (int i = 0; i < kTasks; ++i) {
                y[size_t(i)].assign(size_t(n[i] * (rows[i] + 1)), -7.0f);
                tasks[size_t(i)].y = y[size_t(i)].data();
            }
            Aligned ws(ws_bytes);
            emu::fused_gemm_grouped(type, rb, cols, tasks.data(), kTasks, ws.p, ws_bytes, nullptr);
            int differ = 0;
            for (int i = 0; i < kTasks; ++i) differ += y[size_t(i)] != alone[size_t(i)];
            CHECK(differ == 0);
        }
    }
}

// A task past kGemmMaxTokens (4096) goes alone in fused_gemm_matmul's chunks, between the tasks
// grouped before and after it.
TEST_CASE("cuda fused_gemm_grouped (cpu mode): a task of more than 4096 tokens, alone between grouped ones") {
    const quant::Type type = quant::Type::Q8_0;
    const int64_t cols = 64, big = emu::kGemmMaxTokens + 4;
    const size_t rb = quant::row_size(quant::traits(type), cols);
    const int64_t rows[3] = {5, 3, 7}, n[3] = {40, big, 33};
    const std::vector<float> x = randn(size_t(big * cols), 8600);
    std::vector<Aligned> W;
    std::vector<std::vector<float>> alone(3), y(3);
    std::vector<emu::GemmTask> tasks;
    for (int i = 0; i < 3; ++i) {
        W.push_back(quantized_randn(type, rows[i], cols, 8610 + uint32_t(i)));
        alone[size_t(i)] = run_fused(type, W[size_t(i)].p, rb, rows[i], cols, x, cols, n[i], rows[i]);
        y[size_t(i)].assign(size_t(n[i] * rows[i]), -7.0f);
        tasks.push_back({W[size_t(i)].p, rows[i], x.data(), 0, n[i], y[size_t(i)].data(), 0});
    }
    const size_t ws_bytes = emu::fused_gemm_grouped_workspace_bytes(cols, tasks.data(), 3);
    Aligned ws(ws_bytes);
    emu::fused_gemm_grouped(type, rb, cols, tasks.data(), 3, ws.p, ws_bytes, nullptr);
    for (int i = 0; i < 3; ++i) CHECK(y[size_t(i)] == alone[size_t(i)]);
}

TEST_CASE("cuda fused_gemm_matmul (cpu mode): what it refuses") {
    using quant::Type;
    std::vector<float> x(512, 1.0f), y(8);
    Aligned w(4096), ws(1 << 16);
    CHECK_FALSE(emu::fused_gemm_supported(Type::F32));
    CHECK_FALSE(emu::fused_gemm_supported(Type::F16));
    CHECK_FALSE(emu::fused_gemm_supported(Type::BF16));
    CHECK_FALSE(emu::fused_gemm_supported(Type::Q2_K));
    // A type it has no form for (F16 goes to gemm_matmul), and widths that are not whole blocks.
    const size_t wsb = size_t(1) << 16;
    CHECK_THROWS_WITH_AS(emu::fused_gemm_matmul(Type::F16, w.p, 512, 1, 256, x.data(), 0, 1, y.data(), 0, ws.p, wsb, nullptr),
                         doctest::Contains("no fused form for weight type f16"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(emu::fused_gemm_matmul(Type::Q4_K, w.p, 144, 1, 200, x.data(), 0, 1, y.data(), 0, ws.p, wsb, nullptr),
                         doctest::Contains("200 columns are not whole blocks of 256"), std::invalid_argument);
    CHECK_THROWS_AS(emu::fused_gemm_matmul(Type::Q8_0, w.p, 34, 1, 48, x.data(), 0, 1, y.data(), 0, ws.p, wsb, nullptr),
                    std::invalid_argument);
    // A workspace too small for one token's activations.
    CHECK_THROWS_WITH_AS(emu::fused_gemm_matmul(Type::Q4_K, w.p, 144, 1, 256, x.data(), 0, 1, y.data(), 0, ws.p, 300, nullptr),
                         doctest::Contains("workspace of 300 bytes"), std::invalid_argument);
    const emu::GemmTask t{w.p, 1, x.data(), 0, 1, y.data(), 0};
    CHECK_THROWS_AS(emu::fused_gemm_grouped(Type::BF16, 512, 256, &t, 1, ws.p, wsb, nullptr), std::invalid_argument);
}
