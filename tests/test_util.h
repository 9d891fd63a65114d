// Helpers shared by the test suites: where the data lives, and how a case that cannot run says so.
//
// A case whose input is missing calls skip_case() (or have_golden(), which does it for
// ../shared/golden): the case is then reported as *skipped*, not passed. The shared main
// (test_main.cpp) prints "skipped: N of M test cases" at the end, writes one line per case to
// $KINFER_TEST_REPORT_DIR/<executable>.tsv (ctest sets it; scripts/test.sh sums those files), and
// exits 77 (ctest's SKIP_RETURN_CODE) when every case that ran was skipped.
//
// In CI (CI=true, or KINFER_REQUIRE_GOLDEN=1) ../shared and the packages of scripts/setup.sh
// are there by definition, so a skip for a missing golden file or a missing required tool is a
// failure instead. Skips for a missing CPU feature stay skips everywhere.
#pragma once
#include <doctest/doctest.h>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

namespace kinfer::test {

// ../shared/golden as configured; KINFER_GOLDEN_DIR in the environment overrides it (point it at
// an empty directory to see what a clone without ../shared runs and skips).
inline std::string golden_dir() {
    const char* e = std::getenv("KINFER_GOLDEN_DIR");
    return e && *e ? e : KINFER_GOLDEN_DIR;
}
inline std::string golden(const std::string& rel) { return golden_dir() + "/" + rel; }
// Built by appends: GCC 12 warns (-Warray-bounds, a false positive) on string(literal) + "/" when inlined.
inline std::string data(const std::string& rel) {
    std::string p = KINFER_TEST_DATA_DIR;
    p += '/';
    p += rel;
    return p;
}
inline std::string kinfer_bin() { return KINFER_BIN; }

// n normal floats (mean 0, standard deviation scale) from a seeded generator: the same on every run.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    return x;
}

// Why a case skipped: its golden input is missing, a tool scripts/setup.sh installs is missing,
// or the machine lacks something (a CPU feature, a libm behaviour) no setup can provide.
enum class SkipKind { golden, tool, machine };

// Skips noted by the running test case; test_main.cpp's listener reads and clears it.
struct SkipLog {
    std::vector<std::pair<SkipKind, std::string>> current;
};
inline SkipLog& skip_log() {
    static SkipLog log;
    return log;
}

inline bool ci_requires_inputs() {
    const char* ci = std::getenv("CI");
    const char* req = std::getenv("KINFER_REQUIRE_GOLDEN");
    return (ci && std::string(ci) == "true") || (req && std::string(req) == "1");
}

// Marks the running case skipped (in part or whole) and says why. In CI a golden or tool skip
// fails the case.
inline void skip_case(SkipKind kind, const std::string& why) {
    skip_log().current.emplace_back(kind, why);
    std::printf("SKIP: %s\n", why.c_str());
    if (kind != SkipKind::machine && ci_requires_inputs()) FAIL_CHECK("CI must not skip: " << why);
}

// True when the golden file exists; otherwise marks the case skipped.
inline bool have_golden(const std::string& rel) {
    if (std::filesystem::exists(golden(rel))) return true;
    skip_case(SkipKind::golden, golden(rel) + " not found (needs ../shared/golden)");
    return false;
}

}  // namespace kinfer::test

#include <array>
#include <cstdlib>
#include <sys/wait.h>
#include <unistd.h>

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

// A path in the temp directory unique to this process and name (the suites run in parallel).
inline std::string temp_path(const std::string& name) {
    return (std::filesystem::temp_directory_path() / ("kinfer-test-" + std::to_string(::getpid()) + "-" + name)).string();
}

}  // namespace kinfer::test
