// Sampler: determinism, fixed picks for a fixed seed, greedy, each filter on hand-made logits,
// penalties, bias, the edge cases (empty vocabulary, all banned, NaN), a chi-square test of the
// tempered distribution, and the stop-string matcher.
#include "test_util.h"

#include "common/error.h"
#include "text/sampler.h"

#include <cmath>
#include <limits>
#include <map>
#include <set>

using namespace kinfer::text;

namespace {

std::vector<float> ramp(size_t n) {   // logit i = i / 4: token n-1 most likely
    std::vector<float> l(n);
    for (size_t i = 0; i < n; ++i) l[i] = static_cast<float>(i) / 4.0f;
    return l;
}

SamplerParams plain(int64_t seed = 1) {
    SamplerParams p;
    p.seed = seed;
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

std::set<Token> ids_of(const std::vector<Candidate>& c) {
    std::set<Token> s;
    for (const auto& x : c) s.insert(x.id);
    return s;
}

}  // namespace

TEST_CASE("same seed, same picks; another seed, other picks") {
    const auto l = ramp(100);
    Sampler a(plain(42), 100), b(plain(42), 100), c(plain(43), 100);
    std::vector<Token> ra, rb, rc;
    for (int i = 0; i < 200; ++i) {
        ra.push_back(a.sample(l.data()));
        rb.push_back(b.sample(l.data()));
        rc.push_back(c.sample(l.data()));
    }
    CHECK(ra == rb);
    CHECK(ra != rc);
    a.reset();
    std::vector<Token> again;
    for (int i = 0; i < 200; ++i) again.push_back(a.sample(l.data()));
    CHECK(again == ra);
}

TEST_CASE("fixed expectations: seed 7 on ramp(100) gives the same 16 picks on every platform") {
    // The draw is u = (mt19937() >> 8) / 2^24 against the cumulative tempered softmax, most likely
    // token first; std::mt19937 is specified bit for bit, so these ids are fixed. They were
    // computed outside kinfer (a 20-line program doing exactly that); at temperature 1.1 picks 6,
    // 9 and 13 differ (83 83 96), at 0.9 most do, so an ignored temperature fails here.
    const auto l = ramp(100);
    const std::vector<Token> want_t1 = {99, 98, 93, 98, 97, 84, 94, 97, 84, 98, 96, 98, 97, 99, 99, 97};
    const std::vector<Token> want_t09 = {99, 99, 94, 98, 97, 86, 95, 97, 86, 98, 97, 98, 97, 99, 99, 98};
    Sampler d(plain(7), 100);
    std::vector<Token> got;
    for (int i = 0; i < 16; ++i) got.push_back(d.sample(l.data()));
    CHECK(got == want_t1);
    SamplerParams p = plain(7);
    p.temperature = 0.9f;
    Sampler t(p, 100);
    got.clear();
    for (int i = 0; i < 16; ++i) got.push_back(t.sample(l.data()));
    CHECK(got == want_t09);
}

TEST_CASE("sampler edge cases: empty vocabulary, every token banned, NaN logits") {
    CHECK_THROWS_AS(Sampler(plain(), 0), kinfer::Error);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> l = {0.5f, 3.0f, 1.0f, 2.0f};
    // Every token banned by the bias: both the sampling and the greedy path fall back to the
    // most likely token of the unbiased logits (1), never to an arbitrary id.
    for (float temp : {1.0f, 0.0f}) {
        SamplerParams p = plain(3);
        p.temperature = temp;
        p.logit_bias = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY}};
        Sampler s(p, 4);
        INFO("temperature " << temp);
        for (int i = 0; i < 20; ++i) CHECK(s.sample(l.data()) == 1);
    }
    // NaN logits are never picked, at any temperature and in the first slot too.
    const std::vector<float> with_nan = {nan, 1.0f, nan, 3.0f, 2.0f};
    CHECK(argmax(with_nan.data(), with_nan.size()) == 3);
    for (float temp : {0.0f, 0.7f, 1.0f}) {
        SamplerParams p = plain(11);
        p.temperature = temp;
        Sampler s(p, with_nan.size());
        INFO("temperature " << temp);
        for (int i = 0; i < 200; ++i) {
            const Token t = s.sample(with_nan.data());
            CHECK((t == 1 || t == 3 || t == 4));
        }
        for (const auto& c : s.candidates(with_nan.data())) CHECK_FALSE(std::isnan(c.p));
    }
    // All NaN: a valid id, no crash.
    const std::vector<float> all_nan(6, nan);
    SamplerParams p = plain(1);
    Sampler s(p, all_nan.size());
    const Token t = s.sample(all_nan.data());
    CHECK((t >= 0 && t < 6));
}

TEST_CASE("greedy and its equivalents") {
    std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.5f};
    CHECK(argmax(l.data(), l.size()) == 1);   // first of equal maxima
    SamplerParams p = plain();
    p.temperature = 0.0f;
    Sampler g(p, l.size());
    CHECK(g.sample(l.data()) == 1);
    p = plain();
    p.top_k = 1;
    Sampler k1(p, l.size());
    for (int i = 0; i < 20; ++i) CHECK(k1.sample(l.data()) == 1);
    p = plain();
    p.top_p = 1e-6f;
    Sampler tp(p, l.size());
    for (int i = 0; i < 20; ++i) CHECK(tp.sample(l.data()) == 1);
}

TEST_CASE("top-k, top-p and min-p keep the right tokens") {
    // Probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 for tokens 0..4.
    std::vector<float> l = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.0625f), std::log(0.0625f)};
    SamplerParams p = plain();
    p.top_k = 2;
    CHECK(ids_of(Sampler(p, 5).candidates(l.data())) == std::set<Token>{0, 1});
    p = plain();
    p.top_p = 0.7f;   // 0.5 + 0.25 reaches 0.7
    CHECK(ids_of(Sampler(p, 5).candidates(l.data())) == std::set<Token>{0, 1});
    p.top_p = 0.8f;   // needs the third
    CHECK(ids_of(Sampler(p, 5).candidates(l.data())) == std::set<Token>{0, 1, 2});
    p = plain();
    p.min_p = 0.2f;   // >= 0.1: tokens 0, 1, 2
    CHECK(ids_of(Sampler(p, 5).candidates(l.data())) == std::set<Token>{0, 1, 2});
    p.min_p = 0.6f;
    CHECK(ids_of(Sampler(p, 5).candidates(l.data())) == std::set<Token>{0});
    // Candidate probabilities are renormalised over the survivors.
    p = plain();
    p.top_k = 2;
    auto c = Sampler(p, 5).candidates(l.data());
    REQUIRE(c.size() == 2);
    CHECK(c[0].p == doctest::Approx(2.0 / 3.0));
    // Temperature sharpens and flattens.
    p = plain();
    p.temperature = 0.5f;
    c = Sampler(p, 5).candidates(l.data());
    CHECK(c[0].p == doctest::Approx(0.25 / (0.25 + 0.0625 + 0.015625 + 2 * 0.00390625)));
    // Filtered tokens are never drawn.
    p = plain(5);
    p.top_k = 3;
    p.min_p = 0.3f;   // leaves {0, 1}
    Sampler s(p, 5);
    for (int i = 0; i < 500; ++i) {
        const Token t = s.sample(l.data());
        CHECK((t == 0 || t == 1));
    }
}

// Pearson's chi-square of the counts of N draws against the probabilities.
double chi_square(const std::vector<int>& n, const std::vector<double>& p, int N) {
    double x2 = 0;
    for (size_t i = 0; i < p.size(); ++i) x2 += (n[i] - N * p[i]) * (n[i] - N * p[i]) / (N * p[i]);
    return x2;
}

TEST_CASE("draws follow the tempered softmax: chi-square bound") {
    // 5 tokens, 4 degrees of freedom: P(chi2 > 25) = 5e-5 for a correct sampler. 50,000 draws
    // put a temperature off by 10 % (1.1 for 1.0) at an expected chi2 of 60 to 200.
    const std::vector<double> probs = {0.4, 0.25, 0.15, 0.12, 0.08};
    std::vector<float> l;
    for (double q : probs) l.push_back(float(std::log(q)));
    const int N = 50000;
    for (float temp : {1.0f, 0.7f, 1.5f}) {
        SamplerParams p = plain(123);
        p.temperature = temp;
        Sampler s(p, l.size());
        std::vector<int> n(l.size(), 0);
        for (int i = 0; i < N; ++i) ++n[size_t(s.sample(l.data()))];
        std::vector<double> want(probs.size());
        double sum = 0;
        for (size_t i = 0; i < probs.size(); ++i) sum += (want[i] = std::pow(probs[i], 1.0 / temp));
        for (double& w : want) w /= sum;
        const double x2 = chi_square(n, want, N);
        INFO("temperature " << temp << ": chi2 " << x2);
        CHECK(x2 < 25.0);
        // The test has the power to see a 10 % temperature error.
        std::vector<double> off(probs.size());
        sum = 0;
        for (size_t i = 0; i < probs.size(); ++i) sum += (off[i] = std::pow(probs[i], 1.0 / (temp * 1.1)));
        for (double& w : off) w /= sum;
        CHECK(chi_square(n, off, N) > 25.0);
    }
}

TEST_CASE("repetition, presence and frequency penalties over the last N tokens") {
    std::vector<float> l = {2.0f, -2.0f, 1.0f, 0.6f};
    SamplerParams p = plain();
    p.temperature = 0.0f;
    p.repeat_penalty = 4.0f;
    p.penalty_last_n = 2;
    Sampler s(p, 4);
    CHECK(s.sample(l.data()) == 0);
    s.accept(0);              // 2.0 -> 0.5: token 2 (1.0) now wins
    CHECK(s.sample(l.data()) == 2);
    s.accept(2);              // 1.0 -> 0.25; token 3 (0.6) wins
    CHECK(s.sample(l.data()) == 3);
    s.accept(3);              // window of 2: token 0 left it, so 2.0 wins again
    CHECK(s.sample(l.data()) == 0);

    // Negative logits get multiplied; presence and frequency subtract.
    p = plain();
    p.temperature = 1.0f;
    p.repeat_penalty = 2.0f;
    p.presence_penalty = 0.5f;
    p.frequency_penalty = 0.25f;
    p.penalty_last_n = -1;
    Sampler q(p, 4);
    q.accept(1);
    q.accept(1);
    q.accept(0);
    std::map<Token, float> got;
    for (const auto& c : q.candidates(l.data())) got[c.id] = c.logit;
    CHECK(got[0] == doctest::Approx(2.0f / 2 - 0.25f - 0.5f));
    CHECK(got[1] == doctest::Approx(-2.0f * 2 - 2 * 0.25f - 0.5f));
    CHECK(got[2] == doctest::Approx(1.0f));
    CHECK(got[3] == doctest::Approx(0.6f));
    // Window 0 turns penalties off.
    p.penalty_last_n = 0;
    Sampler off(p, 4);
    off.accept(0);
    for (const auto& c : off.candidates(l.data()))
        if (c.id == 0) CHECK(c.logit == doctest::Approx(2.0f));
}

TEST_CASE("logit bias") {
    std::vector<float> l = {3.0f, 1.0f, 0.0f};
    SamplerParams p = plain();
    p.temperature = 0.0f;
    p.logit_bias = {{0, -INFINITY}};
    CHECK(Sampler(p, 3).sample(l.data()) == 1);
    p.logit_bias = {{2, 5.0f}};
    CHECK(Sampler(p, 3).sample(l.data()) == 2);
    p = plain(9);
    p.logit_bias = {{0, -INFINITY}};
    Sampler s(p, 3);
    for (int i = 0; i < 300; ++i) CHECK(s.sample(l.data()) != 0);
    p.logit_bias = {{3, 1.0f}};
    CHECK_THROWS_AS(Sampler(p, 3), kinfer::Error);
}

TEST_CASE("stop strings are held back until decided") {
    StopMatcher m({"<|im_end|>", "STOP"});
    std::string out;
    out += m.push("Hello <|im");
    CHECK(out == "Hello ");
    out += m.push("_e");
    CHECK(out == "Hello ");
    out += m.push("x and ST");
    CHECK(out == "Hello <|im_ex and ");
    CHECK_FALSE(m.stopped());
    out += m.push("OP tail");
    CHECK(m.stopped());
    CHECK(m.matched() == "STOP");
    CHECK(out == "Hello <|im_ex and ");
    CHECK(m.push("more").empty());
    CHECK(m.flush().empty());

    StopMatcher n({"\n\n"});
    CHECK(n.push("a\n") == "a");
    CHECK(n.flush() == "\n");
}
