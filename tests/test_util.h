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
