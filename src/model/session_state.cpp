// Session state as bytes (DESIGN.md 5: state is explicit and serialisable): what --prompt-cache
// writes to a file and what a pipeline stage could hand on. Layout, all little-endian:
//   "KINFSES\0"  u32 format version (3)  u32 latent cache type (backend::CacheType)
//   u64 model fingerprint  i64 n_ctx  i64 n_past  u64 n_tokens  i32 tokens[n_tokens]
//   per layer: u64 kda bytes, the bytes; u64 conv bytes, the bytes;
//              u64 latent bytes (n_past rows at the cache type), the bytes
//   u64 n_vocab, f32 logits[n_vocab]   u64 extra bytes, the bytes (the caller's: chat's
//   conversation, empty for --prompt-cache)   u64 FNV-1a of everything before it
// Version 2 files (no extra section) are still read.
// The fingerprint (Model::fingerprint) refuses a state from another model or quantization.
#include "model/session.h"

#include "common/error.h"
#include "common/fnv1a.h"
#include "model/placement.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace kinfer::model {

namespace {

constexpr char kMagic[8] = {'K', 'I', 'N', 'F', 'S', 'E', 'S', '\0'};
constexpr uint32_t kVersion = 3;

struct Writer {
    std::vector<uint8_t> out;
    void raw(const void* p, size_t n) {
        const auto* b = static_cast<const uint8_t*>(p);
        out.insert(out.end(), b, b + n);
    }
    template <class T>
    void put(T v) { raw(&v, sizeof v); }
};

struct Reader {
    std::span<const uint8_t> in;
    size_t at = 0;
    const uint8_t* take(size_t n, const char* what) {
        if (n > in.size() - at) fail("session state: truncated at byte {} (reading {}, {} bytes, {} left)", at, what, n, in.size() - at);
        const uint8_t* p = in.data() + at;
        at += n;
        return p;
    }
    template <class T>
    T get(const char* what) {
        T v;
        std::memcpy(&v, take(sizeof v, what), sizeof v);
        return v;
    }
};

}  // namespace

std::vector<uint8_t> Session::save_state(std::span<const uint8_t> extra) const {
    if (!failure_.empty()) fail("cannot save an unusable session ({})", failure_);
    Writer w;
    w.raw(kMagic, sizeof kMagic);
    w.put<uint32_t>(kVersion);
    w.put<uint32_t>(uint32_t(opt_.cache_type));
    w.put<uint64_t>(model_.fingerprint());
    w.put<int64_t>(opt_.n_ctx);
    w.put<int64_t>(n_past_);
    w.put<uint64_t>(tokens_.size());
    w.raw(tokens_.data(), tokens_.size() * sizeof(int32_t));
    for (const LayerState& st : states_) {
        for (const backend::Buffer* buf : {&st.kda, &st.conv}) {
            w.put<uint64_t>(buf->bytes);
            const size_t at = w.out.size();
            w.out.resize(at + buf->bytes);
            if (buf->bytes) st.be->download(w.out.data() + at, buf->ptr, buf->bytes);
        }
        // The latent rows in use, at the cache type, page after page.
        const size_t used = st.mla ? size_t(n_past_) * st.latent.row_bytes : 0;
        w.put<uint64_t>(used);
        size_t at = w.out.size();
        w.out.resize(at + used);
        for (int64_t j = 0; j < (st.mla ? n_past_ : 0); j += opt_.cache_page_rows) {
            const size_t b = size_t(std::min<int64_t>(opt_.cache_page_rows, n_past_ - j)) * st.latent.row_bytes;
            st.be->download(w.out.data() + at, st.latent.row(j), b);
            at += b;
        }
    }
    w.put<uint64_t>(logits_.size());
    w.raw(logits_.data(), logits_.size() * sizeof(float));
    w.put<uint64_t>(extra.size());
    w.raw(extra.data(), extra.size());
    w.put<uint64_t>(fnv1a(w.out.data(), w.out.size()));
    return std::move(w.out);
}

void Session::load_state(std::span<const uint8_t> bytes, const std::function<void(std::span<const uint8_t>)>& take_extra) {
    const HParams& hp = model_.hparams();
    if (bytes.size() < sizeof kMagic + 16 || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0)
        fail("session state: not a kinfer session state (bad magic)");
    uint32_t version;
    std::memcpy(&version, bytes.data() + sizeof kMagic, 4);
    if (version != kVersion && version != 2)
        fail("session state: format version {}, this kinfer reads versions 2 and {}", version, kVersion);
    uint64_t sum;
    std::memcpy(&sum, bytes.data() + bytes.size() - 8, 8);
    if (fnv1a(bytes.data(), bytes.size() - 8) != sum)
        fail("session state: checksum mismatch ({} bytes; the file is damaged or truncated)", bytes.size());
    Reader r{bytes.first(bytes.size() - 8), sizeof kMagic + 4};
    const uint32_t ct = r.get<uint32_t>("cache type");
    if (ct != uint32_t(opt_.cache_type))
        fail("session state: saved with a {} latent cache, this session uses {} (-ctk)",
             ct <= uint32_t(backend::CacheType::q8_0) ? backend::cache_type_name(backend::CacheType(ct)) : "unknown",
             backend::cache_type_name(opt_.cache_type));
    if (r.get<uint64_t>("fingerprint") != model_.fingerprint())
        fail("session state: saved from another model than {} (fingerprint differs)", model_.path());
    r.get<int64_t>("n_ctx");
    const int64_t n_past = r.get<int64_t>("n_past");
    if (n_past < 0 || n_past > opt_.n_ctx)
        fail("session state: {} positions do not fit this session's context of {} (-c)", n_past, opt_.n_ctx);
    const uint64_t n_tok = r.get<uint64_t>("token count");
    if (n_tok != uint64_t(n_past)) fail("session state: {} token ids for {} positions", n_tok, n_past);
    std::vector<int32_t> toks(n_tok);
    const uint8_t* tok_bytes = r.take(n_tok * sizeof(int32_t), "token ids");
    if (n_tok) std::memcpy(toks.data(), tok_bytes, n_tok * sizeof(int32_t));   // an empty vector's data() may be null
    // Read everything before touching the session, so a bad file leaves it as it was.
    std::vector<std::array<std::pair<const uint8_t*, size_t>, 3>> parts(states_.size());
    for (size_t il = 0; il < states_.size(); ++il) {
        const LayerState& st = states_[il];
        const size_t want[3] = {st.kda.bytes, st.conv.bytes, st.mla ? size_t(n_past) * st.latent.row_bytes : 0};
        for (int k = 0; k < 3; ++k) {
            const uint64_t b = r.get<uint64_t>("layer state size");
            if (b != want[k]) fail("session state: layer {} part {} has {} bytes, expected {}", il, k, b, want[k]);
            parts[il][size_t(k)] = {r.take(b, "layer state"), b};
        }
    }
    const uint64_t V = r.get<uint64_t>("vocabulary size");
    if (V != uint64_t(hp.n_vocab)) fail("session state: {} logits, the model has {} tokens", V, hp.n_vocab);
    const uint8_t* lg = r.take(V * sizeof(float), "logits");
    std::span<const uint8_t> extra;
    if (version >= 3) {
        const uint64_t n_extra = r.get<uint64_t>("extra size");
        extra = {r.take(n_extra, "extra bytes"), n_extra};
    }
    if (r.at != r.in.size()) fail("session state: {} bytes after the end", r.in.size() - r.at);
    if (take_extra) take_extra(extra);

    reserve_rows(n_past);
    for (size_t il = 0; il < states_.size(); ++il) {
        const LayerState& st = states_[il];
        const backend::Buffer* bufs[2] = {&st.kda, &st.conv};
        for (int k = 0; k < 2; ++k)
            if (parts[il][size_t(k)].second) st.be->upload(bufs[k]->ptr, parts[il][size_t(k)].first, parts[il][size_t(k)].second);
        const uint8_t* src = parts[il][2].first;
        for (int64_t j = 0; j < (st.mla ? n_past : 0); j += opt_.cache_page_rows) {
            const size_t b = size_t(std::min<int64_t>(opt_.cache_page_rows, n_past - j)) * st.latent.row_bytes;
            st.be->upload(st.latent.row(j), src, b);
            src += b;
        }
    }
    std::memcpy(logits_.data(), lg, V * sizeof(float));
    tokens_ = std::move(toks);
    n_past_ = n_past;
    failure_.clear();
}

}  // namespace kinfer::model
