// libFuzzer target for the GGUF vocabulary loader (`tokenizer.ggml.*` of any GGUF kinfer opens):
// any input that the GGUF reader accepts must either give a vocabulary and a tokenizer that
// encode and decode (ids in range, special tokens found), or throw kinfer::Error. Crashes,
// hangs, sanitizer reports and other exceptions are bugs. The seeds are vocabulary-only GGUFs
// (header + tokenizer keys, no tensors).
#include "gguf/reader.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include "fuzz_util.h"

#include <vector>

using namespace kinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<uint8_t> buf(data, data + size);   // exactly sized, for ASan
    std::unique_ptr<gguf::File> f;
    if (!fuzz::tolerate([&] { f = gguf::File::from_memory(buf.data(), buf.size(), "fuzz.gguf"); })) return 0;
    text::VocabData v;
    if (!fuzz::tolerate([&] { v = text::vocab_from_gguf(*f); })) return 0;
    std::unique_ptr<text::Tokenizer> tok;
    if (!fuzz::tolerate([&] { tok = text::Tokenizer::from_vocab(v); })) return 0;
    const std::string sample = "It is a truth universally acknowledged, 42 <|im_end|>[EOS] naïve \xe6\xbc\xa2\xff";
    for (bool special : {false, true}) {
        const auto ids = tok->encode(sample, special, 1, 1);
        for (auto id : ids)
            if (id < 0 || size_t(id) >= tok->n_tokens()) __builtin_trap();
        fuzz::sink(tok->decode(ids, special));
        text::StreamDecoder sd(*tok);
        for (auto id : ids) fuzz::sink(sd.push(id));
        fuzz::sink(sd.flush());
    }
    for (text::Token id : {text::Token(-1), text::Token(0), tok->bos(), tok->eos(), text::Token(tok->n_tokens()), text::Token(tok->n_tokens() - 1)}) {
        fuzz::sink(tok->piece(id));
        fuzz::sink(uint64_t(tok->is_eog(id)) + uint64_t(tok->is_special(id)));
    }
    fuzz::sink(tok->chat_template());
    return 0;
}
