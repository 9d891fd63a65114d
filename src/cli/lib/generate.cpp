#include "cli/lib/generate.h"

#include "backend/cpu/decode_tuner.h"

#include "cli/lib/cache_flags.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/habits.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "text/unicode.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <utility>
#include <unistd.h>

namespace kinfer::cli {

namespace fs = std::filesystem;
using text::Token;

// ---- flags ----

void add_generation_flags(CLI::App& app, GenArgs& a) {
    add_expert_flags(app, a.experts);
    app.add_option("-m,--model", a.model, "GGUF model (default: the shipped demo model models/kinfer-demo.gguf)");
    app.add_option("-n,--n-predict", a.n_predict,
                   "tokens to generate; -1: until end of generation or a full context (chat: the context bounds it)")
        ->capture_default_str()->check(int_in(-1, kMaxCtx));
    app.add_option("-c,--ctx-size", a.n_ctx, "context size in tokens")->capture_default_str()->check(int_in(1, kMaxCtx));
    app.add_option("-b,--batch-size", a.n_batch, "prefill chunk in tokens")->capture_default_str()->check(int_in(1, kMaxBatch));
    app.add_option("-t,--threads", a.n_threads, "threads (default: physical cores)")->check(int_in(1, kMaxThreads));
    add_cache_type_flag(app, a.cache_type);
    auto& s = a.sampling;
    // The defaults shown are llama.cpp's; a model whose GGUF recommends its own (general.sampling.*)
    // gets those instead where the flag is not given (take_model_sampling).
    app.add_option("--temp", s.temperature, "temperature; 0: greedy (unset: the model's general.sampling.temp if it has one)")->capture_default_str()->check(real_in(0, 100));
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens; 0: off (unset: the model's general.sampling.top_k if any)")->capture_default_str()->check(int_in(0, 1 << 30));
    app.add_option("--top-p", s.top_p, "nucleus sampling; 1: off (unset: the model's general.sampling.top_p if any)")->capture_default_str()->check(real_in(0, 1));
    app.add_option("--min-p", s.min_p, "drop tokens below min-p times the best one; 0: off (unset: the model's general.sampling.min_p if any)")->capture_default_str()->check(real_in(0, 1));
    app.add_option("--repeat-penalty", s.repeat_penalty, "penalise repeated tokens; 1: off (unset: the model's general.sampling.penalty_repeat if any)")->capture_default_str()
        ->check(real_in(0, 10, /*lo_open=*/true));
    app.add_option("--repeat-last-n", s.penalty_last_n, "tokens the penalties look back over; 0: off, -1: all (unset: the model's general.sampling.penalty_last_n if any)")
        ->capture_default_str()->check(int_in(-1, 1 << 30));
    app.add_option("--presence-penalty", s.presence_penalty, "subtracted once from every repeated token")->capture_default_str()
        ->check(real_in(-2, 2));
    app.add_option("--frequency-penalty", s.frequency_penalty, "subtracted per repetition")->capture_default_str()->check(real_in(-2, 2));
    app.add_option("--seed", s.seed, "random seed; -1: a random one (printed with the timing)")->capture_default_str()
        ->check(int_in(-1, 0xffffffffLL));
    app.add_option("--logit-bias", a.logit_bias, "TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043-inf bans a token)")
        ->allow_extra_args(false);
    app.add_option("-r,--reverse-prompt", a.reverse_prompts, "stop when the output contains this text (repeatable)")
        ->allow_extra_args(false);
    app.add_flag("--ignore-eos", a.ignore_eos, "do not stop at end-of-generation tokens");
    app.add_flag("--escape,!--no-escape", a.escape, "process escapes (\\n, \\t, \\xHH, ...) in prompts (default on)");
    app.add_option("--system-prompt", a.system_prompt, "system prompt for the chat format (also -sys TEXT)");
    app.add_option("--chat-template", a.chat_template, "chat format to use instead of the model's: kimi-k2 or kimi-k3");
    app.add_flag("--no-think", a.no_think, "Kimi K3: answer without the think channel");
    app.add_option("--think-effort", a.think_effort, "Kimi K3 thinking effort: low, high or max")->capture_default_str();
    app.add_flag("--show-think", a.show_think, "show the think channel (dimmed on a terminal)");
    app.add_option("--reasoning-budget", a.reasoning_budget,
                   "think tokens allowed before kinfer closes the think block and the answer starts; -1: no limit, 0: no thinking")
        ->capture_default_str()->check(int_in(-1, kMaxCtx));
    app.add_option("--debug-token-delay", a.debug_token_delay_ms, "milliseconds to pause after each token")->group("")
        ->check(int_in(0, 60000));
    app.allow_extras();   // -sys and a lone "-": see take_extras()
}

bool take_extras(CLI::App& app, GenArgs& a) {
    a.sampling_given = sampling_flags_given(app);
    const std::vector<std::string> extra = app.remaining();
    bool dash = false;
    for (size_t i = 0; i < extra.size(); ++i) {
        if (extra[i] == "-sys") {
            if (i + 1 >= extra.size()) usage_fail("-sys needs a value (the system prompt)");
            a.system_prompt = extra[++i];
        } else if (extra[i] == "-") {
            dash = true;
        } else if (!extra[i].empty() && extra[i][0] == '-') {
            usage_fail("unknown option '{}' (see kinfer {} --help)", extra[i], app.get_name());
        } else {
            usage_fail("unexpected argument '{}' (see kinfer {} --help)", extra[i], app.get_name());
        }
    }
    return dash;
}

// ---- inputs ----

std::vector<std::string> default_model_candidates() {
    std::vector<std::string> c;
    if (const char* env = std::getenv("KINFER_MODEL"); env && *env) c.emplace_back(env);
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path bin = exe.parent_path();
        c.push_back((bin / "kinfer-demo.gguf").string());                                                // beside the binary
        c.push_back((bin.parent_path() / "share" / "kinfer" / "models" / "kinfer-demo.gguf").string());  // a relocated install
    }
#ifdef KINFER_INSTALL_PREFIX
    c.push_back(std::string(KINFER_INSTALL_PREFIX) + "/share/kinfer/models/kinfer-demo.gguf");
#endif
#ifdef KINFER_SOURCE_DIR
    c.push_back(std::string(KINFER_SOURCE_DIR) + "/models/kinfer-demo.gguf");   // the build tree's checkout
#endif
    return c;
}

std::string resolve_model_path(const std::string& model) {
    if (!model.empty()) {
        check_input_file(model, "model");
        return model;
    }
    const std::vector<std::string> cands = default_model_candidates();
    if (const char* env = std::getenv("KINFER_MODEL"); env && *env) {
        check_input_file(env, "$KINFER_MODEL");   // set but wrong: say so rather than fall back silently
        return env;
    }
    std::error_code ec;
    std::string tried;
    for (const std::string& p : cands) {
        if (fs::is_regular_file(p, ec)) return fs::weakly_canonical(p, ec).string();
        tried += (tried.empty() ? "" : ", ") + p;
    }
    fail("no model: pass -m FILE or set KINFER_MODEL; the demo model kinfer-demo.gguf is not in any of: {}", tried);
}

void check_utf8(std::string_view s, std::string_view what) {
    for (size_t i = 0; i < s.size();) {
        const text::unicode::Char c = text::unicode::decode(s, i);
        if (c.cp == text::unicode::kInvalid)
            fail("{} is not valid UTF-8: byte 0x{:02x} at offset {}", what, unsigned(uint8_t(s[i])), i);
        i += c.len;
    }
}

std::vector<Token> read_token_ids(const std::string& path, size_t n_vocab) {
    check_input_file(path, "--prompt-ids");
    std::ifstream f(path);
    if (!f) fail("cannot open token id file '{}'", path);
    std::vector<Token> ids;
    long long v;
    while (f >> v) {
        if (v < 0 || size_t(v) >= n_vocab) fail("token id file '{}': id {} is outside the vocabulary (0..{})", path, v, n_vocab - 1);
        ids.push_back(Token(v));
    }
    if (!f.eof()) fail("token id file '{}': not a whitespace-separated list of integers", path);
    if (ids.empty()) fail("token id file '{}' holds no ids", path);
    return ids;
}

text::SamplerParams sampler_params(const GenArgs& a) {
    text::SamplerParams p = a.sampling;
    for (const std::string& b : a.logit_bias) {
        // TOKEN_ID, then the sign that starts the bias (llama.cpp's --logit-bias syntax).
        char* end = nullptr;
        errno = 0;
        const long id = std::strtol(b.c_str(), &end, 10);
        const bool sign_ok = end != b.c_str() && (*end == '+' || *end == '-');
        char* bend = nullptr;
        const float bias = sign_ok ? std::strtof(end, &bend) : 0.0f;
        if (!sign_ok || errno != 0 || bend == end || *bend != '\0' || id < 0 || id > INT32_MAX)
            fail("--logit-bias '{}': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS (e.g. 15043+1 or 15043-inf)", b);
        p.logit_bias.emplace_back(Token(id), bias);
    }
    return p;
}

text::ChatFormat pick_chat_format(const GenArgs& a, const text::Tokenizer& tok) {
    if (!a.chat_template.empty()) {
        if (auto f = text::chat_format_from_name(a.chat_template)) return *f;
        fail("unknown chat template '{}' (known: kimi-k2, kimi-k3)", a.chat_template);
    }
    if (auto f = text::detect_chat_format(tok.chat_template(), &tok)) return *f;
    fail("the model has no chat template kinfer recognises; pass --chat-template kimi-k2 or kimi-k3");
}

text::ChatOptions chat_options(const GenArgs& a) {
    text::ChatOptions o;
    o.add_generation_prompt = true;
    o.thinking = !a.no_think;
    o.thinking_effort = a.think_effort;
    if (o.thinking && o.thinking_effort != "low" && o.thinking_effort != "high" && o.thinking_effort != "max")
        fail("--think-effort must be low, high or max (got '{}')", a.think_effort);
    return o;
}

void take_model_sampling(GenArgs& a, const gguf::File& f) {
    std::string warnings;
    const std::string taken = apply_model_sampling(f, a.sampling_given, a.sampling, &warnings);
    for (size_t b = 0, e; b < warnings.size(); b = e + 1) {
        e = warnings.find('\n', b);
        if (e == std::string::npos) e = warnings.size();
        if (e > b) std::fprintf(stderr, "kinfer: warning: %.*s\n", int(e - b), warnings.c_str() + b);
    }
    if (!taken.empty() && habits().verbose) std::fprintf(stderr, "kinfer: sampling from the model: %s\n", taken.c_str());
}

void resolve_seed(GenArgs& a) {
    if (a.sampling.seed >= 0) return;
    std::random_device rd;
    a.sampling.seed = int64_t(rd() & 0x7fffffff);
}

void set_think_limits(GenLimits& lim, const GenArgs& a, text::ChatFormat format, const text::ChatOptions& opts,
                      const text::Tokenizer& tok) {
    if (format == text::ChatFormat::KimiK3) {
        lim.think_open = opts.thinking;
        lim.think_end = "<|close|>think<|sep|>";
        lim.close_think = tok.encode("<|close|>think<|sep|><|open|>response<|sep|>", /*parse_special=*/true);
    } else {
        lim.think_open = false;   // K2 opens <think> itself when it wants to; nothing to close up front
        lim.think_end = "</think>";
        lim.close_think = tok.encode("</think>", /*parse_special=*/true);
    }
    lim.think_budget = a.reasoning_budget;
}

// ---- held text at the end of generation ----

namespace {
// Text that generation ended inside a possible marker or stop string is held back; whether it is
// shown depends on how it starts. "<|" begins K3's special tokens (its channel markers and the
// chat stop strings): control, not text, so a held start of one is dropped. The rule holds for
// any stop string that starts so, a user's -r "<|..." included; every other tail is shown.
bool special_token_start(std::string_view held) { return held.rfind("<|", 0) == 0; }
}  // namespace

// ---- interrupts ----

namespace {
volatile std::sig_atomic_t g_interrupt = 0;
struct sigaction g_old_action;
int g_scopes = 0;

extern "C" void on_sigint(int) { g_interrupt = 1; }
}  // namespace

InterruptScope::InterruptScope() {
    g_interrupt = 0;
    if (g_scopes++ > 0) return;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;   // output writes resume; input loops poll interrupted() themselves
    sigaction(SIGINT, &sa, &g_old_action);
}

InterruptScope::~InterruptScope() {
    if (--g_scopes == 0) sigaction(SIGINT, &g_old_action, nullptr);
}

bool interrupted() { return g_interrupt != 0; }
void clear_interrupt() { g_interrupt = 0; }

// ---- generation ----

const char* stop_reason_name(StopReason r) {
    switch (r) {
        case StopReason::Eog: return "eog";
        case StopReason::Length: return "length";
        case StopReason::StopString: return "stop_string";
        case StopReason::ContextFull: return "context_full";
        case StopReason::Interrupted: return "interrupted";
    }
    return "?";
}

std::string timing_line(const Timings& t, StopReason r) {
    auto tps = [](int64_t n, double s) { return s > 0 ? double(n) / s : 0.0; };
    std::string line = fmt::format("prompt {} tokens, {:.2f} ms ({:.2f} t/s) | generated {} tokens, {:.2f} ms ({:.2f} t/s) | stop: {}",
                                   t.n_prompt, t.prompt_s * 1e3, tps(t.n_prompt, t.prompt_s), t.n_gen, t.gen_s * 1e3,
                                   tps(t.n_gen, t.gen_s), stop_reason_name(r));
    if (t.seed >= 0) line += fmt::format(" | seed {}", t.seed);
    return line;
}

ThinkingLine::ThinkingLine(bool enabled) : enabled_(enabled && isatty(STDERR_FILENO)) {}

void ThinkingLine::token() {
    ++n_;
    if (!enabled_ || (n_ % 8 != 1 && shown_)) return;
    std::fflush(stdout);
    std::fprintf(stderr, "\r\x1b[2m[thinking... %lld tokens]\x1b[0m\x1b[K", (long long)n_);
    std::fflush(stderr);
    shown_ = true;
}

void ThinkingLine::clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\x1b[K");
    std::fflush(stderr);
    shown_ = false;
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

size_t prefill_chunked(model::Session& s, std::span<const Token> tokens, Timings& t, int64_t cut_every,
                       const std::function<void()>& after_chunk) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t chunk = size_t(std::max<int64_t>(1, s.options().n_batch));
    const bool tty = isatty(STDERR_FILENO);
    bool shown = false;
    size_t done = 0;
    double prev_el = 0;
    while (done < tokens.size() && !interrupted()) {
        size_t n = std::min(chunk, tokens.size() - done);
        if (cut_every > 0) n = std::min(n, size_t(cut_every - s.n_past() % cut_every));
        s.prefill(tokens.subspan(done, n));
        done += n;
        if (after_chunk) after_chunk();
        const double el = seconds_since(t0);
        const double last_el = std::exchange(prev_el, el);
        if (tty && el > 2.0 && done < tokens.size()) {
            // Attention grows with the position, so later chunks are slower: the ETA uses the
            // speed of the last chunk, not the average.
            const double chunk_s = el - last_el, tps = chunk_s > 0 ? double(n) / chunk_s : 0.0;
            const double left = tps > 0 ? double(tokens.size() - done) / tps : 0.0;
            std::fprintf(stderr, "\r\x1b[2m[reading the prompt: %zu / %zu tokens, %.0f t/s, about %ds left; Ctrl-C stops]\x1b[0m\x1b[K",
                         done, tokens.size(), tps, int(left + 0.5));
            std::fflush(stderr);
            shown = true;
        }
    }
    if (shown) {
        std::fprintf(stderr, "\r\x1b[K");
        std::fflush(stderr);
    }
    t.n_prompt += int64_t(done);
    t.prompt_s += seconds_since(t0);
    return done;
}

namespace {

// One tuner for the process: chat's replies go on where the last one left off.
backend::cpu::DecodeTuner& decode_tuner() {
    static backend::cpu::DecodeTuner tuner = backend::cpu::DecodeTuner::for_this_machine();
    return tuner;
}

}  // namespace

std::string decode_tuning_summary() { return decode_tuner().summary(); }

GenResult generate(model::Session& s, text::Sampler& sampler, const text::Tokenizer& tok, const GenLimits& lim,
                   Timings& t, const std::function<void(std::string_view)>& on_text) {
    GenResult r;
    text::StreamDecoder dec(tok, lim.special);
    text::StopMatcher stops(lim.stops);
    auto emit = [&](const std::string& piece) {
        if (piece.empty()) return;
        r.text += piece;
        if (on_text) on_text(piece);
    };
    auto limit_reached = [&] { return lim.n_predict >= 0 && int64_t(r.ids.size()) >= lim.n_predict; };
    // Think-block tracking for --reasoning-budget: the decoded text since the block opened is
    // searched for its end marker (with special tokens shown, the marker is in the text).
    bool thinking = lim.think_open && !lim.think_end.empty();
    std::string think_tail;
    std::vector<Token> forced;   // the closing tokens still to feed, in order
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        if (limit_reached()) { r.stop = StopReason::Length; break; }
        if (interrupted()) { r.stop = StopReason::Interrupted; break; }
        if (thinking && lim.think_budget >= 0 && r.think_tokens >= lim.think_budget && forced.empty() && !lim.close_think.empty()) {
            forced.assign(lim.close_think.rbegin(), lim.close_think.rend());
            r.think_closed_by_budget = true;
        }
        Token id;
        if (!forced.empty()) {
            id = forced.back();
            forced.pop_back();
            if (forced.empty()) thinking = false;
        } else {
            id = sampler.sample(s.logits().data());
        }
        sampler.accept(id);
        if (!lim.ignore_eos && tok.is_eog(id)) { r.stop = StopReason::Eog; break; }
        r.ids.push_back(id);
        const std::string piece = dec.push(id);
        if (thinking) {
            ++r.think_tokens;
            think_tail += piece;
            if (think_tail.find(lim.think_end) != std::string::npos) thinking = false;
            else if (think_tail.size() > 4 * lim.think_end.size()) think_tail.erase(0, think_tail.size() - 2 * lim.think_end.size());
        }
        emit(stops.push(piece));
        if (stops.stopped()) {
            r.stop = StopReason::StopString;
            r.stop_string = stops.matched();
            break;
        }
        if (lim.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(lim.delay_ms));
        // Decide before decoding, so no work is spent on a token nobody will continue from.
        if (limit_reached()) { r.stop = StopReason::Length; break; }
        if (s.n_past() >= s.n_ctx()) { r.stop = StopReason::ContextFull; break; }
        if (interrupted()) { r.stop = StopReason::Interrupted; break; }
        backend::cpu::DecodeTuner& tuner = decode_tuner();
        tuner.before_step();
        const auto step0 = std::chrono::steady_clock::now();
        s.decode(id);
        tuner.after_step(seconds_since(step0));
        ++r.n_fed;
    }
    if (!stops.stopped()) {
        // The decoder's held-back bytes (an unfinished character) and the stop matcher's tail.
        emit(stops.push(dec.flush()));
        if (stops.stopped()) {
            r.stop = StopReason::StopString;
            r.stop_string = stops.matched();
        } else {
            // A held tail is the start of a stop string that generation ended inside (e.g. -n
            // stopped at K3's `<|close|>` before `message<|sep|>`).
            const std::string tail = stops.flush();
            if (!special_token_start(tail)) emit(tail);
        }
    }
    t.n_gen += int64_t(r.ids.size());
    t.gen_s += seconds_since(t0);
    return r;
}

// ---- chat channels ----

ReplyStream::ReplyStream(text::ChatFormat format, bool thinking, Sink sink) : sink_(std::move(sink)) {
    if (format == text::ChatFormat::KimiK3) {
        markers_ = {{"<|open|>think<|sep|>", Channel::Think},
                    {"<|close|>think<|sep|>", Channel::Response},
                    {"<|open|>response<|sep|>", Channel::Response},
                    {"<|close|>response<|sep|>", std::nullopt}};
        ch_ = thinking ? Channel::Think : Channel::Response;   // the generation prompt opened it
    } else {
        markers_ = {{"<think>", Channel::Think}, {"</think>", Channel::Response}};
        ch_ = Channel::Response;
    }
}

void ReplyStream::emit(std::string_view s) {
    if (!s.empty() && sink_) sink_(ch_, s);
}

void ReplyStream::push(std::string_view text) {
    held_ += text;
    for (;;) {
        size_t best = std::string::npos;
        const Marker* m = nullptr;
        for (const Marker& k : markers_) {
            const size_t at = held_.find(k.text);
            if (at < best) best = at, m = &k;
        }
        if (!m) break;
        emit(std::string_view(held_).substr(0, best));
        if (m->to) ch_ = *m->to;
        held_.erase(0, best + m->text.size());
    }
    // Hold back the longest tail that could still become a marker.
    size_t hold = 0;
    for (const Marker& k : markers_) {
        for (size_t n = std::min(k.text.size() - 1, held_.size()); n > hold; --n) {
            if (held_.compare(held_.size() - n, n, k.text, 0, n) == 0) {
                hold = n;
                break;
            }
        }
    }
    emit(std::string_view(held_).substr(0, held_.size() - hold));
    held_.erase(0, held_.size() - hold);
}

void ReplyStream::flush() {
    // What is held is the start of a marker that generation stopped inside (e.g. -n ended the
    // reply at K3's `<|close|>` before `response<|sep|>`). K2's markers are spelled like text.
    if (!special_token_start(held_)) emit(held_);
    held_.clear();
}

}  // namespace kinfer::cli
