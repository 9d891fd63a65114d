// Small helpers for the text tests: file reading, id lists, readable mismatch reports.
#pragma once
#include "text/tokenizer.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace kinfer::test {

inline std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot open " << path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Whitespace / comma separated integers, optionally inside [ ].
inline std::vector<text::Token> read_ids(const std::string& path) {
    std::string s = read_file(path);
    for (char& c : s)
        if (c == '[' || c == ']' || c == ',') c = ' ';
    std::istringstream in(s);
    std::vector<text::Token> ids;
    long long x;
    while (in >> x) ids.push_back(static_cast<text::Token>(x));
    return ids;
}

// "equal" or a description of the first difference, so a failing CHECK says where.
inline std::string describe_match(const std::vector<text::Token>& got, const std::vector<text::Token>& want) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    if (i == got.size() && i == want.size()) return "equal";
    std::ostringstream o;
    o << "first difference at " << i << " of " << got.size() << " (got) / " << want.size() << " (want):";
    o << " got";
    for (size_t k = i; k < got.size() && k < i + 8; ++k) o << ' ' << got[k];
    o << " | want";
    for (size_t k = i; k < want.size() && k < i + 8; ++k) o << ' ' << want[k];
    return o.str();
}

}  // namespace kinfer::test

namespace kinfer::test {

// The golden file when ../shared/golden exists, else a temporary file holding `fallback` (the
// same content, kept in the test so a bare clone still checks it).
inline std::string golden_or_data(const std::string& rel, const std::string& fallback) {
    if (std::filesystem::exists(golden(rel))) return golden(rel);
    const std::string path = (std::filesystem::temp_directory_path() / "kinfer_text_fallback.txt").string();
    std::ofstream(path, std::ios::binary) << fallback;
    return path;
}

}  // namespace kinfer::test
