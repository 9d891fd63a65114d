// Element-wise operators that must reproduce the C library / ggml bit for bit: the vectorised
// tanh equals tanhf (glibc's algorithm; the full 2^32 sweep was run once, this samples it), in
// place as well as out of place, at every ISA level the CPU has; the fused KDA row step equals
// its four-pass definition.
#include "test_util.h"

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"
#include "quant/types.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

using namespace kinfer::backend::cpu;

namespace {
uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}
float float_of(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}
}  // namespace

TEST_CASE("tanh: bit-identical to the C library's tanhf") {
    std::printf("tanh checked at ISA level %s\n", kinfer::quant::isa_name(kinfer::quant::active_isa()));
    // Every 331st bit pattern (13 M floats: all exponents, both signs, NaN / inf / denormals),
    // plus a dense run around each boundary of the vector path.
    std::vector<float> x;
    for (uint64_t b = 0; b < (1ull << 32); b += 331) x.push_back(float_of(uint32_t(b)));
    for (float edge : {0x1p-12f, 1.0f, 9.0f, 0.34657359f, 0.51986039f, 1.0397208f})
        for (int d = -300; d <= 300; ++d) {
            const float v = float_of(bits_of(edge) + uint32_t(d));
            x.push_back(v);
            x.push_back(-v);
        }
    std::vector<float> y(x.size());
    ops::tanh(x.data(), y.data(), int64_t(x.size()));
    size_t bad = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const float want = std::tanh(x[i]);
        if (bits_of(y[i]) != bits_of(want) && !(std::isnan(want) && std::isnan(y[i]))) {
            if (bad < 5) MESSAGE("x = ", x[i], " got ", y[i], " want ", want);
            ++bad;
        }
    }
    CHECK(bad == 0);
    // In place, with an odd length (scalar tail) and out-of-range lanes mixed in.
    std::vector<float> z = {0.5f, -3.0f, 1e-20f, 30.0f, -0.0f, 2.5f, NAN, 0.001f, 8.9f, -1.0f, 0.2f};
    std::vector<float> want(z.size());
    for (size_t i = 0; i < z.size(); ++i) want[i] = std::tanh(z[i]);
    ops::tanh(z.data(), z.data(), int64_t(z.size()));
    for (size_t i = 0; i < z.size(); ++i) {
        CAPTURE(i);
        CHECK((bits_of(z[i]) == bits_of(want[i]) || (std::isnan(z[i]) && std::isnan(want[i]))));
    }
}

TEST_CASE("tanh: the check above passes at every ISA level this CPU has (KINFER_ISA, child processes)") {
    // The level is chosen once per process, so each level runs the case above in a child with
    // KINFER_ISA set; the child says which level it checked.
    if (std::getenv("KINFER_TEST_CHILD")) return;
    using kinfer::quant::Isa;
    int levels = 0;
    for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
        if (!kinfer::quant::cpu_supports(isa)) {
            kinfer::test::skip_case(kinfer::test::SkipKind::machine, std::string("CPU lacks ") + kinfer::quant::isa_name(isa));
            continue;
        }
        const std::string name = kinfer::quant::isa_name(isa);
        const auto r = kinfer::test::run_command("env -u KINFER_TEST_REPORT_DIR KINFER_TEST_CHILD=1 KINFER_ISA=" + name +
                                                 " '" + std::filesystem::read_symlink("/proc/self/exe").string() +
                                                 "' --force-colors=0 -tc='tanh: bit-identical*'");
        INFO(r.out);
        CHECK(r.rc == 0);
        CHECK(r.out.find("tanh checked at ISA level " + name) != std::string::npos);
        ++levels;
    }
    CHECK(levels >= 1);
}

namespace kinfer::backend::cpu {
void kda_rows_step_avx2(float* M, int64_t nrows, const float* eg, const float* k, const float* q, int64_t D,
                        const float* v, float beta, float* o);
}

TEST_CASE("kda recurrence: the fused two-pass row step equals decay, dot, update, dot bit for bit") {
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        MESSAGE("no AVX2/FMA: the fused KDA step is not used on this CPU");
        return;
    }
    uint32_t seed = 7;
    auto rnd = [&] { seed = seed * 1664525u + 1013904223u; return float(int(seed >> 8) - (1 << 23)) / float(1 << 23); };
    int compared = 0;
    // 128 is the models' head size; the others take the tails (D % 64 != 0, D % 8 != 0).
    for (int64_t D : {int64_t(128), int64_t(64), int64_t(100), int64_t(200), int64_t(13)}) {
        for (int64_t rows : {int64_t(1), int64_t(2), int64_t(5)}) {
            const size_t nd = size_t(D);
            std::vector<float> M(size_t(rows) * nd), eg(nd), k(nd), q(nd), v(static_cast<size_t>(rows));
            for (auto& x : M) x = rnd();
            for (auto& x : eg) x = 0.5f + 0.5f * std::fabs(rnd());
            for (auto& x : k) x = rnd();
            for (auto& x : q) x = rnd();
            for (auto& x : v) x = rnd();
            std::vector<float> want_M = M, want_o(static_cast<size_t>(rows)), o(static_cast<size_t>(rows));
            const float beta = 0.7f;
            for (int64_t j = 0; j < rows; ++j) {   // the four separate passes, ggml's order
                float* Mj = want_M.data() + j * D;
                for (int64_t i = 0; i < D; ++i) Mj[i] *= eg[size_t(i)];
                const float d = (v[size_t(j)] - dot_f32(Mj, k.data(), D)) * beta;
                for (int64_t i = 0; i < D; ++i) Mj[i] = std::fma(k[size_t(i)], d, Mj[i]);
                want_o[size_t(j)] = dot_f32(Mj, q.data(), D);
            }
            kda_rows_step_avx2(M.data(), rows, eg.data(), k.data(), q.data(), D, v.data(), beta, o.data());
            CAPTURE(D);
            CAPTURE(rows);
            for (int64_t j = 0; j < rows; ++j) CHECK(bits_of(o[size_t(j)]) == bits_of(want_o[size_t(j)]));
            CHECK(std::memcmp(M.data(), want_M.data(), M.size() * sizeof(float)) == 0);
            ++compared;
        }
    }
    CHECK(compared == 15);
}
