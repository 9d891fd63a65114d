// The one interface between the model and the hardware (docs/architecture.md). The forward pass
// (src/model) calls only what is declared here: memory, copies, streams, and the ops of the two
// architectures. A backend owns memory that other code must not be assumed to address:
//   cpu   host memory, today's kernels (src/backend/cpu), one thread pool;
//   sim   a strict simulated device: its own arena, the CPU kernels run on it, and every op checks
//         that each pointer it is handed lies in the arena (and the CPU backend checks that none
//         does), so a host/device confusion fails loudly here instead of crashing a GPU;
//   cuda  (issue 16) the same calls on a GPU.
//
// Conventions: every float* / Mat handed to an op is memory of that backend, unless the argument
// is documented as a host array (token ids, index lists, routing weights: small, read by the op
// before it returns). Ops run in order on the backend's compute stream; a host-visible result
// (download, route's selections) is complete when the call returns. Which activation format a
// matmul quantizes its input to (ggml's vec_dot_type) is the backend's business.
#pragma once
#include "backend/mat.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace kinfer::backend {

// An allocation in a backend's memory. ptr is what that backend's ops take (a device address for
// a device); it is not to be dereferenced by CPU code unless the backend has host memory.
struct Buffer {
    uint8_t* ptr = nullptr;
    size_t bytes = 0;
    uint64_t handle = 0;          // the backend's own bookkeeping (arena offset, ...)
    bool valid() const { return ptr != nullptr; }
};

// A point in a stream's work; the compute stream can wait for it without blocking the host
// (CUDA: cudaStreamWaitEvent). ticket 0 is an event that has already happened.
struct Event {
    uint64_t ticket = 0;
};

// One input of matmul_tasks: rows of floats, converted once per activation format its tasks need.
struct MatInput {
    const float* x = nullptr;
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t ld = 0;               // 0: cols
};
// y[t][r] = W.row(r) . input.x[row0 + t] for t < n, r < W.rows; y rows ldy apart (0: W.rows).
struct MatTask {
    Mat W;
    int input = 0;                // index into the inputs
    int64_t row0 = 0;
    int64_t n = 0;
    float* y = nullptr;
    int64_t ldy = 0;
};

// The gated activation of the FFNs and experts (DESIGN.md 3.4).
struct Glu {
    bool situ = false;            // false: SwiGLU silu(g) * u
    float beta = 0, linear_beta = 0;
};

// KDA decay gate, DESIGN.md 3.2: K3 g = lb * sigmoid(-a f), Kimi Linear g = a softplus(f).
struct KdaGate {
    bool lower_bound = false;
    float lb = 0;
};

// One KDA layer's delta-rule scan over n tokens of H heads of dim D. q, k (L2-normalised), v and
// g (log-decay) are [n][H*D], beta [n][H]; state [H][D][D] is updated; o gets [n][H*D].
struct KdaScan {
    const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    float* state = nullptr;
    float* o = nullptr;
    int64_t n = 0, H = 0, D = 0;
    bool chunked = false;         // WY / UT chunked form instead of the recurrence
};

// Shapes of one MLA attention call: n queries at positions pos0.., attending causally over the
// latent cache rows [0, pos0 + t] ([c | k_pe], R = r + dr floats each).
struct MlaShape {
    int64_t n = 0, pos0 = 0, H = 0;
    int64_t r = 0, dr = 0;        // kv_lora_rank, d_rope
    int64_t dn = 0, dv = 0;       // dk_nope, value head dim
    float scale = 1;              // 1 / sqrt(key_length_mla)
};

// The element type of the MLA latent cache (-ctk / --cache-type-k): f32 is exact (the golden
// exact mode), f16 is llama.cpp's default, q8_0 blocks of 32 with an f16 scale.
enum class CacheType { f32, f16, q8_0 };
const char* cache_type_name(CacheType t);
bool parse_cache_type(std::string_view s, CacheType& out);   // "f32" / "f16" / "q8_0"
size_t cache_row_bytes(CacheType t, int64_t floats);         // floats % 32 == 0 for q8_0

// One MLA layer's latent cache, grown in pages as the sequence grows: row j ([c | k_pe], R
// floats stored as `type`) lives in pages[j / page_rows] at byte (j % page_rows) * row_bytes.
// pages is a host array of n_pages pointers into the backend's memory.
struct LatentPages {
    CacheType type = CacheType::f32;
    int64_t R = 0;
    int64_t page_rows = 0;
    size_t row_bytes = 0;
    uint8_t* const* pages = nullptr;
    int64_t n_pages = 0;
    int64_t capacity() const { return page_rows * n_pages; }
    uint8_t* row(int64_t j) const { return pages[j / page_rows] + size_t(j % page_rows) * row_bytes; }
};

// Sigmoid routing with a selection bias (DESIGN.md 3.4). hook(t, idx) may inspect or replace
// the K chosen ids of token t (routing traces) before the weights are taken.
struct RouteParams {
    int64_t n_expert = 0, n_used = 0;
    bool norm = true;
    float scale = 1;
};
using RouteHook = std::function<void(int64_t t, int32_t* idx)>;

class Backend {
public:
    virtual ~Backend() = default;

    virtual const std::string& name() const = 0;       // "cpu", "sim0", "cuda0"
    virtual bool host_memory() const = 0;              // CPU code may read its buffers directly
    virtual int n_threads() const = 0;
    virtual size_t total_bytes() const = 0;            // memory it manages (0: unbounded host)
    virtual size_t free_bytes() const = 0;
    virtual std::string describe() const = 0;          // one --list-devices line

    // ---- memory ----------------------------------------------------------------------------
    // Throws kinfer::Error naming `what`, the bytes asked and the bytes free when it does not fit.
    virtual Buffer alloc(size_t bytes, std::string_view what) = 0;
    virtual void free(Buffer& b) = 0;
    // Host memory a device copies from fastest (CUDA: cudaHostAlloc); plain memory elsewhere.
    virtual Buffer alloc_pinned_host(size_t bytes, std::string_view what);
    virtual void free_pinned_host(Buffer& b);
    // True when [p, p + bytes) lies in this backend's memory (host backends: not in a device's).
    virtual bool owns(const void* p, size_t bytes) const = 0;

    // ---- copies -----------------------------------------------------------------------------
    // On the compute stream, in order with the ops; complete when they return.
    virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
    virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
    virtual void copy(void* dst, const void* src, size_t bytes) = 0;       // within this backend
    // dst (in dst_be's memory) = src (in this one's), directly (one GPU to another); false when
    // this backend has no such path and the bytes must go through the host (copy_between).
    virtual bool copy_to(Backend& /*dst_be*/, void* /*dst*/, const void* /*src*/, size_t /*bytes*/) { return false; }
    // On the copy stream: returns at once; host_src must stay valid until the event happened.
    virtual Event upload_async(void* dst, const void* host_src, size_t bytes);
    // The compute stream waits for e (the host thread does not, where the hardware allows).
    virtual void wait(Event e);
    virtual void synchronize() {}
    // A forward step of n tokens begins / ends (Session::forward, when SessionOptions::graphs
    // asks): a GPU backend may record the step's queued work as CUDA graphs and launch them
    // (CudaBackend says when). step_abort ends a step that threw instead: what it queued since
    // the last launch is dropped, not run (a graph of half a step would run its first ops on
    // inputs the failed ones never wrote).
    virtual void step_begin(int64_t /*n_tokens*/) {}
    virtual void step_end() {}
    virtual void step_abort() {}
    // For a library that queues work on this device itself (NCCL, dist/nccl): the device ordinal
    // and the stream (a cudaStream_t) this backend's ops run on in order; -1 and nullptr for a
    // backend without them (the CPU, the simulated device).
    virtual int native_device() const { return -1; }
    virtual void* native_stream() const { return nullptr; }

    // ---- ops: dense algebra -------------------------------------------------------------------
    // y[t][r] = W.row(r) . x[t] for t < n; x rows ldx apart (0: W.cols), y rows ldy apart (0: W.rows).
    virtual void matmul(const Mat& W, const float* x, int64_t n, float* y, int64_t ldx = 0, int64_t ldy = 0) = 0;
    // Many products in one pass (the grouped expert matmul of MoE, or several weights sharing one
    // input): each input is converted once per activation format its tasks need.
    virtual void matmul_tasks(std::span<const MatInput> inputs, std::span<const MatTask> tasks) = 0;
    // ys[i][n x Ws[i].rows] = Ws[i] . x for weights sharing one input [n x cols].
    void matmul_many(std::span<const std::pair<Mat, float*>> outs, const float* x, int64_t n);
    void matmul_many(std::initializer_list<std::pair<Mat, float*>> outs, const float* x, int64_t n) {
        matmul_many(std::span<const std::pair<Mat, float*>>(outs.begin(), outs.size()), x, n);
    }

    // x[t] = row tokens[t] of E, dequantized (tokens: host array, checked against E.rows).
    virtual void embed(const Mat& E, const int32_t* tokens, int64_t n, float* x) = 0;
    // y = x / sqrt(mean(x^2) + eps) [* w] per row of d; rows ld apart (0: d); y may alias x.
    virtual void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps,
                          int64_t ld = 0) = 0;
    virtual void l2_norm(float* x, int64_t rows, int64_t d, float eps) = 0;   // x / max(|x|, eps)
    virtual void add(float* y, const float* a, int64_t n) = 0;                // y += a
    virtual void mul_sigmoid(float* y, const float* g, int64_t n) = 0;        // y *= sigmoid(g)
    virtual void sigmoid(float* x, int64_t n) = 0;
    virtual void softmax_rows(float* x, int64_t rows, int64_t n, float scale) = 0;
    // dst[i][0..cols) = src[i][0..cols) for i < rows, rows ldd / lds floats apart.
    virtual void copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) = 0;
    // g = act(g, u) over rows x ff.
    virtual void glu(float* g, const float* u, int64_t rows, int64_t ff, const Glu& act) = 0;

    // ---- ops: the mixers ----------------------------------------------------------------------
    // Causal depthwise conv over the last W inputs (tap W-1 = current token), then SiLU, in place
    // on x [n][channels]; state [channels][W-1] keeps the last W-1 inputs.
    virtual void conv_silu(float* x, int64_t n, int64_t channels, int64_t W, const float* taps, float* state) = 0;
    // g[t][h*D+i] = gate(g + dt_bias, a[h]) in place (log-decay per key channel).
    virtual void kda_decay(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D,
                           const KdaGate& gate) = 0;
    virtual void kda_scan(const KdaScan& s) = 0;
    // Absorbed MLA: Q [n][H][r + dr] ([q_abs | q_pe]) over the latent cache; lat gets [n][H][r].
    virtual void mla_attend_absorbed(const float* cache, const float* Q, float* lat, const MlaShape& s) = 0;
    // Decompressed (MHA) MLA: K / V per head from k_b {dn, r, H} and v_b {r, dv, H};
    // q [n][H][dn + dr], o [n][H][dv].
    virtual void mla_attend_decompressed(const Mat& k_b, const Mat& v_b, const float* cache, const float* q, float* o,
                                         const MlaShape& s) = 0;

    // Paged latent cache (LatentPages; a backend without these ops refuses them by name): rows [pos0, pos0 + n) are written from / read into f32
    // rows ld floats apart (0: R), converted to and from the cache type.
    virtual void mla_cache_store(const LatentPages& c, int64_t pos0, int64_t n, const float* rows, int64_t ld = 0);
    virtual void mla_cache_load(const LatentPages& c, int64_t pos0, int64_t n, float* rows);
    // The tiled (flash-attention) forms over a paged cache: online softmax over key tiles, no row
    // of probabilities per query. Absorbed: Q [n][H][r + dr] -> lat [n][H][r]. Decompressed:
    // k_b / v_b as above, q [n][H][dn + dr] -> o [n][H][dv].
    virtual void mla_attend_tiled(const LatentPages& c, const float* Q, float* lat, const MlaShape& s);
    virtual void mla_attend_tiled_mha(const Mat& k_b, const Mat& v_b, const LatentPages& c, const float* q, float* o,
                                      const MlaShape& s);
    // Whether mla_attend_tiled_mha runs here; where it does not, long prefill chunks take the
    // tiled absorbed form (the same attention, more operations per (query, key) pair).
    virtual bool has_tiled_mha() const { return false; }

    // ---- ops: MoE and AttnRes -----------------------------------------------------------------
    // probs [n][E] router logits -> sigmoid scores in place; top-K of (score + bias), ties to the
    // lower id; sel [n][K] and w [n][K] (host arrays) get the ids and the (renormalised, scaled)
    // weights.
    virtual void route(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel, float* w,
                       const RouteHook& hook) = 0;
    // dst[j] = src[idx[j] / div] (rows of cols floats); idx: host.
    virtual void gather_rows(const float* src, int64_t cols, std::span<const int64_t> idx, int64_t div, float* dst) = 0;
    // dst[idx[j]] = src[j] * w[idx[j]]; idx, w: host.
    virtual void scatter_weighted(const float* src, int64_t cols, std::span<const int64_t> idx, const float* w,
                                  float* dst) = 0;
    // out[t] = sum over k < K of ys[t][k] (in slot order), rows of cols.
    virtual void sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out) = 0;
    // The routed experts by slot, with the choices left in this backend's memory, so that a
    // device's decode step never waits for the host (model/moe.cpp routed_slots):
    //   route_resident: route() without a hook, sel [n][K] and w [n][K] in this backend's memory;
    //   matmul_id: y[s] = experts.slice(sel[s]) . x[s / x_div] for s < slots (rows of
    //     experts.slice_rows; sel in this backend's memory, ids below n_slices);
    //   scale_rows: y[r] *= w[r] over rows of cols (w in this backend's memory).
    // The same per-row arithmetic as matmul_tasks' one-token tasks and scatter_weighted, so
    // either form gives the same bits (CUDA: an expert task of several tokens in matmul_tasks
    // keeps fp32 activations, so there only for one token at a time). resident_moe(): whether this form avoids a host round trip here and is the one
    // to take for a few tokens (a GPU); the CPU groups tokens by expert instead (ByExpert).
    virtual void route_resident(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel,
                                float* w);
    virtual void matmul_id(const Mat& experts, int64_t n_slices, const int32_t* sel, int64_t slots, const float* x,
                           int64_t x_div, float* y);
    virtual void scale_rows(float* y, const float* w, int64_t rows, int64_t cols);
    virtual bool resident_moe() const { return false; }
    // AttnRes (DESIGN.md 3.1): out = softmax-weighted mix of the banked blocks and p, scored on
    // their RMS-normalised rows against w. stack: a host array of m backend pointers [n x d].
    virtual void attn_res_mix(std::span<const float* const> stack, const float* p, const float* w, float* out,
                              int64_t n, int64_t d, float eps) = 0;

    // ---- ops: the vision tower (src/vision) ----------------------------------------------------
    // Not pure: a backend that has not implemented them yet refuses with the op's name.
    // x = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) the way ggml's CPU evaluates it: through
    // a table of the f16 rounding of x for -10 < x < 10, x above, 0 below. erf: the exact form
    // 0.5 x (1 + erf(x / sqrt 2)) in float instead (PyTorch's nn.GELU(), the Moonshot rules).
    virtual void gelu(float* x, int64_t n, bool erf = false);
    // 2-D rotary embedding of n rows of H heads of dim D (rows ld floats apart, 0: H*D): in each
    // head, dims [0, D/2) rotate by pos_x[t] and [D/2, D) by pos_y[t], adjacent pairs (2i, 2i+1)
    // with angle pos * theta^(-2i / (D/2)). pos_x, pos_y: host arrays of n.
    virtual void rope_2d(float* x, int64_t n, int64_t H, int64_t D, const int32_t* pos_x, const int32_t* pos_y,
                         float theta, int64_t ld = 0);
    // Full (non-causal) attention over n rows: o[t][h] = sum_j softmax_j(scale q[t][h].k[j][h]) v[j][h];
    // q, k, v, o are [n][H*D].
    virtual void attend_full(const float* q, const float* k, const float* v, float* o, int64_t n, int64_t H, int64_t D,
                             float scale);
};

// Copies bytes between two backends' memory (staging through the host when neither is host).
void copy_between(Backend& dst_be, void* dst, Backend& src_be, const void* src, size_t bytes);

// dst[idx[j]] = src[j] on be (rows of cols floats; idx: host): rows computed elsewhere (another
// device, another rank) put in their (token, slot) places. scatter_weighted with weight 1,
// which is exact, so the slots then sum bit for bit as if computed here.
void place_rows(Backend& be, const float* src, int64_t cols, std::span<const int64_t> idx, float* dst);

// What the loader asks before any backend exists (answered from the CPU kernel tables, which
// every backend falls back on): whether a matrix of type t can be multiplied, and an exact
// conversion of host bytes of type t to floats (element-wise weight vectors). to_float_host
// throws kinfer::Error naming `what` when the type has no conversion.
bool cpu_can_matmul(quant::Type t);
void to_float_host(quant::Type t, const void* src, float* dst, int64_t n, std::string_view what);

}  // namespace kinfer::backend
