#include "backend/cpu_backend.h"

#include "backend/cpu/attention.h"
#include "backend/cpu/attention_tiled.h"
#include "backend/cpu/latent_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/kda_kernels.h"
#include "backend/cpu/ops.h"
#include "backend/device_memory.h"
#include "common/error.h"
#include "quant/matmul.h"
#include "quant/types.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>

namespace kinfer::backend {

namespace ops = cpu::ops;

CpuBackend::CpuBackend(int n_threads) : pool_(std::make_shared<runtime::ThreadPool>(n_threads)), name_("cpu") {
    cpu::apply_decode_streams_env();   // a layout fixed by the user holds in run / chat too
    cpu::apply_decode_prefetch_env();
    // The prefill tiles' instruction form: KINFER_K_TILES's, else measured here once a process
    // (about 3 ms on AVX-512, nothing elsewhere) rather than inside the first product's threads.
    if (!cpu::apply_k_tile_form_env()) quant::k_tile_form();
}

CpuBackend::CpuBackend(std::shared_ptr<runtime::ThreadPool> pool, std::string name)
    : pool_(std::move(pool)), name_(std::move(name)) {}

CpuBackend::~CpuBackend() = default;

size_t CpuBackend::free_bytes() const {
    // MemAvailable, what a new allocation can take without swapping.
    std::ifstream f("/proc/meminfo");
    std::string key;
    size_t kb = 0;
    while (f >> key >> kb) {
        if (key == "MemAvailable:") return kb * 1024;
        f.ignore(256, '\n');
    }
    return 0;
}

std::string CpuBackend::describe() const {
    return fmt::format("{}: host memory, {} threads, {} ISA, {:.1f} GiB available", name_, n_threads(),
                       quant::isa_name(quant::active_isa()), double(free_bytes()) / double(1ull << 30));
}

Buffer CpuBackend::alloc(size_t bytes, std::string_view what) {
    const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded);
    if (!p) fail("{}: cannot allocate {} bytes for {}", name_, bytes, what);
    return Buffer{static_cast<uint8_t*>(p), bytes, 0};
}

void CpuBackend::free(Buffer& b) {
    std::free(b.ptr);
    b = Buffer{};
}

bool CpuBackend::owns(const void* p, size_t bytes) const { return device_owning(p, bytes) == nullptr; }

void CpuBackend::need(const void* p, size_t bytes, const char* op, const char* arg) const {
    if (!owns(p, bytes)) {
        const char* dev = device_owning(p, bytes);
        fail("{}: op {} was handed {} memory for {} ({} bytes at {}): it is not this backend's", name_, op,
             dev ? dev : "host", arg, bytes, p);
    }
    need_landed(p, bytes, op, arg);
}

// Host memory has no copy engine: whatever was written is there.
void CpuBackend::need_landed(const void*, size_t, const char*, const char*) const {}

void CpuBackend::need(const Mat& W, const char* op) const {
    if (!owns(W.data, W.bytes())) {
        const char* dev = device_owning(W.data, W.bytes());
        fail("{}: op {} was handed {} memory for weight {} ({} bytes): it is not this backend's", name_, op,
             dev ? dev : "host", W.name, W.bytes());
    }
    need_landed(W.data, W.bytes(), op, W.name ? W.name : "weight");
}

// ---- copies ----

void CpuBackend::upload(void* dst, const void* host_src, size_t bytes) {
    need(dst, bytes, "upload", "dst");
    std::memcpy(dst, host_src, bytes);
}

void CpuBackend::download(void* host_dst, const void* src, size_t bytes) {
    need(src, bytes, "download", "src");
    std::memcpy(host_dst, src, bytes);
}

void CpuBackend::copy(void* dst, const void* src, size_t bytes) {
    need(dst, bytes, "copy", "dst");
    need(src, bytes, "copy", "src");
    std::memmove(dst, src, bytes);
}

// ---- dense algebra ----

void CpuBackend::matmul(const Mat& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy) {
    need(W, "matmul");
    need_f32(x, (n - 1) * (ldx ? ldx : W.cols) + W.cols, "matmul", "x");
    need_f32(y, (n - 1) * (ldy ? ldy : W.rows) + W.rows, "matmul", "y");
    cpu::matmul(*pool_, W, x, n, y, ldx, ldy);
}

void CpuBackend::matmul_tasks(std::span<const MatInput> inputs, std::span<const MatTask> tasks) {
    // One conversion per (input, activation format): ggml's vec_dot_type, or for F16 / BF16
    // weights the weight type itself (their activations are rounded to it).
    struct Conv {
        int input;
        quant::Type key;
        quant::Type wtype;   // a weight type of this conversion: what quantize_acts converts for
    };
    std::vector<Conv> convs;
    std::vector<size_t> conv_of(tasks.size());
    for (const MatInput& in : inputs) need_f32(in.x, (in.rows - 1) * (in.ld ? in.ld : in.cols) + in.cols, "matmul_tasks", "input");
    for (size_t i = 0; i < tasks.size(); ++i) {
        const MatTask& t = tasks[i];
        need(t.W, "matmul_tasks");
        if (t.input < 0 || size_t(t.input) >= inputs.size() || t.row0 < 0 || t.row0 + t.n > inputs[size_t(t.input)].rows ||
            t.W.cols != inputs[size_t(t.input)].cols)
            fail("{}: matmul_tasks: task {} ({}) does not fit its input", name_, i, t.W.name);
        if (t.n > 0) need_f32(t.y, (t.n - 1) * (t.ldy ? t.ldy : t.W.rows) + t.W.rows, "matmul_tasks", "y");
        const quant::Type vt = t.W.type == quant::Type::F32 ? quant::Type::F32 : quant::traits(t.W.type).vec_dot_type;
        const quant::Type key = vt == quant::Type::F32 ? t.W.type : vt;
        size_t k = 0;
        while (k < convs.size() && !(convs[k].input == t.input && convs[k].key == key)) ++k;
        if (k == convs.size()) convs.push_back({t.input, key, t.W.type});
        conv_of[i] = k;
    }
    if (acts_.size() < convs.size()) acts_.resize(convs.size());
    for (size_t k = 0; k < convs.size(); ++k) {
        const MatInput& in = inputs[size_t(convs[k].input)];
        cpu::quantize_acts(pool_.get(), convs[k].wtype, in.x, in.rows, in.cols, in.ld ? in.ld : in.cols, acts_[k]);
    }
    std::vector<cpu::QuantActs> views(tasks.size());
    std::vector<cpu::MatJob> jobs;
    jobs.reserve(tasks.size());
    for (size_t i = 0; i < tasks.size(); ++i) {
        const MatTask& t = tasks[i];
        if (t.n <= 0) continue;
        views[i] = acts_[conv_of[i]].view(t.row0);
        jobs.push_back(cpu::MatJob{t.W, &views[i], t.n, t.y, t.ldy});
    }
    cpu::matmul_jobs(*pool_, jobs.data(), jobs.size());
}

void CpuBackend::embed(const Mat& E, const int32_t* tokens, int64_t n, float* x) {
    need(E, "embed");
    need_f32(x, n * E.cols, "embed", "x");
    for (int64_t t = 0; t < n; ++t) {
        if (tokens[t] < 0 || tokens[t] >= E.rows) fail("token id {} out of range [0, {})", tokens[t], E.rows);
        cpu::dequant_row(E, tokens[t], x + t * E.cols);
    }
}

void CpuBackend::rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t d, float eps, int64_t ld) {
    if (ld == 0) ld = d;
    need_f32(x, (rows - 1) * ld + d, "rms_norm", "x");
    need_f32(y, (rows - 1) * ld + d, "rms_norm", "y");
    if (w) need_f32(w, d, "rms_norm", "weight");
    pool_->parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) ops::rms_norm(x + t * ld, w, y + t * ld, d, eps);
    }, std::max<int64_t>(2, 8192 / std::max<int64_t>(d, 1)));
}

void CpuBackend::l2_norm(float* x, int64_t rows, int64_t d, float eps) {
    need_f32(x, rows * d, "l2_norm", "x");
    pool_->parallel_for(rows, [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) ops::l2_norm(x + t * d, x + t * d, d, eps);
    }, std::max<int64_t>(2, 8192 / std::max<int64_t>(d, 1)));
}

void CpuBackend::add(float* y, const float* a, int64_t n) {
    need_f32(y, n, "add", "y");
    need_f32(a, n, "add", "a");
    for (int64_t i = 0; i < n; ++i) y[i] += a[i];
}

void CpuBackend::mul_sigmoid(float* y, const float* g, int64_t n) {
    need_f32(y, n, "mul_sigmoid", "y");
    need_f32(g, n, "mul_sigmoid", "gate");
    // A K3 layer's output gate (KDA or MLA) is 12288 elements a token, each a libm expf: worth
    // the pool in decode too.
    pool_->parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) y[i] *= ops::sigmoid(g[i]);
    }, 2048);
}

void CpuBackend::sigmoid(float* x, int64_t n) {
    need_f32(x, n, "sigmoid", "x");
    for (int64_t i = 0; i < n; ++i) x[i] = ops::sigmoid(x[i]);
}

void CpuBackend::softmax_rows(float* x, int64_t rows, int64_t n, float scale) {
    need_f32(x, rows * n, "softmax_rows", "x");
    for (int64_t t = 0; t < rows; ++t) ops::softmax(x + t * n, n, scale);
}

void CpuBackend::copy_rows(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows, int64_t cols) {
    if (rows <= 0) return;
    need_f32(dst, (rows - 1) * ldd + cols, "copy_rows", "dst");
    need_f32(src, (rows - 1) * lds + cols, "copy_rows", "src");
    for (int64_t t = 0; t < rows; ++t) std::memcpy(dst + t * ldd, src + t * lds, size_t(cols) * sizeof(float));
}

void CpuBackend::glu(float* g, const float* u, int64_t rows, int64_t ff, const Glu& act) {
    need_f32(g, rows * ff, "glu", "gate");
    need_f32(u, rows * ff, "glu", "up");
    // Element-wise over all rows * ff elements, split in whole blocks of 256 from the start once
    // there are 1024 a thread (decode's one row too): every element takes the vector SiLU / tanh
    // path it takes in one call (ops.h), so the bits do not depend on the thread count.
    constexpr int64_t kBlock = 256;
    const int64_t total = rows * ff;
    pool_->parallel_for((total + kBlock - 1) / kBlock, [&](int64_t b0, int64_t b1, int) {
        const int64_t i0 = b0 * kBlock, m = std::min(total, b1 * kBlock) - i0;
        if (act.situ) ops::situ_glu(g + i0, u + i0, g + i0, m, act.beta, act.linear_beta);
        else ops::swiglu(g + i0, u + i0, g + i0, m);
    }, 4);
}

// ---- mixers ----

void CpuBackend::conv_silu(float* x, int64_t n, int64_t channels, int64_t W, const float* taps, float* state) {
    need_f32(x, n * channels, "conv_silu", "x");
    need_f32(taps, channels * W, "conv_silu", "taps");
    need_f32(state, channels * (W - 1), "conv_silu", "state");
    // Split by channels, 16 at a time (kda_kernels.h: the same bits as one call). Decode runs
    // this three times a KDA layer over a K3 layer's 12288 channels: ~140 us each on one core of
    // the Xeon VM, half of the main thread's work between the pool's runs.
    constexpr int64_t kGroup = 16;
    pool_->parallel_for((channels + kGroup - 1) / kGroup, [&](int64_t g0, int64_t g1, int) {
        cpu::conv_silu_channels(x, n, channels, W, taps, state, g0 * kGroup, std::min(channels, g1 * kGroup));
    }, 64);
}

void CpuBackend::kda_decay(float* g, const float* dt_bias, const float* a, int64_t n, int64_t H, int64_t D,
                           const KdaGate& gate) {
    const int64_t di = H * D;
    need_f32(g, n * di, "kda_decay", "g");
    need_f32(dt_bias, di, "kda_decay", "ssm_dt.bias");
    need_f32(a, H, "kda_decay", "ssm_a");
    // Element-wise, split by (token, head): decode's one token has 96 heads of K3 to share.
    pool_->parallel_for(n * H, [&](int64_t u0, int64_t u1, int) {
        for (int64_t u = u0; u < u1; ++u) {
            const int64_t h = u % H;
            float* gh = g + (u / H) * di + h * D;
            const float* bh = dt_bias + h * D;
            const float ah = a[h];                        // -exp(A_log)
            for (int64_t i = 0; i < D; ++i) {
                const float f = gh[i] + bh[i];
                gh[i] = gate.lower_bound ? ops::sigmoid(-(f * ah)) * gate.lb   // K3: lb * sigmoid(exp(A_log) f)
                                         : ops::softplus(f) * ah;              // Kimi Linear
            }
        }
    }, 16);
}

void CpuBackend::kda_scan(const KdaScan& s) {
    const int64_t D = s.D, H = s.H, n = s.n, di = H * D;
    for (const float* p : {s.q, s.k, s.v, s.g}) need_f32(p, n * di, "kda_scan", "q/k/v/g");
    need_f32(s.beta, n * H, "kda_scan", "beta");
    need_f32(s.state, H * D * D, "kda_scan", "state");
    need_f32(s.o, n * di, "kda_scan", "o");
    const size_t per_head = cpu::kda_chunk_scratch_floats(D);
    if (s.chunked && kda_scratch_.size() < per_head * size_t(H)) kda_scratch_.resize(per_head * size_t(H));
    float* scratch = kda_scratch_.data();
    pool_->parallel_for(H, [&](int64_t h0, int64_t h1, int) {
        for (int64_t h = h0; h < h1; ++h) {
            float* M = s.state + h * D * D;
            if (s.chunked)
                cpu::kda_chunked_head(D, n, s.q + h * D, s.k + h * D, s.v + h * D, s.g + h * D, s.beta + h, di, H, M,
                                      s.o + h * D, di, scratch + size_t(h) * per_head);
            else
                cpu::kda_recurrent_head(D, n, s.q + h * D, s.k + h * D, s.v + h * D, s.g + h * D, s.beta + h, di, H, M,
                                        s.o + h * D, di);
        }
    });
}

void CpuBackend::mla_attend_absorbed(const float* cache, const float* Q, float* lat, const MlaShape& s) {
    const int64_t R = s.r + s.dr;
    need_f32(cache, (s.pos0 + s.n) * R, "mla_attend_absorbed", "latent cache");
    need_f32(Q, s.n * s.H * R, "mla_attend_absorbed", "q");
    need_f32(lat, s.n * s.H * s.r, "mla_attend_absorbed", "out");
    cpu::mla_attend_absorbed(*pool_, cache, Q, lat, s);
}

void CpuBackend::mla_attend_decompressed(const Mat& k_b, const Mat& v_b, const float* cache, const float* q, float* o,
                                         const MlaShape& s) {
    const int64_t R = s.r + s.dr;
    need(k_b, "mla_attend_decompressed");
    need(v_b, "mla_attend_decompressed");
    need_f32(cache, (s.pos0 + s.n) * R, "mla_attend_decompressed", "latent cache");
    need_f32(q, s.n * s.H * (s.dn + s.dr), "mla_attend_decompressed", "q");
    need_f32(o, s.n * s.H * s.dv, "mla_attend_decompressed", "out");
    cpu::mla_attend_decompressed(*pool_, k_b, v_b, cache, q, o, s);
}

void CpuBackend::need_pages(const LatentPages& c, int64_t rows, const char* op) const {
    if (rows > c.capacity())
        fail("{}: {} latent rows asked of a cache of {} pages x {} rows on {}", op, rows, c.n_pages, c.page_rows, name_);
    const int64_t used = (rows + c.page_rows - 1) / c.page_rows;
    for (int64_t i = 0; i < used; ++i) need(c.pages[i], size_t(c.page_rows) * c.row_bytes, op, "latent cache page");
}

void CpuBackend::mla_cache_store(const LatentPages& c, int64_t pos0, int64_t n, const float* rows, int64_t ld) {
    need_pages(c, pos0 + n, "mla_cache_store");
    need_f32(rows, (n - 1) * (ld ? ld : c.R) + c.R, "mla_cache_store", "rows");
    cpu::latent_store(c, pos0, n, rows, ld);
}

void CpuBackend::mla_cache_load(const LatentPages& c, int64_t pos0, int64_t n, float* rows) {
    need_pages(c, pos0 + n, "mla_cache_load");
    need_f32(rows, n * c.R, "mla_cache_load", "rows");
    cpu::latent_load(c, pos0, n, rows);
}

void CpuBackend::mla_attend_tiled(const LatentPages& c, const float* Q, float* lat, const MlaShape& s) {
    need_pages(c, s.pos0 + s.n, "mla_attend_tiled");
    need_f32(Q, s.n * s.H * (s.r + s.dr), "mla_attend_tiled", "q");
    need_f32(lat, s.n * s.H * s.r, "mla_attend_tiled", "out");
    cpu::mla_tiled_absorbed(*pool_, c, Q, lat, s);
}

void CpuBackend::mla_attend_tiled_mha(const Mat& k_b, const Mat& v_b, const LatentPages& c, const float* q, float* o,
                                      const MlaShape& s) {
    need(k_b, "mla_attend_tiled_mha");
    need(v_b, "mla_attend_tiled_mha");
    need_pages(c, s.pos0 + s.n, "mla_attend_tiled_mha");
    need_f32(q, s.n * s.H * (s.dn + s.dr), "mla_attend_tiled_mha", "q");
    need_f32(o, s.n * s.H * s.dv, "mla_attend_tiled_mha", "out");
    cpu::mla_tiled_mha(*pool_, k_b, v_b, c, q, o, s);
}

// ---- MoE and AttnRes ----

void CpuBackend::route(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel, float* w,
                       const RouteHook& hook) {
    const int64_t E = p.n_expert, K = p.n_used;
    need_f32(probs, n * E, "route", "router logits");
    need_f32(bias, E, "route", "exp_probs_b.bias");
    // Sigmoid scores in fp32; the bias only picks, the weights use the raw scores.
    for (int64_t i = 0; i < n * E; ++i) probs[i] = ops::sigmoid(probs[i]);
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::vector<float> biased(static_cast<size_t>(E));
    for (int64_t t = 0; t < n; ++t) {
        const float* pt = probs + t * E;
        for (int64_t e = 0; e < E; ++e) biased[size_t(e)] = pt[e] + bias[e];
        std::iota(idx.begin(), idx.end(), 0);
        // Descending biased score; exact ties go to the lower expert id.
        std::partial_sort(idx.begin(), idx.begin() + K, idx.end(), [&](int32_t a, int32_t b) {
            return biased[size_t(a)] > biased[size_t(b)] || (biased[size_t(a)] == biased[size_t(b)] && a < b);
        });
        if (hook) hook(t, idx.data());
        float* wt = w + t * K;
        for (int64_t i = 0; i < K; ++i) {
            sel[t * K + i] = idx[size_t(i)];
            wt[i] = pt[idx[size_t(i)]];
        }
        if (p.norm) {
            const float sum = std::max(ops::sum(wt, K), 6.103515625e-5f);
            for (int64_t i = 0; i < K; ++i) wt[i] /= sum;
        }
        if (p.scale != 1.0f)
            for (int64_t i = 0; i < K; ++i) wt[i] *= p.scale;
    }
}

void CpuBackend::gather_rows(const float* src, int64_t cols, std::span<const int64_t> idx, int64_t div, float* dst) {
    if (idx.empty()) return;
    need_f32(dst, int64_t(idx.size()) * cols, "gather_rows", "dst");
    for (size_t j = 0; j < idx.size(); ++j) {
        const float* r = src + (idx[j] / div) * cols;
        need_f32(r, cols, "gather_rows", "src");
        std::memcpy(dst + int64_t(j) * cols, r, size_t(cols) * sizeof(float));
    }
}

void CpuBackend::scatter_weighted(const float* src, int64_t cols, std::span<const int64_t> idx, const float* w,
                                  float* dst) {
    if (idx.empty()) return;
    need_f32(src, int64_t(idx.size()) * cols, "scatter_weighted", "src");
    for (size_t j = 0; j < idx.size(); ++j) {
        const float wj = w[size_t(idx[j])];
        const float* r = src + int64_t(j) * cols;
        float* d = dst + idx[j] * cols;
        need_f32(d, cols, "scatter_weighted", "dst");
        for (int64_t i = 0; i < cols; ++i) d[i] = r[i] * wj;
    }
}

void CpuBackend::sum_slots(const float* ys, int64_t n, int64_t K, int64_t cols, float* out) {
    need_f32(ys, n * K * cols, "sum_slots", "slots");
    need_f32(out, n * cols, "sum_slots", "out");
    // In selection order, as ggml's chain of adds does.
    for (int64_t t = 0; t < n; ++t) {
        float* dst = out + t * cols;
        std::memcpy(dst, ys + (t * K) * cols, size_t(cols) * sizeof(float));
        for (int64_t k = 1; k < K; ++k) {
            const float* src = ys + (t * K + k) * cols;
            for (int64_t i = 0; i < cols; ++i) dst[i] += src[i];
        }
    }
}

void CpuBackend::route_resident(float* probs, const float* bias, int64_t n, const RouteParams& p, int32_t* sel,
                                float* w) {
    route(probs, bias, n, p, sel, w, RouteHook());
}

void CpuBackend::matmul_id(const Mat& experts, int64_t n_slices, const int32_t* sel, int64_t slots, const float* x,
                           int64_t x_div, float* y) {
    if (slots <= 0) return;
    if (x_div < 1) fail("matmul_id: x_div {} (each input row serves x_div slots, at least 1)", x_div);
    if (experts.slice_rows <= 0) fail("matmul_id: {} is not a 3-D expert tensor", experts.name);
    const int64_t rows = experts.slice_rows;
    const MatInput in{x, (slots - 1) / x_div + 1, experts.cols, 0};
    std::vector<MatTask> tasks;
    tasks.reserve(size_t(slots));
    for (int64_t s = 0; s < slots; ++s) {
        if (sel[s] < 0 || sel[s] >= n_slices)
            fail("matmul_id: slot {} chose expert {} of {} ({})", s, sel[s], n_slices, experts.name);
        tasks.push_back(MatTask{experts.slice(sel[s]), 0, s / x_div, 1, y + s * rows, 0});
    }
    matmul_tasks({&in, 1}, tasks);
}

void CpuBackend::scale_rows(float* y, const float* w, int64_t rows, int64_t cols) {
    need_f32(y, rows * cols, "scale_rows", "y");
    for (int64_t r = 0; r < rows; ++r) {
        float* d = y + r * cols;
        const float wr = w[r];
        for (int64_t i = 0; i < cols; ++i) d[i] = d[i] * wr;   // scatter_weighted's product
    }
}

void CpuBackend::attn_res_mix(std::span<const float* const> stack, const float* p, const float* w, float* out,
                              int64_t n, int64_t d, float eps) {
    for (const float* b : stack) need_f32(b, n * d, "attn_res_mix", "banked block");
    need_f32(p, n * d, "attn_res_mix", "partial sum");
    need_f32(w, d, "attn_res_mix", "score");
    need_f32(out, n * d, "attn_res_mix", "out");
    cpu::attn_res_mix(*pool_, stack, p, w, out, n, d, eps);
}

}  // namespace kinfer::backend
