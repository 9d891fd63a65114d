// Element-wise operators that must reproduce the C library / ggml bit for bit: the vectorised
// tanh equals tanhf (glibc's algorithm; the full 2^32 sweep was run once, this samples it), in
// place as well as out of place, at every ISA level the CPU has.
#include "test_util.h"

#include "model/ops.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

using namespace kinfer::model;

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
