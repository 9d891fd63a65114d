// kinfer bench: llama-bench-shaped speed table. pp<N>: one prefill of N tokens into an empty
// context (in -b chunks); tg<N>: N single-token decodes from an empty context. Each test runs
// once to warm up, then -r times; t/s is mean +- standard deviation over the repetitions.
// --layer-times FILE instead times every layer (one -p prompt, then -n decodes; the median of -r
// repetitions) and writes the layer profile that --layer-profile balances pipeline stages by.
#include "backend/cpu/matmul.h"
#include "backend/cpu_backend.h"
#include "backend/registry.h"
#include "cli/command.h"
#include "cli/lib/cache_flags.h"
#include "cli/lib/moe_flag.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/split_session.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "dist/layer_timing.h"
#include "model/session.h"
#include "quant/matmul.h"
#include "runtime/expert_flags.h"
#include "runtime/thread_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <sstream>

namespace kinfer::cli {

namespace {

struct BenchArgs {
    std::string model;
    std::vector<int> n_prompt{512}, n_gen{128}, threads;
    int reps = 3;
    int64_t batch = 512;
    std::string cache_type = "f16";   // llama-bench's default -ctk
    std::string moe = "auto";         // --moe
    bool graphs = false;                // --cuda-graphs
    runtime::ExpertFlags experts;
    std::string layer_times;          // --layer-times FILE: the per-layer timing pass
};

// llama.cpp's names for general.file_type, so the "model" column reads the same.
std::string ftype_name(int64_t ft) {
    switch (ft) {
        case 0: return "all F32";
        case 1: return "F16";
        case 2: return "Q4_0";
        case 3: return "Q4_1";
        case 7: return "Q8_0";
        case 8: return "Q5_0";
        case 9: return "Q5_1";
        case 10: return "Q2_K - Medium";
        case 11: return "Q3_K - Small";
        case 12: return "Q3_K - Medium";
        case 13: return "Q3_K - Large";
        case 14: return "Q4_K - Small";
        case 15: return "Q4_K - Medium";
        case 16: return "Q5_K - Small";
        case 17: return "Q5_K - Medium";
        case 18: return "Q6_K";
        case 25: return "IQ4_NL - 4.5 bpw";
        case 30: return "IQ4_XS - 4.25 bpw";
        case 32: return "BF16";
        case 38: return "MXFP4 MoE";
        default: return fmt::format("ftype {}", ft);
    }
}

// llama-bench's size label in the model column: "17M", "48B".
std::string size_label(double n) {
    if (n >= 1e9) return fmt::format("{:.0f}B", n / 1e9);
    if (n >= 1e6) return fmt::format("{:.0f}M", n / 1e6);
    return fmt::format("{:.0f}K", n / 1e3);
}

std::string human_params(double n) {
    if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
    return fmt::format("{:.2f} M", n / 1e6);
}

// Seconds for one run of the test.
double run_once(const model::Model& m, model::Session& s, int np, int ng, std::mt19937& rng) {
    std::uniform_int_distribution<int32_t> tok(0, int32_t(m.hparams().n_vocab) - 1);
    s.reset();
    auto t0 = std::chrono::steady_clock::now();
    if (np > 0) {
        std::vector<int32_t> ids(static_cast<size_t>(np));
        for (auto& id : ids) id = tok(rng);
        s.prefill(ids);
    }
    for (int i = 0; i < ng; ++i) s.decode(tok(rng));
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One process, whatever mpirun started: a profile measures each layer alone, so every rank of a
// later split reads the same numbers (the other ranks just wait for the quit).
int run_layer_times(const BenchArgs& a, const model::Model& m) {
    dist::TimingOptions o;
    o.threads = a.threads.empty() ? 0 : a.threads.front();
    o.prompt = a.n_prompt.front() > 0 ? a.n_prompt.front() : 128;
    o.batch = a.batch;
    o.decode = a.n_gen.front() > 0 ? a.n_gen.front() : 32;
    o.reps = a.reps;
    o.cache_type = cache_type_of(a.cache_type);
    const dist::LayerProfile p = dist::time_layers(m, o);
    p.save(a.layer_times);
    std::fputs(dist::format_layer_times(p, m).c_str(), stdout);
    std::printf("layer profile written to %s\n", a.layer_times.c_str());
    return std::fflush(stdout) == 0 ? 0 : 1;
}

int run_bench(const BenchArgs& a) {
    check_input_file(a.model, "bench: model");
    auto m = model::Model::load(a.model);
    if (!a.layer_times.empty()) return run_layer_times(a, *m);
    const auto& f = m->file();
    double bytes = 0, params = 0;
    for (const auto& t : f.tensors()) bytes += double(t.nbytes), params += double(t.nelements());
    const std::string name = fmt::format("{} {} {}", m->hparams().arch_name, size_label(params),
                                         ftype_name(f.get_int_or("general.file_type", -1)));
    // Bytes of weights one decoded token reads: every matrix, the routed experts' share
    // n_expert_used / n_expert, one row of the token embedding.
    const auto& hp = m->hparams();
    double touched = 0;
    for (const auto& t : f.tensors()) {
        if (t.name == "token_embd.weight") touched += double(t.nbytes) / double(std::max<int64_t>(1, t.ne[1]));
        else if (t.name.find("_exps.") != std::string::npos)
            touched += double(t.nbytes) * double(hp.n_expert_used) / double(std::max<int64_t>(1, hp.n_expert));
        else touched += double(t.nbytes);
    }
    // The KDA layers' fp32 state (the delta rule's and the short convolutions'), read and written
    // back once a token: memory traffic too, but not weights, so told beside the GB/s rather than in
    // it (k3-wide: 13.5 MB each way against 1171 MB of weights).
    const double kda_state = double(hp.n_kda_layers()) * double(hp.kda_state_floats() + hp.conv_state_floats()) * sizeof(float);

    std::printf("| %-30s | %10s | %10s | %-10s | %7s | %15s | %20s |\n", "model", "size", "params", "backend", "threads",
                "test", "t/s");
    std::printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n");
    std::vector<int> threads = a.threads.empty() ? std::vector<int>{runtime::ThreadPool::default_threads()} : a.threads;
    std::mt19937 rng(1234);
    model::SessionOptions so;
    so.n_batch = a.batch;
    so.cache_type = cache_type_of(a.cache_type);
    so.moe_slots = moe_slots_of(a.moe);
    so.graphs = a.graphs;
    std::vector<std::pair<int, int>> tests;
    for (int p : a.n_prompt)
        if (p > 0) tests.push_back({p, 0});
    for (int g : a.n_gen)
        if (g > 0) tests.push_back({0, g});
    int64_t ctx = 1;
    for (auto [p, g] : tests) ctx = std::max<int64_t>(ctx, p + g);
    so.n_ctx = ctx;   // before attach_experts: whether the device layers fit counts their latent cache at it
    auto ex = cli::attach_experts(*m, a.experts, so);
    auto split = cli::attach_split(*m, so);
    // The backend column: the --device ones the run was given (whether or not -ngl, -ot or the
    // expert cache put work on them), as llama-bench names its GPU backend; CPU otherwise.
    std::string backend_name;
    for (size_t i = 0; so.backends && i < so.backends->n_devices(); ++i)
        backend_name += (backend_name.empty() ? "" : ",") + so.backends->device(i)->name();
    if (backend_name.empty()) backend_name = "CPU";
    bool tiles_told = false;
    for (int nt : threads) {
        so.n_threads = nt;
        model::Session s(*m, so);
        if (!tiles_told && quant::active_isa() == quant::Isa::avx512 &&
            std::any_of(tests.begin(), tests.end(), [](auto t) { return t.first > 0; })) {
            // The prefill tiles' instruction form (the CPU backend measured it when it started).
            const quant::KTileTimes kt = quant::k_tile_times();
            std::fprintf(stderr, "prefill K-quant tiles: %s form (%s)\n", quant::k_tile_form_name(quant::k_tile_form()),
                         kt.dpbusd_ns > 0 ? fmt::format("ns per 256 weights and row in cache, the five types added: dpbusd "
                                                        "{:.2f}, maddubs {:.2f}", kt.dpbusd_ns, kt.maddubs_ns).c_str()
                                          : "KINFER_K_TILES");
            tiles_told = true;
        }
        if (std::any_of(tests.begin(), tests.end(), [](auto t) { return t.second > 0; })) {
            // Decode's stream layout for this machine and thread count (same bits whichever wins).
            const auto ds = backend::cpu::calibrate_decode_streams(s.backends().cpu().pool());
            const int ahead_bytes = quant::decode_prefetch();
            if (ds.from_env)
                std::fprintf(stderr, "decode layout: %d stream(s) per core (KINFER_DECODE_STREAMS), prefetch %d bytes ahead (%s)\n",
                             ds.chosen, ahead_bytes, ds.prefetch_from_env ? "KINFER_DECODE_PREFETCH" : "the default");
            else if (!ds.gbps.empty()) {
                auto list = [](const std::vector<std::pair<int, double>>& v) {
                    std::string out;
                    for (auto [n, r] : v) out += fmt::format("{}{}: {:.1f}", out.empty() ? "" : ", ", n, r);
                    return out;
                };
                const std::string ahead = ds.prefetch_from_env ? std::string(" (KINFER_DECODE_PREFETCH)")
                                                               : fmt::format(" (by bytes: {})", list(ds.prefetch_gbps));
                std::fprintf(stderr,
                             "decode layout: %d stream(s) per core, prefetch %d bytes ahead, %d threads (%s read GB/s by "
                             "streams: %s; prefetch%s; %.0f ms)\n",
                             ds.chosen, ahead_bytes, nt, ds.products.c_str(), list(ds.gbps).c_str(), ahead.c_str(), ds.ms);
            }
        }
        for (auto [p, g] : tests) {
            run_once(*m, s, p, g, rng);   // warm-up: page in the weights, size the scratch
            std::vector<double> tps;
            for (int r = 0; r < a.reps; ++r) tps.push_back(double(p + g) / run_once(*m, s, p, g, rng));
            double mean = 0, var = 0;
            for (double x : tps) mean += x;
            mean /= double(tps.size());
            for (double x : tps) var += (x - mean) * (x - mean);
            const double sd = tps.size() > 1 ? std::sqrt(var / double(tps.size() - 1)) : 0.0;
            std::string test = p > 0 ? fmt::format("pp{}", p) : fmt::format("tg{}", g);
            std::printf("| %-30s | %6.2f MiB | %10s | %-10s | %7d | %15s | %20s |\n", name.c_str(), bytes / 1048576.0,
                        human_params(params).c_str(), backend_name.c_str(), s.n_threads(), test.c_str(),
                        fmt::format("{:.2f} ± {:.2f}", mean, sd).c_str());
            std::fflush(stdout);
            if (g > 0)   // decode streams the weights a token touches: how fast, in GB/s
                std::fprintf(stderr, "%s: %.1f MB of weights per token%s -> %.2f GB/s\n", test.c_str(), touched / 1e6,
                             kda_state > 0 ? fmt::format(" (and the KDA state's {:.1f} MB, read and written)", kda_state / 1e6).c_str() : "",
                             touched * mean / 1e9);
        }
    }
    if (ex) ex->finish();
    return 0;
}

}  // namespace

KINFER_COMMAND("bench", "llama-bench style prompt-processing and generation speed", [](CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    app.add_option("-m,--model", a->model, "GGUF model")->required();
    app.add_option("-p,--n-prompt", a->n_prompt, "prompt lengths (pp tests)")->delimiter(',')->check(int_in(0, kMaxBatch));
    app.add_option("-n,--n-gen", a->n_gen, "generation lengths (tg tests)")->delimiter(',')->check(int_in(0, kMaxBatch));
    app.add_option("-r,--repetitions", a->reps, "repetitions per test")->check(int_in(1, 1000));
    app.add_option("-t,--threads", a->threads, "thread counts")->delimiter(',')->check(int_in(1, kMaxThreads));
    app.add_option("-b,--batch-size", a->batch, "prefill chunk size")->check(int_in(1, kMaxBatch));
    add_cache_type_flag(app, a->cache_type);
    add_moe_flag(app, a->moe);
    add_graphs_flag(app, a->graphs);
    cli::add_expert_flags(app, a->experts);
    add_split_flags(app);
    app.add_option("--layer-times", a->layer_times, "time every layer instead (the first -p prompt in -b chunks: use "
                   "--micro-batch's; then the first -n decodes, the median of -r repetitions, the first -t threads) and write the layer profile to FILE "
                   "(for --layer-profile)");
    return [a] { return run_bench(*a); };
});

}  // namespace kinfer::cli
