// --prompt-cache files: a session's state (Session::save_state's bytes: format version, model
// fingerprint, cache type, token ids, KDA + conv states, latent rows, logits, checksum) kept on
// disk, so a later run of the same prompt skips its prefill.
#pragma once
#include "model/session.h"

#include <string>

namespace kinfer::model {

// Writes s's state to path through a temporary file renamed into place: a reader never sees
// half a file, and a failed write leaves an earlier file as it was. extra: the caller's bytes
// kept under the same checksum (Session::save_state).
void save_session_file(const Session& s, const std::string& path, std::span<const uint8_t> extra = {});
// Loads the state saved in path into s, reading it through mmap. Throws kinfer::Error
// "<path>: <one-line reason>" for a file that is missing, damaged, truncated, from another model
// or another cache type; s is left as it was then. take_extra gets the saved extra bytes before
// s changes (Session::load_state); what it throws is reported the same way.
void load_session_file(Session& s, const std::string& path,
                       const std::function<void(std::span<const uint8_t>)>& take_extra = {});

}  // namespace kinfer::model
