// Helpers shared by the test suites: where the data lives, and a uniform "skipped" notice for
// tests that need ../shared/golden (absent on a bare clone).
#pragma once
#include <doctest/doctest.h>
#include <cstdio>
#include <filesystem>
#include <string>

namespace kinfer::test {

inline std::string golden(const std::string& rel) { return std::string(KINFER_GOLDEN_DIR) + "/" + rel; }
inline std::string data(const std::string& rel) { return std::string(KINFER_TEST_DATA_DIR) + "/" + rel; }
inline std::string kinfer_bin() { return KINFER_BIN; }

// True when the golden file exists; otherwise prints one line saying what is skipped.
inline bool have_golden(const std::string& rel) {
    if (std::filesystem::exists(golden(rel))) return true;
    std::printf("SKIP: %s not found (needs ../shared/golden)\n", golden(rel).c_str());
    return false;
}

}  // namespace kinfer::test

#include <array>
#include <cstdlib>
#include <sys/wait.h>

namespace kinfer::test {

struct CommandResult {
    int rc = -1;
    std::string out;   // stdout and stderr together, in order
};

// Runs a shell command line, capturing stdout+stderr. rc is the exit status (or -1 on a signal).
inline CommandResult run_command(const std::string& cmd) {
    CommandResult r;
    FILE* p = popen((cmd + " 2>&1").c_str(), "r");
    if (!p) return r;
    std::array<char, 4096> buf;
    size_t n;
    while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
    const int st = pclose(p);
    r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    return r;
}

// True under the ASan/UBSan configuration (scripts/test.sh sets it), where slow end-to-end
// tests shrink their workload.
inline bool sanitized() { return std::getenv("KINFER_SANITIZED") != nullptr; }

}  // namespace kinfer::test
