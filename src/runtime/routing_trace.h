// A recorded sequence of routing decisions: for each token and each MoE layer, the K experts the
// router chose. `kinfer eval --routing-record FILE` writes one from a real run (say, the trained
// demo model over held-out text); `kinfer bench --routing-replay FILE` then drives another model's
// MoE layers with it, so the expert store can be benchmarked under a trained model's skew on a
// model too large for the cache (a random model routes almost uniformly). Replay changes the
// logits, so it is a benchmarking tool only.
//
// File: "kinfer-routing-trace 1", "layers L experts E used K tokens T", then one line per token
// and MoE layer ("t l e1 .. eK"), tokens in order, layers ascending.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::runtime {

class RoutingTrace {
public:
    RoutingTrace() = default;
    RoutingTrace(int n_layer, int n_expert, int k) : n_layer_(n_layer), n_expert_(n_expert), k_(k) {}

    int n_layer() const { return n_layer_; }     // MoE layers (ordinal, not model layer index)
    int n_expert() const { return n_expert_; }
    int k() const { return k_; }
    int64_t n_tokens() const { return n_layer_ && k_ ? int64_t(sel_.size()) / (int64_t(n_layer_) * k_) : 0; }

    // Records token `token`'s choice at MoE layer `layer` (tokens must arrive in order).
    void record(int64_t token, int layer, const int32_t* experts);
    // The choice for token / layer of a model with n_expert experts, k used and n_layer MoE
    // layers: tokens and layers wrap around the trace; when the model has r times the trace's
    // experts and picks r times as many, trace expert e stands for experts r*e .. r*e + r-1.
    void replay(int64_t token, int layer, int n_expert, int k, int32_t* out) const;
    // Fails with a clear message when replay onto such a model is impossible.
    void check_replay(int n_layer, int n_expert, int k) const;

    void save(const std::string& path) const;     // temp file + rename
    static RoutingTrace load(const std::string& path);

private:
    int n_layer_ = 0, n_expert_ = 0, k_ = 0;
    std::vector<int32_t> sel_;                   // [token][layer][k]
};

}  // namespace kinfer::runtime
