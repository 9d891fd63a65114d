#include "cli/lib/moe_flag.h"

namespace kinfer::cli {

void add_moe_flag(CLI::App& app, std::string& value) {
    app.add_option("--moe", value,
                   "routed experts: grouped (tokens grouped by expert, the choices read on the host), slots (one row "
                   "per chosen expert, the choices left on the backend: what a GPU decode step runs without waiting "
                   "for the router), or auto (slots on a GPU for up to 64 slots, grouped elsewhere); the logits are "
                   "the same bits either way on the CPU, and on a GPU for the weight types with an int8 kernel (the "
                   "quantized ones) while no expert has 32 tokens of a chunk (from 32 on "
                   "the grouped form multiplies an expert's tokens as a GEMM on 16-bit operands)")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "grouped", "slots"}));
}

void add_graphs_flag(CLI::App& app, bool& value) {
    app.add_flag("--cuda-graphs", value,
                 "launch each one-token decode step on a CUDA device as CUDA graphs (captured every step, the "
                 "instantiated graph updated in place; ops that must stop the host end a graph and start the next); "
                 "the same results, fewer launches. The expert store then loads misses when they are used (as "
                 "--expert-sync); ignored with --split or several devices. Not yet measured on a GPU, so off by default");
}

int moe_slots_of(const std::string& value) { return value == "slots" ? 1 : value == "grouped" ? 0 : -1; }

}  // namespace kinfer::cli
