// Snapshots of a session's recurrent state (Session::snapshot / rewind): what chat keeps every
// N tokens so that a regenerated or edited turn restarts near the edit instead of from position
// 0. Only the KDA and conv states and the logits are copied; the latent cache is append-only,
// so going back to a position just forgets the rows after it.
#include "model/session.h"

#include "common/error.h"
#include "common/fnv1a.h"

#include <cstring>

namespace kinfer::model {

size_t Session::snapshot_bytes() const {
    size_t b = logits_.size() * sizeof(float);
    for (const LayerState& st : states_) b += st.kda.bytes + st.conv.bytes;
    return b;
}

Session::Snapshot Session::snapshot() const {
    if (!failure_.empty()) fail("cannot snapshot an unusable session ({})", failure_);
    // Under --split the other ranks hold their layers' states; a local copy would be half of it.
    if (opt_.split) fail("state snapshots are not available with --split");
    Snapshot s;
    s.pos = n_past_;
    s.tokens_hash = fnv1a(tokens_.data(), tokens_.size() * sizeof(int32_t));
    s.state.resize(snapshot_bytes() - logits_.size() * sizeof(float));
    size_t at = 0;
    for (const LayerState& st : states_)
        for (const backend::Buffer* buf : {&st.kda, &st.conv}) {
            if (buf->bytes) st.be->download(s.state.data() + at, buf->ptr, buf->bytes);
            at += buf->bytes;
        }
    s.logits = logits_;
    return s;
}

void Session::rewind(const Snapshot& s) {
    if (s.pos < 0 || s.pos > n_past_)
        fail("state snapshot: position {} is not within this session's {} tokens", s.pos, n_past_);
    if (fnv1a(tokens_.data(), size_t(s.pos) * sizeof(int32_t)) != s.tokens_hash)
        fail("state snapshot: taken after other tokens than the session's first {}", s.pos);
    if (s.state.size() + s.logits.size() * sizeof(float) != snapshot_bytes())
        fail("state snapshot: {} bytes, this session's state is {}", s.bytes(), snapshot_bytes());
    size_t at = 0;
    for (const LayerState& st : states_)
        for (const backend::Buffer* buf : {&st.kda, &st.conv}) {
            if (buf->bytes) st.be->upload(buf->ptr, s.state.data() + at, buf->bytes);
            at += buf->bytes;
        }
    std::memcpy(logits_.data(), s.logits.data(), logits_.size() * sizeof(float));
    tokens_.resize(size_t(s.pos));
    n_past_ = s.pos;
    // The states are whole again (an error mid-forward only touched positions after pos).
    failure_.clear();
}

}  // namespace kinfer::model
