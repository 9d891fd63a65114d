// The doctest main shared by every test executable. Besides running the cases it keeps score of
// the skipped ones (test_util.h, skip_case): it prints "skipped: N of M test cases", writes one
// line per case to $KINFER_TEST_REPORT_DIR/<executable>.tsv, and exits 77 (ctest's
// SKIP_RETURN_CODE, so ctest shows the test as skipped) when every case that ran was skipped.
#define DOCTEST_CONFIG_IMPLEMENT
#include "test_util.h"

#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct CaseResult {
    std::string name;
    bool failed = false;
    std::vector<std::pair<kinfer::test::SkipKind, std::string>> skips;
};

std::vector<CaseResult>& results() {
    static std::vector<CaseResult> r;
    return r;
}

const char* kind_name(kinfer::test::SkipKind k) {
    switch (k) {
        case kinfer::test::SkipKind::golden: return "golden";
        case kinfer::test::SkipKind::tool: return "tool";
        case kinfer::test::SkipKind::machine: return "machine";
    }
    return "?";
}

struct SkipListener : doctest::IReporter {
    explicit SkipListener(const doctest::ContextOptions&) {}
    void report_query(const doctest::QueryData&) override {}
    void test_run_start() override {}
    void test_run_end(const doctest::TestRunStats&) override {}
    void test_case_start(const doctest::TestCaseData& tc) override {
        kinfer::test::skip_log().current.clear();
        results().push_back({tc.m_name, false, {}});
    }
    void test_case_reenter(const doctest::TestCaseData&) override {}
    void test_case_end(const doctest::CurrentTestCaseStats& st) override {
        if (results().empty()) return;
        auto& r = results().back();
        r.failed = !st.testCaseSuccess;
        r.skips = kinfer::test::skip_log().current;
        kinfer::test::skip_log().current.clear();
    }
    void test_case_exception(const doctest::TestCaseException&) override {}
    void subcase_start(const doctest::SubcaseSignature&) override {}
    void subcase_end() override {}
    void log_assert(const doctest::AssertData&) override {}
    void log_message(const doctest::MessageData&) override {}
    void test_case_skipped(const doctest::TestCaseData&) override {}
};

REGISTER_LISTENER("kinfer_skips", 1, SkipListener);

std::string one_line(std::string s) {
    for (char& c : s)
        if (c == '\t' || c == '\n' || c == '\r') c = ' ';
    return s;
}

}  // namespace

int main(int argc, char** argv) {
    doctest::Context ctx(argc, argv);
    const int rc = ctx.run();
    if (ctx.shouldExit()) return rc;

    size_t skipped = 0, failed = 0;
    for (const auto& r : results()) {
        skipped += !r.skips.empty();
        failed += r.failed;
    }
    // Another ctest run of the same executable (cuda_reverse, cuda_warps, ...) names its own report.
    const char* report_name = std::getenv("KINFER_TEST_REPORT_NAME");
    const std::string exe = report_name && *report_name ? report_name : std::filesystem::path(argv[0]).filename().string();
    if (skipped) {
        std::printf("skipped: %zu of %zu test cases in %s\n", skipped, results().size(), exe.c_str());
        for (const auto& r : results())
            for (const auto& [k, why] : r.skips) std::printf("  skipped (%s) %s: %s\n", kind_name(k), r.name.c_str(), why.c_str());
    }
    if (const char* dir = std::getenv("KINFER_TEST_REPORT_DIR"); dir && *dir) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        std::ofstream f(std::filesystem::path(dir) / (exe + ".tsv"), std::ios::app);
        // case <tab> status (pass / fail / skip) <tab> skip kinds (comma-joined) <tab> first reason
        for (const auto& r : results()) {
            std::string kinds;
            for (const auto& s : r.skips) {
                if (kinds.find(kind_name(s.first)) != std::string::npos) continue;
                if (!kinds.empty()) kinds += ',';
                kinds += kind_name(s.first);
            }
            f << one_line(r.name) << '\t' << (r.failed ? "fail" : !r.skips.empty() ? "skip" : "pass") << '\t'
              << (kinds.empty() ? "-" : kinds) << '\t' << (r.skips.empty() ? "-" : one_line(r.skips.front().second)) << '\n';
        }
    }
    if (rc == 0 && !results().empty() && skipped == results().size() && failed == 0) return 77;
    return rc;
}
