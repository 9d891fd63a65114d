// The CUDA backend (issue 16): device buffers (cudaMalloc), a compute and a copy stream with
// events, pinned host memory (cudaHostAlloc), and the ops that have CUDA kernels (kernels.h):
// matmul / matmul_tasks (every type of matvec_supported: the decode matvec below
// kGemmMinTokens tokens, dequantized tiles and cuBLAS from there on, or the int8 tensor-core GEMM
// with KINFER_CUDA_GEMM=int8; matmul_tasks groups its tasks into one matvec launch, one grouped
// cuBLAS GEMM or one int8 GEMM launch per weight shape), rms_norm, l2_norm,
// softmax_rows, glu, add, mul_sigmoid, sigmoid, sum_slots, route, scatter_weighted, attn_res_mix,
// the MoE slot ops (route_resident, matmul_id, scale_rows: resident_moe() is true, so decode's
// routed experts run without a host round trip), conv_silu, kda_decay, kda_scan (the recurrence
// for decode, the chunked WY form from kda_chunked_default_chunk tokens),
// mla_attend_absorbed, the decompressed (MHA) prefill forms mla_attend_decompressed and
// mla_attend_tiled_mha (has_tiled_mha() is true: long prefill chunks take it), the paged latent
// cache (mla_cache_store / load, mla_attend_tiled: the absorbed form through the pages),
// copy_rows (a device copy), gather_rows (device copies; a kernel over the uploaded list past 64
// rows), embed (the table stays on the CPU unless -ot puts
// token_embd on the device).
//
// Plain C++ on purpose: this header and cuda_backend.cpp are built by the host compiler against
// the CUDA runtime API (nvcc cannot compile fmt's compile-time format strings, which kinfer's
// errors use); the kernels are nvcc-built (kinfer::cuda::gpu). Only linked when nvcc exists.
// Built a second time against the emulated runtime and the CPU-mode kernels
// (emu/cuda_backend_emu.cpp defines KINFER_CUDA_EMU_RUNTIME): the same class in namespace
// kinfer::backend::cuda_emu, which the tests run on every machine.
#pragma once
#include "backend/backend.h"
#include "backend/cuda/kernel_math.h"
#include "backend/cuda/open.h"
#include "runtime/device.h"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#if defined(KINFER_CUDA_EMU_RUNTIME)
#define KINFER_CUDA_BACKEND_NS cuda_emu
#else
#define KINFER_CUDA_BACKEND_NS cuda
#endif

namespace kinfer::backend::KINFER_CUDA_BACKEND_NS {

class CudaBackend final : public Backend {
public:
    // `name` is how --device and -ot call it: cudaN, or emu-cudaN for an emulated device.
    CudaBackend(int device, std::string name);
    ~CudaBackend() override;
    CudaBackend(const CudaBackend&) = delete;
    CudaBackend& operator=(const CudaBackend&) = delete;

    const std::string& name() const override { return name_; }
    bool host_memory() const override { return false; }
    int n_threads() const override { return 1; }
    size_t total_bytes() const override;
    size_t free_bytes() const override;
    std::string describe() const override;

    Buffer alloc(size_t bytes, std::string_view what) override;
    void free(Buffer& b) override;
    Buffer alloc_pinned_host(size_t bytes, std::string_view what) override;
    void free_pinned_host(Buffer& b) override;
    bool owns(const void* p, size_t bytes) const override;

    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;
    bool copy_to(Backend& dst_be, void* dst, const void* src, size_t bytes) override;   // another GPU: peer copy
    Event upload_async(void* dst, const void* host_src, size_t bytes) override;
    void wait(Event e) override;
    void synchronize() override;
    // CUDA graphs of one-token steps: from step_begin the compute stream is captured, and the
    // capture ends (instantiated, or the instantiated graph of that place in the step updated in
    // place, and launched) where an op must stop the host or touch memory (HostStop: a download,
    // the router's read-back, an allocation, a wait on the copy stream ...) and at step_end; the
    // next capture starts after that op. So a step runs as a few graphs instead of hundreds of
    // launches, whatever it does. Longer steps (prefill) run as before.
    void step_begin(int64_t n_tokens) override;
    void step_end() override;
    void step_abort() override;
    // Graphs launched and built (instantiated rather than updated) so far.
    uint64_t graphs_launched() const { return graph_launches_; }
    uint64_t graphs_built() const { return graph_builds_; }
    // The prefill GEMM (kGemmMinTokens tokens on) of the quantized weight types: fp16 dequantizes
    // tiles for cuBLAS (gemm.cu); int8, for the types with an int8 form (matvec_q8_supported),
    // multiplies their levels on the int8 tensor cores with the activations quantized as the CPU
    // quantizes them (mmq.cu); fused multiplies fp16's operands on the fp16 tensor cores with the
    // weights decoded inside the kernel (gemm_fused.cu), no dequantized copy. fp16 unless
    // KINFER_CUDA_GEMM says int8 or fused when the backend opens: which is faster where is not
    // measured on a GPU yet (kinfer_gpu_check times all three).
    enum class PrefillGemm { fp16, int8, fused };
    void set_prefill_gemm(PrefillGemm g) { prefill_gemm_ = g; }
    PrefillGemm prefill_gemm() const { return prefill_gemm_; }
    // The arithmetic of two kernels with a tensor-core form: fp32 FMAs on the CUDA cores, or TF32
    // tensor cores (mma_tf32.cuh) on 3xTF32 splits (fp32-accurate) or single TF32 products.
    //   kda: the chunked KDA of prefill (kda_chunked.cu / kda_chunked_mma.cu), KINFER_CUDA_KDA;
    //   mla: the grouped absorbed MLA kernel (mla.cu / mla_mma.cuh) and the decompressed form's
    //        flash kernel (mla_mha.cu / mla_mha_mma.cuh), KINFER_CUDA_MLA.
    // fp32 unless the variable says tf32x3 or tf32 when the backend opens: none of the forms is
    // measured on a GPU yet (kinfer_gpu_check times each). KINFER_CUDA_MLA also takes
    // f16x2 / f16: over an f16 latent cache, the grouped absorbed kernel on fp16 tensor cores
    // (mla_mma_f16.cuh: the cache exact, q and the probabilities split in two fp16 parts or
    // rounded once) and the decompressed form's key expansion on them (the weights split); the
    // TF32 forms (tf32x3 / tf32) wherever those do not apply. KINFER_CUDA_KDA also takes
    // f16x3 / f16: the state products on fp16 tensor cores (kda_chunked_mma_f16.cuh: both operands
    // scaled and split in two fp16 parts, three products, or rounded once).
    using Math = ::kinfer::cuda::F32Math;   // the kernels' own enum (kernel_math.h)
    void set_kda_math(Math m) { kda_math_ = m; }
    void set_mla_math(Math m) { mla_math_ = m; }
    Math kda_math() const { return kda_math_; }
    Math mla_math() const { return mla_math_; }
    int native_device() const override { return device_; }
    void* native_stream() const override { return compute_; }

    // The copy engine as the expert store's device tier uses it (cuda_expert_device.h): a copy
    // queued after the compute work queued so far (so it cannot overwrite a slot a kernel still
    // reads), its ticket (wait(Event{ticket}) makes the compute stream wait for it), and host-side
    // checks of a ticket.
    uint64_t upload_after_compute(void* dst, const void* host_src, size_t bytes);
    bool copy_done(uint64_t ticket);
    void copy_host_wait(uint64_t ticket);
    runtime::Device& expert_device();   // made on first use

    void matmul(const Mat& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy) override;
    void matmul_tasks(std::span<const MatInput> inputs, std::span<const MatTask> tasks) override;
    void embed(const Mat& E, const int32_t* tokens, int64_t n, float* x) override;
    void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps, int64_t ld) override;
    void l2_norm(float* x, int64_t rows, int64_t d, float eps) override;
    void add(float* y, const float* a, int64_t n) override;
    void mul_sigmoid(float* y, const float* g, int64_t n) override;
    void sigmoid(float* x, int64_t n) override;
    void softmax_rows(float* x, int64_t rows, int64_t n, float scale) override;
    void copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) override;
    void glu(float* g, const float* u, int64_t rows, int64_t ff, const Glu& act) override;
    void conv_silu(float* x, int64_t n, int64_t channels, int64_t W, const float* taps, float* state) override;
    void kda_decay(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D,
                   const KdaGate& gate) override;
    void kda_scan(const KdaScan& s) override;
    void mla_attend_absorbed(const float* cache, const float* Q, float* lat, const MlaShape& s) override;
    void mla_attend_decompressed(const Mat& k_b, const Mat& v_b, const float* cache, const float* q, float* o,
                                 const MlaShape& s) override;
    void mla_cache_store(const LatentPages& c, int64_t pos0, int64_t n, const float* rows, int64_t ld) override;
    void mla_cache_load(const LatentPages& c, int64_t pos0, int64_t n, float* rows) override;
    void mla_attend_tiled(const LatentPages& c, const float* Q, float* lat, const MlaShape& s) override;
    void mla_attend_tiled_mha(const Mat& k_b, const Mat& v_b, const LatentPages& c, const float* q, float* o,
                              const MlaShape& s) override;
    bool has_tiled_mha() const override { return true; }
    void route(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel, float* w,
               const RouteHook& hook) override;
    // Up to kGatherCopiesMax rows as device copies (a CUDA graph holds them), more through a
    // kernel over the uploaded list (which ends a capture).
    static constexpr int64_t kGatherCopiesMax = 64;
    void gather_rows(const float* src, int64_t cols, std::span<const int64_t> idx, int64_t div, float* dst) override;
    void scatter_weighted(const float* src, int64_t cols, std::span<const int64_t> idx, const float* w,
                          float* dst) override;
    void sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out) override;
    void route_resident(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel,
                        float* w) override;
    void matmul_id(const Mat& experts, int64_t n_slices, const int32_t* sel, int64_t slots, const float* x,
                   int64_t x_div, float* y) override;
    void scale_rows(float* y, const float* w, int64_t rows, int64_t cols) override;
    bool resident_moe() const override { return true; }
    void attn_res_mix(std::span<const float* const> stack, const float* p, const float* w, float* out, int64_t n,
                      int64_t d, float eps) override;

private:
    // Ends the capture in progress (if any) for the scope of an op that cannot be captured, and
    // starts the next one after it.
    struct HostStop {
        CudaBackend& be;
        bool was;
        explicit HostStop(CudaBackend& b);
        ~HostStop();
        HostStop(const HostStop&) = delete;
        HostStop& operator=(const HostStop&) = delete;
    };
    void begin_segment();
    void end_segment();
    uint64_t record_copy(const char* op);                 // an event at the copy stream's end, as a ticket
    void reap();                                          // releases the events that have fired, oldest first
    void check(int cuda_error, const char* what) const;   // throws naming the op and the CUDA error
    void need(const void* p, size_t bytes, const char* op, const char* arg) const;
    void need(const Mat& W, const char* op) const;
    // W is a device weight of s.H slices of slice_rows rows of cols, of a type with a kernel.
    void need_heads(const Mat& W, int64_t slice_rows, int64_t cols, const MlaShape& s, const char* op) const;
    void select() const;                                  // cudaSetDevice(device_)
    // A grow-only device scratch buffer (route's selections, MLA's pieces).
    void* scratch(size_t bytes);
    // The prefill GEMM's cuBLAS handle (on the compute stream, made on first use) and its own
    // grow-only workspace (bounded: kernels.h gemm_workspace_bytes).
    void* blas();
    void* gemm_workspace(size_t bytes);
    // A paged latent cache's page table on the device, every page checked to be this device's.
    // One table per cache (a model has one cache per MLA layer, K3 about fifteen), known by its
    // first page; only the pages added since the last call for that cache are checked and
    // copied, from pinned memory on the compute stream, so the host never waits for it (a copy
    // from pageable memory may make the driver synchronize, and a stop per MLA layer and token
    // is what a CUDA graph of the step cannot hold).
    const uint8_t* const* page_table(const LatentPages& c, const char* op);
    struct PageTable {
        Buffer dev, pinned;               // room for `cap` page pointers each
        size_t cap = 0;
        size_t n = 0;                     // entries the pinned copy holds, and the device's after the queued copies
    };
    void enable_peer_access(CudaBackend& peer);
    std::set<int> peers_asked_;                           // GPUs enable_peer_access has been asked for
    // Buffers a queued copy or kernel may still use: freed at the next synchronize() or download().
    void retire(Buffer b, bool pinned);
    // b replaced by a buffer of at least `bytes` (half as large again as b when that fits), the
    // old one retired.
    void grow(Buffer& b, size_t bytes, const char* what);
    // bytes of host memory (a list a kernel reads) into the scratch buffer, on the compute stream;
    // returns the device copy. Not capturable: the caller holds a HostStop.
    void* upload_list(const void* host, size_t bytes, const char* op);
    void free_retired();

    int device_;
    std::string name_;
    void* compute_ = nullptr;                             // cudaStream_t
    void* copy_ = nullptr;                                // cudaStream_t
    // The copy stream's events, by ticket. The expert store's I/O thread records them
    // (upload_after_compute) while the op thread waits on them (wait, copy_done, copy_host_wait):
    // events_mu_ guards both, and an event a host thread is blocked on is not released under it.
    struct CopyEvent {
        void* ev = nullptr;                               // cudaEvent_t
        int host_waiters = 0;                             // copy_host_wait calls blocked on it
    };
    std::mutex events_mu_;
    uint64_t next_ticket_ = 1;
    std::map<uint64_t, CopyEvent> events_;
    Buffer scratch_;
    void* blas_ = nullptr;                                // kinfer::cuda::gpu::Blas*
    Buffer gemm_ws_;
    std::map<const uint8_t*, PageTable> tables_;         // by the cache's first page
    std::vector<std::pair<Buffer, bool>> retired_;        // (buffer, pinned)
    std::unique_ptr<runtime::Device> expert_device_;
    bool step_ = false, capturing_ = false;               // in a captured step; capturing now
    std::thread::id step_thread_;                         // the thread running it
    size_t segment_ = 0;                                  // graphs launched in this step so far
    std::vector<void*> execs_;                            // cudaGraphExec_t for each place in a step
    uint64_t graph_launches_ = 0, graph_builds_ = 0;
    PrefillGemm prefill_gemm_ = PrefillGemm::fp16;
    Math kda_math_ = Math::fp32, mla_math_ = Math::fp32;
    // Whether a matmul of n tokens with W takes the int8 kernels: matvec_q8 below kGemmMinTokens,
    // mmq from there on when prefill_gemm_ says int8.
    bool int8_matmul(const Mat& W, int64_t n) const;
    // Whether it takes the fused fp16 GEMM: from kGemmMinTokens on when prefill_gemm_ says fused.
    bool fused_matmul(const Mat& W, int64_t n) const;
    // A Math from environment variable var (unset or empty: fp32; fp32, tf32x3, tf32, f16, and
    // f16x3 for the KDA (kda) or f16x2 for the MLA); anything else is an error.
    Math math_from_env(const char* var, const char* what, bool kda) const;
};

}  // namespace kinfer::backend::KINFER_CUDA_BACKEND_NS
