#include "model/session.h"

#include "common/error.h"
#include "model/forward.h"
#include "model/ops.h"

#include <algorithm>
#include <cstring>

namespace kinfer::model {

Session::Session(const Model& model, SessionOptions opt) : model_(model), opt_(opt) {
    const HParams& hp = model.hparams();
    if (opt_.n_ctx <= 0) fail("n_ctx must be positive (got {})", opt_.n_ctx);
    if (opt_.n_batch <= 0) fail("n_batch must be positive (got {})", opt_.n_batch);
    pool_ = std::make_unique<runtime::ThreadPool>(opt_.n_threads);
    ws_ = std::make_unique<Workspace>();
    states_.resize(size_t(hp.n_layer));
    for (int il = 0; il < hp.n_layer; ++il) {
        auto& st = states_[size_t(il)];
        if (hp.is_kda(il)) {
            st.kda.assign(size_t(hp.n_head * hp.kda_head_dim * hp.kda_head_dim), 0.0f);
            st.conv.assign(size_t(3 * hp.d_inner() * (hp.conv_kernel - 1)), 0.0f);
        } else {
            st.mla.assign(size_t(opt_.n_ctx * hp.mla_cache_dim()), 0.0f);
        }
    }
    logits_.assign(size_t(hp.n_vocab), 0.0f);
}

Session::~Session() = default;

void Session::reset() {
    for (auto& st : states_) {
        std::fill(st.kda.begin(), st.kda.end(), 0.0f);
        std::fill(st.conv.begin(), st.conv.end(), 0.0f);
    }
    n_past_ = 0;
}

size_t Session::state_bytes() const {
    size_t b = 0;
    for (const auto& st : states_) b += (st.kda.size() + st.conv.size() + st.mla.size()) * sizeof(float);
    return b;
}

void Session::forward(const int32_t* tokens, int64_t n, bool want_all, float* out_all) {
    const HParams& hp = model_.hparams();
    if (n_past_ + n > opt_.n_ctx)
        fail("context full: {} + {} tokens exceed n_ctx = {}", n_past_, n, opt_.n_ctx);
    ws_->reset();
    FwdCtx c{hp, model_.weights(), *pool_, *ws_, states_, opt_, n_past_, n};
    ScratchScope s(*ws_);
    float* h = s.get(size_t(n * hp.n_embd));
    if (hp.arch == Arch::KimiK3) forward_kimi_k3(c, tokens, on_layer, h);
    else forward_kimi_linear(c, tokens, on_layer, h);

    // Logits of every row (eval) or only the last one (generation).
    const int64_t first = want_all ? 0 : n - 1, rows = n - first;
    float* hn = s.get(size_t(rows * hp.n_embd));
    for (int64_t t = 0; t < rows; ++t)
        ops::rms_norm(h + (first + t) * hp.n_embd, model_.weights().output_norm, hn + t * hp.n_embd, hp.n_embd, hp.rms_eps);
    float* lg = want_all ? out_all : logits_.data();
    matmul(*pool_, mat_of(model_.weights().output), hn, rows, lg);
    if (want_all) std::memcpy(logits_.data(), lg + (rows - 1) * hp.n_vocab, size_t(hp.n_vocab) * sizeof(float));
    n_past_ += n;
}

void Session::prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits) {
    const int64_t V = model_.hparams().n_vocab;
    size_t base = 0;
    if (all_logits) {
        base = all_logits->size();
        all_logits->resize(base + tokens.size() * size_t(V));
    }
    for (size_t i = 0; i < tokens.size(); i += size_t(opt_.n_batch)) {
        const int64_t n = std::min<int64_t>(opt_.n_batch, int64_t(tokens.size() - i));
        forward(tokens.data() + i, n, all_logits != nullptr, all_logits ? all_logits->data() + base + i * size_t(V) : nullptr);
    }
}

void Session::decode(int32_t token) { forward(&token, 1, false, nullptr); }

}  // namespace kinfer::model
