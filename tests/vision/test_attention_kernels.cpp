// The vision attention's tiled kernels give the bits of the plain algorithm (scores by one
// multiply-add pass per dimension over the whole key row, the row softmax, one dot per output
// in ggml's order), and the F32 matmul's tiles equal its one-row kernels, for lengths and counts
// on both sides of the vector widths.
#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "backend/cpu/vision_kernels.h"
#include "quant/types.h"
#include "test_util.h"

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace kinfer::backend::cpu {
void softmax_row_avx2(float* x, int64_t n, float scale);                 // vision_softmax_avx2.cpp
float dot_f32_sgemm_avx2(const float* a, const float* b, int64_t n);    // matmul_f32_avx2.cpp
}

using namespace kinfer;
using namespace kinfer::backend;

namespace {

std::vector<float> randn(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = d(g);
    return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The attention one output at a time: each score row by one mad_f32 pass per dimension (the
// golden build's unfused chain for head sizes that are multiples of 8), the row softmax, then
// O = V^T P in 256-query blocks with ggml's choice of kernel by the block's shape.
std::vector<float> attend_reference(runtime::ThreadPool& pool, const float* q, const float* k, const float* v, int64_t n,
                                    int64_t H, int64_t D, float scale) {
    const int64_t ld = H * D;
    const bool simd = quant::active_isa() != quant::Isa::scalar;
    std::vector<float> o(static_cast<size_t>(n * ld)), kt(static_cast<size_t>(D * n)), vt(static_cast<size_t>(D * n));
    std::vector<float> p(static_cast<size_t>(n * n));
    for (int64_t h = 0; h < H; ++h) {
        for (int64_t j = 0; j < n; ++j)
            for (int64_t i = 0; i < D; ++i) {
                kt[size_t(i * n + j)] = k[j * ld + h * D + i];
                vt[size_t(i * n + j)] = v[j * ld + h * D + i];
            }
        for (int64_t r = 0; r < n; ++r) {
            float* s = p.data() + r * n;
            const float* qr = q + r * ld + h * D;
            std::fill_n(s, n, 0.0f);
            for (int64_t i = 0; i < D; ++i) cpu::mad_f32(s, kt.data() + i * n, qr[i], n);
            if (simd) cpu::softmax_row_avx2(s, n, scale);
            else cpu::ops::softmax(s, n, scale);
        }
        const Mat Vt{quant::Type::F32, n, D, reinterpret_cast<const uint8_t*>(vt.data()), size_t(n) * sizeof(float), 0, "V"};
        for (int64_t q0 = 0; q0 < n; q0 += 256)
            cpu::matmul(pool, Vt, p.data() + q0 * n, std::min<int64_t>(256, n - q0), o.data() + q0 * ld + h * D, n, ld);
    }
    return o;
}

}  // namespace

TEST_CASE("vision attention: the blocked kernels give the plain algorithm's bits") {
    runtime::ThreadPool pool(2);
    for (const int64_t n : {8, 16, 37, 64, 130, 257, 300}) {   // > 256: a second query block (257: of one row)
        for (const int64_t D : {24, 40}) {
            CAPTURE(n);
            CAPTURE(D);
            const int64_t H = 3;
            const auto q = randn(size_t(n * H * D), 1), k = randn(size_t(n * H * D), 2), v = randn(size_t(n * H * D), 3);
            std::vector<float> o(size_t(n * H * D));
            cpu::attend_full(pool, q.data(), k.data(), v.data(), o.data(), n, H, D, 0.2f);
            CHECK(same_bits(o, attend_reference(pool, q.data(), k.data(), v.data(), n, H, D, 0.2f)));
        }
    }
}

TEST_CASE("f32 matmul: four weight rows at a time give one dot_f32 per output, bit for bit") {
    runtime::ThreadPool pool(2);
    for (const int64_t cols : {24, 72, 100, 988}) {    // none a multiple of 16: the vec_dot path
        for (const int64_t rows : {1, 4, 6, 24}) {
            for (const int64_t n : {1, 3}) {
                CAPTURE(cols);
                CAPTURE(rows);
                CAPTURE(n);
                const auto w = randn(size_t(rows * cols), 4), x = randn(size_t(n * cols), 5);
                const Mat W{quant::Type::F32, cols, rows, reinterpret_cast<const uint8_t*>(w.data()), size_t(cols) * sizeof(float),
                            0, "W"};
                std::vector<float> y(size_t(n * rows)), want(size_t(n * rows));
                cpu::matmul(pool, W, x.data(), n, y.data());
                for (int64_t t = 0; t < n; ++t)
                    for (int64_t r = 0; r < rows; ++r)
                        want[size_t(t * rows + r)] = cpu::dot_f32(w.data() + r * cols, x.data() + t * cols, cols);
                CHECK(same_bits(y, want));
            }
        }
    }
}

TEST_CASE("f32 matmul, tinyBLAS order: two activation rows per tile give the one-row kernel's bits") {
    if (quant::active_isa() == quant::Isa::scalar) return;   // the sgemm order is an AVX2 path
    runtime::ThreadPool pool(2);
    for (const int64_t cols : {16, 48, 192}) {
        for (const int64_t rows : {4, 6, 96}) {
            for (const int64_t n : {2, 3, 5}) {
                CAPTURE(cols);
                CAPTURE(rows);
                CAPTURE(n);
                const auto w = randn(size_t(rows * cols), 6), x = randn(size_t(n * cols), 7);
                const Mat W{quant::Type::F32, cols, rows, reinterpret_cast<const uint8_t*>(w.data()), size_t(cols) * sizeof(float),
                            0, "W"};
                std::vector<float> y(size_t(n * rows)), want(size_t(n * rows));
                cpu::matmul(pool, W, x.data(), n, y.data());
                for (int64_t t = 0; t < n; ++t)
                    for (int64_t r = 0; r < rows; ++r)
                        want[size_t(t * rows + r)] = cpu::dot_f32_sgemm_avx2(w.data() + r * cols, x.data() + t * cols, cols);
                CHECK(same_bits(y, want));
            }
        }
    }
}
