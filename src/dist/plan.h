// Which part of the model each rank of a multi-process run owns (issue 17), decided from the
// tensor table alone, so `kinfer info --plan` can print it without MPI and every rank of a run
// computes the same plan on its own.
//   pipeline: rank r owns a contiguous range of layers, balanced by the bytes each layer's
//             tensors read per token (the last rank also reads the output head); rank 0 embeds.
//   experts:  every rank owns every dense tensor; the routed experts of each MoE layer are
//             split into contiguous ranges of ids, one per rank; rank 0 runs the output head.
#pragma once
#include "model/model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::dist {

enum class SplitKind { pipeline, experts };
SplitKind parse_split(const std::string& s);   // "pipeline" | "experts"; throws UsageError otherwise
const char* split_name(SplitKind k);

struct RankPart {
    int first_layer = 0, last_layer = 0;       // layers [first, last) this rank runs (experts: all)
    int first_expert = 0, last_expert = 0;     // routed experts [first, last) of every MoE layer
    bool embeds = false, head = false;         // token_embd / the output head
    uint64_t bytes = 0;                        // tensor bytes it owns (token_embd: read by rows only)
};

struct Plan {
    SplitKind kind = SplitKind::pipeline;
    int ranks = 1;
    std::vector<RankPart> part;
    // Bytes on the wire for the whole job per token (every rank's sends together), not counting
    // the few bytes of each chunk's command: a decoded token, and a prefill token of a chunk whose
    // logits only the last row needs (generation) or every row needs (eval, perplexity).
    uint64_t bytes_per_decode_token = 0, bytes_per_prefill_token = 0, bytes_per_all_logits_token = 0;

    static Plan make(const model::Model& m, SplitKind kind, int ranks);
    int layer_owner(int il) const;
    int expert_owner(int e) const;
};

// Bytes of the residual message that crosses after layer `boundary` (K3: p and the blocks banked
// so far, DESIGN.md 3.1), per token, without its 24-byte header.
uint64_t residual_bytes_per_token(const model::HParams& hp, int boundary);

// The table `kinfer info --plan` prints.
std::string format_plan(const Plan& p, const model::Model& m);

}  // namespace kinfer::dist
