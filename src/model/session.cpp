#include "model/session.h"

#include "backend/registry.h"
#include "backend/workspace.h"
#include "common/error.h"
#include "model/forward.h"
#include "model/placement.h"
#include "model/split.h"
#include "runtime/expert_store.h"

#include <algorithm>
#include <cstring>

namespace kinfer::model {

namespace {

// Zeroes a backend buffer through a small host block, so no host copy of a large state is made.
void zero(backend::Backend& be, const backend::Buffer& b) {
    static const std::vector<uint8_t> z(size_t(1) << 16, 0);
    for (size_t at = 0; at < b.bytes; at += z.size()) be.upload(b.ptr + at, z.data(), std::min(z.size(), b.bytes - at));
}

backend::Buffer zeros(backend::Backend& be, size_t floats, const char* what) {
    backend::Buffer b = be.alloc(floats * sizeof(float), what);
    zero(be, b);
    return b;
}

}  // namespace

Session::Session(const Model& model, SessionOptions opt) : model_(model), opt_(opt) {
    const HParams& hp = model.hparams();
    if (opt_.n_ctx <= 0) fail("n_ctx must be positive (got {})", opt_.n_ctx);
    if (opt_.n_batch <= 0) fail("n_batch must be positive (got {})", opt_.n_batch);
    if (opt_.backends) {
        backends_ = opt_.backends;
    } else {
        own_backends_ = std::make_unique<backend::Backends>(opt_.n_threads);
        backends_ = own_backends_.get();
    }
    PlacementOptions po;
    po.n_gpu_layers = opt_.n_gpu_layers;
    po.cpu_moe = opt_.cpu_moe;
    po.n_cpu_moe = opt_.n_cpu_moe;
    po.shard_experts = opt_.shard_experts;
    po.overrides = opt_.overrides;
    po.expert_store = opt_.experts != nullptr;
    if (opt_.split) po.share = opt_.split->share();
    placement_ = std::make_unique<Placement>(model, *backends_, po);
    ws_.push_back(std::make_unique<backend::Workspace>(backends_->cpu()));
    for (size_t i = 0; i < backends_->n_devices(); ++i) ws_.push_back(std::make_unique<backend::Workspace>(*backends_->device(i)));

    if (opt_.cache_page_rows <= 0) fail("cache_page_rows must be positive (got {})", opt_.cache_page_rows);

    states_.resize(size_t(hp.n_layer));
    const size_t row_bytes = backend::cache_row_bytes(opt_.cache_type, hp.mla_cache_dim());
    for (int il = 0; il < hp.n_layer; ++il) {
        auto& st = states_[size_t(il)];
        st.be = &placement_->layer(il);
        if (!hp.is_kda(il)) {
            st.mla = true;
            st.latent = backend::LatentPages{opt_.cache_type, hp.mla_cache_dim(), opt_.cache_page_rows, row_bytes, nullptr, 0};
        }
    }
    // The cache grows as the sequence does, so -c costs nothing up front; but a -c the memory
    // can never hold is refused now, not hours into a prefill.
    for (size_t b = 0; b <= backends_->n_devices(); ++b) {
        backend::Backend& be = b == 0 ? backends_->cpu() : *backends_->device(b - 1);
        size_t per_token = 0;
        for (const auto& st : states_)
            if (st.mla && st.be == &be) per_token += row_bytes;
        const size_t need = per_token * size_t(opt_.n_ctx), have = be.free_bytes();
        // A host backend that cannot tell (no /proc/meminfo) reports 0: not checked then.
        if (per_token && need > have && (have > 0 || !be.host_memory()))
            fail("-c {}: the latent cache needs {} bytes on {} ({} bytes per token at {}), {} bytes are free", opt_.n_ctx,
                 need, be.name(), per_token, backend::cache_type_name(opt_.cache_type), have);
    }
    // The KDA and conv states, after every check that can refuse the session: a constructor
    // that throws runs no destructor, so whatever was allocated is freed here before rethrowing.
    try {
        for (int il = 0; il < hp.n_layer; ++il) {
            auto& st = states_[size_t(il)];
            if (st.mla) continue;
            st.kda = zeros(*st.be, size_t(hp.kda_state_floats()), "KDA state");
            st.conv = zeros(*st.be, size_t(hp.conv_state_floats()), "conv state");
        }
        if (opt_.split) opt_.split->open(opt_);
    } catch (...) {
        free_states();
        throw;
    }
    logits_.assign(size_t(hp.n_vocab), 0.0f);
}

Session::~Session() {
    if (opt_.split) opt_.split->close();
    free_states();
    ws_.clear();   // before the backends they allocate from
}

void Session::free_states() {
    for (auto& st : states_) {
        for (backend::Buffer* b : {&st.kda, &st.conv})
            if (b->valid()) st.be->free(*b);
        for (backend::Buffer& b : st.pages) st.be->free(b);
        st.kda = st.conv = backend::Buffer{};
        st.pages.clear();
    }
}

void Session::reserve_rows(int64_t rows) {
    for (auto& st : states_) {
        if (!st.mla) continue;
        // Not zeroed: a position's row is written before any query reads it.
        while (st.latent.capacity() < rows) {
            st.pages.push_back(st.be->alloc(size_t(opt_.cache_page_rows) * st.latent.row_bytes, "MLA latent cache page"));
            st.page_ptrs.push_back(st.pages.back().ptr);
            st.latent.pages = st.page_ptrs.data();
            st.latent.n_pages = int64_t(st.page_ptrs.size());
        }
    }
}

size_t Session::scratch_bytes() const {
    size_t b = 0;
    for (const auto& w : ws_) b += w->bytes();
    return b;
}

size_t Session::latent_bytes_per_token() const {
    size_t b = 0;
    for (const auto& st : states_)
        if (st.mla) b += st.latent.row_bytes;
    return b;
}

int Session::n_threads() const { return backends_->cpu().n_threads(); }

void Session::clear_states() {
    for (auto& st : states_)
        for (const backend::Buffer* b : {&st.kda, &st.conv})
            if (b->valid()) zero(*st.be, *b);
}

void Session::reset() {
    clear_states();
    n_past_ = 0;
    tokens_.clear();
    failure_.clear();
}

size_t Session::state_bytes() const {
    size_t b = 0;
    for (const auto& st : states_) {
        b += st.kda.bytes + st.conv.bytes;
        for (const auto& p : st.pages) b += p.bytes;
    }
    return b;
}

void Session::forward(const int32_t* tokens, int64_t n, bool want_all, float* out_all, const float* embd) {
    const HParams& hp = model_.hparams();
    if (!failure_.empty())
        fail("this session is unusable after an earlier error ({}); reset it or load a saved state", failure_);
    if (n_past_ + n > opt_.n_ctx)
        fail("context full: {} + {} tokens exceed n_ctx = {}", n_past_, n, opt_.n_ctx);
    for (auto& w : ws_) w->reset();
    reserve_rows(n_past_ + n);
    FwdEnv env{hp, *placement_, *backends_, ws_, states_, opt_, n_past_, n};
    // A device may launch the step as CUDA graphs; not where another thread queues work of the
    // step (an expert store's I/O thread: --cuda-graphs makes the CLI's store synchronous) or
    // another library does (--split's transfers), which a capture cannot hold, nor with several
    // devices: their captures run on this one thread, and an allocation for one device (which
    // ends only its own capture) is refused while another's is open (CUDA's thread-local
    // capture mode), invalidating it.
    const bool graphs = opt_.graphs && (!opt_.experts || !opt_.experts->options().async) && !opt_.split &&
                        backends_->n_devices() <= 1;
    try {
        if (graphs) backends_->step_begin(n);
        // Logits of every row (eval) or only the last one (generation).
        const int64_t rows = want_all ? n : 1;
        float* host = want_all ? out_all : logits_.data();
        if (opt_.split) {
            if (embd) fail("--split runs token prompts only: image embeddings are not sent between ranks yet");
            opt_.split->begin(tokens, n, n_past_, want_all);
            opt_.split->forward(env, tokens, want_all, host);
        } else {
            Residual r = embd ? embed_rows(env, embd) : embed(env, tokens);
            forward_layers(env, 0, hp.n_layer, r, on_layer);
            output_logits(env, final_stream(env, r, on_layer), n - rows, host);
        }
        if (want_all) std::memcpy(logits_.data(), host + (rows - 1) * hp.n_vocab, size_t(hp.n_vocab) * sizeof(float));
        if (graphs) backends_->step_end();
    } catch (const std::exception& e) {
        if (graphs) backends_->step_abort();
        // Some layers' states may have advanced: never compute on from them.
        failure_ = e.what();
        throw;
    }
    n_past_ += n;
    if (embd) tokens_.insert(tokens_.end(), size_t(n), -1);
    else tokens_.insert(tokens_.end(), tokens, tokens + n);
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

void Session::prefill_embd(std::span<const float> rows, std::vector<float>* all_logits) {
    const int64_t V = model_.hparams().n_vocab, d = model_.hparams().n_embd;
    if (rows.size() % size_t(d)) fail("embedding rows: {} floats is not a whole number of {}-wide rows", rows.size(), d);
    const int64_t n_rows = int64_t(rows.size()) / d;
    size_t base = 0;
    if (all_logits) {
        base = all_logits->size();
        all_logits->resize(base + size_t(n_rows * V));
    }
    for (int64_t i = 0; i < n_rows; i += opt_.n_batch) {
        const int64_t n = std::min<int64_t>(opt_.n_batch, n_rows - i);
        forward(nullptr, n, all_logits != nullptr, all_logits ? all_logits->data() + base + size_t(i * V) : nullptr,
                rows.data() + i * d);
    }
}

}  // namespace kinfer::model
