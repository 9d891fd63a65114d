// Writing a small text file so that readers never see half of it and nobody can redirect it:
// the content is built in memory, then written through a TempFile (common/safe_file.h: a unique
// O_EXCL temporary beside PATH, fsync'd and renamed over PATH, removed on failure or a signal).
#pragma once
#include "common/error.h"
#include "common/safe_file.h"

#include <sstream>
#include <string>

namespace kinfer {

// write(std::ostream&) produces the content; what names the file in error messages.
template <class Write>
void write_text_file(const std::string& path, const char* what, Write&& write) {
    std::ostringstream out;
    write(out);
    if (!out) fail("{}: producing '{}' failed", what, path);
    const std::string s = out.str();
    TempFile f(path);
    if (!s.empty() && std::fwrite(s.data(), 1, s.size(), f.file()) != s.size())
        fail("{}: writing '{}' failed: {}", what, f.temp_path(), std::strerror(errno));
    f.commit();
}

}  // namespace kinfer
