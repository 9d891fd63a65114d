// The seam a multi-process run (src/dist, issue 17) plugs into a Session: the session calls it
// at the start of every chunk and lets it run the chunk, and the MoE layer asks it which routed
// experts this process computes. A single-process session has none (SessionOptions::split).
#pragma once
#include <climits>
#include <cstdint>
#include <vector>

namespace kinfer::backend {
class Backend;
}

namespace kinfer::model {

struct FwdEnv;
struct SessionOptions;

// The part of the model one process runs: layers [first_layer, last_layer), the output head
// when head, and of every MoE layer the routed experts [first_expert, last_expert). The
// placement copies only that part to a device (model/placement.h); everything by default.
struct Share {
    int first_layer = 0, last_layer = INT_MAX;
    bool head = true;
    int first_expert = 0, last_expert = INT_MAX;
};

class Split {
public:
    virtual ~Split() = default;
    // What this process runs of the model.
    virtual Share share() const { return {}; }
    // A session using this split was made / is going away (rank 0 tells the other ranks to
    // make / drop theirs with the same options).
    virtual void open(const SessionOptions& /*opt*/) {}
    virtual void close() {}
    // Before a chunk of n tokens at position pos0 (rank 0 tells the other ranks what to run).
    virtual void begin(const int32_t* tokens, int64_t n, int64_t pos0, bool want_all) = 0;
    // Runs the chunk. host: [rows x n_vocab] logits of the rows asked for (every row when
    // want_all, else the last one); only the process that owns the terminal needs them filled.
    virtual void forward(const FwdEnv& env, const int32_t* tokens, bool want_all, float* host) = 0;

    // Expert sharding. When shards_experts(), a MoE layer computes only the experts this
    // process owns, and gather_slots() then fills every other (token, slot) row of
    // ys [n][K][lat] from the processes that own them, so every process sums the same rows in
    // the same order.
    virtual bool shards_experts() const { return false; }
    virtual bool owns_expert(int /*il*/, int /*e*/) const { return true; }
    virtual void gather_slots(int /*il*/, const std::vector<int32_t>& /*sel*/, backend::Backend& /*be*/, float* /*ys*/,
                              int64_t /*n*/, int64_t /*K*/, int64_t /*lat*/) {}
};

}  // namespace kinfer::model
