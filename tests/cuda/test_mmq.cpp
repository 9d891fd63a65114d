// The int8 tensor-core GEMM (src/backend/cuda/mmq.cu, mma.cuh) in CPU mode:
//  - mma.cuh's fragments and its plain (shuffle + dp4a) product: A B for random int8 matrices,
//    both shapes (k = 32 and its first 16), equal to a scalar product, and for all -128 (the
//    largest sums: 2^19); the layout of A, B and C is the PTX ISA's, which the GPU's mma.sync uses
//    (kinfer_gpu_check compares the two there);
//  - mmq_matmul for every int8 type against the CPU backend's matmul, which quantizes the
//    activations to the same Q8_K / Q8_0 / Q8_1 and sums the same integer products: only the float
//    steps differ, so |err| <= 1e-5 * sum |w x| + 1e-6 per output (a level at the wrong byte, a
//    scale of the wrong group or a missing min moves an output by far more); partial row and
//    token tiles, widths that are not whole chunks of 256 (the 32-element types: 288, and 64 and
//    32, below one chunk), K3's 7168 (Q4_K, MXFP4), rows ldy apart with the gaps untouched;
//  - mmq_group: tasks of different rows and token counts (and an empty one) in one launch, each the
//    bits of mmq_matmul alone;
//  - what it refuses.
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/types.h"

#include <cstring>
#include <stdexcept>

using namespace kinfer;
using kinfer::cuda::testing::randn;

namespace {

constexpr quant::Type kInt8Types[] = {quant::Type::Q4_K, quant::Type::Q5_K, quant::Type::Q6_K, quant::Type::IQ4_XS,
                                      quant::Type::Q8_0, quant::Type::Q5_0, quant::Type::Q4_0, quant::Type::IQ4_NL,
                                      quant::Type::MXFP4, quant::Type::Q4_1, quant::Type::Q5_1};

using Aligned = kinfer::cuda::testing::AlignedBytes;
using kinfer::cuda::testing::quantized_randn;

}  // namespace

TEST_CASE("cuda mma (cpu mode): the fragments and the plain int8 product are A B, k = 32 and 16") {
    std::mt19937 rng(4242);
    std::uniform_int_distribution<int> v(-128, 127);
    for (int trial = 0; trial < 3; ++trial) {
        INFO("trial ", trial);
        std::vector<int8_t> A(16 * 32), B(8 * 32);
        for (auto& a : A) a = int8_t(v(rng));
        for (auto& b : B) b = int8_t(v(rng));
        if (trial == 2) {   // the extremes: every product 128 x 128 = 2^14, sums of 2^19
            std::fill(A.begin(), A.end(), int8_t(-128));
            std::fill(B.begin(), B.end(), int8_t(-128));
        }
        std::vector<int32_t> out(4 * 128, 7);
        cuda::emu::mma_check(A.data(), B.data(), out.data(), nullptr);
        int bad = 0;
        for (int k : {32, 16})
            for (int r = 0; r < 16; ++r)
                for (int c = 0; c < 8; ++c) {
                    int32_t want = 0;
                    for (int i = 0; i < k; ++i) want += int32_t(A[size_t(32 * r + i)]) * int32_t(B[size_t(32 * c + i)]);
                    const int f = k == 32 ? 0 : 2;
                    bad += out[size_t(128 * f + 8 * r + c)] != want;       // the tensor-core form (plain in CPU mode)
                    bad += out[size_t(128 * (f + 1) + 8 * r + c)] != want; // the plain form
                }
        CHECK(bad == 0);
    }
}

TEST_CASE("cuda mmq_matmul (cpu mode): every int8 type against the CPU backend, partial tiles") {
    for (const quant::Type type : kInt8Types) {
        const quant::Traits& tr = quant::traits(type);
        const bool sb = quant::type_facts(type).block_size == quant::QK_K;
        // Two chunks of 256 on 70 rows x 67 tokens (2 row tiles, 2 token tiles, both partial); the
        // 32-element types also 9 blocks (a chunk of 256, then 32), 2 and 1; K3's width (28 chunks)
        // for its two main types, on one tile.
        struct Shape {
            int64_t cols, rows, n;
        };
        std::vector<Shape> shapes = {{512, 70, 67}};
        if (!sb) shapes.insert(shapes.end(), {{288, 70, 67}, {64, 70, 67}, {32, 70, 67}});
        if (type == quant::Type::Q4_K || type == quant::Type::MXFP4) shapes.push_back({7168, 40, 40});
        for (const Shape& shape : shapes) {
            const int64_t cols = shape.cols, rows = shape.rows, n = shape.n, ldy = rows + 3;
            INFO("type ", std::string(tr.name), ", cols ", cols);
            const size_t rb = quant::row_size(tr, cols), xb = cuda::emu::q8_act_row_bytes(type, cols);
            const Aligned W = quantized_randn(type, rows, cols, 7100 + uint32_t(type) + uint32_t(cols));
            REQUIRE(cuda::emu::matvec_q8_supported(type, W.p, rb, cols));
            const std::vector<float> x = randn(size_t(n * cols), 7200 + uint32_t(cols));
            Aligned xq(xb * size_t(n));
            cuda::emu::quantize_act(type, x.data(), 0, n, cols, xq.p, nullptr);
            std::vector<float> y(size_t(n * ldy), -7.0f), want(size_t(n * rows));
            cuda::emu::mmq_matmul(type, W.p, rb, rows, cols, xq.p, n, y.data(), ldy, nullptr);
            const backend::Mat M{type, cols, rows, W.p, rb, 0, "w"};
            cuda::testing::cpu().matmul(M, x.data(), n, want.data(), 0, 0);
            std::vector<float> deq(size_t(rows * cols));
            for (int64_t r = 0; r < rows; ++r) tr.to_float(W.p + size_t(r) * rb, deq.data() + r * cols, cols);
            int bad = 0, gaps = 0;
            double worst = 0;
            for (int64_t t = 0; t < n; ++t) {
                for (int64_t r = 0; r < rows; ++r) {
                    double mag = 0;
                    for (int64_t i = 0; i < cols; ++i) mag += std::fabs(double(deq[size_t(r * cols + i)]) * double(x[size_t(t * cols + i)]));
                    const double bound = 1e-5 * mag + 1e-6;
                    const double err = std::fabs(double(y[size_t(t * ldy + r)]) - double(want[size_t(t * rows + r)]));
                    bad += !(err <= bound);
                    worst = std::max(worst, err / bound);
                }
                for (int64_t r = rows; r < ldy; ++r) gaps += y[size_t(t * ldy + r)] != -7.0f;
            }
            INFO("worst error / bound ", worst);
            CHECK(bad == 0);
            CHECK(gaps == 0);
        }
    }
}

TEST_CASE("cuda mmq_group (cpu mode): every task the bits of mmq_matmul alone") {
    for (const quant::Type type : {quant::Type::Q4_K, quant::Type::Q6_K, quant::Type::MXFP4, quant::Type::Q5_1}) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t cols = 256;
        const size_t rb = quant::row_size(tr, cols), xb = cuda::emu::q8_act_row_bytes(type, cols);
        INFO("type ", std::string(tr.name));
        const int64_t rows[4] = {65, 0, 17, 64}, n[4] = {33, 5, 70, 1};   // task 1 has no rows: it takes no block
        std::vector<Aligned> W;
        for (int i = 0; i < 4; ++i)
            W.push_back(quantized_randn(type, rows[i], cols, 7300 + uint32_t(i) + 10 * uint32_t(type)));
        const int64_t ntok = 72;
        const std::vector<float> x = randn(size_t(ntok * cols), 7400);
        Aligned xq(xb * size_t(ntok));
        cuda::emu::quantize_act(type, x.data(), 0, ntok, cols, xq.p, nullptr);
        const int64_t first[4] = {1, 0, 2, 9};   // each task's first activation row
        std::vector<std::vector<float>> y(4);
        cuda::emu::MatvecQ8Group g;
        for (int i = 0; i < 4; ++i) {
            y[size_t(i)].assign(size_t(n[i] * (rows[i] + 1)), -7.0f);   // ldy = rows + 1
            g.task[g.n_tasks++] = {W[size_t(i)].p, xq.p + size_t(first[i]) * xb, y[size_t(i)].data(), rows[i], n[i], rows[i] + 1};
        }
        cuda::emu::mmq_group(type, rb, cols, g, nullptr);
        int differ = 0;
        for (int i = 0; i < 4; ++i) {
            std::vector<float> alone(y[size_t(i)].size(), -7.0f);
            cuda::emu::mmq_matmul(type, W[size_t(i)].p, rb, rows[i], cols, xq.p + size_t(first[i]) * xb, n[i], alone.data(),
                                  rows[i] + 1, nullptr);
            differ += alone != y[size_t(i)];
        }
        CHECK(differ == 0);
    }
}

TEST_CASE("cuda mmq_matmul (cpu mode): what it refuses") {
    float y[4];
    uint8_t w[16] = {}, xq[16] = {};
    // Not whole blocks: 100 columns of a 32-element type, 288 of a super-block one.
    CHECK_THROWS_AS(cuda::emu::mmq_matmul(quant::Type::Q8_0, w, 0, 1, 100, xq, 1, y, 0, nullptr), std::invalid_argument);
    CHECK_THROWS_AS(cuda::emu::mmq_matmul(quant::Type::Q4_K, w, 0, 1, 288, xq, 1, y, 0, nullptr), std::invalid_argument);
    // A type without an int8 form.
    CHECK_THROWS_AS(cuda::emu::mmq_matmul(quant::Type::F16, w, 0, 1, 256, xq, 1, y, 0, nullptr), std::invalid_argument);
    // More token tiles than a grid's y extent.
    CHECK_THROWS_AS(cuda::emu::mmq_matmul(quant::Type::Q8_0, w, 0, 1, 32, xq, 65536 * 64, y, 0, nullptr), std::invalid_argument);
    cuda::emu::MatvecQ8Group g;
    g.n_tasks = cuda::emu::kMatvecGroupMax + 1;
    CHECK_THROWS_AS(cuda::emu::mmq_group(quant::Type::Q8_0, 34, 32, g, nullptr), std::invalid_argument);
}
