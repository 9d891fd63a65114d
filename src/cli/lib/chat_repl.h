// The `kinfer chat` conversation loop: reads lines, runs slash commands, and answers each user
// turn. The conversation lives in the session's state: every turn renders the whole conversation
// with the chat format, keeps what the session already holds when its text starts the new
// rendering, and prefills only the rest (a divergence, e.g. after /system or /regen, resets the
// session and prefills from the start: KDA state cannot be rewound).
//
// Line input is abstract (LineReader) so the terminal editor (libedit, linked into the kinfer
// executable only) stays out of this library; make_plain_reader() serves pipes and builds
// without libedit.
#pragma once
#include "cli/lib/generate.h"

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
};

class ChatRepl {
public:
    ChatRepl(model::Session& session, const text::Tokenizer& tok, ChatConfig cfg);
    // Runs until /exit, end of input or Ctrl-C at an empty prompt; returns the exit code.
    int run(LineReader& in);

    // Handles one complete input (a message or a /command); false when the chat should end.
    bool handle(const std::string& input);

private:
    bool command(const std::string& name, const std::string& arg);
    void respond();   // answers the conversation, which ends with a user message
    void answer();    // respond() without the clean-up on errors
    std::vector<text::ChatMessage> conversation() const;
    void save(const std::string& path) const;
    void load(const std::string& path);
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
    int turns_ = 0, reprefills_ = 0;
    bool stopped_on_string_ = false;   // the last reply ended at a stop string (see respond())
    bool at_line_start_ = true;
    bool in_dim_ = false;
};

}  // namespace kinfer::cli
