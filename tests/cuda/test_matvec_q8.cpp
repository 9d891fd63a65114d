// The int8-activation decode matvec (src/backend/cuda/matvec_q8.cu) in CPU mode:
//  - quantize_act writes quant's quantize_row_q8_K bytes for Q4_K and quantize_row_q8_0's values
//    (the fp16 scale widened) for the 32-element formats; for Q8_K, quant's bytes (qs, d, the 16-element sums), also for
//    a block of zeros, a block whose largest magnitude appears twice with both signs (the first
//    one sets the sign of the scale) and rows ld floats apart;
//  - matvec_q8 on Q4_K, Q5_K, Q6_K and IQ4_XS weights against the CPU backend's matmul, which quantizes the activations
//    to the same Q8_K and sums the same integer products: only the float steps' order differs,
//    so |err| <= 1e-5 * sum |w x| + 1e-6 (a wrong scale, min or nibble half moves a row by far more);
//  - matvec_q8_id gives each slot what matvec_q8 gives its expert alone, bit for bit, and NaN
//    rows for a bad id;
//  - the 32-element formats (Q8_0, Q5_0, Q4_0, IQ4_NL, MXFP4 on Q8_0 activations, Q4_1, Q5_1 on
//    Q8_1: quantize_row_q8_1's values and block sums) against the CPU backend with the same bound,
//    and per slot bit for bit;
//  - several tokens at once (a block takes up to 4): every token's row bit-equal to the token
//    alone, rows ldy apart with the gaps untouched, for 2, 3, 5 and 9 tokens of every type;
//  - matvec_q8_group: tasks of different rows and token counts (and an empty one) in one launch,
//    each bit-equal to matvec_q8 alone, for one token everywhere, for a mix, and for a full group
//    of 48 tasks.
#include "backend/cuda/block_dot.cuh"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/blocks.h"
#include "quant/fp16.h"
#include "quant/kernels.h"
#include "quant/types.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

using namespace kinfer;
using kinfer::cuda::testing::randn;

namespace {

// Row r's quantized activations as quant's blocks, read back from the kernel's layout.
std::vector<quant::block_q8_K> blocks_of(const std::vector<uint8_t>& q, int64_t r, int64_t cols) {
    const int64_t nb = cols / quant::QK_K;
    const uint8_t* base = q.data() + size_t(r) * cuda::emu::q8_act_row_bytes(quant::Type::Q4_K, cols);
    std::vector<quant::block_q8_K> b(static_cast<size_t>(nb));
    for (int64_t i = 0; i < nb; ++i) {
        std::memcpy(b[size_t(i)].qs, base + i * quant::QK_K, quant::QK_K);
        std::memcpy(&b[size_t(i)].d, base + cols + 4 * i, 4);
        for (int j = 0; j < 16; ++j) {
            int32_t s;
            std::memcpy(&s, base + cols + 4 * nb + 4 * (16 * i + j), 4);
            b[size_t(i)].bsums[j] = int16_t(s);
        }
    }
    return b;
}

// matvec_q8 of rows x cols weights w (type, rows rb bytes apart) on the quantized activation row
// xq against the CPU backend's matmul of the same weights on x: within 1e-5 of sum |w x| + 1e-6.
void check_against_cpu(quant::Type type, const uint8_t* w, size_t rb, int64_t rows, int64_t cols, const uint8_t* xq,
                       const float* x) {
    const quant::Traits& tr = quant::traits(type);
    std::vector<float> y(static_cast<size_t>(rows), -1.0f), want(static_cast<size_t>(rows), -2.0f);
    cuda::emu::matvec_q8(type, w, rb, rows, cols, xq, 1, y.data(), 0, nullptr);
    const backend::Mat M{type, cols, rows, w, rb, 0, "expert"};
    cuda::testing::cpu().matmul(M, x, 1, want.data(), 0, 0);
    std::vector<float> deq(static_cast<size_t>(cols));
    int bad = 0;
    double worst = 0;
    for (int64_t r = 0; r < rows; ++r) {
        tr.to_float(w + size_t(r) * rb, deq.data(), cols);
        double mag = 0;
        for (int64_t i = 0; i < cols; ++i) mag += std::fabs(double(deq[size_t(i)]) * double(x[i]));
        const double bound = 1e-5 * mag + 1e-6, err = std::fabs(double(y[size_t(r)]) - double(want[size_t(r)]));
        bad += !(err <= bound);
        worst = std::max(worst, err / bound);
    }
    INFO("worst error / bound ", worst);
    CHECK(bad == 0);
}

}  // namespace

TEST_CASE("cuda quantize_act, Q8_K (cpu mode): quant's quantize_row_q8_K bytes") {
    const int64_t rows = 3, cols = 768, ld = 800;
    std::vector<float> x = randn(size_t(rows * ld), 9000);
    for (int64_t i = 0; i < quant::QK_K; ++i) x[size_t(ld + 256 + i)] = 0.0f;   // row 1, block 1: zeros
    x[size_t(2 * ld + 10)] = -7.5f;                                              // row 2, block 0: a tie of
    x[size_t(2 * ld + 200)] = 7.5f;                                              // magnitudes, the first negative
    std::vector<uint8_t> q(cuda::emu::q8_act_row_bytes(quant::Type::Q4_K, cols) * size_t(rows), 0xAA);
    cuda::emu::quantize_act(quant::Type::Q4_K, x.data(), ld, rows, cols, q.data(), nullptr);
    for (int64_t r = 0; r < rows; ++r) {
        INFO("row ", r);
        std::vector<quant::block_q8_K> want(size_t(cols / quant::QK_K));
        quant::quantize_row_q8_K_ref(x.data() + r * ld, want.data(), cols);
        const auto got = blocks_of(q, r, cols);
        for (size_t i = 0; i < want.size(); ++i) {
            CHECK(std::memcmp(got[i].qs, want[i].qs, quant::QK_K) == 0);
            CHECK(std::memcmp(&got[i].d, &want[i].d, 4) == 0);
            CHECK(std::memcmp(got[i].bsums, want[i].bsums, sizeof(want[i].bsums)) == 0);
        }
    }
    CHECK(blocks_of(q, 2, cols)[0].d > 0);   // -7.5 came first: iscale = -127 / -7.5 > 0
}

// matmul_tasks quantizes an input once per q8_act_format and hands the bytes to every task of that
// format: two types share an id exactly when quantize_act writes them the same bytes (Q4_1 and
// Q4_K once shared one: a Q8_1 row read as a Q8_K one).
TEST_CASE("cuda q8_act_format (cpu mode): the same id exactly when quantize_act writes the same bytes") {
    using T = quant::Type;
    const std::vector<T> types = {T::Q4_K, T::Q5_K, T::Q6_K, T::IQ4_XS, T::Q8_0, T::Q5_0,
                                  T::Q4_0, T::IQ4_NL, T::MXFP4, T::Q4_1, T::Q5_1};
    const int64_t rows = 2, cols = 512;
    const std::vector<float> x = randn(size_t(rows * cols), 9300);
    std::vector<std::vector<uint8_t>> bytes;
    for (const T t : types) {
        std::vector<uint8_t> q(cuda::emu::q8_act_row_bytes(t, cols) * size_t(rows), 0);
        cuda::emu::quantize_act(t, x.data(), cols, rows, cols, q.data(), nullptr);
        bytes.push_back(std::move(q));
    }
    for (size_t a = 0; a < types.size(); ++a)
        for (size_t b = a + 1; b < types.size(); ++b) {
            INFO(quant::traits(types[a]).name, " and ", quant::traits(types[b]).name);
            CHECK((cuda::emu::q8_act_format(types[a]) == cuda::emu::q8_act_format(types[b])) == (bytes[a] == bytes[b]));
        }
}

// A MoE prefill's gathered input has n x K rows: 65536 at 8192 tokens and top-8, one more than a
// grid's y extent. quantize_act launches the rows in slices; rows on both sides of the cut and the
// last one are quant's bytes. Row r holds r's own values, so a slice placed at the wrong rows shows.
TEST_CASE("cuda quantize_act (cpu mode): past 65535 rows, every row where it belongs") {
    const int64_t rows = 65537, cols = 256;
    std::vector<float> x(size_t(rows * cols));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < cols; ++i) x[size_t(r * cols + i)] = float((r * 7 + i * 13) % 251) - 125.0f + float(r % 5) * 0.25f;
    const size_t rb = cuda::emu::q8_act_row_bytes(quant::Type::Q4_K, cols);
    std::vector<uint8_t> q(rb * size_t(rows), 0xAA);
    cuda::emu::quantize_act(quant::Type::Q4_K, x.data(), cols, rows, cols, q.data(), nullptr);
    for (const int64_t r : {int64_t(0), int64_t(65534), int64_t(65535), int64_t(65536)}) {
        INFO("row ", r);
        quant::block_q8_K want;
        quant::quantize_row_q8_K_ref(x.data() + r * cols, &want, cols);
        const auto got = blocks_of(q, r, cols);
        CHECK(std::memcmp(got[0].qs, want.qs, quant::QK_K) == 0);
        CHECK(std::memcmp(&got[0].d, &want.d, 4) == 0);
    }
}

TEST_CASE("cuda matvec_q8 (cpu mode): Q4_K, Q5_K, Q6_K and IQ4_XS on int8 activations against the CPU backend; matvec_q8_id per slot") {
    for (const quant::Type type : {quant::Type::Q4_K, quant::Type::Q5_K, quant::Type::Q6_K, quant::Type::IQ4_XS}) {
        const quant::Traits& tr = quant::traits(type);
        for (const int64_t cols : {int64_t(256), int64_t(1024)}) {
            const int64_t rows = 37, E = 4;   // 37 rows: the last warp's second row and the last block are partial
            const size_t rb = quant::row_size(tr, cols), slice = rb * size_t(rows);
            INFO("cols ", cols);
            const std::vector<float> wf = randn(size_t(E * rows * cols), 9100 + uint32_t(cols));
            std::vector<uint8_t> W(slice * size_t(E) + 16);
            uint8_t* w = W.data() + (16 - reinterpret_cast<uintptr_t>(W.data()) % 16) % 16;   // 16-byte aligned rows
            for (int64_t r = 0; r < E * rows; ++r) tr.quantize(wf.data() + r * cols, w + size_t(r) * rb, cols);
            INFO("type ", std::string(tr.name));
            REQUIRE(cuda::emu::matvec_q8_supported(type, w, rb, cols));
            CHECK_FALSE(cuda::emu::matvec_q8_supported(type, w + 1, rb, cols));
            CHECK_FALSE(cuda::emu::matvec_q8_supported(quant::Type::Q2_K, w, rb, cols));
            if (type == quant::Type::Q4_K || type == quant::Type::Q5_K) {   // where a GPU would fault on the 16-byte load, the CPU mode throws
                std::vector<uint8_t> xq0(cuda::emu::q8_act_row_bytes(type, cols) + 16, 0);
                uint8_t* q0 = xq0.data() + (16 - reinterpret_cast<uintptr_t>(xq0.data()) % 16) % 16;
                std::vector<float> y0(static_cast<size_t>(rows - 1));
                CHECK_THROWS_AS(cuda::emu::matvec_q8(type, w + 4, rb, rows - 1, cols, q0, 1, y0.data(), 0, nullptr),
                                std::logic_error);
            }

            const int64_t n = 3, K = 2;
            const std::vector<float> x = randn(size_t(n * cols), 9200);
            std::vector<uint8_t> xq(cuda::emu::q8_act_row_bytes(type, cols) * size_t(n) + 16);
            uint8_t* q = xq.data() + (16 - reinterpret_cast<uintptr_t>(xq.data()) % 16) % 16;
            cuda::emu::quantize_act(type, x.data(), 0, n, cols, q, nullptr);

            // Expert 2 on token 1 against the CPU backend.
            check_against_cpu(type, w + 2 * slice, rb, rows, cols, q + cuda::emu::q8_act_row_bytes(type, cols), x.data() + cols);

            // Slots: token s / K, expert sel[s]; each bit-equal to matvec_q8 alone.
            const std::vector<int32_t> sel = {3, 0, 2, 2, 1, 3};
            std::vector<float> ys(size_t(n * K * rows), -1.0f);
            cuda::emu::matvec_q8_id(type, w, rb, slice, E, rows, cols, sel.data(), n * K, q, K, ys.data(), nullptr);
            int differ = 0;
            for (int64_t s = 0; s < n * K; ++s) {
                std::vector<float> alone(static_cast<size_t>(rows));
                cuda::emu::matvec_q8(type, w + size_t(sel[size_t(s)]) * slice, rb, rows, cols, q + size_t(s / K) * cuda::emu::q8_act_row_bytes(type, cols),
                                     1, alone.data(), 0, nullptr);
                differ += std::memcmp(alone.data(), ys.data() + s * rows, size_t(rows) * sizeof(float)) != 0;
            }
            CHECK(differ == 0);
            const int32_t wrong[2] = {E, 1};
            std::vector<float> yb(size_t(2 * rows), 0.0f);
            cuda::emu::matvec_q8_id(type, w, rb, slice, E, rows, cols, wrong, 2, q, 1, yb.data(), nullptr);
            CHECK(std::all_of(yb.begin(), yb.begin() + rows, [](float v) { return std::isnan(v); }));
            CHECK(std::none_of(yb.begin() + rows, yb.end(), [](float v) { return std::isnan(v); }));
        }
    }
    CHECK_THROWS_AS(cuda::emu::quantize_act(quant::Type::Q4_K, nullptr, 0, 1, 100, nullptr, nullptr), std::invalid_argument);
}

// Q8_0's activations in order (for Q8_0 weights), Q8_1's (for Q5_1) in the nibbles' order with
// the block sums s = d sum(q) after the scales.
TEST_CASE("cuda quantize_act, Q8_0 and Q8_1 (cpu mode): quant's quantize_row_q8_0 / _q8_1 values, d and s widened from fp16") {
    for (const quant::Type type : {quant::Type::Q8_0, quant::Type::Q5_1}) {
        const bool q8_1 = type == quant::Type::Q5_1;
        INFO((q8_1 ? "Q8_1" : "Q8_0"));
        const int64_t rows = 2, cols = 320, ld = 333, nb = cols / 32;
        std::vector<float> x = randn(size_t(rows * ld), 9300);
        for (int64_t i = 0; i < 32; ++i) x[size_t(ld + 64 + i)] = 0.0f;   // row 1, block 2: zeros
        const size_t rb = cuda::emu::q8_act_row_bytes(type, cols);
        std::vector<uint8_t> q(rb * size_t(rows), 0xAA);
        cuda::emu::quantize_act(type, x.data(), ld, rows, cols, q.data(), nullptr);
        for (int64_t r = 0; r < rows; ++r) {
            // quant's blocks as (qs, d, s) per block.
            std::vector<int8_t> qs(static_cast<size_t>(cols));
            std::vector<float> d(static_cast<size_t>(nb)), sum(static_cast<size_t>(nb));
            if (q8_1) {
                std::vector<quant::block_q8_1> b(static_cast<size_t>(nb));
                quant::quantize_row_q8_1(x.data() + r * ld, b.data(), cols);
                for (size_t i = 0; i < b.size(); ++i)
                    std::memcpy(qs.data() + 32 * i, b[i].qs, 32), d[i] = quant::fp16_to_fp32(b[i].d), sum[i] = quant::fp16_to_fp32(b[i].s);
            } else {
                std::vector<quant::block_q8_0> b(static_cast<size_t>(nb));
                quant::quantize_row_q8_0(x.data() + r * ld, b.data(), cols);
                for (size_t i = 0; i < b.size(); ++i) std::memcpy(qs.data() + 32 * i, b[i].qs, 32), d[i] = quant::fp16_to_fp32(b[i].d);
            }
            const uint8_t* row = q.data() + size_t(r) * rb;
            for (int64_t i = 0; i < nb; ++i) {
                INFO("row ", r, " block ", i);
                int differ = 0;
                for (int j = 0; j < 32; ++j)
                    differ += int8_t(row[32 * i + (q8_1 ? (j < 16 ? 2 * j : 2 * (j - 16) + 1) : j)]) != qs[size_t(32 * i + j)];
                CHECK(differ == 0);
                float got_d, got_s;
                std::memcpy(&got_d, row + cols + 4 * i, 4);
                CHECK(got_d == d[size_t(i)]);
                if (!q8_1) continue;
                std::memcpy(&got_s, row + cols + 4 * nb + 4 * i, 4);
                CHECK(got_s == sum[size_t(i)]);
            }
        }
    }
}

TEST_CASE("cuda matvec_q8 (cpu mode): Q8_0, Q5_0, Q4_0, IQ4_NL, MXFP4 on Q8_0 and Q4_1, Q5_1 on Q8_1 activations against the CPU backend; per slot") {
    for (const quant::Type type : {quant::Type::Q8_0, quant::Type::Q5_0, quant::Type::Q4_1, quant::Type::Q5_1, quant::Type::Q4_0, quant::Type::IQ4_NL, quant::Type::MXFP4}) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t rows = 37, cols = 544, E = 3;   // 17 blocks: the last step of the 8-block stride is partial
        const size_t rb = quant::row_size(tr, cols), slice = rb * size_t(rows);
        INFO("type ", std::string(tr.name));
        const std::vector<float> wf = randn(size_t(E * rows * cols), 9400 + uint32_t(type));
        std::vector<uint8_t> W(slice * size_t(E));
        for (int64_t r = 0; r < E * rows; ++r) tr.quantize(wf.data() + r * cols, W.data() + size_t(r) * rb, cols);
        REQUIRE(cuda::emu::matvec_q8_supported(type, W.data(), rb, cols));
        const int64_t n = 2;
        const std::vector<float> x = randn(size_t(n * cols), 9500);
        const size_t xb = cuda::emu::q8_act_row_bytes(type, cols);
        std::vector<uint8_t> xq(xb * size_t(n));
        cuda::emu::quantize_act(type, x.data(), 0, n, cols, xq.data(), nullptr);

        check_against_cpu(type, W.data() + slice, rb, rows, cols, xq.data() + xb, x.data() + cols);   // expert 1, token 1

        const std::vector<int32_t> sel = {2, 0, 1, 1};
        std::vector<float> ys(size_t(4 * rows), -1.0f);
        cuda::emu::matvec_q8_id(type, W.data(), rb, slice, E, rows, cols, sel.data(), 4, xq.data(), 2, ys.data(), nullptr);
        int differ = 0;
        for (int64_t s = 0; s < 4; ++s) {
            std::vector<float> alone(static_cast<size_t>(rows));
            cuda::emu::matvec_q8(type, W.data() + size_t(sel[size_t(s)]) * slice, rb, rows, cols, xq.data() + size_t(s / 2) * xb,
                                 1, alone.data(), 0, nullptr);
            differ += std::memcmp(alone.data(), ys.data() + s * rows, size_t(rows) * sizeof(float)) != 0;
        }
        CHECK(differ == 0);
    }
    CHECK_FALSE(cuda::emu::matvec_q8_supported(quant::Type::Q3_K, nullptr, 110, 256));
}

// prmt as PTX defines its generic mode (the nibble lookups rely on the sign-replicate bit).
TEST_CASE("cuda prmt (cpu mode): byte selection and the sign-replicate selector bit") {
    CHECK(cuda::emu::prmt(0x03020100u, 0x07060504u, 0x7531u) == 0x07050301u);
    CHECK(cuda::emu::prmt(0x80808080u, 0x80808080u, 0x8080u) == 0xff80ff80u);
    CHECK(cuda::emu::prmt(0x7f00ff01u, 0u, 0xba98u) == 0x0000ff00u);   // top bits of bytes 0, 1, 2, 3: 0, 1, 0, 0
}

TEST_CASE("cuda matvec_q8 (cpu mode): several tokens, each the bits of the token alone") {
    for (const quant::Type type : {quant::Type::Q4_K, quant::Type::Q5_K, quant::Type::Q6_K, quant::Type::IQ4_XS, quant::Type::Q8_0, quant::Type::Q5_0,
                                   quant::Type::Q4_1, quant::Type::Q5_1, quant::Type::Q4_0, quant::Type::IQ4_NL, quant::Type::MXFP4}) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t rows = 19, cols = 512, ldy = rows + 3;   // 19 rows: the last warp's second row is partial
        const size_t rb = quant::row_size(tr, cols);
        INFO("type ", std::string(tr.name));
        const std::vector<float> wf = randn(size_t(rows * cols), 9600 + uint32_t(type));
        std::vector<uint8_t> W(rb * size_t(rows) + 16);
        uint8_t* w = W.data() + (16 - reinterpret_cast<uintptr_t>(W.data()) % 16) % 16;
        for (int64_t r = 0; r < rows; ++r) tr.quantize(wf.data() + r * cols, w + size_t(r) * rb, cols);
        REQUIRE(cuda::emu::matvec_q8_supported(type, w, rb, cols));
        const size_t xb = cuda::emu::q8_act_row_bytes(type, cols);
        for (const int64_t n : {2, 3, 5, 9}) {
            INFO(n, " tokens");
            const std::vector<float> x = randn(size_t(n * cols), 9700 + uint32_t(n));
            std::vector<uint8_t> xqv(xb * size_t(n) + 16);
            uint8_t* xq = xqv.data() + (16 - reinterpret_cast<uintptr_t>(xqv.data()) % 16) % 16;
            cuda::emu::quantize_act(type, x.data(), 0, n, cols, xq, nullptr);
            std::vector<float> y(size_t(n * ldy), -7.0f);
            cuda::emu::matvec_q8(type, w, rb, rows, cols, xq, n, y.data(), ldy, nullptr);
            int differ = 0, gaps = 0;
            for (int64_t t = 0; t < n; ++t) {
                std::vector<float> alone(static_cast<size_t>(rows));
                cuda::emu::matvec_q8(type, w, rb, rows, cols, xq + size_t(t) * xb, 1, alone.data(), 0, nullptr);
                differ += std::memcmp(alone.data(), y.data() + t * ldy, size_t(rows) * sizeof(float)) != 0;
                for (int64_t r = rows; r < ldy; ++r) gaps += y[size_t(t * ldy + r)] != -7.0f;
            }
            CHECK(differ == 0);
            CHECK(gaps == 0);
            check_against_cpu(type, w, rb, rows, cols, xq + size_t(n - 1) * xb, x.data() + (n - 1) * cols);   // the last token
        }
    }
}

TEST_CASE("cuda matvec_q8_group (cpu mode): every task the bits of matvec_q8 alone") {
    for (const quant::Type type : {quant::Type::Q4_K, quant::Type::Q6_K, quant::Type::IQ4_XS, quant::Type::Q8_0, quant::Type::Q5_0,
                                   quant::Type::Q4_1, quant::Type::Q5_1, quant::Type::MXFP4}) {
        const quant::Traits& tr = quant::traits(type);
        const int64_t cols = 512;
        const size_t rb = quant::row_size(tr, cols), xb = cuda::emu::q8_act_row_bytes(type, cols);
        INFO("type ", std::string(tr.name));
        const int64_t rows[4] = {9, 0, 17, 8};   // task 1 has no rows: it takes no block
        std::vector<std::vector<uint8_t>> W(4);
        for (int i = 0; i < 4; ++i) {
            W[size_t(i)].resize(rb * size_t(rows[i]) + 16);
            const std::vector<float> wf = randn(size_t(rows[i] * cols), 9800 + uint32_t(i) + 10 * uint32_t(type));
            uint8_t* w = W[size_t(i)].data() + (16 - reinterpret_cast<uintptr_t>(W[size_t(i)].data()) % 16) % 16;
            for (int64_t r = 0; r < rows[i]; ++r) tr.quantize(wf.data() + r * cols, w + size_t(r) * rb, cols);
        }
        auto wp = [&](int i) { return W[size_t(i)].data() + (16 - reinterpret_cast<uintptr_t>(W[size_t(i)].data()) % 16) % 16; };
        const std::vector<float> x = randn(size_t(8 * cols), 9900);
        std::vector<uint8_t> xqv(xb * 8 + 16);
        uint8_t* xq = xqv.data() + (16 - reinterpret_cast<uintptr_t>(xqv.data()) % 16) % 16;
        cuda::emu::quantize_act(type, x.data(), 0, 8, cols, xq, nullptr);
        for (const bool single : {true, false}) {
            INFO((single ? "one token a task" : "1, 2, 3 and 5 tokens"));
            const int64_t n[4] = {single ? 1 : 3, single ? 1 : 2, 1, single ? 1 : 5};
            const int64_t first[4] = {0, 3, 2, 3};   // activation rows of each task's first token
            std::vector<std::vector<float>> y(4);
            cuda::emu::MatvecQ8Group g;
            for (int i = 0; i < 4; ++i) {
                y[size_t(i)].assign(size_t(n[i] * (rows[i] + 1)), -7.0f);   // ldy = rows + 1
                g.task[g.n_tasks++] = {wp(i), xq + size_t(first[i]) * xb, y[size_t(i)].data(), rows[i], n[i], rows[i] + 1};
            }
            cuda::emu::matvec_q8_group(type, rb, cols, g, nullptr);
            int differ = 0;
            for (int i = 0; i < 4; ++i) {
                std::vector<float> alone(size_t(n[i] * (rows[i] + 1)), -7.0f);
                cuda::emu::matvec_q8(type, wp(i), rb, rows[i], cols, xq + size_t(first[i]) * xb, n[i], alone.data(), rows[i] + 1,
                                     nullptr);
                differ += alone != y[size_t(i)];
            }
            CHECK(differ == 0);
        }
        // A full group: kMatvecGroupMax tasks of 1..3 rows and 1..5 tokens (the search over 48 first blocks).
        cuda::emu::MatvecQ8Group g;
        std::vector<std::vector<float>> y(cuda::emu::kMatvecGroupMax);
        for (int i = 0; i < cuda::emu::kMatvecGroupMax; ++i) {
            const int64_t r = 1 + i % 3, n = 1 + i % 5;
            y[size_t(i)].assign(size_t(n * r), -7.0f);
            g.task[g.n_tasks++] = {wp(i % 4 == 1 ? 0 : i % 4), xq + size_t(i % 3) * xb, y[size_t(i)].data(), r, n, 0};
        }
        cuda::emu::matvec_q8_group(type, rb, cols, g, nullptr);
        int differ = 0;
        for (int i = 0; i < g.n_tasks; ++i) {
            const cuda::emu::MatvecQ8Task& t = g.task[i];
            std::vector<float> alone(y[size_t(i)].size(), -7.0f);
            cuda::emu::matvec_q8(type, t.W, rb, t.rows, cols, t.xq, t.n, alone.data(), 0, nullptr);
            differ += alone != y[size_t(i)];
        }
        CHECK(differ == 0);
    }
}
