// llama.cpp habits: the flags a llama.cpp user types, rewritten to kinfer's before CLI11 parses
// the command line. CLI11 reads a one-dash word like `-ngl` as `-n gl`, which gave errors about
// other flags; here each known spelling is either
//   * renamed (-ngl -> --n-gpu-layers, -ot -> --ot, -dev -> --device, -s -> --seed, -sys -> --system-prompt,
//     -ctk -> --cache-type-k),
//   * accepted (-fa, -cnv / -i, --no-mmap, --mlock, -v / --verbose, --log-disable, --no-display-prompt,
//     ...), with a one-line note when it changes nothing here, or
//   * refused with one line saying what kinfer does instead (-ctv, --rope-freq-base, -hf, ...).
// Any other one-dash word of two or more letters is refused as an unknown option, so it never
// reaches CLI11's short-flag splitting.
#pragma once
#include <string>
#include <vector>

namespace kinfer::cli {

// What the accepted habits switch on, read by the commands that use them.
struct Habits {
    bool verbose = false;       // -v / --verbose: say which model and settings a run uses
    bool log_disable = false;   // --log-disable: no informational lines on stderr (errors stay)
    bool mlock = false;         // --mlock: lock the mapped model in RAM after loading
};
Habits& habits();

// args[0] is the program, args[1] the subcommand. Returns the rewritten list; appends notes
// (one line each, without the "kinfer: " prefix) for accepted flags that change nothing.
// Throws UsageError for a flag kinfer has no counterpart for.
std::vector<std::string> rewrite_llama_habits(std::vector<std::string> args, std::vector<std::string>& notes);

// --mlock: mlockall(MCL_CURRENT) once the model is mapped; a warning (not an error) when the
// limit (ulimit -l) refuses it.
void lock_memory_if_asked();

}  // namespace kinfer::cli
