// Shared helpers of the CPU-mode kernel tests: seeded random data, the CPU backend the kernels
// are checked against, and a tolerance check that reports the worst element.
#pragma once
#include "backend/cpu_backend.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kinfer::cuda::testing {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    return x;
}

inline backend::CpuBackend& cpu() {
    static backend::CpuBackend be(2);
    return be;
}

// |got[i] - want[i]| <= rel * |want[i]| + abs for every i; fails naming the worst element.
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rel, double abs,
                        const char* what) {
    REQUIRE(got.size() == want.size());
    size_t worst = 0;
    double worst_excess = -1;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(double(got[i]) - double(want[i]));
        const double excess = err - (rel * std::fabs(double(want[i])) + abs);
        if (excess > worst_excess || std::isnan(got[i])) {
            worst_excess = std::isnan(got[i]) ? 1e30 : excess;
            worst = i;
        }
    }
    INFO(std::string(what), ": worst element ", worst, " got ", got[worst], " want ", want[worst], " (rel ", rel, ", abs ", abs, ")");
    CHECK(worst_excess <= 0);
}

}  // namespace kinfer::cuda::testing
