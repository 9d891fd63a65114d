#include "cli/lib/generate.h"

#include "common/error.h"
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
#include <thread>
#include <unistd.h>

namespace kinfer::cli {

namespace fs = std::filesystem;
using text::Token;

// ---- flags ----

void add_generation_flags(CLI::App& app, GenArgs& a) {
    app.add_option("-m,--model", a.model, "GGUF model (default: the shipped demo model models/kinfer-demo.gguf)");
    app.add_option("-n,--n-predict", a.n_predict, "tokens to generate; -1: until end of generation or a full context")
        ->capture_default_str();
    app.add_option("-c,--ctx-size", a.n_ctx, "context size in tokens")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("-b,--batch-size", a.n_batch, "prefill chunk in tokens")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_option("-t,--threads", a.n_threads, "threads (default: physical cores)");
    auto& s = a.sampling;
    app.add_option("--temp", s.temperature, "temperature; 0: greedy")->capture_default_str();
    app.add_option("--top-k", s.top_k, "keep the k most likely tokens; 0: off")->capture_default_str();
    app.add_option("--top-p", s.top_p, "nucleus sampling; 1: off")->capture_default_str();
    app.add_option("--min-p", s.min_p, "drop tokens below min-p times the best one; 0: off")->capture_default_str();
    app.add_option("--repeat-penalty", s.repeat_penalty, "penalise repeated tokens; 1: off")->capture_default_str();
    app.add_option("--repeat-last-n", s.penalty_last_n, "tokens the penalties look back over; 0: off, -1: all")
        ->capture_default_str();
    app.add_option("--presence-penalty", s.presence_penalty, "subtracted once from every repeated token")->capture_default_str();
    app.add_option("--frequency-penalty", s.frequency_penalty, "subtracted per repetition")->capture_default_str();
    app.add_option("--seed", s.seed, "random seed; -1: a random one")->capture_default_str();
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
    app.add_option("--debug-token-delay", a.debug_token_delay_ms, "milliseconds to pause after each token")->group("");
    app.allow_extras();   // -sys and a lone "-": see take_extras()
}

bool take_extras(CLI::App& app, GenArgs& a) {
    const std::vector<std::string> extra = app.remaining();
    bool dash = false;
    for (size_t i = 0; i < extra.size(); ++i) {
        if (extra[i] == "-sys") {
            if (i + 1 >= extra.size()) fail("-sys needs a value (the system prompt)");
            a.system_prompt = extra[++i];
        } else if (extra[i] == "-") {
            dash = true;
        } else {
            fail("unexpected argument '{}' (see --help)", extra[i]);
        }
    }
    return dash;
}

// ---- inputs ----

std::string resolve_model_path(const std::string& model) {
    if (!model.empty()) return model;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path bin = exe.parent_path();
        for (const fs::path& cand : {bin / ".." / ".." / "models" / "kinfer-demo.gguf",
                                     bin / ".." / "share" / "kinfer" / "models" / "kinfer-demo.gguf"}) {
            if (fs::is_regular_file(cand, ec)) return fs::weakly_canonical(cand, ec).string();
        }
    }
    fail("no model: pass -m FILE (the demo model models/kinfer-demo.gguf is not built yet)");
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
    return fmt::format("prompt {} tokens, {:.2f} ms ({:.2f} t/s) | generated {} tokens, {:.2f} ms ({:.2f} t/s) | stop: {}",
                       t.n_prompt, t.prompt_s * 1e3, tps(t.n_prompt, t.prompt_s), t.n_gen, t.gen_s * 1e3,
                       tps(t.n_gen, t.gen_s), stop_reason_name(r));
}

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

size_t prefill_chunked(model::Session& s, std::span<const Token> tokens, Timings& t) {
    const auto t0 = std::chrono::steady_clock::now();
    const size_t chunk = size_t(std::max<int64_t>(1, s.options().n_batch));
    size_t done = 0;
    while (done < tokens.size() && !interrupted()) {
        const size_t n = std::min(chunk, tokens.size() - done);
        s.prefill(tokens.subspan(done, n));
        done += n;
    }
    t.n_prompt += int64_t(done);
    t.prompt_s += seconds_since(t0);
    return done;
}

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
    const auto t0 = std::chrono::steady_clock::now();
    for (;;) {
        if (limit_reached()) { r.stop = StopReason::Length; break; }
        if (interrupted()) { r.stop = StopReason::Interrupted; break; }
        const Token id = sampler.sample(s.logits().data());
        sampler.accept(id);
        if (!lim.ignore_eos && tok.is_eog(id)) { r.stop = StopReason::Eog; break; }
        r.ids.push_back(id);
        emit(stops.push(dec.push(id)));
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
        s.decode(id);
        ++r.n_fed;
    }
    if (!stops.stopped()) {
        // The decoder's held-back bytes (an unfinished character) and the stop matcher's tail.
        emit(stops.push(dec.flush()));
        if (stops.stopped()) {
            r.stop = StopReason::StopString;
            r.stop_string = stops.matched();
        } else {
            emit(stops.flush());
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
    emit(held_);
    held_.clear();
}

}  // namespace kinfer::cli
