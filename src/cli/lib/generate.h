// Text generation shared by `kinfer run` and `kinfer chat`: the flags both accept, the prompt
// checks (UTF-8, length), prefill in interruptible chunks, the sample -> detokenize -> stop-string
// loop, and the one-line timing report. The data flow is DESIGN.md section 2's: tokens ->
// Session::prefill -> logits -> Sampler -> StreamDecoder -> StopMatcher -> the caller's sink.
#pragma once
#include "cli/lib/model_sampling.h"
#include "model/session.h"
#include "runtime/expert_flags.h"
#include "text/chat_template.h"
#include "text/sampler.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace CLI {
class App;
}

namespace kinfer::cli {

// Everything `run` and `chat` share, as parsed from the command line.
struct GenArgs {
    std::string model;                  // -m; empty: the shipped demo model
    int64_t n_predict = 128;            // -n; -1: until end of generation or a full context
    int64_t n_ctx = 4096;               // -c
    int64_t n_batch = 512;              // -b
    int n_threads = 0;                  // -t; 0: physical cores
    std::string cache_type = "f16";     // -ctk: the MLA latent cache type
    text::SamplerParams sampling;       // --temp, --top-k, ... (llama.cpp's defaults)
    SamplingGiven sampling_given;       // which of them the command line set (the model's own fill the rest)
    std::vector<std::string> logit_bias;   // "ID+BIAS" / "ID-BIAS" (BIAS may be inf)
    std::vector<std::string> reverse_prompts;   // -r: stop strings
    bool ignore_eos = false;
    bool escape = true;                 // process \n, \t, \xHH ... in prompts
    std::string system_prompt;          // -sys / --system-prompt
    std::string chat_template;          // --chat-template: override the detected format
    bool no_think = false;              // K3: answer without the think channel
    std::string think_effort = "max";   // K3: low, high, max
    bool show_think = false;            // show the think channel (dimmed on a terminal)
    int64_t reasoning_budget = -1;      // --reasoning-budget: think tokens before the think block is closed; -1: no limit
    int debug_token_delay_ms = 0;       // hidden test hook: pause after each token (see GenLimits)
    runtime::ExpertFlags experts;       // --device, -ngl, --cpu-moe, the expert store (cli/lib/expert_session.h)
};

// Declares the shared flags on a subcommand. `-sys TEXT` is llama.cpp's spelling, which CLI11
// cannot declare (one-dash names are one letter), so the subcommand accepts extras and
// take_extras() picks it up after parsing, together with a lone `-` (prompt from stdin).
void add_generation_flags(CLI::App& app, GenArgs& a);
// Applies the extras CLI11 left over; returns true when a lone "-" was given. Throws
// kinfer::Error on anything else it does not know.
bool take_extras(CLI::App& app, GenArgs& a);

// -m's value (checked to be a regular file), else the demo model kinfer-demo.gguf found in this
// order: $KINFER_MODEL, beside the executable, <exe>/../share/kinfer/models/, the configured
// install prefix's share/kinfer/models/, the source tree's models/. Throws kinfer::Error listing
// every path tried when there is none.
std::string resolve_model_path(const std::string& model);
std::vector<std::string> default_model_candidates();

// Throws kinfer::Error naming `what` and the byte offset of the first invalid UTF-8 sequence.
void check_utf8(std::string_view s, std::string_view what);

// Whitespace-separated token ids (the debug --prompt-ids input), each checked against n_vocab.
std::vector<text::Token> read_token_ids(const std::string& path, size_t n_vocab);

// The sampler settings with --logit-bias parsed (throws kinfer::Error on a malformed entry).
text::SamplerParams sampler_params(const GenArgs& a);

// The chat format: --chat-template when given (throws on an unknown name), else the one the
// model's template or vocabulary shows (throws when neither decides).
text::ChatFormat pick_chat_format(const GenArgs& a, const text::Tokenizer& tok);
text::ChatOptions chat_options(const GenArgs& a);

// The model's recommended sampling (general.sampling.*) for the settings the command line left
// at their defaults; a key kinfer cannot use is named in a warning on stderr, what was taken
// is printed with -v.
void take_model_sampling(GenArgs& a, const gguf::File& f);

// --seed -1: picks a random seed now and stores it, so the run can print it and be repeated.
void resolve_seed(GenArgs& a);

// SIGINT while generating: the handler only sets a flag that the loops below poll between
// tokens (and between prefill chunks), so an interrupted reply ends cleanly.
class InterruptScope {
public:
    InterruptScope();    // installs the handler, clears the flag
    ~InterruptScope();   // restores the previous handler
    InterruptScope(const InterruptScope&) = delete;
    InterruptScope& operator=(const InterruptScope&) = delete;
};
bool interrupted();
void clear_interrupt();

enum class StopReason { Eog, Length, StopString, ContextFull, Interrupted };
const char* stop_reason_name(StopReason r);

struct Timings {
    int64_t n_prompt = 0;   // tokens prefilled
    double prompt_s = 0;
    int64_t n_gen = 0;      // tokens generated
    double gen_s = 0;
    int64_t seed = -1;      // the sampler's seed (printed when >= 0)
};
// "prompt 64 tokens, 12.30 ms (5203.25 t/s) | generated 32 tokens, ... | stop: length | seed 42".
std::string timing_line(const Timings& t, StopReason r);

// Prefills tokens in chunks of the session's n_batch, stopping early after a chunk when
// interrupted() turns true. Returns how many tokens went in; adds the time to t. On a terminal
// (stderr), a prefill that takes more than about two seconds shows one progress line with an
// ETA, removed when it ends.
// cut_every > 0: chunks also end where the session's position is a multiple of it, and
// after_chunk runs after every chunk (chat keeps state snapshots there, state_snapshots.h).
size_t prefill_chunked(model::Session& s, std::span<const text::Token> tokens, Timings& t, int64_t cut_every = 0,
                       const std::function<void()>& after_chunk = {});

// "[thinking... 120 tokens]" on stderr while a hidden think channel runs, rewritten in place
// (terminals only), removed when the response starts.
class ThinkingLine {
public:
    explicit ThinkingLine(bool enabled);
    ~ThinkingLine() { clear(); }
    void token();   // one more hidden think token
    void clear();

private:
    bool enabled_;
    bool shown_ = false;
    int64_t n_ = 0;
};

struct GenLimits {
    int64_t n_predict = 128;             // -1: no limit but the context
    bool ignore_eos = false;
    std::vector<std::string> stops;      // stop strings (matched on the detokenized text)
    bool special = false;                // detokenize special tokens as their text
    int delay_ms = 0;                    // pause after each token: lets terminal tests interrupt a
                                         // reply of a tiny, fast model deterministically
    // --reasoning-budget: when the reply starts inside a think block (think_open) and it has not
    // closed after think_budget tokens, the tokens of close_think are fed instead of sampling.
    bool think_open = false;
    int64_t think_budget = -1;           // -1: no limit
    std::string think_end;               // the text that closes the block ("<|close|>think<|sep|>")
    std::vector<text::Token> close_think;   // what is fed to close it (and open the response)
};

struct GenResult {
    std::vector<text::Token> ids;   // generated tokens (without the end-of-generation token)
    size_t n_fed = 0;               // how many of ids went into the session (a prefix of ids)
    std::string text;               // what was emitted, stop string excluded
    StopReason stop = StopReason::Length;
    std::string stop_string;
    int64_t think_tokens = 0;       // tokens generated inside the think block
    bool think_closed_by_budget = false;
};

// Fills lim's think fields for a chat reply: the format's closing markers, the budget from the
// args, and whether the generation prompt opened a think block.
void set_think_limits(GenLimits& lim, const GenArgs& a, text::ChatFormat format, const text::ChatOptions& opts,
                      const text::Tokenizer& tok);

// Samples from the session's current logits until a limit; each piece of text that is safe to
// show (whole UTF-8 characters, not a possible start of a stop string) goes to on_text as it
// comes. Every emitted token except the last is decoded into the session; the last one is too
// unless generation stops right after it (so the session never runs past the context).
GenResult generate(model::Session& s, text::Sampler& sampler, const text::Tokenizer& tok, const GenLimits& lim,
                   Timings& t, const std::function<void(std::string_view)>& on_text);

// The CPU decode layout tuned on this process's first decode steps (backend/cpu/decode_tuner.h:
// generate() runs the tuner around every step): what was tried and kept, empty before any.
std::string decode_tuning_summary();

// Splits streamed chat output into its channels: K3's think / response channels and K2's
// <think>...</think>, hiding the markers themselves. A marker split across pushes is held
// back until it is decided.
class ReplyStream {
public:
    enum class Channel { Think, Response };
    using Sink = std::function<void(Channel, std::string_view)>;
    ReplyStream(text::ChatFormat format, bool thinking, Sink sink);
    void push(std::string_view text);
    void flush();
    Channel channel() const { return ch_; }

private:
    struct Marker {
        std::string text;
        std::optional<Channel> to;   // nullopt: hide only
    };
    void emit(std::string_view s);
    std::vector<Marker> markers_;
    Sink sink_;
    Channel ch_;
    std::string held_;
};

}  // namespace kinfer::cli
