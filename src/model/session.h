// One sequence being evaluated: owns the KDA recurrent + conv states and the MLA latent cache
// (sized up front from n_ctx, DESIGN.md section 5), each in the memory of its layer's backend,
// and the placement of the weights (-ngl) across the run's backends.
//
//   auto model = kinfer::model::Model::load("k3.gguf");
//   kinfer::model::Session s(*model, {.n_ctx = 4096});
//   s.prefill(ids);                 // logits of the last position: s.logits()
//   s.decode(next_id);              // one token; s.logits() again
//   s.prefill(ids, &all_logits);    // every position's logits, [n x n_vocab]
//   auto bytes = s.save_state();    // token ids, KDA / conv states, latent cache
//
// If a call throws mid-forward (an expert read fails, say), the session is marked unusable and
// every later prefill / decode refuses with the original error until reset() or load_state():
// it is never silently wrong on the next call.
#pragma once
#include "backend/backend.h"
#include "model/model.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kinfer::runtime {
class ExpertStore;
class RoutingTrace;
}
namespace kinfer::backend {
class Backends;
class Workspace;
}

namespace kinfer::model {

class Placement;
class Split;

struct SessionOptions {
    int64_t n_ctx = 4096;         // most tokens the MLA cache holds (-c)
    int64_t n_batch = 512;        // prefill chunk (-b)
    int n_threads = 0;            // 0 = physical cores (-t); used when the session makes its own backends
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

    // Placement (model/placement.h). backends: the run's CPU and devices (nullptr: the session
    // makes a CPU-only set with n_threads).
    backend::Backends* backends = nullptr;
    int n_gpu_layers = 0;         // -ngl: the last N layers (and the output when N >= n_layer) on device 0
    bool cpu_moe = false;         // --cpu-moe: routed experts of device layers run on the CPU
    int n_cpu_moe = 0;            // --n-cpu-moe N: those of the first N layers do

    // Across processes (--split, src/dist): runs each chunk over the ranks (nullptr: alone).
    Split* split = nullptr;
};

// Called after every layer with the residual stream of the chunk's n tokens ([n x n_embd], host
// memory); layer == n_layer for the final (pre-norm) stream. For --dump-layer and bisecting.
using LayerHook = std::function<void(int layer, int64_t pos0, int64_t n, const float* x)>;

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
    const std::vector<int32_t>& tokens() const { return tokens_; } // every token evaluated so far
    void reset();                                                  // empty the sequence (and clear a failure)

    const Model& model() const { return model_; }
    int n_threads() const;
    const SessionOptions& options() const { return opt_; }
    SessionOptions& options() { return opt_; }                     // forms may change between calls
    size_t state_bytes() const;                                    // KDA + conv + MLA cache
    const Placement& placement() const { return *placement_; }
    backend::Backends& backends() { return *backends_; }

    // Empty when usable; else why the last call failed (prefill / decode refuse until reset()).
    const std::string& failure() const { return failure_; }

    // The sequence as bytes: a fingerprint of the model, n_past, the token ids, every layer's
    // KDA and conv state and the latent cache rows in use, and the last logits. load_state
    // refuses bytes from another model or a session with a larger n_ctx, naming the mismatch.
    std::vector<uint8_t> save_state() const;
    void load_state(std::span<const uint8_t> bytes);

    LayerHook on_layer;

    // Per-layer state, each buffer in its layer's backend memory.
    struct LayerState {
        backend::Backend* be = nullptr;
        backend::Buffer kda;       // [n_head][D (value j)][D (key i)]: S transposed, rows contiguous over keys
        backend::Buffer conv;      // [3 (q,k,v)][d_inner][W-1], oldest input first
        backend::Buffer mla;       // [n_ctx][kv_lora + d_rope]: [c | k_pe] per position
        float* kda_f() const { return reinterpret_cast<float*>(kda.ptr); }
        float* conv_f() const { return reinterpret_cast<float*>(conv.ptr); }
        float* mla_f() const { return reinterpret_cast<float*>(mla.ptr); }
    };
    std::vector<LayerState>& layer_states() { return states_; }

private:
    // Runs n tokens at positions n_past_.. through the model; writes the logits of every row
    // (want_all) or of the last one.
    void forward(const int32_t* tokens, int64_t n, bool want_all, float* out_all);
    void clear_states();

    const Model& model_;
    SessionOptions opt_;
    std::unique_ptr<backend::Backends> own_backends_;
    backend::Backends* backends_ = nullptr;
    std::unique_ptr<Placement> placement_;
    std::vector<std::unique_ptr<backend::Workspace>> ws_;   // one per backend, cpu first
    std::vector<LayerState> states_;
    std::vector<float> logits_;
    std::vector<int32_t> tokens_;
    int64_t n_past_ = 0;
    std::string failure_;
};

}  // namespace kinfer::model
