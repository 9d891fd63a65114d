#include "cli/lib/chat_repl.h"

#include "cli/lib/prompt_text.h"
#include "common/error.h"
#include "common/text_file.h"
#include "vision/media_prompt.h"

#include <algorithm>
#include <cerrno>
#include <optional>
#include <poll.h>
#include <unistd.h>

namespace kinfer::cli {

namespace {

constexpr const char* kDim = "\x1b[2m";
constexpr const char* kReset = "\x1b[0m";

constexpr const char* kHelp =
    "  /exit            leave (also Ctrl-D, or Ctrl-C at an empty prompt)\n"
    "  /clear           forget the conversation (the system prompt stays)\n"
    "  /regen           answer the last message again\n"
    "  /read FILE       send a file's text as your message\n"
    "  /image FILE      attach an image to your next message (needs --mmproj): before its text, or at\n"
    "                   its <__media__> markers, one per image\n"
    "  /system TEXT     set the system prompt (empty TEXT removes it)\n"
    "  /save FILE       write the conversation as JSON\n"
    "  /load FILE       read a conversation written by /save\n"
    "  /save-state FILE write the whole chat: the conversation and the model's state after it\n"
    "  /load-state FILE continue a chat written by /save-state, without reading it again\n"
    "  /stats           context use, the last reply's speed, the decode layout tuned so far\n"
    "  /help            this list\n"
    "  A line ending in \\ continues on the next line; Ctrl-C stops a reply; //text sends /text.\n";

class PlainReader : public LineReader {
public:
    std::optional<std::string> read_line(const std::string& prompt) override {
        const bool tty = isatty(STDIN_FILENO);
        if (tty) {
            std::fputs(prompt.c_str(), stdout);
            std::fflush(stdout);
        }
        for (;;) {
            const size_t nl = buf_.find('\n');
            if (nl != std::string::npos) {
                std::string line = buf_.substr(0, nl);
                buf_.erase(0, nl + 1);
                if (!line.empty() && line.back() == '\r') line.pop_back();
                return line;
            }
            if (interrupted()) {   // Ctrl-C at the prompt: the terminal driver dropped the typed line
                clear_interrupt();
                if (tty) std::fputs("\n", stdout);
                return std::nullopt;
            }
            pollfd p{STDIN_FILENO, POLLIN, 0};
            const int rc = poll(&p, 1, 100);   // wakes up for SIGINT (EINTR) or after 100 ms
            if (rc <= 0) {
                if (rc < 0 && errno != EINTR) return std::nullopt;
                continue;
            }
            char tmp[4096];
            const ssize_t n = read(STDIN_FILENO, tmp, sizeof tmp);
            if (n < 0) {
                if (errno == EINTR || errno == EAGAIN) continue;
                return std::nullopt;
            }
            if (n == 0) {   // end of input: a last line without newline still counts
                if (buf_.empty()) return std::nullopt;
                std::string line;
                line.swap(buf_);
                return line;
            }
            buf_.append(tmp, size_t(n));
        }
    }

private:
    std::string buf_;
};

// Control bytes from a (possibly random) model would move the cursor or change colours; show
// them as U+FFFD on a terminal. Newlines and tabs are text.
std::string visible(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (char c : s) {
        const auto u = uint8_t(c);
        if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) out += "\xEF\xBF\xBD";
        else out += c;
    }
    return out;
}

bool starts_with(const std::string& s, std::string_view p) { return s.compare(0, p.size(), p) == 0; }

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
    return s;
}

// The media tokens an image is wrapped in must be special tokens of this vocabulary: otherwise
// their text would be read as ordinary words.
void check_media_tokens(const text::Tokenizer& tok, bool moonshot) {
    for (const char* t : {"<|media_begin|>", "<|media_end|>", "<|media_content|>"}) {
        if (!moonshot && std::string_view(t) == "<|media_content|>") continue;
        if (tok.find(t) == text::kNoToken) fail("the model's vocabulary has no {} token: it cannot take images", t);
    }
}

}  // namespace

std::unique_ptr<LineReader> make_plain_reader() { return std::make_unique<PlainReader>(); }

ChatRepl::ChatRepl(model::Session& session, const text::Tokenizer& tok, ChatConfig cfg)
    : session_(session), tok_(tok), cfg_(std::move(cfg)),
      sampler_(sampler_params(cfg_.args), size_t(session.model().hparams().n_vocab)),
      system_(cfg_.args.system_prompt),
      // --split sessions keep their states on other ranks too: no local snapshots there.
      snapshots_(session.options().split ? 0
                 : cfg_.snapshot_every < 0 ? default_snapshot_every(session)
                                            : cfg_.snapshot_every) {
    if (!cfg_.mmproj.empty()) {
        check_media_tokens(tok_, cfg_.moonshot_rules);
        vision_ = std::make_unique<ChatImageEncoder>(cfg_.mmproj, session.model().hparams().n_embd, cfg_.args.n_threads,
                                                     cfg_.moonshot_rules);
    } else if (!cfg_.images.empty()) {
        fail("--image needs the vision projector: pass --mmproj FILE");
    }
    for (const auto& path : cfg_.images) attach_image(path);
}

void ChatRepl::notice(const std::string& s) const {
    std::fflush(stdout);   // keep the order of reply text and notices on a shared terminal
    if (cfg_.color) std::fprintf(stderr, "%s%s%s\n", kDim, s.c_str(), kReset);
    else std::fprintf(stderr, "%s\n", s.c_str());
}

std::vector<text::ChatMessage> ChatRepl::conversation() const {
    std::vector<text::ChatMessage> all;
    if (!system_.empty()) all.push_back({"system", scrub_image_slots(system_), "", ""});
    for (size_t i = 0; i < msgs_.size(); ++i) {
        text::ChatMessage m = msgs_[i];
        m.content = scrub_image_slots(std::move(m.content));
        m.reasoning_content = scrub_image_slots(std::move(m.reasoning_content));
        // A message with images has exactly one marker per image (add_user_message, load); in
        // one without, a marker is text.
        if (!msg_images_[i].empty()) m.content = replace_all(std::move(m.content), vision::kMediaMarker, kImageSlot);
        all.push_back(std::move(m));
    }
    return all;
}

ChatRepl::Rendering ChatRepl::render() const {
    Rendering r;
    const std::string plain = text::render_chat(cfg_.format, conversation(), cfg_.opts);
    r.text = vision::expand_media_markers(plain, vision_ && vision_->moonshot_rules(), kImageSlot);
    for (const auto& list : msg_images_) r.images.insert(r.images.end(), list.begin(), list.end());
    if (vision::count_media_markers(r.text, kImageSlot) != r.images.size())
        fail("the {} chat format does not render every user message: its images have no place",
             text::chat_format_name(cfg_.format));
    return r;
}

const ChatImage& ChatRepl::image_of(const Rendering& r, int serial) const {
    for (const auto& im : r.images)
        if (im->serial == serial) return *im;
    fail("chat: image {} is held by the session but not in the conversation", serial);
}

void ChatRepl::push_message(text::ChatMessage m, std::vector<ImageRef> images) {
    msgs_.push_back(std::move(m));
    msg_images_.push_back(std::move(images));
}

void ChatRepl::unsend_last() {
    if (msgs_.empty() || msgs_.back().role != "user") return;
    // Its images go back in front of any attached since, so the message can be sent again.
    pending_.insert(pending_.begin(), msg_images_.back().begin(), msg_images_.back().end());
    msgs_.pop_back();
    msg_images_.pop_back();
}

void ChatRepl::add_user_message(std::string text) {
    if (!pending_.empty()) {
        text = vision::with_media_markers(text, pending_.size());
        const size_t markers = vision::count_media_markers(text);
        if (markers != pending_.size())
            fail("the message has {} {} marker(s) but {} image(s) are attached (/image); it was not sent", markers,
                 vision::kMediaMarker, pending_.size());
    }
    push_message({"user", std::move(text), "", ""}, std::move(pending_));
    pending_.clear();
}

void ChatRepl::attach_image(const std::string& path) {
    if (!vision_) fail("/image needs the vision projector: start kinfer chat with --mmproj FILE");
    ImageRef im = vision_->encode(path);
    notice(fmt::format("[image {}: {} x {}, {} tokens; it goes with your next message]", path, im->width, im->height,
                       im->n_rows));
    pending_.push_back(std::move(im));
}

void ChatRepl::reset_session() {
    session_.reset();
    in_session_.clear();
    snapshots_.clear();
    stopped_on_string_ = false;
    reply_start_ = 0;
}

int ChatRepl::run(LineReader& in) {
    for (;;) {
        std::optional<std::string> line = in.read_line("> ");
        if (!line) break;
        // A trailing backslash continues the message on the next line.
        while (!line->empty() && line->back() == '\\') {
            line->back() = '\n';
            std::optional<std::string> more = in.read_line(". ");
            if (!more) break;
            *line += *more;
        }
        if (line->find_first_not_of(" \t\n") == std::string::npos) continue;
        in.add_history(*line);
        try {
            if (!handle(*line)) break;
        } catch (const kinfer::Error& e) {
            // A bad /read path or a broken /load file ends that command, not the chat.
            notice(std::string("kinfer: error: ") + e.what());
        }
    }
    return 0;
}

bool ChatRepl::handle(const std::string& input) {
    if (starts_with(input, "/") && !starts_with(input, "//")) {
        const size_t sp = input.find_first_of(" \t");
        const size_t at = sp == std::string::npos ? sp : input.find_first_not_of(" \t", sp);
        const std::string name = input.substr(0, sp);
        const std::string arg = at == std::string::npos ? "" : input.substr(at);
        return command(name, arg);
    }
    std::string text = starts_with(input, "//") ? input.substr(1) : input;
    check_utf8(text, "the message");
    add_user_message(std::move(text));
    respond();
    return true;
}

void ChatRepl::respond() {
    try {
        answer();
    } catch (...) {
        // The session may hold part of a prefill that in_session_ does not know about: forget it
        // (the next turn prefills from the start) and drop the unanswered message.
        reset_session();
        unsend_last();
        throw;
    }
}

bool ChatRepl::command(const std::string& name, const std::string& arg) {
    if (name == "/exit" || name == "/quit") return false;
    if (name == "/help") {
        std::fflush(stdout);
        std::fputs(kHelp, stderr);
    } else if (name == "/clear") {
        msgs_.clear();
        msg_images_.clear();
        const size_t dropped = pending_.size();
        pending_.clear();
        reset_session();
        sampler_.reset();
        notice(dropped ? fmt::format("[conversation cleared, and the {} image(s) attached to the next message]", dropped)
                       : std::string("[conversation cleared]"));
    } else if (name == "/regen") {
        if (!msgs_.empty() && msgs_.back().role == "assistant") {
            msgs_.pop_back();
            msg_images_.pop_back();
        }
        if (msgs_.empty() || msgs_.back().role != "user") {
            notice("[nothing to regenerate]");
            return true;
        }
        respond();
    } else if (name == "/read") {
        if (arg.empty()) fail("/read needs a file name");
        std::string text = read_text_file(arg);
        check_utf8(text, arg);
        notice(fmt::format("[{}: {} bytes]", arg, text.size()));
        add_user_message(std::move(text));
        respond();
    } else if (name == "/image") {
        if (arg.empty()) fail("/image needs a file name");
        attach_image(arg);
    } else if (name == "/system") {
        check_utf8(arg, "the system prompt");
        system_ = arg;
        notice(arg.empty() ? "[system prompt removed]" : "[system prompt set]");
    } else if (name == "/save") {
        if (arg.empty()) fail("/save needs a file name");
        save(arg);
        notice(fmt::format("[saved {} messages to {}]", msgs_.size(), arg));
    } else if (name == "/load") {
        if (arg.empty()) fail("/load needs a file name");
        load(arg);
        notice(fmt::format("[loaded {} messages from {}]", msgs_.size(), arg));
    } else if (name == "/save-state") {
        if (arg.empty()) fail("/save-state needs a file name");
        save_state(arg);
        notice(fmt::format("[saved {} messages and {} tokens of state to {}]", msgs_.size(), in_session_.size(), arg));
    } else if (name == "/load-state") {
        if (arg.empty()) fail("/load-state needs a file name");
        load_state(arg);
        notice(fmt::format("[loaded {} messages and {} tokens of state from {}]", msgs_.size(), in_session_.size(), arg));
    } else if (name == "/stats") {
        const ChatCounters& c = counters_;
        notice(fmt::format("[context {} / {} tokens | {} turns | {} full re-prefills | {} from snapshots | format {}]",
                           in_session_.size(), session_.n_ctx(), c.turns, c.full_reprefills, c.resumes,
                           text::chat_format_name(cfg_.format)));
        notice(snapshots_.every() > 0
                   ? fmt::format("[state snapshots every {} tokens: {} kept, {:.1f} MiB]", snapshots_.every(),
                                 snapshots_.count(), double(snapshots_.bytes()) / (1 << 20))
                   : std::string("[state snapshots off: an edit re-reads the conversation from the start]"));
        if (c.turns > 0) notice("[last reply: " + timing_line(last_, last_stop_) + "]");
        // The decode tuner's layout and prefetch distance: tried so far, or kept once decided
        // (generate.cpp tunes them on the first ~20 decode steps, over the replies).
        if (const std::string tuned = decode_tuning_summary(); !tuned.empty()) notice("[decode layout: " + tuned + "]");
        if (!pending_.empty()) notice(fmt::format("[{} image(s) attached to your next message]", pending_.size()));
    } else {
        notice("[unknown command " + name + "; /help lists them]");
    }
    return true;
}

void ChatRepl::print_reply(ReplyStream::Channel ch, std::string_view s) {
    const bool think = ch == ReplyStream::Channel::Think;
    if (think && !cfg_.args.show_think) return;
    std::string out = cfg_.color ? visible(s) : std::string(s);
    if (cfg_.color && think != in_dim_) {
        out = (think ? kDim : kReset) + out;
        in_dim_ = think;
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    at_line_start_ = s.back() == '\n';
}

// How much of the session still stands: the longest run from the start whose text (special
// tokens as their text) starts the rendering; a held image stands where the rendering has the
// same image. A text token never covers part of an image slot.
ChatRepl::Kept ChatRepl::kept_prefix(const Rendering& r, size_t max_tokens) const {
    Kept k;
    const std::string& text = r.text;
    const size_t limit = std::min(max_tokens, in_session_.size());
    size_t slot = std::min(text.find(kImageSlot), text.size());
    while (k.tokens < limit) {
        const text::Token id = in_session_[k.tokens];
        if (is_image_row(id)) {
            size_t end = k.tokens;
            while (end < in_session_.size() && in_session_[end] == id) ++end;
            const bool same = k.chars == slot && k.images < r.images.size() && r.images[k.images]->serial == image_serial(id) &&
                              int64_t(end - k.tokens) == r.images[k.images]->n_rows && end <= limit;
            if (!same) break;
            k.tokens = end;
            k.chars += kImageSlot.size();
            ++k.images;
            slot = std::min(text.find(kImageSlot, k.chars), text.size());
            continue;
        }
        if (id < 0) break;   // rows of an image the chat cannot name (load_state)
        const std::string& p = tok_.piece(id);
        if (k.chars + p.size() > slot || text.compare(k.chars, p.size(), p) != 0) break;
        k.chars += p.size();
        ++k.tokens;
    }
    return k;
}

void ChatRepl::answer() {
    const Rendering rendered = render();
    // Keep the tokens the session holds as far as their text starts the new rendering, and
    // prefill only the rest. Comparing text rather than re-tokenising keeps the model's own reply
    // tokens (a sampled reply is rarely the canonical BPE of its text). After a stop string the
    // session may hold the start of that string as plain tokens where the rendering has a special
    // token: keep nothing of that reply.
    const Kept kept = kept_prefix(rendered, stopped_on_string_ ? reply_start_ : in_session_.size());
    const size_t keep = kept.tokens;
    // Going back (an edit, /regen): KDA state cannot drop tokens, so restart from the nearest
    // snapshot at or before the kept tokens (or from 0) and read the kept ones after it again.
    const model::Session::Snapshot* snap = keep < in_session_.size() ? snapshots_.at_or_before(int64_t(keep)) : nullptr;
    const size_t start = keep == in_session_.size() ? keep : snap ? size_t(snap->pos) : 0;
    std::vector<text::Token> fresh(in_session_.begin() + std::ptrdiff_t(start), in_session_.begin() + std::ptrdiff_t(keep));
    {
        const std::vector<text::Token> rest = tokenize_with_images(tok_, std::string_view(rendered.text).substr(kept.chars),
                                                                   std::span(rendered.images).subspan(kept.images));
        fresh.insert(fresh.end(), rest.begin(), rest.end());
    }
    const size_t total = start + fresh.size();
    if (int64_t(total) >= session_.n_ctx()) {
        unsend_last();   // leave the conversation as it was
        notice(fmt::format("[the conversation is {} tokens and does not fit the context of {} (-c); /clear starts over]",
                           total, session_.n_ctx()));
        return;
    }
    if (start < in_session_.size()) {
        if (snap) {
            session_.rewind(*snap);
            in_session_.resize(start);
            snapshots_.drop_after(int64_t(start));
            ++counters_.resumes;
            counters_.last_resume_pos = int64_t(start);
        } else {
            reset_session();
            ++counters_.full_reprefills;
            counters_.last_resume_pos = 0;
        }
    }
    // A snapshot to go back to if Ctrl-C stops the prefill: the cancelled message is then
    // dropped and the session is as it was, so nothing is re-read on the next turn. It holds
    // only the KDA + conv states: the latent rows before it stay in the cache. Kept afterwards
    // as the turn's start (an edit of this message goes back there, not before the last reply).
    std::optional<model::Session::Snapshot> before;
    const size_t held_before = in_session_.size();
    if (!in_session_.empty() && !session_.options().split) before = session_.snapshot();

    Timings t;
    t.seed = cfg_.args.sampling.seed;
    InterruptScope guard;
    const size_t fed = prefill_with_images(
        session_, fresh, [&](int serial) -> const ChatImage& { return image_of(rendered, serial); }, t, snapshots_.every(),
        [&] { snapshots_.after_chunk(session_); });
    in_session_.insert(in_session_.end(), fresh.begin(), fresh.begin() + std::ptrdiff_t(fed));
    counters_.prefilled += int64_t(fed);
    counters_.last_prefilled = int64_t(fed);

    if (fed < fresh.size()) {   // Ctrl-C while reading the message: as if it was never sent
        if (before) {
            session_.rewind(*before);
            in_session_.resize(held_before);
            snapshots_.drop_after(int64_t(held_before));
        } else {
            reset_session();
        }
        unsend_last();
        clear_interrupt();
        notice(pending_.empty() ? "[interrupted while reading your message; it was not sent]"
                                : "[interrupted while reading your message; it was not sent, its images stay attached]");
        return;
    }
    snapshots_.end_of_prompt(std::move(before), session_);
    reply_start_ = in_session_.size();
    for (text::Token id : fresh)
        if (id >= 0) sampler_.accept(id);   // text only, as run does with an image prompt

    GenResult r;
    ThinkingLine thinking_line(!cfg_.args.show_think && isatty(STDOUT_FILENO));
    {
        GenLimits lim;
        lim.n_predict = cfg_.args.n_predict;
        lim.ignore_eos = cfg_.args.ignore_eos;
        lim.delay_ms = cfg_.args.debug_token_delay_ms;
        lim.stops = text::chat_stop_strings(cfg_.format);
        for (const auto& s : cfg_.args.reverse_prompts) lim.stops.push_back(s);
        lim.special = true;   // channel markers are special tokens; ReplyStream hides them
        set_think_limits(lim, cfg_.args, cfg_.format, cfg_.opts, tok_);
        ReplyStream view(cfg_.format, cfg_.opts.thinking, [&](ReplyStream::Channel ch, std::string_view s) {
            if (ch == ReplyStream::Channel::Think && !cfg_.args.show_think) thinking_line.token();
            else thinking_line.clear();
            print_reply(ch, s);
        });
        at_line_start_ = true;
        r = generate(session_, sampler_, tok_, lim, t, [&](std::string_view s) { view.push(s); });
        view.flush();
        thinking_line.clear();
        in_session_.insert(in_session_.end(), r.ids.begin(), r.ids.begin() + std::ptrdiff_t(r.n_fed));
    }
    if (in_dim_) {
        std::fputs(kReset, stdout);
        in_dim_ = false;
    }
    if (!at_line_start_) std::fputs("\n", stdout);
    std::fflush(stdout);
    clear_interrupt();

    // The partial reply of an interrupted turn is kept: the conversation stays consistent.
    const text::ChatReply reply = text::split_reply(cfg_.format, r.text, cfg_.opts.thinking);
    push_message({"assistant", reply.response, reply.reasoning, ""});
    last_ = t;
    last_stop_ = r.stop;
    stopped_on_string_ = r.stop == StopReason::StopString;
    ++counters_.turns;
    if (r.stop == StopReason::Interrupted) notice("[interrupted]");
    else if (r.stop == StopReason::ContextFull && reply.response.empty() && r.think_tokens > 0 && !cfg_.args.show_think)
        notice(fmt::format("[the context of {} tokens (-c) filled up while the model was thinking ({} hidden tokens, no answer); "
                           "--reasoning-budget N closes thinking sooner, --show-think shows it; /clear starts over]",
                           session_.n_ctx(), r.think_tokens));
    else if (r.stop == StopReason::ContextFull)
        notice(fmt::format("[reply stopped: the context of {} tokens (-c) is full; /clear starts over, -c sets a larger one]",
                           session_.n_ctx()));
    if (r.think_closed_by_budget) notice(fmt::format("[thinking closed after {} tokens (--reasoning-budget)]", cfg_.args.reasoning_budget));
}

}  // namespace kinfer::cli
