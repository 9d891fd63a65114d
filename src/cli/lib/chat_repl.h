// The `kinfer chat` conversation loop: reads lines, runs slash commands, and answers each user
// turn. The conversation lives in the session's state: every turn renders the whole conversation
// with the chat format, keeps what the session already holds when its text starts the new
// rendering, and prefills only the rest. A divergence (/regen, /system, a /load that shares a
// prefix) keeps the tokens whose text still starts the rendering and goes back to the nearest
// state snapshot at or before them (state_snapshots.h; KDA state cannot be rewound otherwise),
// re-reading only what follows it. /save-state and /load-state keep the whole chat (session
// state and conversation) in one --prompt-cache file (chat_files.cpp). Images (--mmproj,
// /image FILE) belong to the user message they were attached to (chat_images.h).
//
// Line input is abstract (LineReader) so the terminal editor (libedit, linked into the kinfer
// executable only) stays out of this library; make_plain_reader() serves pipes and builds
// without libedit.
#pragma once
#include "cli/lib/chat_images.h"
#include "cli/lib/generate.h"
#include "cli/lib/state_snapshots.h"

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kinfer::cli {

class LineReader {
public:
    virtual ~LineReader() = default;
    // One line without its newline; nullopt ends the chat (end of input, or Ctrl-C on an empty
    // line).
    virtual std::optional<std::string> read_line(const std::string& prompt) = 0;
    virtual void add_history(const std::string& /*line*/) {}
};

// Reads stdin with poll() + read(), so a Ctrl-C (SIGINT, see InterruptScope) at the prompt ends
// the chat instead of waiting for Enter. Prints the prompt only when stdin is a terminal.
std::unique_ptr<LineReader> make_plain_reader();

struct ChatConfig {
    GenArgs args;
    text::ChatFormat format = text::ChatFormat::KimiK2;
    text::ChatOptions opts;
    bool color = false;   // ANSI dim for the think channel and notices, control bytes made visible
    int64_t snapshot_every = -1;   // --state-snapshot-every: -1 by memory (default_snapshot_every), 0 none
    std::string mmproj;               // --mmproj: the vision projector; empty: no images
    std::vector<std::string> images;  // --image: attached to the first user message
    bool moonshot_rules = false;      // --image-rules moonshot
};

// What the chat has read and how (for /stats and tests).
struct ChatCounters {
    int turns = 0;
    int full_reprefills = 0;      // edits that went back to position 0 (no snapshot before them)
    int resumes = 0;              // edits that went back to a snapshot
    int64_t prefilled = 0;        // tokens prefilled over the whole chat
    int64_t last_prefilled = 0;   // tokens prefilled for the last reply
    int64_t last_resume_pos = -1; // the snapshot position the last edit went back to (-1: none)
};

class ChatRepl {
public:
    // Loads --mmproj and encodes --image now (throws kinfer::Error naming a bad file).
    ChatRepl(model::Session& session, const text::Tokenizer& tok, ChatConfig cfg);
    // Runs until /exit, end of input or Ctrl-C at an empty prompt; returns the exit code.
    int run(LineReader& in);

    // Handles one complete input (a message or a /command); false when the chat should end.
    bool handle(const std::string& input);

    const ChatCounters& counters() const { return counters_; }
    const std::vector<text::ChatMessage>& messages() const { return msgs_; }
    const StateSnapshots& snapshots() const { return snapshots_; }
    const std::vector<std::vector<ImageRef>>& message_images() const { return msg_images_; }   // one list per message
    const std::vector<ImageRef>& pending_images() const { return pending_; }

private:
    bool command(const std::string& name, const std::string& arg);
    void respond();   // answers the conversation, which ends with a user message
    void answer();    // respond() without the clean-up on errors
    // The conversation as the chat format renders it: the system prompt first, each image's
    // markers as kImageSlot.
    std::vector<text::ChatMessage> conversation() const;
    // The rendering with every image slot wrapped in its media tokens, and the images in order.
    struct Rendering {
        std::string text;
        std::vector<ImageRef> images;
    };
    Rendering render() const;
    // The messages change only through these, which keep msg_images_ in step with msgs_.
    void add_user_message(std::string text);   // takes the pending images
    void push_message(text::ChatMessage m, std::vector<ImageRef> images = {});
    void unsend_last();   // drops the unanswered user message; its images are attached again
    void attach_image(const std::string& path);
    const ChatImage& image_of(const Rendering& r, int serial) const;
    // chat_files.cpp: /save and /load (the conversation as JSON), /save-state and /load-state.
    void save(const std::string& path) const;
    void load(const std::string& path);
    void save_state(const std::string& path) const;
    void load_state(const std::string& path);
    // The images of a loaded conversation, encoded again (file: the chat file, for the errors).
    ImageRef same_image_held(const ImageRef& im, const std::vector<std::vector<ImageRef>>& taken) const;
    std::vector<std::vector<ImageRef>> encode_images(const std::vector<std::vector<std::string>>& paths, const std::string& file);
    // How much of what the session holds still stands: the longest run from the start (at most
    // max_tokens) whose text starts the rendering, a held image counting where the rendering has
    // the same image.
    struct Kept {
        size_t tokens = 0;   // entries of in_session_
        size_t chars = 0;    // bytes of the rendering they cover
        size_t images = 0;   // images among them
    };
    Kept kept_prefix(const Rendering& r, size_t max_tokens) const;
    void notice(const std::string& s) const;
    void print_reply(ReplyStream::Channel ch, std::string_view s);
    void reset_session();

    model::Session& session_;
    const text::Tokenizer& tok_;
    ChatConfig cfg_;
    text::Sampler sampler_;
    std::string system_;
    std::vector<text::ChatMessage> msgs_;   // user / assistant turns (the system prompt apart)
    std::vector<std::vector<ImageRef>> msg_images_;   // each message's images, in the order of its markers
    std::vector<ImageRef> pending_;          // attached to the next user message
    std::unique_ptr<ChatImageEncoder> vision_;   // null without --mmproj
    // What the session holds, in order: token ids, image rows as image_row_id placeholders.
    std::vector<text::Token> in_session_;
    Timings last_;
    StopReason last_stop_ = StopReason::Length;
    ChatCounters counters_;
    StateSnapshots snapshots_;
    bool stopped_on_string_ = false;   // the last reply ended at a stop string (see answer())
    size_t reply_start_ = 0;           // in_session_ position where the last reply began
    bool at_line_start_ = true;
    bool in_dim_ = false;
};

}  // namespace kinfer::cli
