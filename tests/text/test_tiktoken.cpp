// tiktoken rank files against OpenAI's tiktoken (golden/tiktoken/*.ids), and the converter's
// tiktoken -> GGUF vocabulary path against llama.cpp's GGUF metadata.
#include "test_util.h"
#include "text_test_util.h"

#include "text/tokenizer.h"

using namespace kinfer::text;
using namespace kinfer::test;

namespace {

void check_encoding(const char* encoding, PreTokenizer pre) {
    const std::string rank_file = std::string("tiktoken/") + encoding + ".tiktoken";
    if (!have_golden(rank_file)) return;
    auto tok = Tokenizer::from_tiktoken_file(golden(rank_file), pre);
    for (const char* name : {"tricky", "gpl3", "kjv200k", "pydocs200k", "fortunes200k"}) {
        const std::string base = std::string("tiktoken/") + name;
        if (!have_golden(base + ".txt")) continue;
        const std::string text = read_file(golden(base + ".txt"));
        const std::vector<Token> want = read_ids(golden(base + "." + encoding + ".ids"));
        const std::vector<Token> got = tok->encode(text, false);
        INFO(encoding << " " << name);
        CHECK(describe_match(got, want) == "equal");
        CHECK(tok->decode(got) == text);
    }
}

}  // namespace

TEST_CASE("tiktoken cl100k_base matches OpenAI tiktoken") { check_encoding("cl100k_base", PreTokenizer::Cl100k); }
TEST_CASE("tiktoken o200k_base matches OpenAI tiktoken") { check_encoding("o200k_base", PreTokenizer::O200k); }
