// --prompt-cache files: a session's state (Session::save_state's bytes: format version, model
// fingerprint, cache type, token ids, KDA + conv states, latent rows, logits, checksum) kept on
// disk, so a later run of the same prompt skips its prefill.
#pragma once
#include "model/session.h"

#include <string>

namespace kinfer::model {

// Writes s's state to path through a temporary file renamed into place: a reader never sees
// half a file, and a failed write leaves an earlier file as it was.
void save_session_file(const Session& s, const std::string& path);
// Loads the state saved in path into s, reading it through mmap. Throws kinfer::Error
// "<path>: <one-line reason>" for a file that is missing, damaged, truncated, from another model
// or another cache type; s is left as it was then.
void load_session_file(Session& s, const std::string& path);

}  // namespace kinfer::model
