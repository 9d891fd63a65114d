// The perplexity arithmetic on hand-made logits: known NLLs, the base-record encoding, KLD of a
// model against itself, and the KLD file's refusal of bad input.
#include "cli/lib/kld_file.h"
#include "cli/lib/perplexity_stats.h"
#include "common/error.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

using namespace kinfer::ppl;

TEST_CASE("uniform logits give NLL = log(V)") {
    std::vector<float> l(1000, 0.25f);
    CHECK(token_nll(l.data(), 1000, 7) == doctest::Approx(std::log(1000.0)).epsilon(1e-12));
}

TEST_CASE("NLL of a peaked distribution") {
    std::vector<float> l = {0.f, 0.f, std::log(8.f)};   // p = {0.1, 0.1, 0.8}
    CHECK(token_nll(l.data(), 3, 2) == doctest::Approx(-std::log(0.8)).epsilon(1e-6));
    CHECK(token_nll(l.data(), 3, 0) == doctest::Approx(-std::log(0.1)).epsilon(1e-6));
}

TEST_CASE("accumulator: PPL and its uncertainty follow llama-perplexity's formula") {
    NllAccumulator acc;
    const double v[] = {1.0, 2.0, 3.0, 4.0};
    for (double x : v) acc.add(x);
    CHECK(acc.ppl() == doctest::Approx(std::exp(2.5)));
    // var = mean(x^2) - mean^2 = 7.5 - 6.25 = 1.25; err = ppl * sqrt(1.25 / 3)
    CHECK(acc.ppl_uncertainty() == doctest::Approx(std::exp(2.5) * std::sqrt(1.25 / 3)));
}

TEST_CASE("KLD of a model against its own base records is ~0 and top tokens agree") {
    const int V = 4352;
    std::mt19937 rng(1);
    std::normal_distribution<float> nd(0.f, 3.f);
    std::vector<uint16_t> rec(base_record_u16(V));
    KldAccumulator kld;
    NllAccumulator base;
    for (int pos = 0; pos < 200; ++pos) {
        std::vector<float> l(V);
        for (auto& x : l) x = nd(rng);
        const int tok = pos % V;
        base.add(encode_base(l.data(), V, tok, rec.data()));
        kld.add(l.data(), V, tok, rec.data());
    }
    const MeanErr m = mean_and_uncertainty(kld.sum_kld, kld.sum_kld2, kld.count);
    MESSAGE("self KLD mean " << m.mean);
    CHECK(std::fabs(m.mean) < 1e-5);   // only the uint16 level rounding remains
    CHECK(kld.n_same_top == kld.count);
    CHECK(std::exp(kld.sum_nll / kld.count) == doctest::Approx(base.ppl()).epsilon(1e-6));
}

TEST_CASE("percentiles interpolate like llama-perplexity") {
    std::vector<float> v = {0, 1, 2, 3, 4};
    CHECK(percentile(v, 0.5f) == doctest::Approx(2));
    CHECK(percentile(v, 0.9f) == doctest::Approx(3.6));
    CHECK(median(v) == 2);
    v.push_back(5);
    CHECK(median(v) == doctest::Approx(2.5));
}

TEST_CASE("KLD file round trip, and a truncated file is refused with its offset") {
    const std::string path = "test_kld_roundtrip.kld";
    std::vector<int32_t> toks(2 * 8);
    for (size_t i = 0; i < toks.size(); ++i) toks[i] = int32_t(i * 7);
    std::vector<uint16_t> recs(3 * base_record_u16(10), 0x1234);
    {
        KldWriter w(path, 8, 10, 2, toks);
        w.write_records(recs.data(), recs.size());
        w.finish();
    }
    KldReader r(path);
    CHECK(r.n_ctx == 8);
    CHECK(r.n_vocab == 10);
    CHECK(r.tokens == toks);
    CHECK(r.tokens_hash == hash_tokens(toks));
    std::vector<uint16_t> back(recs.size());
    r.read_records(back.data(), back.size());
    CHECK(back == recs);
    try {
        r.read_records(back.data(), 1);
        FAIL("expected an error");
    } catch (const kinfer::Error& e) {
        CHECK(std::string(e.what()).find("at byte") != std::string::npos);
    }
    std::remove(path.c_str());
    CHECK_THROWS_AS(KldReader("does-not-exist.kld"), kinfer::Error);
}

TEST_CASE("an abandoned KLD writer leaves no file") {
    const std::string path = "test_kld_abandoned.kld";
    { KldWriter w(path, 8, 10, 1, std::vector<int32_t>(8, 1)); }
    FILE* f = std::fopen(path.c_str(), "rb");
    CHECK(f == nullptr);
    if (f) std::fclose(f);
}
