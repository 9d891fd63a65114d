// The prefill GEMM path (src/backend/cuda/gemm.cu, blas.h) in CPU mode: the dequantization
// kernels, the activation conversion, and gemm_matmul (tiles, token chunks, strides) with the
// CPU-mode GEMM standing in for cuBLAS.
//  - dequant_rows is exact: to F32 it gives quant's to_float bit for bit, to F16 / BF16 the
//    quant/fp16.h rounding of those same floats, bit for bit (every type of matvec_supported).
//  - convert_rows is quant/fp16.h's rounding bit for bit, specials (inf, NaN, subnormals,
//    overflow to inf) included.
//  - gemm_matmul against two references. Exact: the dequantized weights dotted with x in double.
//    The path rounds each weight w and activation x to the GEMM element type (fp16: at most
//    2^-11 |v|, plus 2^-25 absolute below fp16's normal range; bf16 activations 2^-8 |x|; bf16
//    and fp32 weights and fp32 activations not at all); the products of two 16-bit values are
//    exact in fp32, and an fp32 sum of K terms is off by at most K 2^-24 sum |w x|. So
//    |err| <= sum |w| |x| (ew + ex + ew ex) + 2^-25 sum (|w| + |x|) [fp16] + K 2^-24 sum |w x|,
//    times 1.01 for the second-order terms. The CPU backend's matmul rounds the activations to
//    its vec_dot format first (cuda_test_util.h act_rounding): its bound adds that, as
//    test_matvec.cpp does. A token row scaled against fp16's range by 2^-k
//    (convert_rows_f16_scaled) has its activations' share of the subnormal term, 2^-25 sum |w|,
//    times 2^k. Shapes are k3-tiny-a's (n_embd 256, q / kv ranks 64, expert ff 32, vocab 4352)
//    and K3-like multiples of 256 / 32, with odd token counts; then every matrix of the shipped
//    k3-tiny-a Q4_K_M file itself (trained weights, not random ones).
//    Measured here: at most 0.61 of the exact bound (an f32 matrix with K = 4, where the fp32
//    sum's worst case is nearly reached) and 0.43 of the CPU one; against the CPU backend the
//    quantized types differ by up to 1.1 % of the largest |y| (its Q8 activations), f16 / bf16 /
//    f32 weights by under 1e-6 of it.
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "gguf/reader.h"
#include "test_util.h"
#include "quant/fp16.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

using namespace kinfer;
using kinfer::cuda::emu::Elem;
using kinfer::cuda::testing::act_rounding;
using kinfer::cuda::testing::randn;

namespace {

constexpr auto& kAllTypes = kinfer::cuda::testing::kKernelTypes;

bool unblocked(quant::Type t) { return t == quant::Type::F32 || t == quant::Type::F16 || t == quant::Type::BF16; }

// A weight matrix: rows of cols elements of one type, rb bytes apart.
struct WeightView {
    quant::Type type;
    int64_t rows, cols;
    const uint8_t* data;
    size_t rb;
    std::vector<float> dequantized() const {
        std::vector<float> out(size_t(rows * cols));
        for (int64_t i = 0; i < rows; ++i) quant::traits(type).to_float(data + size_t(i) * rb, out.data() + i * cols, cols);
        return out;
    }
};

// A quantized weight matrix of random rows.
struct Weights {
    quant::Type type;
    int64_t rows, cols;
    size_t rb;
    std::vector<uint8_t> bytes;
    Weights(quant::Type t, int64_t r, int64_t c, uint32_t seed, float scale = 1.0f)
        : type(t), rows(r), cols(c), rb(quant::row_size(quant::traits(t), c)), bytes(rb * size_t(r)) {
        const std::vector<float> wf = randn(size_t(r * c), seed, scale);
        for (int64_t i = 0; i < r; ++i) quant::traits(t).quantize(wf.data() + i * c, bytes.data() + size_t(i) * rb, c);
    }
    WeightView view() const { return {type, rows, cols, bytes.data(), rb}; }
    std::vector<float> dequantized() const { return view().dequantized(); }
};

uint32_t bits_as(Elem e, float v) {
    uint32_t u;
    switch (e) {
        case Elem::F16: return quant::fp32_to_fp16(v);
        case Elem::BF16: return quant::fp32_to_bf16(v);
        case Elem::F32: break;
    }
    std::memcpy(&u, &v, 4);
    return u;
}

uint32_t stored(Elem e, const std::vector<uint8_t>& buf, int64_t i) {
    uint32_t u = 0;
    std::memcpy(&u, buf.data() + size_t(i) * size_t(cuda::emu::elem_bytes(e)), size_t(cuda::emu::elem_bytes(e)));
    return u;
}

const char* elem_name(Elem e) { return e == Elem::F32 ? "f32" : e == Elem::F16 ? "f16" : "bf16"; }

// The largest error / bound ratios seen, per reference (the file's header gives the bounds).
struct Worst {
    double exact = 0, cpu = 0;
};

// The power of two convert_rows_f16_scaled divides a token row by (kernels.h): 2^k, k the least
// that brings the row's largest |x| under 2^15 when it is 65504 or more and finite, else 0.
double f16_row_scale(const float* x, int64_t cols) {
    float amax = 0;
    for (int64_t i = 0; i < cols; ++i)
        if (!std::isnan(x[i])) amax = std::max(amax, std::fabs(x[i]));
    if (!(amax >= 65504.0f) || std::isinf(amax)) return 1.0;
    int k = 0;
    while (double(amax) * std::ldexp(1.0, -k) >= 32768.0) ++k;
    return std::ldexp(1.0, k);
}

// gemm_matmul of W with n random tokens (rows ldx apart, outputs ldy apart) against the exact
// product and the CPU backend's matmul (unless with_cpu is false); ws_bytes 0: what
// gemm_workspace_bytes asks. With big, every third token (from the second) is multiplied by it:
// past fp16's range for big >= 2e4.
Worst check_gemm(const WeightView& W, int64_t n, int64_t ldx, int64_t ldy, size_t ws_bytes = 0, float big = 0,
                 bool with_cpu = true) {
    const int64_t rows = W.rows, K = W.cols;
    INFO("type ", quant::traits(W.type).name, " rows ", rows, " K ", K, " tokens ", n, " ldx ", ldx, " ldy ", ldy,
         " workspace ", ws_bytes, " big ", big);
    std::vector<float> x = randn(size_t((n - 1) * ldx + K), 500 + uint32_t(n));
    if (big != 0)
        for (int64_t t = 1; t < n; t += 3)
            for (int64_t i = 0; i < K; ++i) x[size_t(t * ldx + i)] *= big;
    const float sentinel = -12345.0f;
    std::vector<float> y(size_t((n - 1) * ldy + rows), sentinel);
    if (ws_bytes == 0) ws_bytes = cuda::emu::gemm_workspace_bytes(W.type, rows, K, n);
    std::vector<uint8_t> ws(std::max<size_t>(ws_bytes, 1));
    std::unique_ptr<cuda::emu::Blas, void (*)(cuda::emu::Blas*)> blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    cuda::emu::gemm_matmul(blas.get(), W.type, W.data, W.rb, rows, K, x.data(), ldx, n, y.data(), ldy, ws.data(),
                           ws_bytes, nullptr);

    std::vector<float> cpu_y(y.size(), sentinel);
    const backend::Mat M{W.type, K, rows, W.data, W.rb, 0, "test_weight"};
    cuda::testing::cpu().matmul(M, x.data(), n, cpu_y.data(), ldx, ldy);

    const Elem e = cuda::emu::gemm_elem(W.type);
    const double ex = e == Elem::F16 ? std::ldexp(1.0, -11) : e == Elem::BF16 ? std::ldexp(1.0, -8) : 0.0;
    const double ew = e == Elem::F16 && W.type != quant::Type::F16 ? std::ldexp(1.0, -11) : 0.0;
    const double sum_u = double(K) * std::ldexp(1.0, -24);
    const std::vector<float> deq = W.dequantized();
    Worst worst;
    int bad_exact = 0, bad_cpu = 0, touched_gap = 0;
    for (int64_t t = 0; t < n; ++t) {
        const float* xt = x.data() + t * ldx;
        // fp16's subnormal floor: 2^-25 for a weight, 2^-25 2^k for an activation of a token scaled by 2^-k.
        const double sub = e == Elem::F16 ? std::ldexp(1.0, -25) : 0.0, x_scale = f16_row_scale(xt, K);
        const std::vector<double> act = act_rounding(W.type, xt, K);
        for (int64_t r = 0; r < rows; ++r) {
            const float* w = deq.data() + r * K;
            double s = 0, mag = 0, sum_w = 0, sum_x = 0, cpu_round = 0;
            for (int64_t i = 0; i < K; ++i) {
                s += double(w[i]) * double(xt[i]);
                mag += std::fabs(double(w[i]) * double(xt[i]));
                sum_w += std::fabs(double(w[i]));
                sum_x += std::fabs(double(xt[i]));
                cpu_round += std::fabs(double(w[i])) * act[size_t(i)];
            }
            const double tol = 1.01 * (mag * (ew + ex + ew * ex) + sub * (x_scale * sum_w + sum_x) + sum_u * mag) + 1e-30;
            const double cpu_tol = tol + cpu_round + 1e-5 * mag + 1e-6;
            const size_t at = size_t(t * ldy + r);
            const double e1 = std::fabs(double(y[at]) - s), e2 = std::fabs(double(y[at]) - double(cpu_y[at]));
            bad_exact += !(e1 <= tol);
            if (with_cpu) {
                bad_cpu += !(e2 <= cpu_tol);
                worst.cpu = std::max(worst.cpu, e2 / cpu_tol);
            }
            worst.exact = std::max(worst.exact, e1 / tol);
        }
        if (t + 1 < n)
            for (int64_t r = rows; r < ldy; ++r) touched_gap += y[size_t(t * ldy + r)] != sentinel;
    }
    INFO("worst error / bound: exact ", worst.exact, ", cpu backend ", worst.cpu);
    CHECK(bad_exact == 0);
    CHECK(bad_cpu == 0);
    CHECK(touched_gap == 0);
    return worst;
}

}  // namespace

TEST_CASE("cuda dequant_rows (cpu mode): quant's values bit for bit, and their fp16 / bf16 rounding") {
    for (const quant::Type t : kAllTypes) {
        for (const float scale : {1.0f, 3e-5f}) {   // 3e-5: fp16 subnormals, tiny fp16 block scales
            const int64_t rows = 3, cols = unblocked(t) ? 516 : 512, ldy = cols + 3;
            const Weights W(t, rows, cols, 2000 + uint32_t(t), scale);
            const std::vector<float> want = W.dequantized();
            for (const Elem e : {Elem::F32, Elem::F16, Elem::BF16}) {
                INFO("type ", quant::traits(t).name, " to ", elem_name(e), " scale ", scale);
                const size_t eb = size_t(cuda::emu::elem_bytes(e));
                std::vector<uint8_t> got(size_t(rows * ldy) * eb, 0xab);
                cuda::emu::dequant_rows(t, W.bytes.data(), W.rb, rows, cols, e, got.data(), ldy, nullptr);
                int bad = 0, gap = 0;
                for (int64_t r = 0; r < rows; ++r) {
                    for (int64_t i = 0; i < cols; ++i) bad += stored(e, got, r * ldy + i) != bits_as(e, want[size_t(r * cols + i)]);
                    for (size_t b = size_t(r * ldy + cols) * eb; b < size_t((r + 1) * ldy) * eb; ++b) gap += got[b] != 0xab;
                }
                CHECK(bad == 0);
                CHECK(gap == 0);
            }
        }
    }
}

TEST_CASE("cuda convert_rows (cpu mode): quant/fp16.h's rounding bit for bit, specials included") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> x = randn(3 * 300, 9, 10.0f);
    const float special[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -1e6f, inf, -inf, nan, 6e-8f, 2.9e-8f, 1e-40f,
                             3.4e38f, 1.00048828125f /* ties in fp16 */, 1.00390625f /* ties in bf16 */};
    for (size_t i = 0; i < std::size(special); ++i) x[i * 7] = special[i];
    const int64_t rows = 3, cols = 297, ldx = 300, ldy = 301;
    for (const Elem e : {Elem::F32, Elem::F16, Elem::BF16}) {
        INFO("to ", elem_name(e));
        std::vector<uint8_t> got(size_t(rows * ldy) * size_t(cuda::emu::elem_bytes(e)), 0);
        cuda::emu::convert_rows(x.data(), ldx, rows, cols, e, got.data(), ldy, nullptr);
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t i = 0; i < cols; ++i) bad += stored(e, got, r * ldy + i) != bits_as(e, x[size_t(r * ldx + i)]);
        CHECK(bad == 0);
    }
    CHECK(quant::fp32_to_fp16(65520.0f) == 0x7c00);   // the overflow gemm_elem's note warns of
}

// Rows past fp16's range are scaled by a power of two and report it; rows in range (and rows
// holding inf, which no scale brings in range) convert exactly as convert_rows converts them.
TEST_CASE("cuda convert_rows_f16_scaled (cpu mode): the power of two per row, and convert_rows' bits after it") {
    const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
    const int64_t cols = 300, ldx = 303, ldy = 301;
    struct Row {
        float peak;      // put at column 7 of a randn row
        double scale;    // what the row must report
    };
    const Row rows_in[] = {{3.0f, 1},         {65503.0f, 1},          {-65504.0f, 2},   {65536.0f, 4},
                           {1e6f, 32},        {3.4e38f, 0x1p113},     {inf, 1},         {nan, 1},
                           {1e-30f, 1},       {-2.5e9f, 0x1p17}};
    const int64_t rows = int64_t(std::size(rows_in));
    std::vector<float> x = randn(size_t(rows * ldx), 77, 3.0f);
    for (int64_t r = 0; r < rows; ++r) x[size_t(r * ldx + 7)] = rows_in[r].peak;
    x[size_t(7 * ldx + 9)] = 7e4f;   // beside the NaN: the NaN is skipped, 7e4 scales the row
    std::vector<uint8_t> got(size_t(rows * ldy) * 2, 0), plain(got.size(), 0);
    std::vector<float> scale(size_t(rows), -1.0f);
    cuda::emu::convert_rows_f16_scaled(x.data(), ldx, rows, cols, got.data(), ldy, scale.data(), nullptr);
    cuda::emu::convert_rows(x.data(), ldx, rows, cols, Elem::F16, plain.data(), ldy, nullptr);
    for (int64_t r = 0; r < rows; ++r) {
        const double want = r == 7 ? 4.0 : rows_in[r].scale;
        INFO("row ", r, " peak ", rows_in[r].peak);
        CHECK(double(scale[size_t(r)]) == want);
        CHECK(double(scale[size_t(r)]) == f16_row_scale(x.data() + r * ldx, cols));
        int bad = 0, differs = 0;
        for (int64_t i = 0; i < cols; ++i) {
            const float v = float(double(x[size_t(r * ldx + i)]) / want);   // exact: a power of two
            bad += stored(Elem::F16, got, r * ldy + i) != bits_as(Elem::F16, v);
            differs += stored(Elem::F16, got, r * ldy + i) != stored(Elem::F16, plain, r * ldy + i);
        }
        CHECK(bad == 0);
        if (want == 1) CHECK(differs == 0);
    }
    CHECK_THROWS_AS(cuda::emu::convert_rows_f16_scaled(x.data(), 1, cuda::emu::kGemmMaxTokens + 1, 1, got.data(), 1,
                                                       scale.data(), nullptr),
                    std::invalid_argument);
}

// A token past fp16's range (one large activation is enough) would make all of its outputs inf or
// NaN in the fp16 GEMM; scaled and multiplied back, its outputs keep the bounds of a token in range.
TEST_CASE("cuda gemm_matmul (cpu mode): tokens past fp16's range, scaled and multiplied back") {
    for (const quant::Type t : kAllTypes) {
        const int64_t K = unblocked(t) ? 516 : 512;
        const Weights W(t, 37, K, 5000 + uint32_t(t));
        // 1e5: the CPU backend's own activations stay in range, except F16 weights' (fp16, as
        // ggml's) and Q8_1's (its s = d sum(q) is fp16). 1e30: only the exact reference (the
        // CPU's Q8_0 scales are fp16 too).
        const bool cpu_in_range = t != quant::Type::F16 && quant::type_facts(t).vec_dot_type != quant::Type::Q8_1;
        check_gemm(W.view(), 8, K, 37, 0, 1e5f, cpu_in_range);
        check_gemm(W.view(), 8, K, 37, 0, 1e30f, false);
    }
    // Past one activation chunk: the second chunk's tokens are scaled with their own scales.
    check_gemm(Weights(quant::Type::Q4_K, 5, 256, 5100).view(), cuda::emu::kGemmMaxTokens + 5, 256, 5, 0, 1e6f);
}

TEST_CASE("cuda gemm_matmul (cpu mode): every type, k3-tiny-a and K3-like shapes, odd token counts") {
    Worst all;
    for (const quant::Type t : kAllTypes) {
        const int64_t K = unblocked(t) ? 516 : 512;
        for (const int64_t n : {1, 7, 33}) {
            const Worst w = check_gemm(Weights(t, 37, K, 3000 + uint32_t(t)).view(), n, K, 37);
            all.exact = std::max(all.exact, w.exact);
            all.cpu = std::max(all.cpu, w.cpu);
        }
        // K = 32 / 96 (32-element blocks) or 256 (256-element blocks), as k3-tiny-a's expert and
        // attention shapes are.
        const bool k256 = quant::traits(t).block_size == 256;
        check_gemm(Weights(t, 64, 256, 3100 + uint32_t(t)).view(), 33, 256, 64);              // attn_k: 256 -> 64
        check_gemm(Weights(t, 256, k256 ? 256 : 64, 3200 + uint32_t(t)).view(), 17, k256 ? 256 : 64, 256);   // attn_output
        if (!k256) check_gemm(Weights(t, 32, 96, 3300 + uint32_t(t)).view(), 9, 96, 32);
    }
    INFO("worst error / bound over the first shapes: exact ", all.exact, ", cpu backend ", all.cpu);
    CHECK(all.exact <= 1.0);
}

TEST_CASE("cuda gemm_matmul (cpu mode): strides, several weight tiles, token chunks, the vocab projection") {
    for (const quant::Type t : kAllTypes) {
        const int64_t K = unblocked(t) ? 516 : 512;
        const Weights W(t, 37, K, 4000 + uint32_t(t));
        // Rows and outputs with gaps between them; the gaps stay untouched.
        check_gemm(W.view(), 11, K + 40, 37 + 5);
        // A workspace of one chunk and 10 weight rows: four tiles, the last of 7 rows.
        const Elem e = cuda::emu::gemm_elem(t);
        const size_t x_bytes = cuda::emu::gemm_act_bytes(t, K, 11);
        if (e != Elem::F32) check_gemm(W.view(), 11, K, 37, x_bytes + size_t(10 * K * cuda::emu::elem_bytes(e)));
    }
    // More tokens than one activation chunk holds (kGemmMaxTokens): the weights are decoded again
    // for the second chunk, whose outputs land after the first's.
    check_gemm(Weights(quant::Type::Q8_0, 3, 32, 4100).view(), cuda::emu::kGemmMaxTokens + 3, 32, 3);
    check_gemm(Weights(quant::Type::BF16, 5, 40, 4101).view(), cuda::emu::kGemmMaxTokens + 1, 40, 5);
    // k3-tiny-a's output projection (Q6_K, 4352 x 256) over a short prompt.
    check_gemm(Weights(quant::Type::Q6_K, 4352, 256, 4102).view(), 9, 256, 4352);
}

TEST_CASE("cuda gemm_matmul (cpu mode): every matrix of k3-tiny-a Q4_K_M, a 33-token prompt") {
    // Real weight distributions (trained scales, q4_K / q5_0 / q6_K / f32 / ...): each 2-D
    // matrix, and the first expert of each 3-D one, against the same bounds.
    const auto file = gguf::File::open(test::data("models/k3-tiny-a-Q4_K_M.gguf"));
    int checked = 0;
    for (const gguf::TensorInfo& t : file->tensors()) {
        if (t.n_dims < 2 || !cuda::emu::matvec_supported(t.type)) continue;
        const WeightView W{t.type, t.ne[1], t.ne[0], t.data, t.row_bytes()};
        INFO("tensor ", t.name, " ", t.shape_str());
        check_gemm(W, 33, t.ne[0], t.ne[1]);
        ++checked;
    }
    CHECK(checked > 50);
}

TEST_CASE("cuda gemm_matmul (cpu mode): the workspace it asks for is bounded, and refusals are clear") {
    using quant::Type;
    // K3-sized calls: one chunk of activations and one tile of at most kGemmTileBytes.
    const size_t big = cuda::emu::gemm_workspace_bytes(Type::Q4_K, 18432, 7168, 100000);
    CHECK(big <= cuda::emu::gemm_act_bytes(Type::Q4_K, 7168, 100000) + cuda::emu::kGemmTileBytes);
    // The chunk's activations as fp16 and one scale a token, each rounded up to 256 bytes.
    CHECK(cuda::emu::gemm_act_bytes(Type::Q4_K, 7168, 100000) ==
          size_t(cuda::emu::kGemmMaxTokens * 7168 * 2) + size_t(cuda::emu::kGemmMaxTokens * 4));
    CHECK(cuda::emu::gemm_act_bytes(Type::Q4_K, 7, 3) == 256 + 256);
    CHECK(cuda::emu::gemm_act_bytes(Type::BF16, 7, 3) == 256);
    CHECK(cuda::emu::gemm_workspace_bytes(Type::F32, 7168, 7168, 512) == 0);   // used in place
    CHECK(cuda::emu::gemm_workspace_bytes(Type::BF16, 7168, 7168, 512) == size_t(512 * 7168 * 2));
    CHECK(cuda::emu::gemm_elem(Type::Q4_K) == Elem::F16);
    CHECK(cuda::emu::gemm_elem(Type::BF16) == Elem::BF16);
    CHECK(cuda::emu::gemm_elem(Type::F32) == Elem::F32);

    std::unique_ptr<cuda::emu::Blas, void (*)(cuda::emu::Blas*)> blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    std::vector<uint8_t> w(4096), ws(1 << 16);
    std::vector<float> x(4 * 256), y(64);
    CHECK_THROWS_WITH_AS(cuda::emu::gemm_matmul(blas.get(), Type::Q2_K, w.data(), 84, 1, 256, x.data(), 0, 4, y.data(), 0,
                                                ws.data(), ws.size(), nullptr),
                         doctest::Contains("q2_K"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(cuda::emu::gemm_matmul(blas.get(), Type::Q4_K, w.data(), 144, 1, 200, x.data(), 0, 4, y.data(), 0,
                                                ws.data(), ws.size(), nullptr),
                         doctest::Contains("whole blocks"), std::invalid_argument);
    CHECK_THROWS_WITH_AS(cuda::emu::gemm_matmul(blas.get(), Type::Q4_K, w.data(), 144, 1, 256, x.data(), 0, 4, y.data(), 0,
                                                ws.data(), 100, nullptr),
                         doctest::Contains("workspace"), std::invalid_argument);
    CHECK_THROWS_AS(cuda::emu::gemm(blas.get(), Elem::F16, 4, 4, 8, w.data(), 4, w.data(), 8, y.data(), 4),
                    std::invalid_argument);   // lda shorter than a row
}

// gemm_tf32 (the MHA key expansion's GEMM on TF32 tensor cores): each operand rounded to TF32 (11
// significant bits, nearest, ties away from zero, as the CPU mode states it), then gemm()'s fp32
// sums. The reference rounds in double, written apart from the CPU mode's bit arithmetic; the
// operands include exact ties (1 + 2^-11 goes to 1 + 2^-10, its negative likewise) and values
// that are TF32 already (unchanged, so gemm_tf32 is gemm() on them bit for bit).
TEST_CASE("cuda gemm_tf32 (cpu mode): operands rounded to TF32, ties away from zero; TF32 values exact") {
    std::unique_ptr<cuda::emu::Blas, void (*)(cuda::emu::Blas*)> blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    auto tf32 = [](float x) {
        if (x == 0 || !std::isfinite(x)) return x;
        const int e = std::ilogb(x);
        return float(std::ldexp(std::round(std::ldexp(double(x), 10 - e)), e - 10));
    };
    const int64_t m = 5, n = 3, k = 37;
    std::vector<float> a = randn(size_t(m * k), 71), b = randn(size_t(n * k), 72);
    a[0] = 1.0f + std::ldexp(1.0f, -11), a[1] = -(1.0f + std::ldexp(1.0f, -11)), b[0] = 3.0f * (1.0f + std::ldexp(1.0f, -11));
    CHECK(tf32(a[0]) == 1.0f + std::ldexp(1.0f, -10));
    std::vector<float> ar(a.size()), br(b.size());
    std::transform(a.begin(), a.end(), ar.begin(), tf32);
    std::transform(b.begin(), b.end(), br.begin(), tf32);
    std::vector<float> got(size_t(m * n)), want(got.size()), raw(got.size()), exact(got.size());
    cuda::emu::gemm_tf32(blas.get(), m, n, k, a.data(), k, b.data(), k, got.data(), m);
    cuda::emu::gemm(blas.get(), Elem::F32, m, n, k, ar.data(), k, br.data(), k, want.data(), m);
    cuda::emu::gemm(blas.get(), Elem::F32, m, n, k, a.data(), k, b.data(), k, raw.data(), m);
    CHECK(got == want);
    CHECK(got != raw);   // the rounding is not a no-op
    cuda::emu::gemm_tf32(blas.get(), m, n, k, ar.data(), k, br.data(), k, exact.data(), m);
    CHECK(exact == want);
}

// The grouped prefill GEMM (gemm_matmul_grouped: a MoE layer's experts in one cuBLAS call) must
// give every task what gemm_matmul gives it alone: the same conversions and, in CPU mode, the same
// GEMM loops, so the same bits. Tasks of different rows and token counts, strided inputs and
// outputs, two tasks reading one input at different rows; workspaces that hold every task at
// once, one task at a time (one grouped call per task), and less than one task (each goes
// through gemm_matmul's tiles).
TEST_CASE("cuda gemm_matmul_grouped (cpu mode): every task bit-equal to its own gemm_matmul, any workspace") {
    std::unique_ptr<cuda::emu::Blas, void (*)(cuda::emu::Blas*)> blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    struct TaskShape {
        int64_t rows, n, row0, ldy_pad;
    };
    const TaskShape shapes[] = {{64, 40, 0, 0}, {32, 33, 5, 3}, {96, 64, 0, 1}, {16, 0, 0, 0}, {48, 35, 2, 0}};
    for (const quant::Type type : {quant::Type::Q4_K, quant::Type::MXFP4, quant::Type::Q8_0, quant::Type::F16,
                                   quant::Type::BF16, quant::Type::F32}) {
        const int64_t cols = 512, ldx = cols + 7;
        const Weights all(type, 96 * 5, cols, 900 + uint32_t(type), 0.5f);   // rows of every task, one after another
        // Rows 3 and 36 past fp16's range: every task but the empty one holds one of them (rows
        // 0-39, 5-37, 0-63, 2-36), so every grouped call's scaled tokens meet gemm_matmul's.
        std::vector<float> x = randn(size_t(80 * ldx), 901);
        for (int64_t i = 0; i < cols; ++i) x[size_t(3 * ldx + i)] *= 1e5f, x[size_t(36 * ldx + i)] *= 3e7f;
        std::vector<cuda::emu::GemmTask> tasks;
        std::vector<std::vector<float>> got, want;
        for (size_t i = 0; i < std::size(shapes); ++i) {
            const TaskShape& s = shapes[i];
            const int64_t ldy = s.rows + s.ldy_pad;
            got.emplace_back(size_t(std::max<int64_t>(s.n, 1) * ldy), -5.0f);
            want.emplace_back(got.back().size(), -5.0f);
            tasks.push_back(cuda::emu::GemmTask{all.bytes.data() + i * 96 * all.rb, s.rows, x.data() + s.row0 * ldx, ldx,
                                                s.n, nullptr, ldy});
        }
        for (size_t i = 0; i < tasks.size(); ++i) {
            const auto& t = tasks[i];
            std::vector<uint8_t> ws(std::max<size_t>(cuda::emu::gemm_workspace_bytes(type, t.rows, cols, t.n), 1));
            cuda::emu::gemm_matmul(blas.get(), type, t.W, all.rb, t.rows, cols, t.x, t.ldx, t.n, want[i].data(), t.ldy,
                                   ws.data(), ws.size(), nullptr);
        }
        const size_t full = cuda::emu::gemm_grouped_workspace_bytes(type, cols, tasks.data(), int64_t(tasks.size()));
        size_t one_task = 0;   // the largest single task's share: one grouped call per task
        for (const auto& t : tasks) one_task = std::max(one_task, cuda::emu::gemm_workspace_bytes(type, t.rows, cols, t.n));
        // The least gemm_matmul takes for the largest task (one chunk's activations and one
        // weight row): every task too large to group, each in tiles of a few rows.
        size_t least = 0;
        if (type != quant::Type::F32)
            for (const auto& t : tasks) least = std::max(least, cuda::emu::gemm_act_bytes(type, cols, t.n) + size_t(cols) * 2);
        for (const size_t ws_bytes : {full, one_task + 4096, one_task, least}) {
            INFO("type ", quant::traits(type).name, " workspace ", ws_bytes, " of ", full);
            std::vector<uint8_t> ws(std::max<size_t>(ws_bytes, 1));
            for (size_t i = 0; i < tasks.size(); ++i) {
                std::fill(got[i].begin(), got[i].end(), -5.0f);
                tasks[i].y = got[i].data();
            }
            int not_finite = 0;
            cuda::emu::gemm_matmul_grouped(blas.get(), type, all.rb, cols, tasks.data(), int64_t(tasks.size()), ws.data(),
                                           ws_bytes, nullptr);
            for (size_t i = 0; i < tasks.size(); ++i) {
                INFO("task ", i);
                CHECK(std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)) == 0);
                for (const float v : got[i]) not_finite += !std::isfinite(v);
            }
            CHECK(not_finite == 0);
        }
    }
    std::vector<uint8_t> w(64);
    cuda::emu::GemmTask t{w.data(), 1, nullptr, 0, 40, nullptr, 0};
    CHECK_THROWS_AS(cuda::emu::gemm_matmul_grouped(blas.get(), quant::Type::Q2_K, 84, 256, &t, 1, w.data(), w.size(), nullptr),
                    std::invalid_argument);
}

// More tasks than one unscale launch takes (kMatvecGroupMax, 48): 50 experts of two tokens each,
// one of every three holding a token past fp16's range, each task against gemm_matmul alone (whose
// own unscaling the range case checks against the exact product). Task 48 is in the second launch.
TEST_CASE("cuda gemm_matmul_grouped (cpu mode): 50 tasks with scaled tokens, past one unscale launch") {
    std::unique_ptr<cuda::emu::Blas, void (*)(cuda::emu::Blas*)> blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    const quant::Type type = quant::Type::Q4_K;
    const int64_t cols = 256, rows = 8, n = 2, count = 50;
    const Weights all(type, rows * count, cols, 950);
    std::vector<float> x = randn(size_t(count * n * cols), 951);
    for (int64_t i = 0; i < count; i += 3)
        for (int64_t c = 0; c < cols; ++c) x[size_t((i * n + 1) * cols + c)] *= 1e5f;
    std::vector<cuda::emu::GemmTask> tasks;
    std::vector<float> got(size_t(count * n * rows), -5.0f), want(got.size(), -5.0f);
    for (int64_t i = 0; i < count; ++i)
        tasks.push_back(cuda::emu::GemmTask{all.bytes.data() + size_t(i * rows) * all.rb, rows, x.data() + i * n * cols, 0,
                                            n, got.data() + i * n * rows, 0});
    for (const auto& t : tasks) {
        std::vector<uint8_t> ws(cuda::emu::gemm_workspace_bytes(type, rows, cols, n));
        cuda::emu::gemm_matmul(blas.get(), type, t.W, all.rb, rows, cols, t.x, 0, n, want.data() + (t.y - got.data()), 0,
                               ws.data(), ws.size(), nullptr);
    }
    std::vector<uint8_t> ws(cuda::emu::gemm_grouped_workspace_bytes(type, cols, tasks.data(), count));
    cuda::emu::gemm_matmul_grouped(blas.get(), type, all.rb, cols, tasks.data(), count, ws.data(), ws.size(), nullptr);
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    int not_finite = 0;
    for (const float v : got) not_finite += !std::isfinite(v);
    CHECK(not_finite == 0);
}
