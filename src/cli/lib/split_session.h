// Running a command across the ranks of an MPI job (issue 17): `mpirun -np N kinfer eval|run|
// chat|perplexity|bench ... [--split pipeline|experts|both [--stages S]]`. Rank 0 runs the command as usual (it
// owns the terminal, the tokenizer and the sampler); every other rank runs dist::serve() instead
// and mirrors rank 0's sessions. Without MPI (not built, or not launched by mpirun) none of this
// does anything and the command runs alone.
#pragma once
#include "model/session.h"
#include "model/split.h"

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

namespace kinfer::cli {

// --split / --dist-timeout, for every command that runs a session. One process runs one
// command, so the values live in one place for the whole process.
struct SplitFlags {
    std::string split;           // empty: pipeline when there is more than one rank
    double timeout_s = 600.0;    // a rank waiting longer than this on a peer ends the job
    int64_t micro_batch = 0;     // pipeline prefill pieces (0: whole chunks)
    int stages = 2;              // --split both: pipeline stages
    bool stats = false;          // print each rank's bytes sent, peak RSS and busy time at exit
    std::string balance;         // --balance: bytes | decode | prefill (empty: prefill with a profile, else bytes)
    std::string layer_profile;   // --layer-profile FILE (kinfer bench --layer-times)
    std::string link = "auto";   // --dist-link: mpi | nccl | auto
};
SplitFlags& split_flags();
void add_split_flags(CLI::App& app);
// --balance and --layer-profile alone (kinfer info --plan takes them too).
void add_balance_flags(CLI::App& app, std::string& balance, std::string& layer_profile);

// The ranks of this MPI job (1 when alone, or without MPI).
int split_ranks();

// The split the run asks for, wired into so.split; nullptr (and so untouched) when alone. Keep
// it alive as long as the sessions made with so.
std::unique_ptr<model::Split> attach_split(const model::Model& m, model::SessionOptions& so);

// main()'s part: starts MPI when launched by mpirun; on ranks other than 0, worker() is true and
// serve() is all the process does. On rank 0 the destructor releases the workers.
class DistScope {
public:
    DistScope(int* argc, char*** argv);
    ~DistScope();
    DistScope(const DistScope&) = delete;
    DistScope& operator=(const DistScope&) = delete;
    bool worker() const;
    int serve();
};

}  // namespace kinfer::cli
