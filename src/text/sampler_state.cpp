// Sampler::save_state / load_state: the random generator and the penalty window as one line of
// text, kept in chat's saved states so a sampled conversation continues as if never stopped.
#include "text/sampler.h"

#include "common/error.h"

#include <sstream>

namespace kinfer::text {

namespace {
constexpr const char* kTag = "kinfer-sampler-1";
}

std::string Sampler::save_state() const {
    std::ostringstream o;
    o << kTag << ' ' << rng_ << ' ' << history_.size();
    for (Token id : history_) o << ' ' << id;
    return o.str();
}

void Sampler::load_state(std::string_view text) {
    std::istringstream in{std::string(text)};
    std::string tag;
    std::mt19937 rng;
    size_t n = 0;
    in >> tag;
    if (tag != kTag) fail("sampler state: expected '{}', got '{}'", kTag, tag.substr(0, 40));
    in >> rng >> n;
    if (!in || n > (1u << 24)) fail("sampler state: a broken generator state or window size");
    std::deque<Token> hist;
    for (size_t i = 0; i < n; ++i) {
        Token id = -1;
        if (!(in >> id) || id < 0 || size_t(id) >= n_vocab_) fail("sampler state: window entry {} is not a token id", i);
        hist.push_back(id);
    }
    in >> std::ws;
    if (!in.eof()) fail("sampler state: text after the window");
    rng_ = rng;
    history_ = std::move(hist);
}

}  // namespace kinfer::text
