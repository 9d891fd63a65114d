// Shared helpers of the CPU-mode kernel tests: seeded random data, the CPU backend the kernels
// are checked against, a tolerance check that reports the worst element, and the bound on the
// CPU backend's activation rounding in a matmul.
#pragma once
#include "test_util.h"

#include "backend/cpu_backend.h"
#include "backend/cuda/kernels.h"
#include "quant/types.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace kinfer::cuda::testing {

// Every weight type the CUDA kernels decode (matvec_supported, with_dec): the type lists of the
// matvec, group, by-slot, embedding and GEMM tests.
inline constexpr quant::Type kKernelTypes[] = {
    quant::Type::F32,  quant::Type::F16,  quant::Type::BF16,   quant::Type::Q8_0, quant::Type::Q4_0,
    quant::Type::Q5_0, quant::Type::Q4_1, quant::Type::Q5_1,   quant::Type::IQ4_NL, quant::Type::MXFP4,
    quant::Type::Q4_K, quant::Type::Q5_K, quant::Type::Q6_K,   quant::Type::IQ4_XS};

using kinfer::test::randn;   // test_util.h

inline backend::CpuBackend& cpu() {
    static backend::CpuBackend be(2);
    return be;
}

// Bytes whose data starts 256-byte aligned, as a device allocation's (the kernels' 16-byte loads
// and cp.async need 16).
struct AlignedBytes {
    std::vector<uint8_t> mem;
    uint8_t* p;
    explicit AlignedBytes(size_t bytes) : mem(bytes + 256, 0) {
        p = mem.data() + (256 - reinterpret_cast<uintptr_t>(mem.data()) % 256) % 256;
    }
};

// rows x cols weights of `type` quantized from randn(seed), quant::row_size apart.
inline AlignedBytes quantized_randn(quant::Type type, int64_t rows, int64_t cols, uint32_t seed) {
    const quant::Traits& tr = quant::traits(type);
    const size_t rb = quant::row_size(tr, cols);
    AlignedBytes W(rb * size_t(rows));
    const std::vector<float> wf = randn(size_t(rows * cols), seed);
    for (int64_t r = 0; r < rows; ++r) tr.quantize(wf.data() + r * cols, W.p + size_t(r) * rb, cols);
    return W;
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

// Per-element bound on |x - round(x)| of the CPU backend's activation conversion before a matmul
// with weight type t (the vec_dot format: Q8_0 / Q8_1 / Q8_K blocks, or F16 / BF16; F32 none).
inline std::vector<double> act_rounding(quant::Type t, const float* x, int64_t cols) {
    std::vector<double> e(size_t(cols), 0.0);
    const quant::Type vt = quant::type_facts(t).vec_dot_type;
    if (t == quant::Type::F16 || t == quant::Type::BF16) {
        const double rel = t == quant::Type::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
        for (int64_t i = 0; i < cols; ++i) e[size_t(i)] = std::fabs(x[i]) * rel;
    } else if (vt == quant::Type::Q8_0 || vt == quant::Type::Q8_1 || vt == quant::Type::Q8_K) {
        const int64_t bs = quant::type_facts(vt).block_size;
        for (int64_t b = 0; b < cols; b += bs) {
            double amax = 0;
            for (int64_t i = b; i < b + bs; ++i) amax = std::max(amax, double(std::fabs(x[i])));
            for (int64_t i = b; i < b + bs; ++i) e[size_t(i)] = 0.57 * amax / 127.0;
        }
    }
    return e;
}

// A latent cache of n_rows rows of R floats at type t, in pages of page_rows, each page its own
// allocation (as the session grows them), filled with 0xa5 until stored; args() is the kernels' view.
struct HostPages {
    std::vector<std::vector<uint8_t>> mem;
    std::vector<uint8_t*> ptr;
    backend::LatentPages c;
    HostPages(backend::CacheType t, int64_t R, int64_t page_rows, int64_t n_rows) {
        c.type = t, c.R = R, c.page_rows = page_rows, c.row_bytes = backend::cache_row_bytes(t, R);
        for (int64_t p = 0; p * page_rows < n_rows; ++p) mem.emplace_back(size_t(page_rows) * c.row_bytes, uint8_t(0xa5));
        for (auto& m : mem) ptr.push_back(m.data());
        c.pages = ptr.data(), c.n_pages = int64_t(ptr.size());
    }
    cuda::emu::LatentArgs args() const {
        cuda::emu::LatentArgs a;
        a.type = int(c.type), a.R = c.R, a.page_rows = c.page_rows, a.row_bytes = c.row_bytes, a.pages = c.pages;
        return a;
    }
    bool same_bytes(const HostPages& o) const { return mem == o.mem; }
};

}  // namespace kinfer::cuda::testing
