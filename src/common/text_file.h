// Writing a small text file so that readers never see half of it: the content goes to PATH.tmp,
// which is renamed over PATH only once it was written completely (and removed otherwise).
#pragma once
#include "common/error.h"

#include <cstdio>
#include <fstream>
#include <string>

namespace kinfer {

// write(std::ostream&) produces the content; what names the file in error messages.
template <class Write>
void write_text_file(const std::string& path, const char* what, Write&& write) {
    const std::string tmp = path + ".tmp";
    {
        std::ofstream f(tmp);
        if (!f) fail("{}: cannot write '{}'", what, tmp);
        write(f);
        f.flush();
        if (!f) {
            std::remove(tmp.c_str());
            fail("{}: writing '{}' failed", what, tmp);
        }
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
        std::remove(tmp.c_str());
        fail("{}: cannot rename '{}' to '{}'", what, tmp, path);
    }
}

}  // namespace kinfer
