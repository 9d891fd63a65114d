// kinfer run: one-shot generation. The prompt comes from -p, -f, or stdin (`-` or a pipe),
// optionally wrapped in the model's chat format (--chat); tokens stream to stdout as they come
// and one timing line goes to stderr (or everything as one JSON object with --json).
#include "backend/cpu_backend.h"
#include "cli/command.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/cache_flags.h"
#include "cli/lib/generate.h"
#include "cli/lib/habits.h"
#include "cli/lib/prompt_text.h"
#include "cli/lib/split_session.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "model/session_file.h"
#include "vision/image_prompt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <span>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <unistd.h>

namespace kinfer::cli {

namespace {

struct RunArgs {
    GenArgs gen;
    std::string prompt, prompt_file, prompt_ids;
    std::string prompt_cache;   // --prompt-cache FILE
    bool prompt_given = false, chat = false, json = false, print_ids = false;
    vision::ImagePromptArgs vision;   // --mmproj, --image
    std::string image_rules = "llama.cpp";
};

std::string read_stdin() {
    std::string s{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
    if (std::cin.bad()) fail("reading the prompt from stdin failed");
    return s;
}

// The prompt text as typed (escapes and chat wrapping come later).
std::string prompt_text(const RunArgs& a, bool dash) {
    const int sources = int(a.prompt_given) + int(!a.prompt_file.empty()) + int(dash);
    if (sources > 1) fail("give the prompt one way: -p TEXT, -f FILE or - (stdin)");
    if (a.prompt_given) return a.prompt;
    if (!a.prompt_file.empty()) return read_text_file(a.prompt_file);   // as stdin: every byte, a last newline too
    if (dash || !isatty(STDIN_FILENO)) return read_stdin();
    fail("no prompt: pass -p TEXT, -f FILE, or pipe text on stdin");
}

void write_out(std::string_view s) {
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
}

int run(RunArgs& a, bool dash) {
    if (!a.chat && !a.gen.system_prompt.empty())
        usage_fail("-sys / --system-prompt needs --chat: the system prompt is part of the chat format");
    const std::string path = resolve_model_path(a.gen.model);
    if (!a.prompt_cache.empty()) check_output_path(a.prompt_cache, "--prompt-cache");
    resolve_seed(a.gen);
    // Read and check the prompt before loading a (possibly large) model.
    std::string prompt;
    if (a.prompt_ids.empty()) {
        prompt = prompt_text(a, dash);
        if (a.gen.escape) {
            process_escapes(prompt);
            process_escapes(a.gen.system_prompt);
        }
        check_utf8(prompt, "the prompt");
        check_utf8(a.gen.system_prompt, "the system prompt");
    }
    auto model = model::Model::load(path);
    lock_memory_if_asked();
    take_model_sampling(a.gen, model->file());
    if (habits().verbose)
        std::fprintf(stderr, "kinfer: model %s (%s), context %lld, batch %lld, seed %lld\n", path.c_str(),
                     model->describe().c_str(), (long long)a.gen.n_ctx, (long long)a.gen.n_batch, (long long)a.gen.sampling.seed);
    auto tok = text::Tokenizer::from_gguf(model->file());
    const size_t n_vocab = size_t(model->hparams().n_vocab);

    std::vector<text::Token> ids;
    std::optional<text::ChatFormat> format;
    text::ChatOptions chat_opts = chat_options(a.gen);
    if (!a.prompt_ids.empty()) {
        ids = read_token_ids(a.prompt_ids, n_vocab);
    } else {
        if (a.chat) {
            format = pick_chat_format(a.gen, *tok);
            std::vector<text::ChatMessage> msgs;
            if (!a.gen.system_prompt.empty()) msgs.push_back({"system", a.gen.system_prompt, "", ""});
            // Images without markers go in front of the user's text, inside the user message
            // (mtmd-cli's placement, and chat's), not in front of the whole chat rendering.
            msgs.push_back({"user", vision::with_media_markers(prompt, a.vision.images.size()), "", ""});
            prompt = text::render_chat(*format, msgs, chat_opts);
        }
        ids = tok->encode(prompt, /*parse_special=*/true);
    }
    // Images: encoded now, placed at the prompt's <__media__> markers (vision/media_prompt.h).
    std::optional<vision::ImagePrompt> media;
    if (!a.vision.images.empty()) {
        if (!a.prompt_ids.empty()) usage_fail("--image needs a text prompt (-p, -f or stdin), not --prompt-ids");
        backend::CpuBackend vision_be(a.gen.n_threads);
        a.vision.verbose = !habits().log_disable;
        a.vision.tower.moonshot_rules = a.image_rules == "moonshot";
        media = vision::prepare_image_prompt(a.vision, prompt, *tok, model->hparams().n_embd, vision_be);
        ids = media->text_tokens();
    }
    const int64_t n_prompt = media ? media->n_positions : int64_t(ids.size());
    if (n_prompt == 0) fail("the prompt is empty");
    if (n_prompt >= a.gen.n_ctx)
        fail("the prompt is {} tokens, which leaves no room in the context of {} tokens (-c)", n_prompt, a.gen.n_ctx);

    model::SessionOptions so;
    so.n_ctx = a.gen.n_ctx;
    so.n_batch = a.gen.n_batch;
    so.n_threads = a.gen.n_threads;
    so.cache_type = cache_type_of(a.gen.cache_type);
    auto devices = attach_experts(*model, a.gen.experts, so);
    auto split = attach_split(*model, so);
    model::Session session(*model, so);
    text::Sampler sampler(sampler_params(a.gen), n_vocab);
    for (text::Token id : ids) sampler.accept(id);   // the penalties see the prompt too (llama.cpp does)

    GenLimits lim;
    lim.n_predict = a.gen.n_predict;
    lim.ignore_eos = a.gen.ignore_eos;
    lim.delay_ms = a.gen.debug_token_delay_ms;
    lim.stops = a.gen.reverse_prompts;
    if (format) {
        for (auto& s : text::chat_stop_strings(*format)) lim.stops.push_back(s);
        lim.special = true;   // the channel markers are special tokens; ReplyStream hides them
        set_think_limits(lim, a.gen, *format, chat_opts, *tok);
    }

    const bool stream = !a.json && !a.print_ids;
    const bool tty = isatty(STDOUT_FILENO);
    std::string reasoning, response;
    ThinkingLine thinking_line(stream && !a.gen.show_think && !habits().log_disable);
    ReplyStream channels(format.value_or(text::ChatFormat::KimiK2), chat_opts.thinking,
                         [&](ReplyStream::Channel ch, std::string_view s) {
                             (ch == ReplyStream::Channel::Think ? reasoning : response) += s;
                             if (ch == ReplyStream::Channel::Think && stream && !a.gen.show_think) thinking_line.token();
                             if (ch == ReplyStream::Channel::Response) thinking_line.clear();
                             if (!stream || (ch == ReplyStream::Channel::Think && !a.gen.show_think)) return;
                             if (ch == ReplyStream::Channel::Think && tty) {
                                 write_out("\x1b[2m");
                                 write_out(s);
                                 write_out("\x1b[0m");
                             } else {
                                 write_out(s);
                             }
                         });

    Timings t;
    t.seed = a.gen.sampling.seed;
    if (media) {
        if (!a.prompt_cache.empty()) fail("--prompt-cache works on text prompts only (this one has images)");
        const auto t0 = std::chrono::steady_clock::now();
        vision::prefill_chunks(session, media->chunks, media->rows());
        t.prompt_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        t.n_prompt += n_prompt;
    } else {
        // --prompt-cache: a saved state whose tokens start the prompt replaces their prefill. A file
        // that cannot be used (damaged, another model or cache type) stops the run with its reason
        // and is left alone; one saved for another prompt is replaced.
        size_t reused = 0;
        if (!a.prompt_cache.empty() && std::filesystem::exists(a.prompt_cache)) {
            model::load_session_file(session, a.prompt_cache);
            const auto& saved = session.tokens();
            if (saved.size() <= ids.size() && std::equal(saved.begin(), saved.end(), ids.begin())) {
                reused = saved.size();
            } else {
                session.reset();
            }
            if (!habits().log_disable)
                std::fprintf(stderr, "kinfer: --prompt-cache %s: %zu of %zu prompt tokens reused\n", a.prompt_cache.c_str(),
                             reused, ids.size());
        }
        const size_t read = prefill_chunked(session, std::span(ids).subspan(reused), t);
        if (!a.prompt_cache.empty() && reused < ids.size() && reused + read == ids.size())
            model::save_session_file(session, a.prompt_cache);
    }
    const GenResult r = generate(session, sampler, *tok, lim, t, [&](std::string_view s) {
        if (format) channels.push(s);
        else if (stream) write_out(s);
    });
    if (format) channels.flush();
    thinking_line.clear();
    devices->finish();

    if (a.json) {
        nlohmann::json j;
        j["text"] = format ? response : r.text;
        if (format) j["reasoning"] = reasoning;
        j["generated_ids"] = r.ids;
        j["prompt_tokens"] = t.n_prompt;
        j["generated_tokens"] = t.n_gen;
        j["prompt_ms"] = t.prompt_s * 1e3;
        j["generation_ms"] = t.gen_s * 1e3;
        j["prompt_tps"] = t.prompt_s > 0 ? double(t.n_prompt) / t.prompt_s : 0.0;
        j["generation_tps"] = t.gen_s > 0 ? double(t.n_gen) / t.gen_s : 0.0;
        j["stop_reason"] = stop_reason_name(r.stop);
        j["seed"] = t.seed;
        if (format) j["think_tokens"] = r.think_tokens;
        if (r.stop == StopReason::StopString) j["stop_string"] = r.stop_string;
        j["model"] = path;
        // Generated bytes may be invalid UTF-8 (a random model can emit half a character).
        write_out(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
        return 0;
    }
    if (a.print_ids) {
        std::string line;
        for (size_t i = 0; i < r.ids.size(); ++i) line += (i ? " " : "") + std::to_string(r.ids[i]);
        write_out(line + "\n");
    } else if (tty) {
        write_out("\n");   // leave the shell prompt on its own line; pipes get the exact text
    }
    if (r.stop == StopReason::ContextFull)
        std::fprintf(stderr, "kinfer: context full (%lld tokens, -c); generation stopped\n", (long long)session.n_ctx());
    if (format && response.empty() && !reasoning.empty() && !a.gen.show_think)
        std::fprintf(stderr, "kinfer: the reply was %lld tokens of hidden thinking and no answer (--show-think shows it, "
                     "--reasoning-budget N closes it sooner)\n", (long long)r.think_tokens);
    if (r.think_closed_by_budget && !habits().log_disable)
        std::fprintf(stderr, "kinfer: thinking closed after %lld tokens (--reasoning-budget)\n", (long long)a.gen.reasoning_budget);
    if (!habits().log_disable) std::fprintf(stderr, "kinfer: %s\n", timing_line(t, r.stop).c_str());
    if (habits().verbose) {
        const std::string tuned = decode_tuning_summary();
        if (!tuned.empty()) std::fprintf(stderr, "kinfer: decode layout tuned on this run's steps: %s\n", tuned.c_str());
    }
    return 0;
}

std::function<int()> setup_run(CLI::App& app) {
    auto a = std::make_shared<RunArgs>();
    add_generation_flags(app, a->gen);
    add_split_flags(app);
    app.add_option("-p,--prompt", a->prompt, "prompt text")->each([a](const std::string&) { a->prompt_given = true; });
    app.add_option("-f,--file", a->prompt_file, "read the prompt from a file (its bytes as they are, like stdin)");
    app.add_flag("--chat", a->chat, "wrap the prompt in the model's chat format");
    app.add_option("--mmproj", a->vision.mmproj, "vision projector GGUF (llama.cpp's mmproj) for --image");
    app.add_option("--image", a->vision.images,
                   "image file for the next <__media__> marker of the prompt (repeatable, in order; no marker: before the prompt)");
    app.add_option("--image-rules", a->image_rules,
                   "llama.cpp (default: mtmd's kimik3 preprocessing and numerics) or moonshot (Moonshot's own: no upscaling, "
                   "bicubic, right/bottom padding, alpha on a chessboard, tower eps 2^-7, erf GELU, image wrapper tokens; docs/vision.md)")
        ->check(CLI::IsMember({"llama.cpp", "moonshot"}));
    app.add_flag("--json", a->json, "print one JSON object (text, token counts, timings, stop reason) instead of the text");
    app.add_flag("--print-ids", a->print_ids, "print the generated token ids instead of the text");
    // Debug: feed token ids directly (parity tests against llama.cpp's greedy runs).
    app.add_option("--prompt-ids", a->prompt_ids, "file of token ids to use as the raw prompt")->group("");
    app.add_option("--prompt-cache", a->prompt_cache,
                   "save the state after the prompt to FILE; a later run whose prompt starts with the saved one loads "
                   "it and reads only the rest");
    return [a, &app] { return run(*a, take_extras(app, a->gen)); };
}

}  // namespace

KINFER_COMMAND("run", "One-shot generation from -p, a prompt file or stdin", setup_run);

}  // namespace kinfer::cli
