// kinfer: the single binary. Parses the subcommand with CLI11 and runs it; every error that
// reaches here is printed as one line and turned into exit code 1.
#include "cli/command.h"
#include "common/error.h"

#include <cstdio>
#include <map>
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

}  // namespace

int main(int argc, char** argv) {
    using namespace kinfer::cli;
    CLI::App app{"kinfer: inference for Kimi K3 and Kimi Linear models"};
    app.require_subcommand(1);
    app.set_version_flag("--version", std::string("kinfer ") + KINFER_VERSION);

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

    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    try {
        for (auto& [sub, action] : actions)
            if (sub->parsed()) return action();
    } catch (const kinfer::Error& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "kinfer: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
