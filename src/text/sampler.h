// Token sampling: the llama.cpp chain, in its order. Logit bias, then the repetition / presence /
// frequency penalties over the last N accepted tokens, then top-k, top-p, min-p on the
// (untempered) distribution, then temperature, then a draw from a seeded std::mt19937. A
// temperature <= 0 picks the most likely token after bias and penalties (greedy). Same seed and
// same logits give the same picks on every platform: the draw uses the generator's raw 32-bit
// output, not a library distribution.
//
// Also here: the end-of-generation test (Tokenizer::is_eog wraps llama.cpp's set) and a stop-string
// matcher for streamed text.
#pragma once
#include "text/tokenizer.h"

#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kinfer::text {

struct SamplerParams {
    int64_t seed = -1;              // < 0: seed from std::random_device
    float temperature = 0.8f;       // <= 0: greedy
    int top_k = 40;                 // <= 0: off
    float top_p = 0.95f;            // >= 1: off
    float min_p = 0.05f;            // <= 0: off
    float repeat_penalty = 1.0f;    // 1: off. logit > 0 ? logit / p : logit * p, for tokens in the window
    float presence_penalty = 0.0f;  // subtracted once from every token in the window
    float frequency_penalty = 0.0f; // subtracted once per occurrence in the window
    int penalty_last_n = 64;        // window size; 0: off, -1: the whole history
    std::vector<std::pair<Token, float>> logit_bias;   // added to the logit; -INFINITY bans the token
};

struct Candidate {
    Token id;
    float logit;
    float p;
};

class Sampler {
public:
    Sampler(const SamplerParams& params, size_t n_vocab);

    // Chooses the next token from n_vocab logits. Does not record it: call accept().
    Token sample(const float* logits);
    // Records a token (generated or from the prompt) in the penalty window.
    void accept(Token id);
    // Clears the penalty window and reseeds the generator with the original seed.
    void reset();

    // The candidates that survive bias, penalties and the filters, with their final
    // probabilities (after temperature), most likely first. For tests and debugging.
    std::vector<Candidate> candidates(const float* logits) const;

    // The generator's state and the penalty window as text ("kinfer-sampler 1", the mt19937
    // state, the window's ids), so that a saved chat continues with the same draws.
    std::string save_state() const;
    // Restores save_state's text; refuses anything else with the sampler unchanged.
    void load_state(std::string_view text);

    const SamplerParams& params() const { return p_; }
    uint32_t seed() const { return seed_; }

private:
    void apply_bias_and_penalties(std::vector<float>& logits) const;
    std::vector<Candidate> filtered(const float* logits) const;

    SamplerParams p_;
    size_t n_vocab_;
    uint32_t seed_;
    std::mt19937 rng_;
    std::deque<Token> history_;
};

// Greedy pick: the index of the largest logit (the first one on ties).
Token argmax(const float* logits, size_t n);

// Watches streamed text for stop strings. push() returns the part of the text that can be shown
// now: text that might be the beginning of a stop string is held back until it is decided. Once a
// stop string appears, stopped() turns true and nothing from it onwards is returned.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
    std::string push(std::string_view text);
    std::string flush();   // the held-back text (none after a stop)
    bool stopped() const { return stopped_; }
    const std::string& matched() const { return matched_; }

private:
    std::vector<std::string> stops_;
    std::string held_;
    bool stopped_ = false;
    std::string matched_;
};

}  // namespace kinfer::text
