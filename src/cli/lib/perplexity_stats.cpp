#include "cli/lib/perplexity_stats.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace kinfer::ppl {

namespace {
// Round to nearest via the 1.5*2^23 trick, as ggml does, so stored levels match bit for bit.
inline int round_nearest(float v) {
    float f = v + 12582912.f;
    int32_t i;
    std::memcpy(&i, &f, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}
}  // namespace

double token_nll(const float* logits, int n_vocab, int tok) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; ++i) mx = std::max(mx, logits[i]);
    double sum = 0.0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - mx);
    return -(double(logits[tok]) - mx - std::log(sum));
}

double NllAccumulator::ppl() const { return count ? std::exp(nll / double(count)) : 0.0; }

double NllAccumulator::ppl_uncertainty() const {
    if (count < 2) return 0.0;
    const double mean = nll / double(count);
    const double var = nll2 / double(count) - mean * mean;
    return var > 0 ? std::sqrt(var / double(count - 1)) * std::exp(mean) : 0.0;
}

size_t base_record_u16(int n_vocab) { return size_t(2 * ((n_vocab + 1) / 2) + 4); }

double encode_base(const float* logits, int n_vocab, int tok, uint16_t* rec) {
    float mx = logits[0], mn = logits[0];
    for (int i = 1; i < n_vocab; ++i) {
        mx = std::max(mx, logits[i]);
        mn = std::min(mn, logits[i]);
    }
    // Probabilities below e^-16 of the top one are not worth resolving.
    mn = std::max(mn, mx - 16);
    double sum = 0.0;
    for (int i = 0; i < n_vocab; ++i) sum += std::exp(logits[i] - mx);
    const float log_sum = float(std::log(sum));
    const float min_log_prob = mn - mx - log_sum;
    const float scale = (mx - mn) / 65535.f;
    std::memcpy(rec, &scale, 4);
    std::memcpy(rec + 2, &min_log_prob, 4);
    uint16_t* lv = rec + 4;
    if (scale != 0.f) {
        const float inv = 1 / scale;
        for (int i = 0; i < n_vocab; ++i) lv[i] = logits[i] > mn ? uint16_t(round_nearest(inv * (logits[i] - mn))) : 0;
    } else {
        std::memset(lv, 0, size_t(n_vocab) * sizeof(uint16_t));
    }
    return double(mx) + log_sum - logits[tok];
}

void KldAccumulator::add(const float* logits, int n_vocab, int tok, const uint16_t* rec) {
    float mx = logits[0];
    int imax = 0;
    for (int i = 1; i < n_vocab; ++i)
        if (logits[i] > mx) { mx = logits[i]; imax = i; }
    double sum_exp = 0.0;
    for (int i = 0; i < n_vocab; ++i) sum_exp += std::exp(logits[i] - mx);
    const float log_sum = float(std::log(sum_exp));
    float scale, min_log_prob;
    std::memcpy(&scale, rec, 4);
    std::memcpy(&min_log_prob, rec + 2, 4);
    const uint16_t* lv = rec + 4;

    const float nll = mx + log_sum - logits[tok];
    sum_nll += nll;
    sum_nll2 += double(nll) * nll;
    const float nll_base = -(scale * lv[tok] + min_log_prob);
    sum_nll_base += nll_base;
    sum_nll_base2 += double(nll_base) * nll_base;
    sum_nll_nll_base += double(nll) * nll_base;

    // KL(base || current), skipping base probabilities below e^-16.
    const float log_norm = mx + log_sum;
    double kld = 0;
    int imax_base = -1;
    float best = 0;
    for (int i = 0; i < n_vocab; ++i) {
        const float lpb = scale * lv[i] + min_log_prob;
        if (i == 0 || lpb > best) { best = lpb; imax_base = i; }
        if (lpb > -16.f) kld += std::exp(lpb) * (lpb - logits[i] + log_norm);
    }
    sum_kld += kld;
    sum_kld2 += kld * kld;
    ++count;
    n_same_top += imax == imax_base;

    const float p_diff = std::exp(-nll) - std::exp(-nll_base);
    sum_p_diff += p_diff;
    const double d2 = double(p_diff) * p_diff;
    sum_p_diff2 += d2;
    sum_p_diff4 += d2 * d2;
    max_p_diff = std::max(max_p_diff, std::fabs(p_diff));
    kld_values.push_back(float(kld));
    p_diff_values.push_back(p_diff);
}

MeanErr mean_and_uncertainty(double sum, double sum2, size_t count) {
    if (count < 1) return {};
    const double f = sum / double(count);
    double df = sum2 / double(count) - f * f;
    df = df > 0 && count > 10 ? std::sqrt(df / double(count - 1)) : 0.0;
    return {f, df};
}

double covariance(double suma, double sumb, double sumab, size_t count) {
    if (count < 10) return 0.0;
    const double n = double(count);
    return (sumab / n - (suma / n) * (sumb / n)) / (n - 1);
}

float percentile(const std::vector<float>& v, float fraction) {
    if (v.empty()) return 0.f;
    if (fraction <= 0) return v.front();
    if (fraction >= 1) return v.back();
    float p = fraction * float(v.size() - 1);
    const size_t ip = size_t(p);
    p -= float(ip);
    return (1 - p) * v[ip] + p * v[std::min(ip + 1, v.size() - 1)];
}

float median(const std::vector<float>& v) {
    if (v.empty()) return 0.f;
    const size_t n = v.size();
    return n % 2 == 0 ? 0.5f * (v[n / 2] + v[n / 2 - 1]) : v[n / 2];
}

}  // namespace kinfer::ppl
