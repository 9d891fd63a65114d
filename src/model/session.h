// One sequence being evaluated: owns the KDA recurrent + conv states and the MLA latent cache
// (all sized up front from n_ctx, DESIGN.md section 5) and the thread pool it computes with.
//
//   auto model = kinfer::model::Model::load("k3.gguf");
//   kinfer::model::Session s(*model, {.n_ctx = 4096});
//   s.prefill(ids);                 // logits of the last position: s.logits()
//   s.decode(next_id);              // one token; s.logits() again
//   s.prefill(ids, &all_logits);    // every position's logits, [n x n_vocab]
#pragma once
#include "model/model.h"
#include "runtime/thread_pool.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace kinfer::runtime {
class ExpertStore;
class RoutingTrace;
}

namespace kinfer::model {

struct SessionOptions {
    int64_t n_ctx = 4096;         // most tokens the MLA cache holds (-c)
    int64_t n_batch = 512;        // prefill chunk (-b)
    int n_threads = 0;            // 0 = physical cores (-t)
    // Prefill KDA in the chunked WY form instead of the recurrence. Off by default: llama.cpp's
    // CPU runs the recurrence for prefill too, and with it quantized models match llama.cpp bit
    // for bit up to its own first rounding event; the chunked form agrees to fp32 rounding
    // (tested) and is the basis for a GEMM-shaped prefill kernel.
    bool kda_chunked = false;
    bool mla_decompressed = false;// prefill MLA in the decompressed MHA form (false: absorbed)
    runtime::ExpertStore* experts = nullptr;   // routed experts through this store (nullptr: the mapping)
    bool prefetch_next = false;   // speculative routing of the next MoE layer (--prefetch-next)
    runtime::RoutingTrace* routing_record = nullptr;        // every routing decision is added here
    const runtime::RoutingTrace* routing_replay = nullptr;  // route by this trace (benchmarks only)
};

// Called after every layer with the residual stream of the chunk's n tokens ([n x n_embd]);
// layer == n_layer for the final (pre-norm) stream. For --dump-layer and bisecting.
using LayerHook = std::function<void(int layer, int64_t pos0, int64_t n, const float* x)>;

struct Workspace;   // scratch buffers, model/forward_ctx.h

class Session {
public:
    Session(const Model& model, SessionOptions opt = {});
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Evaluates tokens after the current position, in chunks of n_batch. When all_logits is
    // given it receives [tokens.size() x n_vocab] (appended); logits() holds the last row.
    void prefill(std::span<const int32_t> tokens, std::vector<float>* all_logits = nullptr);
    // One token through the decode path (matvecs, KDA recurrence, absorbed MLA).
    void decode(int32_t token);

    const std::vector<float>& logits() const { return logits_; }   // last evaluated position
    int64_t n_past() const { return n_past_; }
    int64_t n_ctx() const { return opt_.n_ctx; }
    void reset();                                                  // empty the sequence

    const Model& model() const { return model_; }
    runtime::ThreadPool& pool() { return *pool_; }
    const SessionOptions& options() const { return opt_; }
    SessionOptions& options() { return opt_; }                     // forms may change between calls
    size_t state_bytes() const;                                    // KDA + conv + MLA cache

    LayerHook on_layer;

    // State, exposed for the property tests and a future --prompt-cache.
    struct LayerState {
        std::vector<float> kda;    // [n_head][D (value j)][D (key i)]: S transposed, rows contiguous over keys
        std::vector<float> conv;   // [3 (q,k,v)][d_inner][W-1], oldest input first
        std::vector<float> mla;    // [n_ctx][kv_lora + d_rope]: [c | k_pe] per position
    };
    std::vector<LayerState>& layer_states() { return states_; }

private:
    // Runs n tokens at positions n_past_.. through the model; writes n_out rows of logits
    // (the last n_out positions) to out.
    void forward(const int32_t* tokens, int64_t n, bool want_all, float* out_all);

    const Model& model_;
    SessionOptions opt_;
    std::unique_ptr<runtime::ThreadPool> pool_;
    std::vector<LayerState> states_;
    std::unique_ptr<Workspace> ws_;
    std::vector<float> logits_;
    int64_t n_past_ = 0;
};

}  // namespace kinfer::model
