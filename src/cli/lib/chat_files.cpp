// chat's files: /save and /load keep the conversation as JSON; /save-state and /load-state keep
// the whole chat in one session-state file (model/session_file.h, the format --prompt-cache
// writes), with the same JSON, the sampler's state and the chat's own flags as its extra
// section. One file, one checksum: the conversation and the model state cannot be mixed up
// with another pair, and a refused file changes neither.
//
// A message with images lists their files ("images": [absolute paths]); its content keeps one
// <__media__> per image where it goes. Loading encodes them again (a missing or bad file refuses
// the whole file). A chat state also records where each held image's rows are and a hash of
// them, so the loaded chat knows its images and refuses files that now encode differently.
#include "cli/lib/chat_repl.h"

#include "cli/lib/prompt_text.h"

#include "common/error.h"
#include "common/safe_file.h"
#include "common/text_file.h"
#include "model/session_file.h"
#include "vision/media_prompt.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace kinfer::cli {

namespace {

constexpr int kChatStateVersion = 1;

nlohmann::json conversation_json(text::ChatFormat format, const std::string& system, const std::vector<text::ChatMessage>& msgs,
                                 const std::vector<std::vector<ImageRef>>& images) {
    nlohmann::json j;
    j["format"] = text::chat_format_name(format);
    j["system"] = system;
    j["messages"] = nlohmann::json::array();
    for (size_t i = 0; i < msgs.size(); ++i) {
        const auto& m = msgs[i];
        nlohmann::json o{{"role", m.role}, {"content", m.content}};
        if (!m.reasoning_content.empty()) o["reasoning_content"] = m.reasoning_content;
        if (!m.name.empty()) o["name"] = m.name;
        for (const auto& im : images[i]) o["images"].push_back(im->path);
        j["messages"].push_back(std::move(o));
    }
    return j;
}

// A message's "images": a list of file names, only on user messages.
std::vector<std::string> image_paths(const nlohmann::json& m, const std::string& role, const std::string& path) {
    std::vector<std::string> out;
    if (!m.contains("images")) return out;
    const auto& a = m["images"];
    if (!a.is_array()) fail("{}: a message's \"images\" must be a list of file names", path);
    if (!a.empty() && role != "user") fail("{}: only user messages can have images, not {}", path, role);
    for (const auto& p : a) out.push_back(p.get<std::string>());
    return out;
}

// {"system": ..., "messages": [...]} as /save writes it, or a bare message array. paths gets
// each message's image files.
void parse_conversation(const nlohmann::json& j, const std::string& path, std::string& system,
                        std::vector<text::ChatMessage>& msgs, std::vector<std::vector<std::string>>& paths) {
    const nlohmann::json* arr = j.is_array() ? &j : (j.is_object() && j.contains("messages") ? &j["messages"] : nullptr);
    if (!arr || !arr->is_array()) fail("{}: expected {{\"messages\": [...]}} as /save writes", path);
    if (j.is_object()) system = j.value("system", std::string());
    for (const auto& m : *arr) {
        if (!m.is_object() || !m.contains("role")) fail("{}: every message needs a \"role\"", path);
        text::ChatMessage cm{m["role"].get<std::string>(), m.value("content", std::string()),
                             m.value("reasoning_content", std::string()), m.value("name", std::string())};
        if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "tool")
            fail("{}: unknown role '{}'", path, cm.role);
        std::vector<std::string> images = image_paths(m, cm.role, path);
        if (cm.role == "system" && msgs.empty()) {
            system = cm.content;
            continue;
        }
        if (!images.empty()) {
            cm.content = vision::with_media_markers(cm.content, images.size());
            const size_t markers = vision::count_media_markers(cm.content);
            if (markers != images.size())
                fail("{}: message {} has {} {} marker(s) but {} image(s)", path, msgs.size() + 1, markers, vision::kMediaMarker,
                     images.size());
        }
        msgs.push_back(std::move(cm));
        paths.push_back(std::move(images));
    }
}

// Where the session holds each image's rows: [{"pos", "message", "image", "rows", "hash"}]
// (message and image index into the conversation).
nlohmann::json held_images_json(const std::vector<text::Token>& held, const std::vector<std::vector<ImageRef>>& images) {
    nlohmann::json out = nlohmann::json::array();
    for (size_t pos = 0; pos < held.size();) {
        if (!is_image_row(held[pos])) {
            ++pos;
            continue;
        }
        const int serial = image_serial(held[pos]);
        for (size_t m = 0; m < images.size(); ++m)
            for (size_t i = 0; i < images[m].size(); ++i)
                if (images[m][i]->serial == serial)
                    out.push_back({{"pos", pos}, {"message", m}, {"image", i}, {"rows", images[m][i]->n_rows},
                                   {"hash", images[m][i]->hash}});
        while (pos < held.size() && held[pos] == image_row_id(serial)) ++pos;
    }
    return out;
}

// The images encoded again must give the rows the saved state was computed from.
void check_held_images(const nlohmann::json& held, const std::vector<std::vector<ImageRef>>& images) {
    for (const auto& h : held) {
        const size_t m = h.at("message").get<size_t>(), i = h.at("image").get<size_t>();
        if (m >= images.size() || i >= images[m].size()) fail("its image rows name an image the conversation lacks");
        const ChatImage& im = *images[m][i];
        if (h.at("rows").get<int64_t>() != im.n_rows || h.at("hash").get<uint64_t>() != im.hash)
            fail("{} now encodes to other rows than when the chat was saved (the image or --mmproj changed)", im.path);
    }
}

// After loading: the session records image rows as -1; give each its image's placeholder.
void name_held_images(const nlohmann::json& held, const std::vector<std::vector<ImageRef>>& images,
                      std::vector<text::Token>& in_session) {
    for (const auto& h : held) {
        const size_t pos = h.at("pos").get<size_t>();
        const ChatImage& im = *images[h.at("message").get<size_t>()][h.at("image").get<size_t>()];
        const size_t end = pos + size_t(im.n_rows);
        if (end > in_session.size() || !std::all_of(in_session.begin() + std::ptrdiff_t(pos), in_session.begin() + std::ptrdiff_t(end),
                                                    [](text::Token id) { return id == -1; }))
            continue;   // left as -1: the next turn reads from there again
        std::fill(in_session.begin() + std::ptrdiff_t(pos), in_session.begin() + std::ptrdiff_t(end), image_row_id(im.serial));
    }
}

std::string dump(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

// An image of the conversation with the same file and the same rows is the same image: taking
// it keeps its serial, so the session's rows of it still stand after a /load (an edit then
// re-reads from the edit, not from the first image). Each held image is taken once: a serial
// names one place in the conversation.
ImageRef ChatRepl::same_image_held(const ImageRef& im, const std::vector<std::vector<ImageRef>>& taken) const {
    auto is_taken = [&](const ImageRef& h) {
        return std::any_of(taken.begin(), taken.end(), [&](const auto& l) { return std::find(l.begin(), l.end(), h) != l.end(); });
    };
    for (const auto& list : msg_images_)
        for (const auto& held : list)
            if (held->path == im->path && held->hash == im->hash && held->n_rows == im->n_rows && !is_taken(held)) return held;
    return im;
}

// Every image of a loaded conversation, encoded again; the errors name the chat file too.
std::vector<std::vector<ImageRef>> ChatRepl::encode_images(const std::vector<std::vector<std::string>>& paths,
                                                           const std::string& file) {
    std::vector<std::vector<ImageRef>> out;
    for (size_t i = 0; i < paths.size(); ++i) {
        out.emplace_back();
        if (!paths[i].empty() && !vision_)
            fail("{}: message {} has images; start kinfer chat with --mmproj FILE to read them", file, i + 1);
        for (const auto& p : paths[i]) {
            ImageRef im;
            try {
                im = vision_->encode(p);
            } catch (const kinfer::Error& e) {
                fail("{}: message {}: {}", file, i + 1, e.what());
            }
            out.back().push_back(same_image_held(im, out));
        }
    }
    return out;
}

void ChatRepl::save(const std::string& path) const {
    check_output_path(path, "/save");
    const nlohmann::json j = conversation_json(cfg_.format, system_, msgs_, msg_images_);
    write_text_file(path, "/save", [&](std::ostream& f) { f << dump(j, 2) << "\n"; });
}

void ChatRepl::load(const std::string& path) {
    std::string system;
    std::vector<text::ChatMessage> msgs;
    std::vector<std::vector<std::string>> paths;
    try {
        parse_conversation(nlohmann::json::parse(read_text_file(path)), path, system, msgs, paths);
    } catch (const nlohmann::json::exception& e) {
        fail("{}: not a saved chat ({})", path, e.what());
    }
    auto images = encode_images(paths, path);
    system_ = std::move(system);
    msgs_ = std::move(msgs);
    msg_images_ = std::move(images);
    // The session is brought in line on the next turn (prefix comparison).
}

void ChatRepl::save_state(const std::string& path) const {
    check_output_path(path, "/save-state");
    nlohmann::json j = conversation_json(cfg_.format, system_, msgs_, msg_images_);
    j["kinfer_chat_state"] = kChatStateVersion;
    j["image_rows"] = held_images_json(in_session_, msg_images_);
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
    std::vector<std::vector<ImageRef>> images;
    nlohmann::json held;
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
            std::vector<std::vector<std::string>> paths;
            parse_conversation(j, "its conversation", system, msgs, paths);
            images = encode_images(paths, "its conversation");
            held = j.value("image_rows", nlohmann::json::array());
            check_held_images(held, images);
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
    msg_images_ = std::move(images);
    sampler_ = std::move(sampler);
    in_session_ = session_.tokens();
    name_held_images(held, msg_images_, in_session_);
    snapshots_.clear();
    stopped_on_string_ = stopped;
    reply_start_ = std::min(reply_start, in_session_.size());
    if (format != text::chat_format_name(cfg_.format))
        notice(fmt::format("[saved with the {} chat format, this chat uses {}: the next turn reads the conversation again]",
                           format, text::chat_format_name(cfg_.format)));
}

}  // namespace kinfer::cli
