// chat's files: /save and /load keep the conversation as JSON; /save-state and /load-state keep
// the whole chat in one session-state file (model/session_file.h, the format --prompt-cache
// writes), with the same JSON, the sampler's state and the chat's own flags as its extra
// section. One file, one checksum: the conversation and the model state cannot be mixed up
// with another pair, and a refused file changes neither.
#include "cli/lib/chat_repl.h"

#include "cli/lib/prompt_text.h"

#include "common/error.h"
#include "common/safe_file.h"
#include "common/text_file.h"
#include "model/session_file.h"

#include <nlohmann/json.hpp>

namespace kinfer::cli {

namespace {

constexpr int kChatStateVersion = 1;

nlohmann::json conversation_json(text::ChatFormat format, const std::string& system, const std::vector<text::ChatMessage>& msgs) {
    nlohmann::json j;
    j["format"] = text::chat_format_name(format);
    j["system"] = system;
    j["messages"] = nlohmann::json::array();
    for (const auto& m : msgs) {
        nlohmann::json o{{"role", m.role}, {"content", m.content}};
        if (!m.reasoning_content.empty()) o["reasoning_content"] = m.reasoning_content;
        if (!m.name.empty()) o["name"] = m.name;
        j["messages"].push_back(std::move(o));
    }
    return j;
}

// {"system": ..., "messages": [...]} as /save writes it, or a bare message array.
void parse_conversation(const nlohmann::json& j, const std::string& path, std::string& system,
                        std::vector<text::ChatMessage>& msgs) {
    const nlohmann::json* arr = j.is_array() ? &j : (j.is_object() && j.contains("messages") ? &j["messages"] : nullptr);
    if (!arr || !arr->is_array()) fail("{}: expected {{\"messages\": [...]}} as /save writes", path);
    if (j.is_object()) system = j.value("system", std::string());
    for (const auto& m : *arr) {
        if (!m.is_object() || !m.contains("role")) fail("{}: every message needs a \"role\"", path);
        text::ChatMessage cm{m["role"].get<std::string>(), m.value("content", std::string()),
                             m.value("reasoning_content", std::string()), m.value("name", std::string())};
        if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
            fail("{}: unknown role '{}'", path, cm.role);
        if (cm.role == "system" && msgs.empty()) system = cm.content;
        else msgs.push_back(std::move(cm));
    }
}

std::string dump(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

void ChatRepl::save(const std::string& path) const {
    check_output_path(path, "/save");
    const nlohmann::json j = conversation_json(cfg_.format, system_, msgs_);
    write_text_file(path, "/save", [&](std::ostream& f) { f << dump(j, 2) << "\n"; });
}

void ChatRepl::load(const std::string& path) {
    std::string system;
    std::vector<text::ChatMessage> msgs;
    try {
        parse_conversation(nlohmann::json::parse(read_text_file(path)), path, system, msgs);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not a saved chat ({})", path, e.what());
    }
    system_ = std::move(system);
    msgs_ = std::move(msgs);
    // The session is brought in line on the next turn (prefix comparison).
}

void ChatRepl::save_state(const std::string& path) const {
    check_output_path(path, "/save-state");
    nlohmann::json j = conversation_json(cfg_.format, system_, msgs_);
    j["kinfer_chat_state"] = kChatStateVersion;
    j["sampler"] = sampler_.save_state();
    j["stopped_on_string"] = stopped_on_string_;
    j["reply_start"] = reply_start_;
    const std::string extra = dump(j, -1);
    model::save_session_file(session_, path, {reinterpret_cast<const uint8_t*>(extra.data()), extra.size()});
}

void ChatRepl::load_state(const std::string& path) {
    // Everything is parsed inside the check, before the session changes: a refused file leaves
    // both the session and the conversation as they were.
    std::string system;
    std::vector<text::ChatMessage> msgs;
    text::Sampler sampler = sampler_;
    bool stopped = false;
    size_t reply_start = 0;
    std::string format;
    model::load_session_file(session_, path, [&](std::span<const uint8_t> extra) {
        if (extra.empty()) fail("holds no conversation (a --prompt-cache file?); /load-state reads what /save-state writes");
        try {
            const auto j = nlohmann::json::parse(extra.begin(), extra.end());
            if (!j.is_object() || j.value("kinfer_chat_state", 0) != kChatStateVersion)
                fail("not a chat state of version {} (/save-state writes it)", kChatStateVersion);
            parse_conversation(j, "its conversation", system, msgs);
            sampler.load_state(j.at("sampler").get<std::string>());
            stopped = j.at("stopped_on_string").get<bool>();
            reply_start = j.at("reply_start").get<size_t>();
            format = j.value("format", std::string());
        } catch (const nlohmann::json::exception& e) {
            fail("its conversation is broken ({})", e.what());
        }
    });
    system_ = std::move(system);
    msgs_ = std::move(msgs);
    sampler_ = std::move(sampler);
    in_session_ = session_.tokens();
    snapshots_.clear();
    stopped_on_string_ = stopped;
    reply_start_ = std::min(reply_start, in_session_.size());
    if (format != text::chat_format_name(cfg_.format))
        notice(fmt::format("[saved with the {} chat format, this chat uses {}: the next turn reads the conversation again]",
                           format, text::chat_format_name(cfg_.format)));
}

}  // namespace kinfer::cli
