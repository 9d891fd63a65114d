// --moe: how the routed experts of a layer that holds them run (SessionOptions::moe_slots), for
// the commands that measure or check it (eval, bench).
#pragma once
#include <CLI/CLI.hpp>
#include <string>

namespace kinfer::cli {

// Declares --moe on app, storing "auto", "grouped" or "slots" in value.
void add_moe_flag(CLI::App& app, std::string& value);
// SessionOptions::moe_slots for a --moe value: -1 auto, 0 grouped, 1 slots.
int moe_slots_of(const std::string& value);
// Declares --cuda-graphs on app (SessionOptions::graphs).
void add_graphs_flag(CLI::App& app, bool& value);

}  // namespace kinfer::cli
