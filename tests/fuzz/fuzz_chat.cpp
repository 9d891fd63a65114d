// libFuzzer target for chat templates: detection from a GGUF's tokenizer.chat_template (with and
// without the vocabulary's special tokens), format names, rendering of arbitrary conversations
// in both formats, and splitting a generated reply. Every call must return or throw
// kinfer::Error; crashes, hangs, sanitizer reports and other exceptions are bugs.
//
// Input: <template> \0 <format name> \0 <flags byte> <messages>, messages separated by \x1e,
// fields (role, content, reasoning, name) by \x1f. The reply split gets the messages' bytes.
#include "gguf/reader.h"
#include "text/chat_template.h"
#include "text/pretokenize.h"
#include "text/tokenizer.h"
#include "text/unicode.h"

#include "fuzz_util.h"

using namespace kinfer;

namespace {

// The shipped tiny model's vocabulary (K3 layout), for detection by special tokens.
const text::Tokenizer* vocab() {
    static const std::unique_ptr<text::Tokenizer> tok = [] {
        auto f = gguf::File::open(std::string(KINFER_TEST_DATA_DIR) + "/models/k3-tiny-a-Q4_K_M.gguf");
        return text::Tokenizer::from_gguf(*f);
    }();
    return tok.get();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view all(reinterpret_cast<const char*>(data), size);
    const auto [tmpl, rest1] = fuzz::split_at(all, '\0');
    const auto [name, rest2] = fuzz::split_at(rest1, '\0');
    const uint8_t flags = rest2.empty() ? 0 : uint8_t(rest2[0]);
    const std::string_view msgs = rest2.empty() ? rest2 : rest2.substr(1);

    const std::string t(tmpl);   // a copy of exactly the template's bytes, for ASan
    fuzz::sink(uint64_t(text::detect_chat_format(t).value_or(text::ChatFormat::KimiK2)));
    fuzz::sink(uint64_t(text::detect_chat_format(t, vocab()).value_or(text::ChatFormat::KimiK2)));
    const std::string n(name);
    if (auto f = text::chat_format_from_name(n)) fuzz::sink(text::chat_format_name(*f));

    std::vector<text::ChatMessage> conv;
    std::string_view m = msgs;
    while (!m.empty() && conv.size() < 64) {
        const auto [one, more] = fuzz::split_at(m, '\x1e');
        auto [role, r1] = fuzz::split_at(one, '\x1f');
        auto [content, r2] = fuzz::split_at(r1, '\x1f');
        auto [reasoning, nm] = fuzz::split_at(r2, '\x1f');
        conv.push_back({std::string(role), std::string(content), std::string(reasoning), std::string(nm)});
        if (more.data() == nullptr || one.size() == m.size()) break;
        m = more;
    }
    static const char* const efforts[] = {"max", "high", "low", "", "medium"};
    text::ChatOptions opt;
    opt.add_generation_prompt = flags & 1;
    opt.thinking = flags & 2;
    opt.thinking_effort = efforts[(flags >> 2) % 5];
    for (auto fmt : {text::ChatFormat::KimiK2, text::ChatFormat::KimiK3}) {
        fuzz::tolerate([&] {
            const std::string out = text::render_chat(fmt, conv, opt);
            fuzz::sink(out);
            // What chat does next: tokenize the rendered prompt with specials parsed.
            if (flags & 0x80) fuzz::sink(vocab()->encode(out, true).size());
        });
        for (const auto& s : text::chat_stop_strings(fmt)) fuzz::sink(s);
        const std::string g(msgs);
        for (bool thinking : {false, true}) {
            const auto r = text::split_reply(fmt, g, thinking);
            if (r.reasoning.size() + r.response.size() > g.size()) __builtin_trap();   // output from nothing
        }
    }
    return 0;
}
