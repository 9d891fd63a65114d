// The Kimi tokenizer against llama.cpp: ids for the golden cases (plain and with special tokens
// parsed), llama-tokenize ids for gpl-3 and the prompt text, pieces, decoding; the converter's
// tiktoken -> GGUF vocabulary path against the vocabulary llama.cpp's converter wrote.
#include "test_util.h"
#include "text_test_util.h"

#include "gguf/reader.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

using namespace kinfer::text;
using namespace kinfer::test;
using nlohmann::json;

namespace {

std::string to_hex(std::string_view s) {
    static const char* d = "0123456789abcdef";
    std::string h;
    for (unsigned char c : s) {
        h += d[c >> 4];
        h += d[c & 15];
    }
    return h;
}

std::unique_ptr<Tokenizer> gguf_tokenizer(const std::string& layout) {
    auto file = kinfer::gguf::File::open(data("models/" + layout + "-tiny-a-Q4_K_M.gguf"));
    return Tokenizer::from_gguf(*file);
}

// Kimi's special tokens for the tiny vocab: the named ones of tokenizer_config.json, the other
// slots of 4096..4351 as <|reserved_token_{id}|> (as tokenization_kimi.py names them).
std::map<Token, std::string> kimi_specials(const std::string& config_path) {
    const json cfg = json::parse(read_file(config_path));
    std::map<Token, std::string> named;
    for (const auto& [k, v] : cfg.at("added_tokens_decoder").items()) named[std::stoi(k)] = v.at("content").get<std::string>();
    return kimi_special_tokens(4096, 256, named);
}

void check_cases(const Tokenizer& tok, const std::string& json_path) {
    const json g = json::parse(read_file(json_path));
    CHECK(tok.n_tokens() == g.at("n_tokens").get<size_t>());
    CHECK(tok.bos() == g.at("bos").get<Token>());
    CHECK(tok.eos() == g.at("eos").get<Token>());
    for (const auto& c : g.at("cases")) {
        const std::string name = c.at("name");
        const std::string text = c.at("text");
        INFO("case " << name);
        const auto want = c.at("ids").get<std::vector<Token>>();
        const auto want_sp = c.at("ids_parse_special").get<std::vector<Token>>();
        const auto got = tok.encode(text, false);
        const auto got_sp = tok.encode(text, true);
        CHECK(describe_match(got, want) == "equal");
        CHECK(describe_match(got_sp, want_sp) == "equal");
        if (c.contains("pieces_hex")) {
            const auto pieces = c.at("pieces_hex").get<std::vector<std::string>>();
            REQUIRE(pieces.size() == want.size());
            for (size_t i = 0; i < want.size(); ++i) CHECK(to_hex(tok.piece(want[i])) == pieces[i]);
        }
        CHECK(tok.decode(got) == text);
        CHECK(tok.decode(got_sp) == text);
    }
}

}  // namespace

TEST_CASE("kimi tokenizer from GGUF matches llama.cpp on the golden cases") {
    for (const char* layout : {"k3", "kl"}) {
        INFO(layout);
        auto tok = gguf_tokenizer(layout);
        CHECK(tok->uses_merges());
        CHECK(tok->pre_tokenizer() == PreTokenizer::KimiK2);
        check_cases(*tok, data(std::string("text/tokenizer_") + layout + "_vocab.json"));
    }
}

TEST_CASE("kimi tokenizer matches llama-tokenize on gpl-3 and the prompt text") {
    for (const char* layout : {"k3", "kl"}) {
        auto tok = gguf_tokenizer(layout);
        for (const char* name : {"gpl-3", "pp_text"}) {
            INFO(layout << " " << name);
            const std::string text = read_file(data(std::string("text/") + name + ".txt"));
            const auto want = read_ids(data(std::string("text/") + name + "." + layout + "_vocab.llama-tokenize.ids.txt"));
            const auto got = tok->encode(text, true);
            CHECK(describe_match(got, want) == "equal");
            CHECK(tok->decode(got) == text);
        }
    }
    // llama-perplexity's stream: the same text without its trailing newline.
    if (have_golden("llama.cpp/tokenizer/gpl-3.perplexity_input.ids.txt")) {
        auto tok = gguf_tokenizer("k3");
        std::string text = read_file(data("text/gpl-3.txt"));
        text.pop_back();
        CHECK(describe_match(tok->encode(text, true), read_ids(golden("llama.cpp/tokenizer/gpl-3.perplexity_input.ids.txt"))) == "equal");
    }
}

TEST_CASE("special ids and end-of-generation set as llama.cpp derives them") {
    auto k3 = gguf_tokenizer("k3");
    CHECK(k3->eos() == 4098);
    CHECK(k3->eot() == 4105);
    CHECK(k3->unk() == 4350);
    CHECK(k3->pad() == 4351);
    CHECK(k3->eog_ids() == std::vector<Token>{4097, 4098, 4105, 4351});
    CHECK(k3->find("<|open|>") == 4099);
    CHECK(k3->is_special(4099));
    CHECK_FALSE(k3->is_eog(4099));
    auto kl = gguf_tokenizer("kl");
    CHECK(kl->eos() == 4097);
    CHECK(kl->eog_ids() == std::vector<Token>{4097, 4098, 4105, 4351});
    CHECK(kl->find("<|im_end|>") == 4098);
    // Specials are not parsed when asked not to, and decode can drop them.
    const auto plain = kl->encode("<|im_end|>", false);
    CHECK(plain.size() > 1);
    CHECK(kl->encode("a<|im_end|>b", true) == std::vector<Token>{kl->encode("a", false)[0], 4098, kl->encode("b", false)[0]});
    CHECK(kl->decode({4098, 64}, false) == "a");
    CHECK(kl->decode({4098, 64}, true) == "<|im_end|>a");
}

TEST_CASE("tiktoken.model -> GGUF vocabulary equals llama.cpp's converter output") {
    const TiktokenRanks ranks = load_tiktoken(data("text/kimi_tiny.tiktoken.model"));
    CHECK(ranks.count == 4096);
    for (const char* layout : {"k3", "kl"}) {
        INFO(layout);
        auto file = kinfer::gguf::File::open(data(std::string("models/") + layout + "-tiny-a-Q4_K_M.gguf"));
        const VocabData want = vocab_from_gguf(*file);
        const VocabData got = vocab_from_tiktoken(ranks, kimi_specials(data(std::string("text/") + layout + "_tokenizer_config.json")), 4352);
        CHECK(got.pre == want.pre);
        CHECK(got.tokens == want.tokens);
        CHECK(got.types == want.types);
        CHECK(got.merges.size() == want.merges.size());
        CHECK(got.merges == want.merges);
    }
}

TEST_CASE("tiktoken-mode Kimi tokenizer gives the same ids as the GGUF one") {
    const TiktokenRanks ranks = load_tiktoken(data("text/kimi_tiny.tiktoken.model"));
    auto tok = Tokenizer::from_tiktoken(ranks, PreTokenizer::KimiK2, kimi_specials(data("text/k3_tokenizer_config.json")));
    CHECK_FALSE(tok->uses_merges());
    const json g = json::parse(read_file(data("text/tokenizer_k3_vocab.json")));
    for (const auto& c : g.at("cases")) {
        INFO("case " << c.at("name").get<std::string>());
        CHECK(describe_match(tok->encode(c.at("text").get<std::string>(), false), c.at("ids").get<std::vector<Token>>()) == "equal");
        CHECK(describe_match(tok->encode(c.at("text").get<std::string>(), true), c.at("ids_parse_special").get<std::vector<Token>>()) == "equal");
    }
    const std::string text = read_file(data("text/gpl-3.txt"));
    CHECK(describe_match(tok->encode(text, true), read_ids(data("text/gpl-3.k3_vocab.llama-tokenize.ids.txt"))) == "equal");
}

TEST_CASE("GPT-2 byte mapping round-trips every byte") {
    std::string all;
    for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
    CHECK(gpt2_to_bytes(bytes_to_gpt2(all)) == all);
    CHECK(bytes_to_gpt2(" ") == "\xC4\xA0");   // U+0120 'Ġ'
    CHECK(bytes_to_gpt2("\n") == "\xC4\x8A");  // U+010A 'Ċ'
    CHECK(bytes_to_gpt2("a!") == "a!");
}

TEST_CASE("decode(encode(x)) == x on the corpora (throughput printed)") {
    auto tok = gguf_tokenizer("k3");
    double bytes = 0, secs = 0;
    for (const char* name : {"gpl-3.txt", "dict-devil.txt", "fortunes_all.txt", "kjv_bible.txt", "python311_docs_rst.txt"}) {
        const std::string rel = std::string("../corpora/") + name;
        if (!have_golden(rel)) continue;
        const std::string text = read_file(golden(rel));
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok->encode(text, true);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %-24s %9zu bytes -> %8zu tokens, %.1f MB/s\n", name, text.size(), ids.size(), text.size() / 1e6 / s);
        bytes += double(text.size());
        secs += s;
        INFO(name);
        CHECK(tok->decode(ids) == text);
    }
    // Throughput is printed for the log only: speed is measured by tools/bench, never by tests
    // (README, Testing); a pathological slowdown still fails here through ctest's timeout.
    if (secs > 0) std::printf("  encoder: %.1f MB/s over %.1f MB\n", bytes / 1e6 / secs, bytes / 1e6);
    // Invalid UTF-8 survives byte-level BPE.
    const std::string junk = "a\xff\xfe b\xc3 \xe4\xbd caf\xc3\xa9 \xf0\x9f\x98";
    CHECK(tok->decode(tok->encode(junk)) == junk);
}

TEST_CASE("StreamDecoder never emits half a character") {
    auto tok = gguf_tokenizer("k3");
    const std::string text = "你好，世界！ emoji \xF0\x9F\x98\x80 done <|open|>";
    const auto ids = tok->encode(text, true);
    StreamDecoder sd(*tok);
    std::string out;
    for (Token id : ids) {
        const std::string s = sd.push(id);
        CHECK(kinfer::text::unicode::incomplete_utf8_tail(s) == 0);
        for (size_t p = 0; p < s.size();) {
            const auto c = kinfer::text::unicode::decode(s, p);
            CHECK(c.cp != kinfer::text::unicode::kInvalid);
            p += c.len;
        }
        out += s;
    }
    out += sd.flush();
    CHECK(out == text);
}

TEST_CASE("long pieces (heap merging) agree with a naive BPE") {
    const TiktokenRanks ranks = load_tiktoken(data("text/kimi_tiny.tiktoken.model"));
    std::unordered_map<std::string, int32_t> rank_of;
    for (size_t r = 0; r < ranks.by_rank.size(); ++r) rank_of[ranks.by_rank[r]] = static_cast<int32_t>(r);
    auto tik = Tokenizer::from_tiktoken(ranks, PreTokenizer::KimiK2);
    auto gg = gguf_tokenizer("kl");
    uint32_t state = 12345;
    auto rnd = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
    for (int iter = 0; iter < 60; ++iter) {
        // One pre-tokenizer piece: a lowercase word, a run of spaces before a letter, or symbols.
        const size_t n = 20 + rnd() % 300;
        std::string s;
        const int kind = iter % 3;
        for (size_t i = 0; i < n; ++i) s += kind == 0 ? static_cast<char>('a' + rnd() % (iter % 7 == 0 ? 2 : 26))
                                                      : kind == 1 ? ' ' : "=-*#"[rnd() % (iter % 2 ? 1 : 4)];
        if (kind == 1) s += 'x';
        std::vector<Token> want;
        std::string_view piece = s;
        if (kind == 1) piece = std::string_view(s).substr(0, s.size() - 2);   // the spaces before " x"
        for (const auto& part : bpe_with_max_rank(rank_of, piece, INT32_MAX)) want.push_back(rank_of.at(part));
        INFO("kind " << kind << " length " << piece.size());
        const auto got_tik = tik->encode(piece, false);
        const auto got_gg = gg->encode(piece, false);
        CHECK(describe_match(got_tik, want) == "equal");
        CHECK(describe_match(got_gg, want) == "equal");
    }
}

TEST_CASE("kinfer tokenize prints what llama-tokenize prints") {
    const std::string out = (std::filesystem::temp_directory_path() / "kinfer_tokenize_ids.txt").string();
    const std::string cmd = kinfer_bin() + " tokenize -m " + data("models/k3-tiny-a-Q4_K_M.gguf") + " -f " +
                            data("text/gpl-3.txt") + " --ids > " + out;
    REQUIRE(std::system(cmd.c_str()) == 0);
    CHECK(read_file(out) == read_file(data("text/gpl-3.k3_vocab.llama-tokenize.ids.txt")));
    const std::string out2 = (std::filesystem::temp_directory_path() / "kinfer_tokenize_pieces.txt").string();
    const std::string cmd2 = kinfer_bin() + " tokenize -m " + data("models/kl-tiny-a-Q4_K_M.gguf") +
                             " -p 'Hello world<|im_end|>' > " + out2;
    REQUIRE(std::system(cmd2.c_str()) == 0);
    CHECK(read_file(out2) == "    39 -> 'H'\n   301 -> 'el'\n   385 -> 'lo'\n  1917 -> ' world'\n  4098 -> '<|im_end|>'\n");
}

TEST_CASE("random bytes round-trip and split cleanly under every pre-tokenizer") {
    auto tok = gguf_tokenizer("k3");
    uint32_t state = 99;
    auto rnd = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
    const char* chunks[] = {"a", "Z", " ", "\n", "\r", "\t", "'", "s", "1", "/", "<|open|>", "[EOS]", "\xe4\xbd\xa0",
                            "\xcc\x81", "\xf0\x9f\x98\x80", "\xc3", "\xff", "\x80", "\xe2\x80\x99", "\xef\xbc\x8c"};
    for (int iter = 0; iter < 3000; ++iter) {
        std::string s;
        const size_t n = rnd() % 60;
        for (size_t i = 0; i < n; ++i) s += chunks[rnd() % std::size(chunks)];
        CHECK(tok->decode(tok->encode(s, iter % 2 == 0)) == s);
        for (PreTokenizer k : {PreTokenizer::KimiK2, PreTokenizer::O200k, PreTokenizer::Cl100k}) {
            for (size_t pos = 0; pos < s.size();) {
                const size_t end = next_piece(k, s, pos);
                REQUIRE(end > pos);
                REQUIRE(end <= s.size());
                pos = end;
            }
        }
    }
}
