// Every GGUF the gguf tests run over: all *.gguf under ../shared/golden (recursively; a one-line
// SKIP notice when it is absent) and tests/data/models/*.gguf (always shipped). Vision projector
// files (mmproj-*.gguf, architecture "clip") are not text models: the vision tests cover them.
#pragma once
#include "test_util.h"

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

namespace kinfer::test {

inline std::vector<std::string> all_test_ggufs() {
    namespace fs = std::filesystem;
    std::vector<std::string> r;
    if (have_golden("")) {
        std::error_code ec;
        for (auto it = fs::recursive_directory_iterator(golden(""), fs::directory_options::skip_permission_denied, ec);
             it != fs::recursive_directory_iterator(); it.increment(ec))
            if (it->path().extension() == ".gguf" && it->is_regular_file() &&
                it->path().filename().string().rfind("mmproj", 0) != 0)
                r.push_back(it->path().string());
    }
    for (auto& e : fs::directory_iterator(data("models")))
        if (e.path().extension() == ".gguf") r.push_back(e.path().string());
    std::sort(r.begin(), r.end());
    return r;
}

}  // namespace kinfer::test
