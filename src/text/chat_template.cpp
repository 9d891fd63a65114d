#include "text/chat_template.h"

#include "common/error.h"
#include "text/tokenizer.h"

namespace kinfer::text {
namespace {

// Jinja's |trim: strips leading and trailing whitespace (Python str.strip()).
std::string_view trim(std::string_view s) {
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
    while (!s.empty() && ws(s.front())) s.remove_prefix(1);
    while (!s.empty() && ws(s.back())) s.remove_suffix(1);
    return s;
}

// ---- kimi-k2 ----

std::string render_k2(const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
    std::string out;
    for (size_t i = 0; i < msgs.size(); ++i) {
        const ChatMessage& m = msgs[i];
        if (i == 0 && msgs[0].role != "system")
            out += "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>\n";
        const std::string& role_name = m.name.empty() ? m.role : m.name;
        if (m.role == "user") out += "<|im_user|>" + role_name + "<|im_middle|>";
        else if (m.role == "assistant") out += "<|im_assistant|>" + role_name + "<|im_middle|>";
        else if (m.role == "system" || m.role == "tool") out += "<|im_system|>" + role_name + "<|im_middle|>";
        else fail("chat: unknown role '{}' (system, user, assistant, tool)", m.role);
        if (m.role == "tool") {
            out += "## Return of functions." + (m.name.empty() ? std::string("unknown") : m.name) + ":0\n";
        }
        out += m.content;
        out += "<|im_end|>";
    }
    if (o.add_generation_prompt) out += "<|im_assistant|>assistant<|im_middle|>";
    return out;
}

// ---- kimi-k3 (XTML) ----

std::string escape_attr(std::string_view v) {
    std::string r;
    for (char c : v) {
        if (c == '&') r += "&amp;";
        else if (c == '"') r += "&quot;";
        else r += c;
    }
    return r;
}

using Attrs = std::vector<std::pair<std::string, std::string>>;

void open_tag(std::string& out, std::string_view tag, const Attrs& attrs = {}) {
    out += "<|open|>";
    out += tag;
    for (const auto& [k, v] : attrs) out += " " + k + "=\"" + escape_attr(v) + "\"";
    out += "<|sep|>";
}

void close_tag(std::string& out, std::string_view tag) {
    out += "<|close|>";
    out += tag;
    out += "<|sep|>";
}

void end_message(std::string& out) {
    close_tag(out, "message");
    out += "<|end_of_msg|>";
}

std::string render_k3(const std::vector<ChatMessage>& msgs, const ChatOptions& o) {
    const std::string& effort = o.thinking_effort;
    if (o.thinking && !effort.empty() && effort != "low" && effort != "high" && effort != "max")
        fail("chat: unsupported thinking_effort={}; supported values are low, high, and max.", effort);
    std::string out;
    if (o.thinking && !effort.empty()) {
        open_tag(out, "message", {{"role", "system"}, {"type", "thinking-effort"}});
        out += "`thinking_effort` guides on how much to think in your thinking channel (not including the "
               "response channel), supported values include `low`, `medium`, `high`, and `max`.\n"
               "Now the system is invoked with `thinking_effort=" + effort + "`.";
        end_message(out);
    }
    int tool_index = 0;
    for (const ChatMessage& m : msgs) {
        if (m.role == "user" || m.role == "system") {
            Attrs attrs{{"role", m.role}};
            if (!m.name.empty()) attrs.emplace_back("name", m.name);
            open_tag(out, "message", attrs);
            out += m.content;
            end_message(out);
        } else if (m.role == "assistant") {
            tool_index = 0;
            Attrs attrs{{"role", "assistant"}};
            if (!m.name.empty()) attrs.emplace_back("name", m.name);
            open_tag(out, "message", attrs);
            if (o.thinking) {
                open_tag(out, "think");
                if (!trim(m.reasoning_content).empty()) out += m.reasoning_content;
                close_tag(out, "think");
            }
            open_tag(out, "response");
            out += m.content;
            close_tag(out, "response");
            end_message(out);
        } else if (m.role == "tool") {
            ++tool_index;
            if (m.name.empty())
                fail("chat: Kimi K3 tool messages need a tool name (ChatMessage::name)");
            open_tag(out, "message", {{"role", "tool"}, {"tool", m.name}, {"index", std::to_string(tool_index)}});
            out += m.content;
            end_message(out);
        } else {
            fail("chat: unknown role '{}' (system, user, assistant, tool)", m.role);
        }
    }
    if (o.add_generation_prompt) {
        open_tag(out, "message", {{"role", "assistant"}});
        open_tag(out, o.thinking ? "think" : "response");
    }
    return out;
}

}  // namespace

const char* chat_format_name(ChatFormat f) {
    return f == ChatFormat::KimiK3 ? "kimi-k3" : "kimi-k2";
}

std::optional<ChatFormat> chat_format_from_name(std::string_view n) {
    if (n == "kimi-k2" || n == "k2" || n == "kimi-linear" || n == "kimi") return ChatFormat::KimiK2;
    if (n == "kimi-k3" || n == "k3" || n == "xtml") return ChatFormat::KimiK3;
    return std::nullopt;
}

std::optional<ChatFormat> detect_chat_format(std::string_view tmpl, const Tokenizer* vocab) {
    auto has = [&](std::string_view s) { return tmpl.find(s) != std::string_view::npos; };
    if (has("<|open|>") || has("<|end_of_msg|>")) return ChatFormat::KimiK3;
    if (has("<|im_middle|>") || has("<|im_user|>") || has("<|im_assistant|>")) return ChatFormat::KimiK2;
    if (vocab) {
        if (vocab->find("<|open|>") != kNoToken && vocab->find("<|end_of_msg|>") != kNoToken) return ChatFormat::KimiK3;
        if (vocab->find("<|im_middle|>") != kNoToken && vocab->find("<|im_user|>") != kNoToken) return ChatFormat::KimiK2;
    }
    return std::nullopt;
}

std::string render_chat(ChatFormat format, const std::vector<ChatMessage>& messages, const ChatOptions& opts) {
    return format == ChatFormat::KimiK3 ? render_k3(messages, opts) : render_k2(messages, opts);
}

std::vector<std::string> chat_stop_strings(ChatFormat format) {
    if (format == ChatFormat::KimiK3) return {"<|end_of_msg|>", "<|close|>message<|sep|>"};
    return {"<|im_end|>"};
}

ChatReply split_reply(ChatFormat format, std::string_view g, bool thinking) {
    ChatReply r;
    if (format == ChatFormat::KimiK3) {
        static constexpr std::string_view kEndThink = "<|close|>think<|sep|>";
        static constexpr std::string_view kOpenResp = "<|open|>response<|sep|>";
        static constexpr std::string_view kCloseResp = "<|close|>response<|sep|>";
        std::string_view rest = g;
        if (thinking) {
            const size_t e = rest.find(kEndThink);
            if (e == std::string_view::npos) {
                r.reasoning = std::string(rest);
                return r;
            }
            r.reasoning = std::string(rest.substr(0, e));
            rest.remove_prefix(e + kEndThink.size());
        }
        if (rest.substr(0, kOpenResp.size()) == kOpenResp) rest.remove_prefix(kOpenResp.size());
        const size_t c = rest.find(kCloseResp);
        r.response = std::string(c == std::string_view::npos ? rest : rest.substr(0, c));
        return r;
    }
    const size_t a = g.find("<think>");
    const size_t b = g.find("</think>");
    if (a != std::string_view::npos && b != std::string_view::npos && a < b) {
        r.reasoning = std::string(g.substr(a + 7, b - a - 7));
        r.response = std::string(g.substr(0, a)) + std::string(g.substr(b + 8));
    } else {
        r.response = std::string(g);
    }
    const size_t end = r.response.find("<|im_end|>");
    if (end != std::string::npos) r.response.resize(end);
    return r;
}

}  // namespace kinfer::text
