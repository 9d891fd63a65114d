// libFuzzer target for the tiktoken rank-file loader (tiktoken.model of a checkpoint, `kinfer
// tokenize --tiktoken`, `kinfer convert`): any text must either parse into ranks, from which a
// rank-BPE tokenizer and a GGUF-style vocabulary (merges) are built and used to encode and
// decode, or throw kinfer::Error. For a tokenizer whose 256 single bytes all have ranks,
// decode(encode(s)) must give s back. Crashes, hangs, sanitizer reports, other exceptions and
// broken round trips are bugs.
#include "gguf/reader.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include "fuzz_util.h"

using namespace kinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string in(reinterpret_cast<const char*>(data), size);
    text::TiktokenRanks ranks;
    if (!fuzz::tolerate([&] { ranks = text::parse_tiktoken(in, "fuzz.tiktoken"); })) return 0;
    if (ranks.count > ranks.by_rank.size()) __builtin_trap();
    if (ranks.by_rank.size() > 8192) return 0;   // keeps one input's tokenizer builds short
    const std::map<text::Token, std::string> specials = {{text::Token(ranks.by_rank.size()), "<|im_end|>"},
                                                         {text::Token(ranks.by_rank.size() + 1), "[EOS]"}};
    bool all_bytes = ranks.by_rank.size() >= 256;
    for (size_t b = 0; b < 256 && all_bytes; ++b) {
        bool found = false;
        for (const auto& r : ranks.by_rank)
            if (r.size() == 1 && uint8_t(r[0]) == b) { found = true; break; }
        all_bytes = found;
    }
    const std::string sample = "Hello, world! 123 <|im_end|> naïve 漢字 \xff\xfe" + in.substr(0, 48);
    for (auto pre : {text::PreTokenizer::KimiK2, text::PreTokenizer::Cl100k}) {
        std::unique_ptr<text::Tokenizer> tok;
        if (!fuzz::tolerate([&] { tok = text::Tokenizer::from_tiktoken(ranks, pre, specials); })) continue;
        const auto ids = tok->encode(sample, false);
        for (auto id : ids)
            if (id < 0 || size_t(id) >= tok->n_tokens()) __builtin_trap();
        const std::string back = tok->decode(ids);
        if (all_bytes && back != sample) __builtin_trap();
        fuzz::sink(tok->encode(sample, true).size());
    }
    // The converter's path: a merge vocabulary from the ranks, then a tokenizer from that.
    if (ranks.by_rank.size() <= 2048) {
        fuzz::tolerate([&] {
            auto v = text::vocab_from_tiktoken(ranks, specials);
            auto tok = text::Tokenizer::from_vocab(v);
            fuzz::sink(tok->decode(tok->encode(sample, true)));
        });
    }
    return 0;
}
