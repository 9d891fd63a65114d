// The files compiled with -mavx2 / -mavx512* (cmake/kinfer_module.cmake: *_avx2.cpp, *_avx512.cpp)
// must hold no code that runs before main: a static initializer there executes those
// instructions at start-up on every CPU, before the run-time dispatch has looked at the machine
// (an E8M0 table built by a constructor made every binary die of SIGILL on CPUs without
// AVX-512). Their objects are read with nm for the compiler's start-up functions.
#include "test_util.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace fs = std::filesystem;

TEST_CASE("ISA-specific objects run nothing at start-up (no static initializers in *_avx2 / *_avx512 files)") {
    const fs::path build = KINFER_BUILD_DIR;
    if (std::system("command -v nm >/dev/null 2>&1") != 0) {
        kinfer::test::skip_case(kinfer::test::SkipKind::tool, "nm (binutils) is not installed");
        return;
    }
    std::vector<fs::path> objects;
    for (const auto& e : fs::recursive_directory_iterator(build, fs::directory_options::skip_permission_denied)) {
        const std::string name = e.path().filename().string();
        if (e.is_regular_file() && name.ends_with(".o") && (name.find("_avx2.") != std::string::npos || name.find("_avx512.") != std::string::npos))
            objects.push_back(e.path());
    }
    REQUIRE_MESSAGE(objects.size() >= 8, "found only " << objects.size() << " ISA objects under " << build);
    for (const fs::path& o : objects) {
        CAPTURE(o.string());
        FILE* p = ::popen(("nm " + o.string() + " 2>/dev/null").c_str(), "r");
        REQUIRE(p != nullptr);
        std::string out;
        char buf[4096];
        for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
        ::pclose(p);
        CHECK(out.find("_GLOBAL__sub_I") == std::string::npos);   // GCC's and clang's start-up function
    }
}
