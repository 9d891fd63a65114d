#include "backend/cpu/matmul.h"

#include "backend/cpu/row_split.h"

#include "common/error.h"
#include "quant/fp16.h"
#include "quant/matmul.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <string_view>
#include <chrono>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kinfer::backend::cpu {

float dot_f32_avx2(const float* a, const float* b, int64_t n);
void dot4_f32_sgemm_avx2(const float* const* w, const float* x, int64_t n, float* out);
float dot_f32_sgemm_avx2(const float* a, const float* b, int64_t n);
void mad_f32_avx2(float* y, const float* x, float a, int64_t n);
void fma_f32_avx2(float* y, const float* a, const float* b, int64_t n);
void dot4_f32_avx2(const float* a, const float* const* b, int64_t n, float* out);
void dot_f32_tile_avx2(const float* const* w, const float* const* x, int64_t n, float* out);
void dot_f32_sgemm_tile_avx2(const float* const* w, const float* const* x, int64_t n, float* out);

namespace {

// Every ISA decision goes through quant::active_isa(), so KINFER_ISA=scalar really gives a scalar
// forward pass (and =avx2 an AVX2 one on an AVX-512 machine).
bool have_avx2() {
    static const bool ok = quant::active_isa() >= quant::Isa::avx2;
    return ok;
}

float dot_f32_scalar(const float* a, const float* b, int64_t n) {
    // Eight partial sums, like a SIMD kernel would keep, so results do not depend much on
    // which path ran.
    float s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) s[k] += a[i + k] * b[i + k];
    float r = ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
    for (; i < n; ++i) r += a[i] * b[i];
    return r;
}

// Multiplications below this many multiply-adds run on the calling thread: waking the pool
// costs a few microseconds, more than a tiny matvec.
constexpr int64_t kMinParallelWork = 1 << 15;
// Activation rows processed together, so each weight row is reused from L1 for a whole block.
constexpr int64_t kTokenBlock = 16;
// matmul_jobs' slices per thread when the pool has more threads than CPUs.
constexpr int kSlicesPerThreadOversubscribed = 2;
// matmul_jobs claims no piece of a region below this many weight bytes (row_split.h): each piece
// starts its streams and their prefetch anew. With several tokens, no piece below this many rows
// either (each piece packs the activations again).
constexpr double kMinPieceBytes = 64 << 10;
constexpr int64_t kMinPieceRowsPrefill = 64;

}  // namespace

float dot_f32(const float* a, const float* b, int64_t n) {
    return have_avx2() ? dot_f32_avx2(a, b, n) : dot_f32_scalar(a, b, n);
}

void dot4_f32(const float* a, const float* const* b, int64_t n, float* out) {
    if (have_avx2()) return dot4_f32_avx2(a, b, n, out);
    for (int k = 0; k < 4; ++k) out[k] = dot_f32_scalar(a, b[k], n);
}

void mad_f32(float* y, const float* x, float a, int64_t n) {
    if (have_avx2()) return mad_f32_avx2(y, x, a, n);
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void fma_f32(float* y, const float* a, const float* b, int64_t n) {
    if (have_avx2()) return fma_f32_avx2(y, a, b, n);
    for (int64_t i = 0; i < n; ++i) y[i] = std::fma(a[i], b[i], y[i]);
}

void dequant_row(const Mat& W, int64_t r, float* out) {
    if (W.type == quant::Type::F32) {
        std::memcpy(out, W.row(r), size_t(W.cols) * sizeof(float));
        return;
    }
    quant::traits(W.type).to_float(W.row(r), out, W.cols);
}

// ---- activation conversion ----

void quantize_acts(runtime::ThreadPool* pool, quant::Type wtype, const float* x, int64_t n, int64_t cols,
                   int64_t ldx, QuantActs& out) {
    if (ldx == 0) ldx = cols;
    out.cols = cols;
    out.f32 = nullptr;
    if (wtype == quant::Type::F32) {
        out.type = quant::Type::F32;
        out.f32 = x;
        out.ld_f32 = ldx;
        return;
    }
    const quant::Traits& wt = quant::traits(wtype);
    const quant::Type vdt = wt.vec_dot_type;
    out.type = vdt;
    if (vdt == quant::Type::F32) {
        if (wtype == quant::Type::F16 || wtype == quant::Type::BF16) {
            // ggml-cpu converts activations to F16 / BF16 for these weights (vec_dot_type);
            // quant's kernels take F32 activations, so round them through the narrow type.
            out.buf.resize(size_t(n * cols) * sizeof(float));
            float* r = reinterpret_cast<float*>(out.buf.data());
            for (int64_t t = 0; t < n; ++t)
                for (int64_t i = 0; i < cols; ++i) {
                    const float v = x[t * ldx + i];
                    r[t * cols + i] = wtype == quant::Type::F16 ? quant::fp16_to_fp32(quant::fp32_to_fp16(v))
                                                                : quant::bf16_to_fp32(quant::fp32_to_bf16(v));
                }
            out.f32 = r;
            out.ld_f32 = cols;
            return;
        }
        out.f32 = x;
        out.ld_f32 = ldx;
        return;
    }
    const quant::Traits& at = quant::traits(vdt);
    if (cols % at.block_size != 0)
        fail("matmul: row of {} elements is not a multiple of {}'s block size {}", cols, at.name, at.block_size);
    out.row_bytes = quant::row_size(at, cols);
    if (out.buf.size() < out.row_bytes * size_t(n)) out.buf.resize(out.row_bytes * size_t(n));
    out.q = out.buf.data();

    const quant::FromFloatFn conv = at.from_float ? at.from_float : at.from_float_ref;
    if (!conv) fail("matmul: no activation quantizer for {}", at.name);

    auto work = [&](int64_t b, int64_t e, int) {
        for (int64_t t = b; t < e; ++t) conv(x + t * ldx, out.buf.data() + size_t(t) * out.row_bytes, cols);
    };
    if (pool && n * cols >= kMinParallelWork) pool->parallel_for(n, work);
    else work(0, n, 0);
}

// ---- the product ----

void matmul_q_rows(const Mat& W, const QuantActs& xq, int64_t n, float* y, int64_t ldy, int64_t r0, int64_t r1) {
    if (ldy == 0) ldy = W.rows;
    if (W.type == quant::Type::F32) {
        // Follow llama.cpp's choice of kernel so fp32 results match it bit for bit: tinyBLAS
        // (sgemm) for >= 2 activation rows when cols % 16 == 0, ggml_vec_dot_f32 otherwise.
        const bool sgemm = n >= 2 && W.cols % 16 == 0 && have_avx2();
        for (int64_t t0 = 0; t0 < n; t0 += kTokenBlock) {
            const int64_t t1 = std::min(n, t0 + kTokenBlock);
            int64_t r = r0;
            if (sgemm) {
                for (; r + 4 <= r1; r += 4) {
                    const float* w[4] = {reinterpret_cast<const float*>(W.row(r)), reinterpret_cast<const float*>(W.row(r + 1)),
                                         reinterpret_cast<const float*>(W.row(r + 2)), reinterpret_cast<const float*>(W.row(r + 3))};
                    int64_t t = t0;
                    for (; t + 2 <= t1; t += 2) {   // two activation rows per tile, same bits
                        const float* x[2] = {static_cast<const float*>(xq.row(t)), static_cast<const float*>(xq.row(t + 1))};
                        float o[8];
                        dot_f32_sgemm_tile_avx2(w, x, W.cols, o);
                        for (int k = 0; k < 8; ++k) y[(t + k / 4) * ldy + r + k % 4] = o[k];
                    }
                    for (; t < t1; ++t) {
                        float o[4];
                        dot4_f32_sgemm_avx2(w, static_cast<const float*>(xq.row(t)), W.cols, o);
                        float* yt = y + t * ldy + r;
                        yt[0] = o[0]; yt[1] = o[1]; yt[2] = o[2]; yt[3] = o[3];
                    }
                }
                for (; r < r1; ++r) {
                    const float* w = reinterpret_cast<const float*>(W.row(r));
                    for (int64_t t = t0; t < t1; ++t)
                        y[t * ldy + r] = dot_f32_sgemm_avx2(w, static_cast<const float*>(xq.row(t)), W.cols);
                }
            }
            // ggml_vec_dot_f32's order; four weight rows x two activation rows per tile, four
            // weight rows for a last single row (each product keeps its own order).
            for (; r + 4 <= r1; r += 4) {
                const float* w[4] = {reinterpret_cast<const float*>(W.row(r)), reinterpret_cast<const float*>(W.row(r + 1)),
                                     reinterpret_cast<const float*>(W.row(r + 2)), reinterpret_cast<const float*>(W.row(r + 3))};
                int64_t t = t0;
                if (have_avx2())
                    for (; t + 2 <= t1; t += 2) {
                        const float* x[2] = {static_cast<const float*>(xq.row(t)), static_cast<const float*>(xq.row(t + 1))};
                        float o[8];
                        dot_f32_tile_avx2(w, x, W.cols, o);
                        for (int k = 0; k < 8; ++k) y[(t + k / 4) * ldy + r + k % 4] = o[k];
                    }
                for (; t < t1; ++t) {
                    float o[4];
                    dot4_f32(static_cast<const float*>(xq.row(t)), w, W.cols, o);
                    float* yt = y + t * ldy + r;
                    yt[0] = o[0]; yt[1] = o[1]; yt[2] = o[2]; yt[3] = o[3];
                }
            }
            for (; r < r1; ++r) {
                const float* w = reinterpret_cast<const float*>(W.row(r));
                for (int64_t t = t0; t < t1; ++t) y[t * ldy + r] = dot_f32(w, static_cast<const float*>(xq.row(t)), W.cols);
            }
        }
        return;
    }
    if (quant::traits(W.type).quantized) {
        // quant's gemm: ggml's dot kernels (bit-equal), several activation rows per weight row.
        quant::gemm(W.type, W.data, W.row_bytes, W.cols, xq.q, n, y, ldy, r0, r1);
        return;
    }
    // F16 / BF16 weights with activations already rounded to the narrow type (quantize_acts).
    const quant::VecDotFn vd = quant::traits(W.type).vec_dot;
    for (int64_t t0 = 0; t0 < n; t0 += kTokenBlock) {
        const int64_t t1 = std::min(n, t0 + kTokenBlock);
        for (int64_t r = r0; r < r1; ++r) {
            const uint8_t* w = W.row(r);
            for (int64_t t = t0; t < t1; ++t) y[t * ldy + r] = vd(W.cols, w, xq.row(t));
        }
    }
}

void matmul_q(runtime::ThreadPool& pool, const Mat& W, const QuantActs& xq, int64_t n, float* y, int64_t ldy) {
    const MatJob job{W, &xq, n, y, ldy};
    matmul_jobs(pool, &job, 1);
}

void matmul_jobs(runtime::ThreadPool& pool, const MatJob* jobs, size_t count) {
    // Per job: its units of 4 rows (the F32 kernel's row groups) and a unit's cost, its weight
    // bytes when one token reads them (decode streams them), times the token count when there are
    // several (prefill multiplies each byte by every token: a routed expert's 200 tokens cost 100
    // times its 2). Kept by the calling thread from call to call (no allocation a pass); the
    // pool's tasks reach them (and the split below) through these references, since a
    // thread_local named in a task would be the worker's own.
    thread_local std::vector<int64_t> units_of_caller;
    thread_local std::vector<double> cost_of_caller;
    std::vector<int64_t>& units = units_of_caller;
    std::vector<double>& cost = cost_of_caller;
    units.resize(count);
    cost.resize(count);
    int64_t work = 0, rows = 0, total_units = 0, n_max = 0;
    double bytes = 0;
    for (size_t i = 0; i < count; ++i) {
        const MatJob& j = jobs[i];
        work += j.W.rows * j.W.cols * j.n;
        rows += j.W.rows;
        units[i] = j.n > 0 ? (j.W.rows + 3) / 4 : 0;
        cost[i] = 4.0 * double(j.W.row_bytes) * double(std::max<int64_t>(1, j.n));
        bytes += 4.0 * double(j.W.row_bytes) * double(units[i]);
        total_units += units[i];
        n_max = std::max(n_max, j.n);
    }
    // Rows r0..r1 of job j (the result rows are their own: the bits do not depend on the split).
    auto rows_of = [&](const MatJob& j, int64_t r0, int64_t r1) {
        r1 = std::min(j.W.rows, r1);
        if (r0 < r1 && j.n > 0) matmul_q_rows(j.W, *j.xq, j.n, j.y, j.ldy ? j.ldy : j.W.rows, r0, r1);
    };
    if (pool.size() == 1 || work < kMinParallelWork || rows < 8) {
        for (size_t i = 0; i < count; ++i) rows_of(jobs[i], 0, jobs[i].W.rows);
        return;
    }
    if (pool.oversubscribed()) {
        // Slices claimed in turn by whichever thread is free, two a thread: a CPU the scheduler
        // gives two threads would otherwise finish last, a whole slice after the others (3
        // threads on 2 CPUs, k3-wide Q4_K_M pp64: 64 t/s against 78 with 2; 73 this way). Each
        // slice is a part of every job's units.
        const int slices = pool.size() * kSlicesPerThreadOversubscribed;
        std::atomic<int> next{0};
        pool.run([&](int, int) {
            for (int s; (s = next.fetch_add(1, std::memory_order_relaxed)) < slices;)
                for (size_t i = 0; i < count; ++i) rows_of(jobs[i], units[i] * s / slices * 4, units[i] * (s + 1) / slices * 4);
        });
        return;
    }
    // One region of units a task (normally one a thread), the jobs end to end, helped at its end
    // by the tasks that finish first (row_split.h). The smallest piece is in weight bytes; with
    // several tokens also in rows, since each piece of a prefill product packs its activations anew
    // (quant/vec_dot_k_tiles_avx512.cpp, pack_acts).
    int64_t min_units = total_units > 0 ? int64_t(std::ceil(kMinPieceBytes / (bytes / double(total_units)))) : 1;
    if (n_max > 1) min_units = std::max(min_units, kMinPieceRowsPrefill / 4);
    thread_local RowSplit split_of_caller;
    RowSplit& split = split_of_caller;
    split.reset(units.data(), cost.data(), count, pool.size(), min_units);
    pool.run([&](int ith, int) {
        int cursor = 0;
        for (int64_t b, e; split.claim(ith, cursor, b, e);)
            split.for_each_job(b, e, [&](size_t j, int64_t u0, int64_t u1) { rows_of(jobs[j], u0 * 4, u1 * 4); });
    });
}

void matmul_many(runtime::ThreadPool& pool, const Mat* Ws, float* const* ys, size_t count, const float* x, int64_t n) {
    // One conversion per distinct vec_dot type (a layer mixes at most a few weight types).
    constexpr size_t kMax = 8;
    if (count > kMax) fail("matmul_many: {} weights, at most {}", count, kMax);
    thread_local QuantActs conv[kMax];
    quant::Type conv_type[kMax];
    size_t n_conv = 0;
    MatJob jobs[kMax];
    for (size_t i = 0; i < count; ++i) {
        const quant::Type vt = Ws[i].type == quant::Type::F32 ? quant::Type::F32 : quant::traits(Ws[i].type).vec_dot_type;
        // F16 / BF16 round the activations to their own type: key those by the weight type.
        const quant::Type key = vt == quant::Type::F32 ? Ws[i].type : vt;
        size_t k = 0;
        while (k < n_conv && conv_type[k] != key) ++k;
        if (k == n_conv) {
            quantize_acts(&pool, Ws[i].type, x, n, Ws[i].cols, Ws[i].cols, conv[k]);
            conv_type[n_conv++] = key;
        }
        jobs[i] = MatJob{Ws[i], &conv[k], n, ys[i], 0};
    }
    matmul_jobs(pool, jobs, count);
}

namespace {

// The whole integer in environment variable `name`, or 0 when it is unset or empty; anything else
// (not a number, trailing characters, a value `valid` refuses) fails with what was expected.
template <class Valid>
int env_int(const char* name, Valid valid, const char* expected) {
    const char* env = std::getenv(name);
    if (!env || !*env) return 0;
    const std::string_view v(env);
    int x = 0;
    const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
    if (ec != std::errc() || end != v.data() + v.size() || !valid(x)) fail("{}={}: expected {}", name, env, expected);
    return x;
}

// Runs measure(candidate) three times for each entry of `tried` (rounds over all of them, best of
// each: a machine whose speed drifts slows them alike) and returns the fastest candidate when it
// beats `def`'s rate by more than `margin`, else `def`.
template <class Measure>
int keep_fastest(std::vector<std::pair<int, double>>& tried, int def, double margin, Measure measure) {
    for (int round = 0; round < 3; ++round)
        for (auto& [c, r] : tried) r = std::max(r, measure(c));
    const auto def_it = std::find_if(tried.begin(), tried.end(), [&](const auto& e) { return e.first == def; });
    const auto best_it = std::max_element(tried.begin(), tried.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    return best_it->second > def_it->second * (1 + margin) ? best_it->first : def;
}

}  // namespace

int apply_decode_streams_env() {
    const int s = env_int("KINFER_DECODE_STREAMS", [](int x) { return x == 1 || x == 2 || x == 4 || x == 8; }, "1, 2, 4 or 8");
    if (s) quant::set_decode_streams(s);
    return s;
}

int apply_decode_prefetch_env() {
    const int b = env_int("KINFER_DECODE_PREFETCH", [](int x) { return x >= 64 && x <= 16384 && x % 64 == 0; },
                          "a multiple of 64 bytes from 64 to 16384");
    if (b) quant::set_decode_prefetch(b);
    return b;
}

bool apply_k_tile_form_env() {
    const char* env = std::getenv("KINFER_K_TILES");
    if (!env || !*env) return false;
    const std::string_view v(env);
    if (v == "dpbusd") quant::set_k_tile_form(quant::KTileForm::dpbusd);
    else if (v == "maddubs") quant::set_k_tile_form(quant::KTileForm::maddubs);
    else fail("KINFER_K_TILES={}: expected dpbusd or maddubs", env);
    return true;
}

DecodeStreams calibrate_decode_streams(runtime::ThreadPool& pool) {
    DecodeStreams d;
    d.prefetch_from_env = apply_decode_prefetch_env() != 0;
    if (const int s = apply_decode_streams_env()) {
        d.chosen = s;
        d.from_env = true;
        return d;
    }
    const auto t0 = std::chrono::steady_clock::now();
    quant::set_decode_streams(0);
    if (!d.prefetch_from_env) quant::set_decode_prefetch(0);   // the layouts are ranked at the default distance
    const quant::Isa isa = quant::active_isa();
    const std::vector<int> layouts = quant::decode_stream_layouts(isa);
    if (layouts.empty()) return d;   // the scalar kernels have one layout and do not prefetch
    // Twice the last-level cache, within 32-512 MiB (a VM may report its host's whole L3), so the
    // product streams from memory as decode does; rows as wide as K3's hidden size (7168 = 28
    // super-blocks). 64 MiB was too little on a Zen 4 VM that caches reads up to about 100 MiB
    // (membw: 43.7 GB/s over 64 MiB, 36.6 over 256): the layouts were ranked at cache speed
    // (4 streams 53 GB/s, above the machine's read rate); from 256 MiB they read 34-37 GB/s. A Xeon VM
    // with 260 MiB of L3 still read 36 GB/s over 256 MiB against membw's 31-32, hence up to 512.
    long llc = 0;
#ifdef _SC_LEVEL3_CACHE_SIZE
    llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
#endif
    const size_t want = std::clamp<size_t>(2 * size_t(std::max(0L, llc)), size_t(32) << 20, size_t(512) << 20);
    // Q4_K and Q6_K, the two types of a Q4_K_M model's decode (its attn_v, ffn_down and output
    // are Q6_K), and Q8_0, most of an MXFP4_MOE model's bytes (everything but the routed experts),
    // a third of the size each: they do not prefer the same layouts (Zen 5, one thread: Q6_K reads
    // at 8 GB/s with its rows side by side and at 30 GB/s from 4 segments; Q4_K at 19 and 25), so a
    // layout chosen by one alone can halve another's speed. (Q8_0's kernels take their own layout
    // at the default, vec_dot_tiles_avx512.cpp's decode_tiles.)
    struct Bench {
        Mat W;
        std::vector<uint8_t> buf;
        QuantActs xq;
    };
    constexpr int kTypes = 3;
    Bench bench[kTypes];
    const quant::Type types[kTypes] = {quant::Type::Q4_K, quant::Type::Q6_K, quant::Type::Q8_0};
    std::vector<float> x(7168);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float(int(i % 17) - 8) * 0.125f;
    size_t rows_max = 0;
    for (int k = 0; k < kTypes; ++k) {
        std::string name = quant::traits(types[k]).name;   // ggml's "q4_K": upper-case as in the docs
        name[0] = char(std::toupper(static_cast<unsigned char>(name[0])));
        d.products += (k ? " + " : "") + name;
        Mat& W = bench[k].W;
        W.type = types[k];
        W.cols = 7168;
        W.row_bytes = quant::row_size(quant::traits(W.type), W.cols);
        W.rows = int64_t(want / kTypes / W.row_bytes) / 64 * 64;
        W.name = "decode-calibration";
        // Every byte written (fresh zero pages would all map to one page and read from cache);
        // the (super-)block scales (Q4_K: d and dmin first, Q6_K: d last, Q8_0: d first) are small
        // fp16 values so the float sums stay finite.
        std::vector<uint8_t>& buf = bench[k].buf;
        buf.resize(W.bytes());
        std::memset(buf.data(), 0x5a, buf.size());
        const size_t sb = quant::traits(W.type).type_size;
        for (size_t off = 0; off + sb <= buf.size(); off += sb) {
            const size_t d = W.type == quant::Type::Q6_K ? off + sb - 2 : off;
            buf[d] = 0x00, buf[d + 1] = 0x1c;   // d = 2^-8
            if (W.type == quant::Type::Q4_K) buf[off + 2] = 0x00, buf[off + 3] = 0x1c;   // dmin
        }
        W.data = buf.data();
        quantize_acts(&pool, W.type, x.data(), 1, W.cols, W.cols, bench[k].xq);
        rows_max = std::max(rows_max, size_t(W.rows));
    }
    std::vector<float> y(rows_max);
    auto rate = [&](int streams) {
        quant::set_decode_streams(streams);
        double s = 0, bytes = 0;
        for (Bench& b : bench) {
            const auto a = std::chrono::steady_clock::now();
            matmul_q(pool, b.W, b.xq, 1, y.data());
            s += std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
            bytes += double(b.W.bytes());
        }
        return bytes / s / 1e9;
    };
    const int def = quant::default_decode_streams(isa);
    rate(def);   // warm-up: the pool's threads, the activations in cache
    // The default layout stays unless another is clearly (> 3 %) faster.
    for (int s : layouts) d.gbps.push_back({s, 0.0});
    d.chosen = keep_fastest(d.gbps, def, 0.03, rate);
    quant::set_decode_streams(d.chosen);
    // Then how far ahead each row prefetches, in that layout: it covers the memory's latency, which
    // differs between machines (the bytes one thread must have in flight: its read rate x latency).
    // k3-wide-shaped Q4_K, 2 threads: a Sapphire-Rapids-class Xeon VM read 27.1 / 28.2 / 29.5 /
    // 29.8 GB/s at 384 / 768 / 1536 / 3072 bytes, while on Zen 5 768 was best.
    if (!d.prefetch_from_env) {
        for (int p : quant::decode_prefetch_distances()) d.prefetch_gbps.push_back({p, 0.0});
        quant::set_decode_prefetch(keep_fastest(d.prefetch_gbps, quant::kDefaultDecodePrefetch, 0.02, [&](int p) {
            quant::set_decode_prefetch(p);
            return rate(d.chosen);
        }));
    }
    d.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return d;
}

void matmul(runtime::ThreadPool& pool, const Mat& W, const float* x, int64_t n, float* y, int64_t ldx, int64_t ldy) {
    thread_local QuantActs xq;
    quantize_acts(&pool, W.type, x, n, W.cols, ldx, xq);
    matmul_q(pool, W, xq, n, y, ldy);
}

}  // namespace kinfer::backend::cpu
