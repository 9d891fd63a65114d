// kinfer perplexity: llama-perplexity's method and numbers. The text is tokenized whole, cut into
// non-overlapping windows of n_ctx tokens, each window is evaluated from an empty state, and
// only the second half of each window is scored (the model always has context). With
// --kl-divergence-base the base model's log-probabilities are saved; a second run with
// --kl-divergence compares another model against them.
#include "cli/command.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/cache_flags.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/kld_file.h"
#include "cli/lib/perplexity_stats.h"
#include "cli/lib/prompt_text.h"
#include "cli/lib/split_session.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "model/session.h"
#include "text/tokenizer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <unistd.h>

namespace kinfer::cli {

namespace {

struct PplArgs {
    std::string model, file, kld_base;
    bool kld = false, json = false, no_escape = false;
    int64_t n_ctx = 512, n_batch = 512;
    runtime::ExpertFlags experts;   // --device, -ngl, --cpu-moe, the expert store
    int chunks = -1, threads = 0;
    std::string cache_type = "f32";   // exact by default, as the golden comparisons run
};

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// "ETA 1m05s" on stderr, rewritten in place when stderr is a terminal.
void progress(int done, int total, double elapsed) {
    if (!isatty(STDERR_FILENO) || done == 0) return;
    const double left = elapsed / done * (total - done);
    std::fprintf(stderr, "\r\033[Kperplexity: chunk %d/%d, %.1fs elapsed, about %dm%02ds left", done, total, elapsed,
                 int(left) / 60, int(left) % 60);
    if (done == total) std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
}

// Evaluates one window from an empty state; returns the logits of positions first..n_ctx-2.
const float* eval_window(model::Session& s, const int32_t* toks, int64_t n_ctx, int64_t first, std::vector<float>& buf) {
    s.reset();
    buf.clear();
    s.prefill(std::span<const int32_t>(toks, size_t(n_ctx)), &buf);
    return buf.data() + size_t(first) * s.model().hparams().n_vocab;
}

int run_perplexity(const PplArgs& a) {
    // With --json, stdout carries exactly one JSON document; the human-readable lines go to stderr.
    std::FILE* out = a.json ? stderr : stdout;
    check_input_file(a.model, "perplexity: model");
    if (!a.file.empty()) check_input_file(a.file, "perplexity: -f");
    if (!a.kld && !a.kld_base.empty()) check_output_path(a.kld_base, "perplexity: --kl-divergence-base");
    else if (!a.kld_base.empty()) check_input_file(a.kld_base, "perplexity: --kl-divergence-base");
    auto model = model::Model::load(a.model);
    auto tok = text::Tokenizer::from_gguf(model->file());
    const int n_vocab = int(model->hparams().n_vocab);
    const int64_t n_ctx = a.n_ctx;
    if (n_ctx < 4) fail("-c must be at least 4 (got {})", n_ctx);
    const bool kld_mode = a.kld;
    if (kld_mode && a.kld_base.empty()) fail("--kl-divergence needs --kl-divergence-base FILE (the base model's saved log-probabilities)");

    std::unique_ptr<ppl::KldReader> base;
    std::vector<int32_t> tokens;
    int n_chunk = 0;
    if (kld_mode) {
        base = std::make_unique<ppl::KldReader>(a.kld_base);
        if (int(base->n_vocab) != n_vocab)
            fail("{}: saved with a vocabulary of {} tokens, this model has {}", a.kld_base, base->n_vocab, n_vocab);
        if (int64_t(base->n_ctx) != n_ctx)
            fail("{}: saved with -c {}, this run uses -c {}: use the same context", a.kld_base, base->n_ctx, n_ctx);
        tokens = base->tokens;
        n_chunk = int(base->n_chunk);
        if (!a.file.empty()) {
            std::string text = read_prompt_file(a.file);
            if (!a.no_escape) process_escapes(text);
            auto mine = tok->encode(text, /*parse_special=*/false);
            mine.resize(std::min(mine.size(), tokens.size()));
            if (ppl::hash_tokens(mine) != base->tokens_hash)
                fail("{}: its token stream does not match {} tokenized with this model (different text or tokenizer)", a.kld_base, a.file);
        }
    } else {
        if (a.file.empty()) fail("-f FILE is required: the text to evaluate");
        std::string text = read_prompt_file(a.file);
        if (!a.no_escape) process_escapes(text);
        tokens = tok->encode(text, /*parse_special=*/false);
        if (int64_t(tokens.size()) < 2 * n_ctx)
            fail("{} tokenizes to {} tokens; perplexity with -c {} needs at least {}", a.file, tokens.size(), n_ctx, 2 * n_ctx);
        n_chunk = int(int64_t(tokens.size()) / n_ctx);
        if (a.chunks >= 0) n_chunk = std::min(n_chunk, a.chunks);
        tokens.resize(size_t(n_chunk * n_ctx));
    }
    // A vocabulary that asks for BOS gets it in place of each window's first token.
    const auto probe = tok->encode("", /*parse_special=*/false);
    const bool add_bos = !probe.empty() && probe.front() == tok->bos();
    const int64_t first = n_ctx / 2;
    const int64_t n_scored = n_ctx - 1 - first;

    model::SessionOptions so;
    so.n_ctx = n_ctx;
    so.n_batch = a.n_batch;
    so.n_threads = a.threads;
    so.cache_type = cache_type_of(a.cache_type);
    auto devices = attach_experts(*model, a.experts, so);
    auto split = cli::attach_split(*model, so);
    model::Session s(*model, so);

    std::unique_ptr<ppl::KldWriter> writer;
    if (!kld_mode && !a.kld_base.empty())
        writer = std::make_unique<ppl::KldWriter>(a.kld_base, uint32_t(n_ctx), uint32_t(n_vocab), uint32_t(n_chunk), tokens);
    const size_t rec_u16 = ppl::base_record_u16(n_vocab);
    std::vector<uint16_t> recs(size_t(n_scored) * rec_u16);

    std::fprintf(stderr, "perplexity: %s, %zu tokens, %d chunks of %lld, batch %lld, %d threads\n", a.model.c_str(),
                 tokens.size(), n_chunk, (long long)n_ctx, (long long)a.n_batch, s.n_threads());
    if (kld_mode)
        std::fprintf(out, "\nchunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              Δp RMS            Same top p\n");

    ppl::NllAccumulator acc;
    ppl::KldAccumulator kacc;
    std::vector<float> buf;
    std::vector<int32_t> window(static_cast<size_t>(n_ctx), 0);
    std::vector<double> chunk_ppl;
    const auto t0 = Clock::now();
    for (int c = 0; c < n_chunk; ++c) {
        std::copy_n(tokens.begin() + c * n_ctx, n_ctx, window.begin());
        if (add_bos) window[0] = tok->bos();
        const float* lg = eval_window(s, window.data(), n_ctx, first, buf);
        const int32_t* next = tokens.data() + c * n_ctx + first + 1;
        if (kld_mode) {
            base->read_records(recs.data(), recs.size());
            for (int64_t i = 0; i < n_scored; ++i) kacc.add(lg + size_t(i) * n_vocab, n_vocab, next[i], recs.data() + i * rec_u16);
            const auto lp = ppl::mean_and_uncertainty(kacc.sum_nll, kacc.sum_nll2, kacc.count);
            const auto lb = ppl::mean_and_uncertainty(kacc.sum_nll_base, kacc.sum_nll_base2, kacc.count);
            const double cov = ppl::covariance(kacc.sum_nll, kacc.sum_nll_base, kacc.sum_nll_nll_base, kacc.count);
            const auto kl = ppl::mean_and_uncertainty(kacc.sum_kld, kacc.sum_kld2, kacc.count);
            const auto pd = ppl::mean_and_uncertainty(kacc.sum_p_diff2, kacc.sum_p_diff4, kacc.count);
            const double rms = std::sqrt(pd.mean);
            const double top = double(kacc.n_same_top) / double(kacc.count);
            std::fprintf(out, "%4d    %9.4f ± %9.4f    %10.5f ± %10.5f    %10.5f ± %10.5f    %6.3f ± %6.3f %%    %6.3f ± %6.3f %%\n",
                        c + 1, std::exp(lp.mean), std::exp(lp.mean) * lp.err, lp.mean - lb.mean,
                        std::sqrt(lp.err * lp.err + lb.err * lb.err - 2 * cov), kl.mean, kl.err, 100 * rms,
                        rms > 0 ? 100 * 0.5 / rms * pd.err : 0.0, 100 * top,
                        100 * std::sqrt(top * (1 - top) / double(kacc.count - 1)));
            chunk_ppl.push_back(std::exp(lp.mean));
        } else {
            for (int64_t i = 0; i < n_scored; ++i) {
                const float* row = lg + size_t(i) * n_vocab;
                acc.add(writer ? ppl::encode_base(row, n_vocab, next[i], recs.data() + i * rec_u16)
                               : ppl::token_nll(row, n_vocab, next[i]));
            }
            if (writer) writer->write_records(recs.data(), recs.size());
            std::fprintf(out, "[%d]%.4f,", c + 1, acc.ppl());
            chunk_ppl.push_back(acc.ppl());
        }
        std::fflush(out);
        progress(c + 1, n_chunk, seconds_since(t0));
    }
    std::fprintf(out, "\n");
    const double secs = seconds_since(t0);
    const double tps = double(n_chunk) * double(n_ctx) / secs;
    if (writer) writer->finish();
    devices->finish();

    nlohmann::json js;
    js["model"] = a.model;
    js["n_ctx"] = n_ctx;
    js["chunks"] = n_chunk;
    js["seconds"] = secs;
    js["tokens_per_second"] = tps;
    js["chunk_ppl"] = chunk_ppl;
    if (!kld_mode) {
        const double p = acc.ppl(), e = acc.ppl_uncertainty();
        std::fprintf(stderr, "Final estimate: PPL = %.4f +/- %.5f\n", p, e);
        std::fprintf(stderr, "perplexity: %zu tokens scored, %lld evaluated in %.2f s (%.1f tokens/s)\n", acc.count,
                     (long long)(n_chunk * n_ctx), secs, tps);
        js["ppl"] = p;
        js["ppl_error"] = e;
        js["tokens_scored"] = acc.count;
    } else {
        auto& k = kacc;
        std::sort(k.kld_values.begin(), k.kld_values.end());
        std::sort(k.p_diff_values.begin(), k.p_diff_values.end());
        const auto lp = ppl::mean_and_uncertainty(k.sum_nll, k.sum_nll2, k.count);
        const auto lb = ppl::mean_and_uncertainty(k.sum_nll_base, k.sum_nll_base2, k.count);
        const double cov = ppl::covariance(k.sum_nll, k.sum_nll_base, k.sum_nll_nll_base, k.count);
        const auto kl = ppl::mean_and_uncertainty(k.sum_kld, k.sum_kld2, k.count);
        const auto pdm = ppl::mean_and_uncertainty(k.sum_p_diff2, k.sum_p_diff4, k.count);
        const auto pd = ppl::mean_and_uncertainty(k.sum_p_diff, k.sum_p_diff2, k.count);
        const double top = double(k.n_same_top) / double(k.count);
        const double ppl_q = std::exp(lp.mean), ppl_b = std::exp(lb.mean);
        std::fprintf(out, "====== Perplexity statistics ======\n");
        std::fprintf(out, "Mean PPL(Q)                   : %10.6f ± %10.6f\n", ppl_q, ppl_q * lp.err);
        std::fprintf(out, "Mean PPL(base)                : %10.6f ± %10.6f\n", ppl_b, ppl_b * lb.err);
        std::fprintf(out, "Cor(ln(PPL(Q)), ln(PPL(base))): %6.2f%%\n", 100.0 * cov / (lp.err * lb.err));
        const double lr = lp.mean - lb.mean, lr_err = std::sqrt(lp.err * lp.err + lb.err * lb.err - 2 * cov);
        std::fprintf(out, "Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", lr, lr_err);
        std::fprintf(out, "Mean PPL(Q)/PPL(base)         : %10.6f ± %10.6f\n", std::exp(lr), std::exp(lr) * lr_err);
        const double ppl_q_err = ppl_q * lp.err, ppl_b_err = ppl_b * lb.err;
        std::fprintf(out, "Mean PPL(Q)-PPL(base)         : %10.6f ± %10.6f\n\n", ppl_q - ppl_b,
                    std::sqrt(ppl_q_err * ppl_q_err + ppl_b_err * ppl_b_err - 2 * ppl_q * ppl_b * cov));
        std::fprintf(out, "====== KL divergence statistics ======\n");
        std::fprintf(out, "Mean    KLD: %10.6f ± %10.6f\n", kl.mean, kl.err);
        std::fprintf(out, "Maximum KLD: %10.6f\n", k.kld_values.back());
        const std::pair<const char*, float> pts[] = {{"99.9%", 0.999f}, {"99.0%", 0.99f}, {"95.0%", 0.95f}, {"90.0%", 0.9f}};
        for (auto [name, f] : pts) std::fprintf(out, "%-6s  KLD: %10.6f\n", name, ppl::percentile(k.kld_values, f));
        std::fprintf(out, "Median  KLD: %10.6f\n", ppl::median(k.kld_values));
        const std::pair<const char*, float> lows[] = {{"10.0%", 0.1f}, {" 5.0%", 0.05f}, {" 1.0%", 0.01f}, {" 0.1%", 0.001f}};
        for (auto [name, f] : lows) std::fprintf(out, "%-6s  KLD: %10.6f\n", name, ppl::percentile(k.kld_values, f));
        std::fprintf(out, "Minimum KLD: %10.6f\n\n", k.kld_values.front());
        std::fprintf(out, "====== Token probability statistics ======\n");
        std::fprintf(out, "Mean    Δp: %6.3f ± %5.3f %%\n", 100 * pd.mean, 100 * pd.err);
        std::fprintf(out, "Maximum Δp: %6.3f%%\n", 100 * k.p_diff_values.back());
        std::fprintf(out, "Median  Δp: %6.3f%%\n", 100 * ppl::median(k.p_diff_values));
        std::fprintf(out, "Minimum Δp: %6.3f%%\n", 100 * k.p_diff_values.front());
        std::fprintf(out, "RMS Δp    : %6.3f ± %5.3f %%\n", 100 * std::sqrt(pdm.mean), pdm.mean > 0 ? 100 * 0.5 / std::sqrt(pdm.mean) * pdm.err : 0.0);
        std::fprintf(out, "Same top p: %6.3f ± %5.3f %%\n", 100 * top, 100 * std::sqrt(top * (1 - top) / double(k.count - 1)));
        std::fprintf(stderr, "perplexity: %zu tokens scored in %.2f s (%.1f tokens/s)\n", k.count, secs, tps);
        js["ppl"] = ppl_q;
        js["ppl_base"] = ppl_b;
        js["kld_mean"] = kl.mean;
        js["kld_error"] = kl.err;
        js["kld_max"] = k.kld_values.back();
        js["kld_median"] = ppl::median(k.kld_values);
        js["kld_p99"] = ppl::percentile(k.kld_values, 0.99f);
        js["same_top_p"] = top;
        js["rms_dp"] = std::sqrt(pdm.mean);
        js["tokens_scored"] = k.count;
    }
    if (a.json) std::printf("%s\n", js.dump(1).c_str());
    return 0;
}

}  // namespace

KINFER_COMMAND("perplexity", "llama-perplexity-compatible perplexity and KL divergence", [](CLI::App& app) {
    auto a = std::make_shared<PplArgs>();
    app.add_option("-m,--model", a->model, "GGUF model file")->required()->check(CLI::ExistingFile);
    cli::add_expert_flags(app, a->experts);
    app.add_option("-f,--file", a->file, "text to evaluate (one trailing newline dropped, escapes processed, as llama-perplexity does)");
    app.add_option("-c,--ctx-size", a->n_ctx, "window size in tokens; the second half of each window is scored")->capture_default_str()
        ->check(int_in(4, kMaxCtx));
    app.add_option("-b,--batch-size", a->n_batch, "prefill chunk in tokens")->capture_default_str()->check(int_in(1, kMaxBatch));
    app.add_option("--chunks", a->chunks, "evaluate at most this many windows (default: all)")->check(int_in(-1, 1 << 30));
    app.add_option("-t,--threads", a->threads, "threads (default: physical cores)")->check(int_in(1, kMaxThreads));
    add_cache_type_flag(app, a->cache_type);
    app.add_option("--kl-divergence-base", a->kld_base,
                   "alone: save this model's log-probabilities to FILE; with --kl-divergence: compare against FILE");
    app.add_flag("--kl-divergence", a->kld, "compare this model with the saved base (KLD, delta-p, same top token)");
    app.add_flag("--no-escape", a->no_escape, "take the text's backslashes literally");
    app.add_flag("--json", a->json, "print only a JSON summary on stdout (the per-chunk lines go to stderr)");
    add_split_flags(app);
    return [a] { return run_perplexity(*a); };
});

}  // namespace kinfer::cli
