// The `kinfer chat` conversation loop: reads lines, runs slash commands, and answers each user
// turn. The conversation lives in the session's state: every turn renders the whole conversation
// with the chat format, keeps what the session already holds when its text starts the new
// rendering, and prefills only the rest. A divergence (/regen, /system, a /load that shares a
// prefix) keeps the tokens whose text still starts the rendering and goes back to the nearest
// state snapshot at or before them (state_snapshots.h; KDA state cannot be rewound otherwise),
// re-reading only what follows it. /save-state and /load-state keep the whole chat (session
// state and conversation) in one --prompt-cache file (chat_files.cpp).
//
// Line input is abstract (LineReader) so the terminal editor (libedit, linked into the kinfer
// executable only) stays out of this library; make_plain_reader() serves pipes and builds
// without libedit.
#pragma once
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
    ChatRepl(model::Session& session, const text::Tokenizer& tok, ChatConfig cfg);
    // Runs until /exit, end of input or Ctrl-C at an empty prompt; returns the exit code.
    int run(LineReader& in);

    // Handles one complete input (a message or a /command); false when the chat should end.
    bool handle(const std::string& input);

    const ChatCounters& counters() const { return counters_; }
    const std::vector<text::ChatMessage>& messages() const { return msgs_; }
    const StateSnapshots& snapshots() const { return snapshots_; }

private:
    bool command(const std::string& name, const std::string& arg);
    void respond();   // answers the conversation, which ends with a user message
    void answer();    // respond() without the clean-up on errors
    std::vector<text::ChatMessage> conversation() const;
    // chat_files.cpp: /save and /load (the conversation as JSON), /save-state and /load-state.
    void save(const std::string& path) const;
    void load(const std::string& path);
    void save_state(const std::string& path) const;
    void load_state(const std::string& path);
    // How many of the session's tokens still stand: the longest run from the start whose text
    // starts `rendered`.
    size_t kept_prefix(const std::string& rendered) const;
    void notice(const std::string& s) const;
    void print_reply(ReplyStream::Channel ch, std::string_view s);
    void reset_session();

    model::Session& session_;
    const text::Tokenizer& tok_;
    ChatConfig cfg_;
    text::Sampler sampler_;
    std::string system_;
    std::vector<text::ChatMessage> msgs_;   // user / assistant turns (the system prompt apart)
    std::vector<text::Token> in_session_;   // exactly the tokens the session holds, in order
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
