// kinfer info FILE [-c N] [--json] [--no-tensors]: metadata, hyper-parameters, tokenizer, tensor
// table, totals and the memory one sequence needs. The content lives in cli/lib/info_report.
#include "cli/command.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/info_report.h"
#include "common/error.h"
#include "common/safe_file.h"
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
    bool plan = false;          // --plan: the rank plan of `mpirun -np RANKS kinfer ... --split SPLIT`
    int ranks = 2;
    std::string split = "pipeline";
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
    app.add_flag("--plan", a->plan, "Print how --ranks processes split the model (layers, experts, bytes, bytes moved per token)");
    app.add_option("--ranks", a->ranks, "With --plan: the number of ranks (mpirun -np)")
        ->capture_default_str()
        ->check(kinfer::cli::int_in(1, 4096));
    app.add_option("--split", a->split, "With --plan: pipeline or experts")
        ->capture_default_str()
        ->check(CLI::IsMember({"pipeline", "experts"}));
    return std::function<int()>([a] {
        kinfer::check_input_file(a->file, "info");   // a FIFO or device would block the open
        if (a->plan) {
            auto m = kinfer::model::Model::load(a->file);
            write_out(kinfer::dist::format_plan(kinfer::dist::Plan::make(*m, kinfer::dist::parse_split(a->split), a->ranks), *m));
            return std::fflush(stdout) == 0 ? 0 : 1;
        }
        auto f = kinfer::gguf::File::open(a->file);
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
