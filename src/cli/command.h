// Subcommand registry. Each src/cli/cmd_*.cpp registers itself with KINFER_COMMAND, so adding a
// subcommand touches one file. main.cpp lists every planned name, so `kinfer --help` shows the
// whole tool even before a subcommand is implemented.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace kinfer::cli {

// Called with the subcommand's CLI11 App to declare its flags; returns the action run after
// parsing. The action returns the process exit code.
using CommandSetup = std::function<std::function<int()>(CLI::App&)>;

struct CommandDef {
    const char* name;
    const char* help;
    CommandSetup setup;
};

bool register_command(CommandDef def);

}  // namespace kinfer::cli

#define KINFER_CAT2(a, b) a##b
#define KINFER_CAT(a, b) KINFER_CAT2(a, b)
#define KINFER_COMMAND(name, help, setup) \
    static const bool KINFER_CAT(kinfer_cmd_registered_, __LINE__) = ::kinfer::cli::register_command({name, help, setup})
