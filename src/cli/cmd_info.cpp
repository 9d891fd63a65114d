// kinfer info FILE [-c N] [--json] [--no-tensors]: metadata, hyper-parameters, tokenizer, tensor
// table, totals and the memory one sequence needs. The content lives in cli/lib/info_report.
// kinfer info FILE --plan -c N [-b B] [-ctk T] [--ram SIZE [--gpu NxSIZE]]: the memory plan of a run
// (cli/lib/memory_plan), and where it goes on a planned machine (cli/lib/machine_plan).
#include "cli/command.h"
#include "cli/lib/cache_flags.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/machine_plan.h"
#include "cli/lib/memory_plan.h"
#include "cli/lib/info_report.h"
#include "cli/lib/split_session.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "dist/layer_profile.h"
#include "dist/plan.h"
#include "gguf/reader.h"

#include <cstdio>
#include <memory>

namespace {

struct InfoArgs {
    std::string file;
    int64_t context = 4096;
    bool json = false;
    bool no_tensors = false;
    bool plan = false;                 // --plan: the memory plan (with --ranks: the rank plan instead)
    int64_t batch = 512;
    std::string cache_type = "f16";
    int ranks = 0;                     // --ranks: the rank plan of `mpirun -np RANKS kinfer ... --split SPLIT`
    std::string split = "pipeline";
    int stages = 2;                    // --stages: pipeline stages of --split both
    std::string gpu, ram;              // --gpu COUNTxSIZE, --ram SIZE: a planned machine (cli/lib/machine_plan.h)
    std::string balance, layer_profile;   // --balance, --layer-profile: what the stages are balanced by
};

void write_out(const std::string& s) { std::fwrite(s.data(), 1, s.size(), stdout); }

}  // namespace

KINFER_COMMAND("info", "Show a GGUF file's metadata, tensors and memory needs", [](CLI::App& app) {
    auto a = std::make_shared<InfoArgs>();
    app.add_option("file", a->file, "GGUF file")->required();
    app.add_option("-c,--ctx-size", a->context, "Context length for the per-sequence state estimate")
        ->capture_default_str()
        ->check(kinfer::cli::int_in(0, kinfer::cli::kMaxCtx));
    app.add_flag("--json", a->json, "Print one JSON object instead of text");
    app.add_flag("--no-tensors", a->no_tensors, "Leave out the per-tensor table");
    auto* plan = app.add_flag("--plan", a->plan, "Print only the memory plan of a run at -c N: weights, latent cache per token "
                 "and per type, KDA + conv state, scratch, the expected peak RSS; with --ranks, how that many "
                 "processes split the model instead");
    app.add_option("-b,--batch-size", a->batch, "Prefill chunk for the plan's scratch")->capture_default_str()
        ->check(kinfer::cli::int_in(1, kinfer::cli::kMaxBatch));
    kinfer::cli::add_cache_type_flag(app, a->cache_type);
    auto* ranks = app.add_option("--ranks", a->ranks, "With --plan: the rank plan for this many processes (mpirun -np): layers, "
                   "experts, bytes, bytes moved per token")
        ->check(kinfer::cli::int_in(1, 4096));
    auto* ram = app.add_option("--ram", a->ram, "With --plan: a planned machine's RAM (e.g. 2TiB): which parts of the plan "
                               "fit where, and by how much they do not")
                    ->check(kinfer::cli::size_in(false));
    ram->needs(plan);
    ram->excludes(ranks);   // the rank plan is another view of --plan
    app.add_option("--gpu", a->gpu, "With --plan --ram: the planned machine's GPUs, COUNTxSIZE (e.g. 8x141GiB): the dense "
                   "and attention weights, latent cache, state and hot experts go there, cold experts to RAM")
        ->check(kinfer::cli::size_in(true))
        ->needs(ram);
    app.add_option("--split", a->split, "With --plan --ranks: pipeline, experts or both (a grid of --stages "
                   "pipeline stages, the experts of each stage shared among its ranks)")
        ->capture_default_str()
        ->check(CLI::IsMember({"pipeline", "experts", "both"}));
    app.add_option("--stages", a->stages, "With --plan --ranks --split both: the pipeline stages (RANKS must be a "
                   "multiple)")
        ->capture_default_str()
        ->check(kinfer::cli::int_in(1, 4096));
    kinfer::cli::add_balance_flags(app, a->balance, a->layer_profile);
    return std::function<int()>([a] {
        kinfer::check_input_file(a->file, "info");   // a FIFO or device would block the open
        if (a->plan && a->ranks > 0) {
            auto m = kinfer::model::Model::load(a->file);
            kinfer::dist::LayerProfile prof;
            const auto costs = kinfer::dist::costs_from_flags(*m, a->balance, a->layer_profile, &prof);
            const auto p = kinfer::dist::Plan::make(*m, kinfer::dist::parse_split(a->split), a->ranks, a->stages, costs ? &*costs : nullptr);
            write_out(kinfer::dist::format_plan(p, *m, a->layer_profile.empty() ? nullptr : &prof));
            return std::fflush(stdout) == 0 ? 0 : 1;
        }
        auto f = kinfer::gguf::File::open(a->file);
        if (a->plan) {
            kinfer::cli::PlanOptions po;
            po.n_ctx = a->context;
            po.n_batch = a->batch;
            po.cache_type = kinfer::cli::cache_type_of(a->cache_type);
            auto plan = kinfer::cli::memory_plan(*f, po);
            std::string text = kinfer::cli::memory_plan_text(plan);
            if (!a->ram.empty()) {
                kinfer::cli::Machine mach;
                mach.ram_bytes = kinfer::cli::parse_size_spec(a->ram, false).bytes;
                if (!a->gpu.empty()) {
                    const auto g = kinfer::cli::parse_size_spec(a->gpu, true);
                    mach.n_gpu = g.count;
                    mach.gpu_bytes = g.bytes;
                }
                plan["machine"] = kinfer::cli::machine_fit(plan, mach);
                text += kinfer::cli::machine_fit_text(plan["machine"]);
            }
            write_out(a->json ? plan.dump(1) + "\n" : text);
            return std::fflush(stdout) == 0 ? 0 : 1;
        }
        kinfer::cli::InfoOptions opt;
        opt.context = a->context;
        opt.with_tensors = !a->no_tensors;
        auto report = kinfer::cli::info_report(*f, opt);
        if (a->json)
            write_out(report.dump(1, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n");
        else
            write_out(kinfer::cli::info_text(report));
        return std::fflush(stdout) == 0 ? 0 : 1;
    });
});
