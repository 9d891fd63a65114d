// Helpers for the multi-process tests: mpirun command lines on localhost, and byte-exact file
// comparison of the logits `kinfer eval --logits` writes.
#pragma once
#include "test_util.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace kinfer::test {

inline bool have_mpirun() {
#ifndef KINFER_HAVE_MPI
    skip_case(SkipKind::tool, "kinfer was built without MPI (scripts/setup.sh installs libopenmpi-dev)");
    return false;
#else
    if (run_command("command -v mpirun").rc == 0) return true;
    skip_case(SkipKind::tool, "mpirun not found (scripts/setup.sh installs openmpi-bin)");
    return false;
#endif
}

// mpirun on this machine, ranks oversubscribing its cores, as root if need be. Under the
// sanitizers the ranks do not check for leaks: OpenMPI leaves its own allocations (some in
// components it has unloaded, beyond any suppression file) at exit; kinfer's own leaks are
// checked by the single-process suites.
inline std::string mpirun_bare() {
    std::string s = sanitized() ? "ASAN_OPTIONS=\"$ASAN_OPTIONS:detect_leaks=0\" " : "";
    return s + "mpirun --allow-run-as-root --oversubscribe --bind-to none ";
}
// The same with np ranks of the command that follows.
inline std::string mpirun(int np) { return mpirun_bare() + "-np " + std::to_string(np) + " "; }

inline std::string read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// cmd with its stderr sent to err_path (run_command merges it into the output otherwise).
inline std::string stderr_to(const std::string& cmd, const std::string& err_path) {
    std::string s = "(";   // built step by step: GCC 12 warns (-Wrestrict) on "(" + std::string
    s += cmd;
    s += " 2>";
    s += err_path;
    s += ")";
    return s;
}

// A fresh scratch directory for one test case.
inline std::string scratch_dir(const std::string& name) {
    const auto d = std::filesystem::temp_directory_path() / ("kinfer-dist-" + name + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d.string();
}

}  // namespace kinfer::test
