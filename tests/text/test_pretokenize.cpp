// The hand-written pre-tokenizers against a backtracking regex engine: tests/data/text/
// pretok_cases.json holds random strings split by Python's `regex` module with the exact
// kimi-k2, o200k and cl100k patterns (tools/text/gen_pretok_cases.py).
#include "test_util.h"
#include "text_test_util.h"

#include "text/pretokenize.h"
#include "text/unicode.h"

#include <nlohmann/json.hpp>

using namespace kinfer::text;
using namespace kinfer::test;

namespace {

std::vector<std::string> split(PreTokenizer kind, std::string_view s) {
    std::vector<std::string> v;
    for (size_t pos = 0; pos < s.size();) {
        const size_t end = next_piece(kind, s, pos);
        REQUIRE(end > pos);
        REQUIRE(end <= s.size());
        v.emplace_back(s.substr(pos, end - pos));
        pos = end;
    }
    return v;
}

}  // namespace

TEST_CASE("pre-tokenizers split like the regex engine") {
    const auto cases = nlohmann::json::parse(read_file(data("text/pretok_cases.json")));
    REQUIRE(cases.size() > 400);
    const std::pair<const char*, PreTokenizer> kinds[] = {
        {"kimi-k2", PreTokenizer::KimiK2}, {"o200k", PreTokenizer::O200k}, {"cl100k", PreTokenizer::Cl100k}};
    for (const auto& c : cases) {
        const std::string text = c.at("text");
        for (const auto& nk : kinds) {   // no structured binding: clang 14 cannot capture one in INFO
            const char* name = nk.first;
            const PreTokenizer kind = nk.second;
            INFO(name << " on " << nlohmann::json(text).dump());
            CHECK(split(kind, text) == c.at(name).get<std::vector<std::string>>());
        }
    }
}

TEST_CASE("kimi-k2 pieces on hand-picked strings") {
    using V = std::vector<std::string>;
    CHECK(split(PreTokenizer::KimiK2, "Hello world") == V{"Hello", " world"});
    CHECK(split(PreTokenizer::KimiK2, "I'm DON'T") == V{"I'm", " DON'T"});
    CHECK(split(PreTokenizer::KimiK2, "1234567") == V{"123", "456", "7"});
    CHECK(split(PreTokenizer::KimiK2, "a  b") == V{"a", " ", " b"});
    CHECK(split(PreTokenizer::KimiK2, "x   ") == V{"x", "   "});
    CHECK(split(PreTokenizer::KimiK2, "你好abc世界") == V{"你好", "abc", "世界"});
    CHECK(split(PreTokenizer::KimiK2, " 你好") == V{" ", "你好"});
    CHECK(split(PreTokenizer::KimiK2, "a\r\n\r\n b") == V{"a", "\r\n\r\n", " b"});
    CHECK(split(PreTokenizer::KimiK2, "?!\n\nx") == V{"?!\n\n", "x"});
    CHECK(split(PreTokenizer::O200k, "a//\nb") == V{"a", "//\n", "b"});
    CHECK(split(PreTokenizer::KimiK2, "a//\nb") == V{"a", "//\n", "b"});
    CHECK(split(PreTokenizer::KimiK2, "a/\n/b") == V{"a", "/\n", "/b"});
    // Invalid UTF-8 bytes are single characters of no class.
    CHECK(split(PreTokenizer::KimiK2, "ab\xff\xfe cd") == V{"ab", "\xff\xfe", " cd"});
}

TEST_CASE("unicode classes") {
    namespace uc = kinfer::text::unicode;
    CHECK(uc::flags('a') == uc::kLl);
    CHECK(uc::flags('A') == uc::kLu);
    CHECK(uc::flags('7') == uc::kNumber);
    CHECK(uc::flags(' ') == uc::kSpace);
    CHECK(uc::flags(0x4F60) == (uc::kLo | uc::kHan));
    CHECK(uc::flags(0x3007) == (uc::kNumber | uc::kHan));   // 〇: Nl, Script=Han
    CHECK(uc::flags(0x3002) == 0);                          // 。: Po, Script=Common
    CHECK(uc::flags(0x20000) == (uc::kLo | uc::kHan));     // CJK Extension B (above the BMP table)
    CHECK(uc::flags(0x0301) == uc::kMark);
    CHECK(uc::flags(0x3000) == uc::kSpace);
    CHECK(uc::flags(0x180E) == 0);                          // not White_Space since Unicode 6.3
    CHECK(uc::flags(0x1F600) == 0);
    CHECK(uc::flags(0x110000) == 0);
    CHECK(uc::incomplete_utf8_tail("a\xe4\xbd") == 2);
    CHECK(uc::incomplete_utf8_tail("a\xe4\xbd\xa0") == 0);
    CHECK(uc::incomplete_utf8_tail("\xf0\x9f\x98") == 3);
    CHECK(uc::incomplete_utf8_tail("ab") == 0);
}
