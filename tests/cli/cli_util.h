// Helpers for the kinfer run / chat tests: the shipped golden models and shell quoting.
#pragma once
#include "test_util.h"

#include <filesystem>
#include <string>
#include <vector>

namespace kinfer::test {

inline std::string quote(const std::string& s) {
    std::string q = "'";
    for (char c : s) {
        if (c == '\'') q += "'\\''";
        else q += c;
    }
    return q + "'";
}

inline std::string tiny_model(const std::string& name) { return data("models/" + name + ".gguf"); }

// The tiny K3 with a vision tower, for chat's image tests: vision/<rel> from tests/data (the
// mmproj, the images), else from ../shared/golden (the text GGUF); "" and the case marked
// skipped when neither has it.
inline std::string vision_chat_file(const std::string& rel) {
    const std::string local = data("vision/" + rel);
    if (std::filesystem::exists(local)) return local;
    return have_golden("vision/" + rel) ? golden("vision/" + rel) : "";
}

// `kinfer run` on a shipped tiny model with two threads (what the golden runs used).
inline std::string run_cmd(const std::string& model, const std::string& args) {
    return quote(kinfer_bin()) + " run -m " + quote(tiny_model(model)) + " -t 2 " + args;
}

// The command with its stderr dropped: run_command merges stderr into the output otherwise.
inline std::string quiet(const std::string& cmd) {
    std::string s = "(";
    s += cmd;
    s += " 2>/dev/null)";
    return s;
}

// The command's stderr alone (its stdout dropped).
inline std::string stderr_only(const std::string& cmd) {
    std::string s = "(";
    s += cmd;
    s += " >/dev/null)";
    return s;
}

// Lines of a command's output (without empty trailing lines).
inline std::vector<std::string> lines_of(const std::string& out) {
    std::vector<std::string> v;
    size_t a = 0;
    while (a < out.size()) {
        size_t b = out.find('\n', a);
        if (b == std::string::npos) b = out.size();
        v.push_back(out.substr(a, b - a));
        a = b + 1;
    }
    while (!v.empty() && v.back().empty()) v.pop_back();
    return v;
}

}  // namespace kinfer::test
