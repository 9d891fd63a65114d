// kinfer: the single binary. Rewrites llama.cpp habits (cli/lib/habits.h), parses the subcommand
// with CLI11 and runs it. Every error that reaches here is printed as one "kinfer: error: ..."
// line. Exit codes: 0 success, 1 runtime error (a file, the model, the machine), 2 usage error
// (an unknown command or flag, a value out of range); a signal ends it with 128 + the signal.
#include "cli/command.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/habits.h"
#include "cli/lib/split_session.h"
#include "common/error.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace kinfer::cli {

static std::map<std::string, CommandDef>& registry() {
    static std::map<std::string, CommandDef> r;
    return r;
}

bool register_command(CommandDef def) {
    registry()[def.name] = std::move(def);
    return true;
}

}  // namespace kinfer::cli

namespace {

struct Planned {
    const char* name;
    const char* help;
};

// The whole tool, in the order `--help` lists it. Names without a registered implementation
// say so and exit non-zero.
const Planned kPlanned[] = {
    {"chat", "Interactive terminal chat with a model"},
    {"run", "One-shot generation from -p, a prompt file or stdin"},
    {"convert", "Convert a Hugging Face safetensors checkpoint to GGUF"},
    {"quantize", "Re-quantize a GGUF file (ggml block formats and llama.cpp mixtures)"},
    {"perplexity", "llama-perplexity-compatible perplexity and KL divergence"},
    {"bench", "llama-bench style prompt-processing and generation speed"},
    {"info", "Show a GGUF file's metadata, tensors and memory needs"},
    {"eval", "Debug: evaluate token ids and write raw logits"},
    {"tokenize", "Tokenize text like llama-tokenize"},
};

constexpr const char* kFooter =
    "\nExit status: 0 success, 1 runtime error (file, model, machine), 2 usage error (unknown command or flag,\n"
    "a value outside its range). `kinfer COMMAND --help` explains every flag of a command.";

// CLI11's messages, made to name what was wrong in kinfer's words.
std::string usage_message(const CLI::ParseError& e) {
    std::string m = e.what();
    const std::string extra = "The following argument was not expected: ";
    const std::string extras = "The following arguments were not expected: ";
    if (m.rfind(extra, 0) == 0) return "unknown option or argument '" + m.substr(extra.size()) + "' (see --help)";
    if (m.rfind(extras, 0) == 0) return "unknown options or arguments: " + m.substr(extras.size()) + " (see --help)";
    const size_t req = m.find(" required ");
    if (req != std::string::npos && m.size() > 8 && m.compare(m.size() - 8, 8, " missing") == 0)
        return m.substr(0, m.find(':')) + " needs a value";
    return m;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace kinfer::cli;
    // Under mpirun every rank but 0 serves rank 0's sessions and parses no command line.
    DistScope dist(&argc, &argv);
    if (dist.worker()) return dist.serve();
    CLI::App app{"kinfer: inference for Kimi K3 and Kimi Linear models"};
    app.require_subcommand(1);
    app.footer(kFooter);
    app.set_version_flag("--version", std::string("kinfer ") + KINFER_VERSION);
    app.add_flag_callback("--list-devices", [] { list_devices_and_exit(""); },
                          "print the backends found (CPU, every CUDA GPU with its free memory) and exit");

    std::vector<std::pair<CLI::App*, std::function<int()>>> actions;
    for (const auto& p : kPlanned) {
        auto it = registry().find(p.name);
        CLI::App* sub = app.add_subcommand(p.name, it != registry().end() ? it->second.help : p.help);
        if (it != registry().end()) {
            actions.emplace_back(sub, it->second.setup(*sub));
        } else {
            sub->allow_extras();
            std::string name = p.name;
            actions.emplace_back(sub, [name] {
                std::fprintf(stderr, "kinfer: '%s' is not implemented yet\n", name.c_str());
                return 2;
            });
        }
    }
    for (const auto& [name, def] : registry()) {
        bool planned = false;
        for (const auto& p : kPlanned) planned |= name == p.name;
        if (planned) continue;
        CLI::App* sub = app.add_subcommand(name, def.help);
        actions.emplace_back(sub, def.setup(*sub));
    }

    // No command, or one kinfer does not have: say so (CLI11 would only say "A subcommand is
    // required"), with the list.
    std::vector<std::string> args(argv, argv + argc);
    if (args.size() < 2) {
        std::fputs(app.help().c_str(), stderr);
        return 2;
    }
    if (args[1].empty() || args[1][0] != '-') {
        bool known = false;
        std::string names;
        for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
            known |= sub->get_name() == args[1];
            names += (names.empty() ? "" : ", ") + sub->get_name();
        }
        if (!known) {
            std::fprintf(stderr, "kinfer: error: unknown command '%s'; the commands are: %s\n", args[1].c_str(), names.c_str());
            return 2;
        }
    }
    try {
        std::vector<std::string> notes;
        args = rewrite_llama_habits(std::move(args), notes);
        for (const auto& n : notes)
            if (!habits().log_disable) std::fprintf(stderr, "kinfer: note: %s\n", n.c_str());
        std::vector<char*> av;
        for (auto& a : args) av.push_back(a.data());
        app.parse(int(av.size()), av.data());
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", usage_message(e).c_str());
        return 2;
    } catch (const kinfer::Error& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        return 2;
    }
    try {
        for (auto& [sub, action] : actions)
            if (sub->parsed()) return action();
    } catch (const kinfer::UsageError& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        return 2;
    } catch (const kinfer::Error& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
