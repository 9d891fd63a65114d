// Byte-exact parity with ggml: every quantizer against the golden rows ggml itself produced,
// and every dequantizer against ggml's first values and rmse.
#include <cmath>
#include <cstring>

#include "quant/kernels.h"
#include "quant/types.h"
#include "quant_test_util.h"

using namespace kinfer::quant;
using namespace kinfer::quant::testing;

namespace {

// Quantize the LCG input with fn, compare bytes / hash / dequantized values / rmse.
void check_entry(const GoldenEntry& e, FromFloatFn fn) {
    const auto type = type_from_name(e.name);
    REQUIRE_MESSAGE(type.has_value(), e.name);
    const Traits& t = traits(*type);
    const auto x = lcg_input();
    const int64_t n = int64_t(x.size());
    std::vector<uint8_t> q(row_size(t, n));
    fn(x.data(), q.data(), n);
    CHECK_MESSAGE(to_hex(q.data(), q.size()) == e.all_hex, e.name, " quantized bytes differ from ggml");
    CHECK_MESSAGE(fnv1a64(q.data(), q.size()) == e.fnv, e.name);
    std::vector<float> y(static_cast<size_t>(n));
    t.to_float(q.data(), y.data(), n);
    for (int k = 0; k < 4; ++k) CHECK_MESSAGE(y[size_t(k)] == e.y[k], e.name, " y[", k, "]");
    double se = 0;
    for (int64_t i = 0; i < n; ++i) se += double(x[size_t(i)] - y[size_t(i)]) * (x[size_t(i)] - y[size_t(i)]);
    CHECK_MESSAGE(std::sqrt(se / double(n)) == doctest::Approx(e.rmse).epsilon(1e-4), e.name);
}

}  // namespace

TEST_CASE("golden: the LCG input matches the files' stated first values") {
    const auto x = lcg_input();
    CHECK(x[0] == -3.836f);
    CHECK(x[1] == -3.868f);
    CHECK(x[2] == 0.448f);
    CHECK(x[3] == 1.2f);
}

TEST_CASE("golden: quantize_row_*_ref is byte-identical to ggml's reference") {
    const std::string path = golden_quant_file("ggml_reference_vectors.txt");
    if (path.empty()) return;
    const auto entries = read_golden(path);
    REQUIRE(entries.size() >= 10);
    for (const auto& e : entries) {
        INFO("type ", e.name);
        check_entry(e, traits(*type_from_name(e.name)).from_float_ref);
    }
}

TEST_CASE("golden: Traits::quantize is byte-identical to ggml_quantize_chunk (no imatrix)") {
    const std::string path = golden_quant_file("ggml_quantize_chunk_vectors.txt");
    if (path.empty()) return;
    const auto entries = read_golden(path);
    REQUIRE(entries.size() >= 15);
    for (const auto& e : entries) {
        INFO("type ", e.name);
        check_entry(e, traits(*type_from_name(e.name)).quantize);
    }
}
