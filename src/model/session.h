// One sequence being evaluated: owns the KDA recurrent + conv states and the MLA latent cache
// (grown in pages as the sequence grows, up to n_ctx; DESIGN.md section 5), each in the memory
// of its layer's backend, and the placement of the weights (-ngl) across the run's backends.
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

// Rows the MLA latent cache holds for n_ctx tokens: it grows in whole pages of page_rows
// (SessionOptions::cache_page_rows).
inline int64_t latent_cache_rows(int64_t n_ctx, int64_t page_rows) { return (n_ctx + page_rows - 1) / page_rows * page_rows; }

struct SessionOptions {
    int64_t n_ctx = 4096;         // most tokens the MLA cache holds (-c)
    int64_t n_batch = 512;        // prefill chunk (-b)
    int n_threads = 0;            // 0 = physical cores (-t); used when the session makes its own backends
    // Prefill KDA in the chunked WY form instead of the recurrence. Off by default: llama.cpp's
    // CPU runs the recurrence for prefill too, and with it quantized models match llama.cpp bit
    // for bit up to its own first rounding event; the chunked form agrees to fp32 rounding
    // (tested) and is the basis for a GEMM-shaped prefill kernel.
    bool kda_chunked = false;
    bool mla_decompressed = false;// prefill MLA in the untiled decompressed MHA form (tests; false: absorbed)
    // The latent cache's element type (-ctk). The library keeps f32, the exact mode the golden
    // tests compare; the CLI defaults to f16 like llama.cpp.
    backend::CacheType cache_type = backend::CacheType::f32;
    int64_t cache_page_rows = 256;// latent rows per page (the cache grows a page at a time)
    // Attention over more keys than this runs the tiled (flash) kernels; up to it, the untiled
    // kernels of the golden parity tests (llama.cpp's operation order). 0: always tiled.
    int64_t tiled_min_keys = 1024;
    int mla_tiled_form = -1;      // tiled prefill form: -1 by cost, 0 absorbed, 1 decompressed (MHA)
    // Routed experts of a layer whose experts sit on its backend (no store, no split, no routing
    // trace): slot by slot with the choices left in the backend's memory (model/moe.cpp
    // routed_slots: no host round trip, what a GPU decode step needs), or grouped by expert on
    // the host. -1: by slot where the backend says it pays (Backend::resident_moe, a GPU) for up
    // to kMaxResidentSlots slots; 0: never; 1: always (tests: the same logits either way on the
    // CPU; on a GPU for one token at a time, see CudaBackend::matmul_tasks).
    int moe_slots = -1;
    runtime::ExpertStore* experts = nullptr;   // routed experts through this store (nullptr: the mapping)
    // Decode steps as CUDA graphs on the devices that can (--cuda-graphs; Backend::step_begin):
    // the same work, launched as a few graphs instead of hundreds of kernels. Ignored with an
    // expert store that copies from its own thread (ExpertStoreOptions::async) or a split.
    bool graphs = false;
    bool prefetch_next = false;   // speculative routing of the next MoE layer (--prefetch-next)
    runtime::RoutingTrace* routing_record = nullptr;        // every routing decision is added here
    const runtime::RoutingTrace* routing_replay = nullptr;  // route by this trace (benchmarks only)

    // Placement (model/placement.h). backends: the run's CPU and devices (nullptr: the session
    // makes a CPU-only set with n_threads).
    backend::Backends* backends = nullptr;
    int n_gpu_layers = 0;         // -ngl: the last N layers (and the output when N >= n_layer) on device 0
    bool cpu_moe = false;         // --cpu-moe: routed experts of device layers run on the CPU
    int n_cpu_moe = 0;            // --n-cpu-moe N: those of the first N layers do
    bool shard_experts = false;   // --split-mode experts: the devices share each layer's experts
    std::vector<std::string> overrides{};   // -ot REGEX=DEV: whole layers to a backend (model/placement.h)

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
    // Evaluates rows of input embeddings instead of token ids (an image's rows from the vision
    // encoder; [n x n_embd], host memory) after the current position, in chunks of n_batch, like
    // prefill. They are recorded in tokens() as id -1.
    void prefill_embd(std::span<const float> rows, std::vector<float>* all_logits = nullptr);

    const std::vector<float>& logits() const { return logits_; }   // last evaluated position
    int64_t n_past() const { return n_past_; }
    int64_t n_ctx() const { return opt_.n_ctx; }
    const std::vector<int32_t>& tokens() const { return tokens_; } // every token evaluated so far
    void reset();                                                  // empty the sequence (and clear a failure)

    const Model& model() const { return model_; }
    int n_threads() const;
    const SessionOptions& options() const { return opt_; }
    SessionOptions& options() { return opt_; }                     // forms may change between calls
    size_t state_bytes() const;                                    // KDA + conv + MLA pages allocated
    size_t latent_bytes_per_token() const;                         // over all MLA layers, at the cache type
    size_t scratch_bytes() const;                                  // the workspaces' high-water mark
    const Placement& placement() const { return *placement_; }
    backend::Backends& backends() { return *backends_; }

    // Empty when usable; else why the last call failed (prefill / decode refuse until reset()).
    const std::string& failure() const { return failure_; }

    // The sequence as bytes: a fingerprint of the model, n_past, the token ids, every layer's
    // KDA and conv state and the latent cache rows in use, and the last logits. load_state
    // refuses bytes from another model or a session with a larger n_ctx, naming the mismatch.
    // extra: the caller's own bytes kept with the state under the same checksum (chat keeps its
    // conversation there). load_state hands them to take_extra after every other check and
    // before the session changes: a throw from it refuses the bytes with the session as it was.
    std::vector<uint8_t> save_state(std::span<const uint8_t> extra = {}) const;
    void load_state(std::span<const uint8_t> bytes,
                    const std::function<void(std::span<const uint8_t>)>& take_extra = {});

    // A snapshot of the recurrent part of the sequence (every layer's KDA and conv state, and the
    // last logits) at n_past, for going back to that position later: a hybrid model cannot undo
    // tokens in its KDA state, but the latent cache rows before pos stay valid and need no copy.
    struct Snapshot {
        int64_t pos = -1;             // n_past when it was taken
        uint64_t tokens_hash = 0;     // of tokens()[0, pos): rewind() checks the prefix is the same
        std::vector<uint8_t> state;   // per layer: the KDA bytes, then the conv bytes
        std::vector<float> logits;
        size_t bytes() const { return state.size() + logits.size() * sizeof(float); }
    };
    Snapshot snapshot() const;
    // Back to s.pos: the states and logits from s, the latent cache and tokens() cut to s.pos.
    // Refuses (the session unchanged) a snapshot past n_past or taken after other tokens.
    void rewind(const Snapshot& s);
    size_t snapshot_bytes() const;   // what one snapshot() holds

    LayerHook on_layer;

    // Per-layer state, each buffer in its layer's backend memory.
    struct LayerState {
        backend::Backend* be = nullptr;
        backend::Buffer kda;       // [n_head][D (value j)][D (key i)]: S transposed, rows contiguous over keys
        backend::Buffer conv;      // [3 (q,k,v)][d_inner][W-1], oldest input first
        // MLA layers: [c | k_pe] per position, in pages of cache_page_rows rows at the cache type.
        bool mla = false;
        std::vector<backend::Buffer> pages;
        std::vector<uint8_t*> page_ptrs;   // host array for LatentPages
        backend::LatentPages latent;       // view of the pages (updated as pages are added)
        float* kda_f() const { return reinterpret_cast<float*>(kda.ptr); }
        float* conv_f() const { return reinterpret_cast<float*>(conv.ptr); }
    };
    std::vector<LayerState>& layer_states() { return states_; }

private:
    // Runs n tokens (or n embedding rows, when embd is given) at positions n_past_.. through the
    // model; writes the logits of every row (want_all) or of the last one.
    void forward(const int32_t* tokens, int64_t n, bool want_all, float* out_all, const float* embd = nullptr);
    void clear_states();
    void reserve_rows(int64_t rows);   // grows every latent cache to hold rows positions
    void free_states();                // the KDA / conv buffers and latent pages (destructor, failed constructor)

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
