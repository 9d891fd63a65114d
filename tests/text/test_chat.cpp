// Chat formats against the real Jinja templates rendered by jinja2 (tests/data/text/
// chat_golden.json, made by tools/text/gen_chat_goldens.py), byte for byte, plus format
// detection and the markup of the golden tokenizer cases.
#include "test_util.h"
#include "text_test_util.h"

#include "common/error.h"
#include "gguf/reader.h"
#include "text/chat_template.h"
#include "text/tokenizer.h"

#include <nlohmann/json.hpp>

using namespace kinfer::text;
using namespace kinfer::test;
using nlohmann::json;

namespace {

std::vector<ChatMessage> load_messages(const json& j) {
    std::vector<ChatMessage> v;
    for (const auto& m : j) {
        ChatMessage c;
        c.role = m.at("role");
        c.content = m.value("content", "");
        c.reasoning_content = m.value("reasoning_content", "");
        c.name = m.value("name", "");
        v.push_back(c);
    }
    return v;
}

}  // namespace

TEST_CASE("chat formats render exactly what the Jinja templates render") {
    const json convs = json::parse(read_file(data("text/chat_conversations.json")));
    std::map<std::string, std::vector<ChatMessage>> by_name;
    for (const auto& c : convs) by_name[c.at("name")] = load_messages(c.at("messages"));
    const json golden_cases = json::parse(read_file(data("text/chat_golden.json")));
    int n = 0;
    for (const auto& g : golden_cases) {
        const auto fmt = chat_format_from_name(g.at("format").get<std::string>());
        REQUIRE(fmt);
        ChatOptions o;
        const json& opt = g.at("options");
        o.add_generation_prompt = opt.value("add_generation_prompt", false);
        o.thinking = opt.value("thinking", true);
        if (opt.contains("thinking_effort")) o.thinking_effort = opt.at("thinking_effort").is_null() ? "" : opt.at("thinking_effort").get<std::string>();
        INFO(g.at("format").get<std::string>() << " / " << g.at("conversation").get<std::string>() << " / " << opt.dump());
        CHECK(render_chat(*fmt, by_name.at(g.at("conversation")), o) == g.at("text").get<std::string>());
        ++n;
    }
    CHECK(n == 56);
}

TEST_CASE("the golden tokenizer markup cases are these formats") {
    ChatOptions o;
    CHECK(render_chat(ChatFormat::KimiK2, {{"system", "You are helpful.", "", ""}, {"user", "hi", "", ""}}, o) ==
          read_file(golden_or_data("llama.cpp/tokenizer/cases/k2_chat_markup.txt",
                                   "<|im_system|>system<|im_middle|>You are helpful.<|im_end|><|im_user|>user<|im_middle|>hi<|im_end|><|im_assistant|>assistant<|im_middle|>")));
    o.add_generation_prompt = false;
    o.thinking_effort = "";
    CHECK(render_chat(ChatFormat::KimiK3, {{"user", "hi there", "", ""}}, o) ==
          read_file(golden_or_data("llama.cpp/tokenizer/cases/k3_chat_markup.txt",
                                   "<|open|>message role=\"user\"<|sep|>hi there<|close|>message<|sep|><|end_of_msg|>")));
}

TEST_CASE("chat format detection") {
    CHECK(detect_chat_format(read_file(data("text/Kimi-K3.jinja"))) == ChatFormat::KimiK3);
    CHECK(detect_chat_format(read_file(data("text/Kimi-K2-Instruct.jinja"))) == ChatFormat::KimiK2);
    CHECK_FALSE(detect_chat_format("{{ messages }}").has_value());
    for (const char* layout : {"k3", "kl"}) {
        auto file = kinfer::gguf::File::open(data(std::string("models/") + layout + "-tiny-a-Q4_K_M.gguf"));
        auto tok = Tokenizer::from_gguf(*file);
        CHECK(detect_chat_format(tok->chat_template(), tok.get()) ==
              (std::string(layout) == "k3" ? ChatFormat::KimiK3 : ChatFormat::KimiK2));
    }
    CHECK(chat_format_from_name("kimi-linear") == ChatFormat::KimiK2);
    CHECK(chat_format_from_name("xtml") == ChatFormat::KimiK3);
    CHECK_FALSE(chat_format_from_name("chatml").has_value());
}

TEST_CASE("rendered chats tokenize into the special tokens") {
    auto file = kinfer::gguf::File::open(data("models/k3-tiny-a-Q4_K_M.gguf"));
    auto tok = Tokenizer::from_gguf(*file);
    const std::string s = render_chat(ChatFormat::KimiK3, {{"user", "hi", "", ""}});
    const auto ids = tok->encode(s, true);
    CHECK(ids.front() == tok->find("<|open|>"));
    CHECK(ids.back() == tok->find("<|sep|>"));
    CHECK(tok->decode(ids) == s);
}

TEST_CASE("errors and reply splitting") {
    CHECK_THROWS_AS(render_chat(ChatFormat::KimiK2, {{"robot", "x", "", ""}}), kinfer::Error);
    CHECK_THROWS_AS(render_chat(ChatFormat::KimiK3, {{"tool", "x", "", ""}}), kinfer::Error);
    ChatOptions o;
    o.thinking_effort = "medium";
    CHECK_THROWS_AS(render_chat(ChatFormat::KimiK3, {{"user", "x", "", ""}}, o), kinfer::Error);

    auto r = split_reply(ChatFormat::KimiK3, "hmm, 4.<|close|>think<|sep|><|open|>response<|sep|>It is 4.<|close|>response<|sep|>");
    CHECK(r.reasoning == "hmm, 4.");
    CHECK(r.response == "It is 4.");
    r = split_reply(ChatFormat::KimiK3, "still thinking");
    CHECK(r.reasoning == "still thinking");
    CHECK(r.response.empty());
    r = split_reply(ChatFormat::KimiK3, "Direct answer<|close|>response<|sep|>", false);
    CHECK(r.response == "Direct answer");
    r = split_reply(ChatFormat::KimiK2, "<think>a</think>b<|im_end|>");
    CHECK(r.reasoning == "a");
    CHECK(r.response == "b");
}

TEST_CASE("a GGUF from llama.cpp's K3 converter carries Kimi-K3.jinja and is detected as kimi-k3") {
    if (!have_golden("hf/gguf/hf-k3-tiny-bf16.gguf")) return;
    auto file = kinfer::gguf::File::open(golden("hf/gguf/hf-k3-tiny-bf16.gguf"));
    auto tok = Tokenizer::from_gguf(*file);
    CHECK(tok->chat_template() == read_file(data("text/Kimi-K3.jinja")));
    CHECK(detect_chat_format(tok->chat_template()) == ChatFormat::KimiK3);
    CHECK(tok->eos() == 4098);
    CHECK(tok->eog_ids() == std::vector<Token>{4097, 4098, 4105, 4351});
    if (have_golden("hf/gguf/hf-kl-tiny-bf16.gguf")) {
        auto kl = kinfer::gguf::File::open(golden("hf/gguf/hf-kl-tiny-bf16.gguf"));
        auto kt = Tokenizer::from_gguf(*kl);
        CHECK(kt->chat_template().empty());
        CHECK(detect_chat_format(kt->chat_template(), kt.get()) == ChatFormat::KimiK2);
    }
}
