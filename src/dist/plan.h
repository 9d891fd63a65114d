// Which part of the model each rank of a multi-process run owns (issue 17), decided from the
// tensor table alone (or with a measured layer profile, dist/layer_profile.h), so `kinfer info
// --plan` can print it without MPI and every rank of a run computes the same plan on its own.
//   pipeline: rank r owns a contiguous range of layers, balanced by the bytes each layer's
//             tensors read per token (the last rank also reads the output head), or by the
//             measured time per token of each layer (--layer-profile); rank 0 embeds.
//   experts:  every rank owns every dense tensor; the routed experts of each MoE layer are
//             split into contiguous ranges of ids, one per rank; rank 0 runs the output head.
//   both:     the ranks form a grid of S pipeline stages x E expert shards (rank = stage * E +
//             shard): stage s owns a range of layers as in pipeline, and within it shard e owns a
//             range of every MoE layer's experts as in experts. pipeline is the grid S = ranks,
//             E = 1, and experts the grid S = 1, E = ranks.
#pragma once
#include "model/model.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::dist {

enum class SplitKind { pipeline, experts, both };
SplitKind parse_split(const std::string& s);   // "pipeline" | "experts" | "both"; throws UsageError otherwise
const char* split_name(SplitKind k);

// What the pipeline stages are balanced by (--balance): the bytes each layer reads, or its
// measured decode or prefill time per token.
enum class Balance { bytes, decode, prefill };
Balance parse_balance(const std::string& s);   // "bytes" | "decode" | "prefill"; throws UsageError otherwise
const char* balance_name(Balance b);

// Per-layer costs to balance the stages by instead of bytes, in one unit (a layer profile's
// nanoseconds per token): layer[il] for every layer (layer 0 with the embedding) and head for
// the output head, which the last stage runs.
struct StageCosts {
    Balance by = Balance::decode;
    std::vector<uint64_t> layer;
    uint64_t head = 0;
};

// The contiguous split of w into `parts` non-empty ranges whose largest sum is the smallest
// possible (exact). Returns the first index of every range, then w.size().
std::vector<int> contiguous_split(const std::vector<uint64_t>& w, int parts);

struct RankPart {
    int stage = 0, shard = 0;                  // its place in the grid
    int first_layer = 0, last_layer = 0;       // layers [first, last) this rank runs (experts: all)
    int first_expert = 0, last_expert = 0;     // routed experts [first, last) of every MoE layer
    bool embeds = false, head = false;         // token_embd / the output head
    uint64_t bytes = 0;                        // tensor bytes it owns (token_embd: read by rows only)
    uint64_t cost = 0;                         // its stage's total of what the stages were balanced by
};

struct Plan {
    SplitKind kind = SplitKind::pipeline;
    Balance balance = Balance::bytes;
    int ranks = 1;
    int stages = 1, shards = 1;                // the grid: ranks = stages * shards
    std::vector<RankPart> part;
    // Bytes on the wire for the whole job per token (every rank's sends together), not counting
    // the few bytes of each chunk's command: a decoded token, and a prefill token of a chunk whose
    // logits only the last row needs (generation) or every row needs (eval, perplexity).
    uint64_t bytes_per_decode_token = 0, bytes_per_prefill_token = 0, bytes_per_all_logits_token = 0;

    // stages: the number of pipeline stages for --split both (0: 2); ignored by the other two.
    // costs: balance the stages by these instead of bytes (their size must be the layer count).
    static Plan make(const model::Model& m, SplitKind kind, int ranks, int stages = 0, const StageCosts* costs = nullptr);
    int rank_at(int stage, int shard) const { return stage * shards + shard; }
    // A hash of every rank's layers and experts: rank 0 sends it with the open command, and a rank
    // whose own plan differs (another model file, other costs) stops instead of computing on.
    uint64_t digest() const;
    int layer_stage(int il) const;   // the stage that runs layer il
    int expert_shard(int e) const;   // the shard (within every stage) that runs routed expert e
};

// Bytes of the residual message that crosses after layer `boundary` (K3: p and the blocks banked
// so far, DESIGN.md 3.1), per token, without its 24-byte header.
uint64_t residual_bytes_per_token(const model::HParams& hp, int boundary);

// What each layer weighs in the stage balance of a grid with `shards` expert shards per stage:
// its bytes (dense tensors, and the routed experts' share 1 / shards), or with costs its
// measured cost scaled by the same share of its bytes (a profile is measured in one process,
// with every expert); the head's bytes or cost are added to the last layer, which always runs
// on the last stage.
std::vector<uint64_t> layer_weights(const model::Model& m, int shards, const StageCosts* costs);

struct LayerProfile;
// The table `kinfer info --plan` prints; with a profile, each stage's predicted share of the
// decode and prefill time per token too.
std::string format_plan(const Plan& p, const model::Model& m, const LayerProfile* profile = nullptr);

}  // namespace kinfer::dist
