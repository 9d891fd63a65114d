// The CPU backend: host memory, one persistent thread pool, and the kernels of src/backend/cpu
// (ggml's arithmetic, bit for bit). Every op first checks its arguments with need(): the CPU
// backend refuses device memory (a registered device range, device_memory.h); the strict
// simulated device (sim_backend.h) derives from it, runs the same kernels and refuses anything
// outside its arena.
#pragma once
#include "backend/backend.h"
#include "backend/cpu/matmul.h"
#include "runtime/thread_pool.h"

#include <memory>
#include <vector>

namespace kinfer::backend {

class CpuBackend : public Backend {
public:
    explicit CpuBackend(int n_threads = 0);
    // A backend running on another one's threads (the simulated device shares the host's pool).
    CpuBackend(std::shared_ptr<runtime::ThreadPool> pool, std::string name);
    ~CpuBackend() override;

    const std::string& name() const override { return name_; }
    bool host_memory() const override { return true; }
    int n_threads() const override { return pool_->size(); }
    size_t total_bytes() const override { return 0; }
    size_t free_bytes() const override;
    std::string describe() const override;
    runtime::ThreadPool& pool() { return *pool_; }
    std::shared_ptr<runtime::ThreadPool> shared_pool() { return pool_; }

    Buffer alloc(size_t bytes, std::string_view what) override;
    void free(Buffer& b) override;
    bool owns(const void* p, size_t bytes) const override;

    void upload(void* dst, const void* host_src, size_t bytes) override;
    void download(void* host_dst, const void* src, size_t bytes) override;
    void copy(void* dst, const void* src, size_t bytes) override;

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
    void gather_rows(const float* src, int64_t cols, std::span<const int64_t> idx, int64_t div, float* dst) override;
    void scatter_weighted(const float* src, int64_t cols, std::span<const int64_t> idx, const float* w,
                          float* dst) override;
    void sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out) override;
    void route_resident(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel,
                        float* w) override;
    void matmul_id(const Mat& experts, int64_t n_slices, const int32_t* sel, int64_t slots, const float* x,
                   int64_t x_div, float* y) override;
    void scale_rows(float* y, const float* w, int64_t rows, int64_t cols) override;
    void attn_res_mix(std::span<const float* const> stack, const float* p, const float* w, float* out, int64_t n,
                      int64_t d, float eps) override;
    void gelu(float* x, int64_t n, bool erf) override;
    void rope_2d(float* x, int64_t n, int64_t H, int64_t D, const int32_t* pos_x, const int32_t* pos_y, float theta,
                 int64_t ld) override;
    void attend_full(const float* q, const float* k, const float* v, float* o, int64_t n, int64_t H, int64_t D,
                     float scale) override;

protected:
    // Throws kinfer::Error naming this backend, the op and the argument when [p, p + bytes) is
    // not this backend's memory.
    void need(const void* p, size_t bytes, const char* op, const char* arg) const;
    void need(const Mat& W, const char* op) const;
    void need_f32(const float* p, int64_t n, const char* op, const char* arg) const {
        if (n > 0) need(p, size_t(n) * sizeof(float), op, arg);
    }
    // Every page of c is this backend's memory and rows [0, rows) exist.
    void need_pages(const LatentPages& c, int64_t rows, const char* op) const;
    // Called by need() once the range is known to be ours: a backend with a copy engine throws
    // when a copy the compute stream has not waited for is still writing the range.
    virtual void need_landed(const void* p, size_t bytes, const char* op, const char* arg) const;

private:
    std::shared_ptr<runtime::ThreadPool> pool_;
    std::string name_;
    // Activation conversions of matmul_tasks, kept so their buffers are reused call to call.
    std::vector<cpu::QuantActs> acts_;
    std::vector<float> kda_scratch_;
};

}  // namespace kinfer::backend
