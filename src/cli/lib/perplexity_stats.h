// The arithmetic of llama-perplexity, so kinfer prints the same numbers for the same logits:
// per-token negative log-likelihood from a double-precision log-softmax, PPL = exp(mean NLL),
// its uncertainty PPL * sqrt(var(NLL) / (N - 1)), and the KL-divergence statistics against a
// base model whose log-probabilities were saved compactly (uint16 per vocabulary entry).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kinfer::ppl {

// NLL of token `tok` under softmax(logits): max + log(sum exp(l - max)) - l[tok], with the
// exponentials in float and the sum in double, as llama-perplexity computes it.
double token_nll(const float* logits, int n_vocab, int tok);

struct NllAccumulator {
    double nll = 0, nll2 = 0;
    size_t count = 0;
    void add(double v) { nll += v; nll2 += v * v; ++count; }
    double ppl() const;
    double ppl_uncertainty() const;   // 0 when it cannot be estimated
};

// One scored position of the base model: 2 floats (scale, min log-prob) then n_vocab uint16
// levels, padded to an even count, exactly the layout llama-perplexity keeps in memory.
size_t base_record_u16(int n_vocab);   // number of uint16 slots per position
// Encodes the log-probabilities of `logits` into `rec`; returns the NLL of `tok`.
double encode_base(const float* logits, int n_vocab, int tok, uint16_t* rec);

struct KldAccumulator {
    double sum_nll = 0, sum_nll2 = 0, sum_nll_base = 0, sum_nll_base2 = 0, sum_nll_nll_base = 0;
    double sum_kld = 0, sum_kld2 = 0, sum_p_diff = 0, sum_p_diff2 = 0, sum_p_diff4 = 0;
    float max_p_diff = 0;
    size_t n_same_top = 0, count = 0;
    std::vector<float> kld_values, p_diff_values;

    // Compares the current model's logits at one position with the base record.
    void add(const float* logits, int n_vocab, int tok, const uint16_t* rec);
};

struct MeanErr {
    double mean = 0, err = 0;
};
// mean and standard error of the mean from sums, as llama-perplexity computes them (err is 0
// for fewer than 11 samples).
MeanErr mean_and_uncertainty(double sum, double sum2, size_t count);
double covariance(double suma, double sumb, double sumab, size_t count);
// Linear interpolation between sorted values, llama-perplexity's percentile.
float percentile(const std::vector<float>& sorted, float fraction);
float median(const std::vector<float>& sorted);

}  // namespace kinfer::ppl
