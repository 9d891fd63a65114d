#include "text/sampler.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

namespace kinfer::text {

Token argmax(const float* logits, size_t n) {
    size_t best = 0;
    while (best + 1 < n && std::isnan(logits[best])) ++best;   // a NaN is never the largest
    for (size_t i = best + 1; i < n; ++i)
        if (logits[i] > logits[best]) best = i;
    return static_cast<Token>(best);
}

Sampler::Sampler(const SamplerParams& params, size_t n_vocab) : p_(params), n_vocab_(n_vocab) {
    if (n_vocab == 0) fail("sampler: empty vocabulary");
    if (p_.seed < 0) seed_ = std::random_device{}();
    else seed_ = static_cast<uint32_t>(p_.seed);
    rng_.seed(seed_);
    for (const auto& [id, b] : p_.logit_bias)
        if (id < 0 || static_cast<size_t>(id) >= n_vocab_) fail("sampler: logit bias for token {} outside the vocabulary", id);
}

void Sampler::accept(Token id) {
    if (p_.penalty_last_n == 0) return;
    history_.push_back(id);
    if (p_.penalty_last_n > 0)
        while (history_.size() > static_cast<size_t>(p_.penalty_last_n)) history_.pop_front();
}

void Sampler::reset() {
    history_.clear();
    rng_.seed(seed_);
}

void Sampler::apply_bias_and_penalties(std::vector<float>& l) const {
    for (const auto& [id, b] : p_.logit_bias) l[id] += b;
    const bool penalize = p_.repeat_penalty != 1.0f || p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f;
    if (!penalize || history_.empty()) return;
    std::unordered_map<Token, int> count;
    for (Token t : history_)
        if (t >= 0 && static_cast<size_t>(t) < n_vocab_) ++count[t];
    for (const auto& [t, c] : count) {
        float& x = l[t];
        if (p_.repeat_penalty != 1.0f) x = x > 0 ? x / p_.repeat_penalty : x * p_.repeat_penalty;
        x -= static_cast<float>(c) * p_.frequency_penalty + p_.presence_penalty;
    }
}

// Bias, penalties, top-k, top-p and min-p; the result is sorted by logit (descending) and holds
// softmax probabilities of the untempered logits over the survivors.
std::vector<Candidate> Sampler::filtered(const float* logits) const {
    std::vector<float> l(logits, logits + n_vocab_);
    apply_bias_and_penalties(l);
    std::vector<Candidate> c;
    c.reserve(n_vocab_);
    for (size_t i = 0; i < n_vocab_; ++i)
        if (!std::isnan(l[i]) && l[i] != -INFINITY) c.push_back({static_cast<Token>(i), l[i], 0.0f});
    if (c.empty()) c.push_back({argmax(logits, n_vocab_), 0.0f, 1.0f});   // everything banned: fall back
    auto by_logit = [](const Candidate& a, const Candidate& b) { return a.logit != b.logit ? a.logit > b.logit : a.id < b.id; };
    // top-k
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < c.size()) {
        std::partial_sort(c.begin(), c.begin() + p_.top_k, c.end(), by_logit);
        c.resize(static_cast<size_t>(p_.top_k));
    } else {
        std::sort(c.begin(), c.end(), by_logit);
    }
    auto softmax = [](std::vector<Candidate>& v) {
        const float mx = v.front().logit;
        double sum = 0;
        for (auto& x : v) sum += (x.p = std::exp(x.logit - mx));
        for (auto& x : v) x.p = static_cast<float>(x.p / sum);
    };
    softmax(c);
    // top-p: the smallest prefix whose probability reaches p (at least one token).
    if (p_.top_p < 1.0f) {
        double cum = 0;
        size_t keep = c.size();
        for (size_t i = 0; i < c.size(); ++i) {
            cum += c[i].p;
            if (cum >= p_.top_p) {
                keep = i + 1;
                break;
            }
        }
        c.resize(keep);
    }
    // min-p: drop tokens less likely than min_p times the most likely one.
    if (p_.min_p > 0.0f) {
        const float cut = c.front().logit + std::log(p_.min_p);
        size_t keep = 1;
        while (keep < c.size() && c[keep].logit >= cut) ++keep;
        c.resize(keep);
    }
    return c;
}

std::vector<Candidate> Sampler::candidates(const float* logits) const {
    std::vector<Candidate> c = filtered(logits);
    if (p_.temperature <= 0.0f) {
        c.resize(1);
        c[0].p = 1.0f;
        return c;
    }
    const float mx = c.front().logit;
    double sum = 0;
    for (auto& x : c) sum += (x.p = std::exp((x.logit - mx) / p_.temperature));
    for (auto& x : c) x.p = static_cast<float>(x.p / sum);
    return c;
}

Token Sampler::sample(const float* logits) {
    if (p_.temperature <= 0.0f) {
        if (p_.logit_bias.empty() && p_.repeat_penalty == 1.0f && p_.presence_penalty == 0.0f &&
            p_.frequency_penalty == 0.0f)
            return argmax(logits, n_vocab_);
        std::vector<float> l(logits, logits + n_vocab_);
        apply_bias_and_penalties(l);
        const Token t = argmax(l.data(), n_vocab_);
        // Everything banned: the same fallback as the sampling path (filtered()).
        if (std::isnan(l[size_t(t)]) || l[size_t(t)] == -INFINITY) return argmax(logits, n_vocab_);
        return t;
    }
    const std::vector<Candidate> c = candidates(logits);
    // A uniform draw in [0, 1) from 24 raw bits of the generator, then the inverse CDF.
    const double u = static_cast<double>(rng_() >> 8) * (1.0 / 16777216.0);
    double cum = 0;
    for (const auto& x : c) {
        cum += x.p;
        if (u < cum) return x.id;
    }
    return c.back().id;
}

// ---------------------------------------------------------------------------------------------

std::string StopMatcher::push(std::string_view text) {
    if (stopped_) return {};
    held_ += text;
    // A complete stop string: emit what precedes the earliest one and stop.
    size_t first = std::string::npos;
    for (const auto& s : stops_) {
        if (s.empty()) continue;
        const size_t at = held_.find(s);
        if (at != std::string::npos && (first == std::string::npos || at < first)) {
            first = at;
            matched_ = s;
        }
    }
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Hold back the longest suffix that is a prefix of some stop string.
    size_t hold = 0;
    for (const auto& s : stops_) {
        const size_t max = std::min(s.size() - (s.empty() ? 0 : 1), held_.size());
        for (size_t k = max; k > hold; --k) {
            if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    std::string out = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    return out;
}

std::string StopMatcher::flush() {
    std::string out;
    if (!stopped_) out.swap(held_);
    held_.clear();
    return out;
}

}  // namespace kinfer::text
