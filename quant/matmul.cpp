// gemm / gemv over the trait table's best vec_dot (see matmul.h).
#include "quant/matmul.h"

#include "quant/kernels.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace kinfer::quant {

namespace {
const Traits& act_traits(Type w) { return traits(traits(w).vec_dot_type); }
}  // namespace

namespace {
std::atomic<int> g_decode_streams{0};
}  // namespace

void set_decode_streams(int streams) { g_decode_streams.store(streams < 0 ? 0 : streams, std::memory_order_relaxed); }
int decode_streams() { return g_decode_streams.load(std::memory_order_relaxed); }

namespace detail {
int g_decode_prefetch = kDefaultDecodePrefetch;
}  // namespace detail

void set_decode_prefetch(int bytes) { detail::g_decode_prefetch = bytes <= 0 ? kDefaultDecodePrefetch : bytes; }
int decode_prefetch() { return detail::g_decode_prefetch; }
std::vector<int> decode_prefetch_distances() { return {kDefaultDecodePrefetch, 1536, 3072}; }

namespace {
// KTileForm as an int (automatic until measured or set) and the last measurement, under a mutex
// so that one thread measures while others wait; the form is read with acquire once per tiled call.
std::atomic<int> g_k_tile_form{int(KTileForm::automatic)};
std::mutex g_k_tile_mutex;
KTileTimes g_k_tile_times;
}  // namespace

void set_k_tile_form(KTileForm form) {
    const std::lock_guard<std::mutex> lock(g_k_tile_mutex);
    g_k_tile_times = {};
    g_k_tile_form.store(int(form), std::memory_order_release);
}

KTileForm k_tile_form() {
    if (const int f = g_k_tile_form.load(std::memory_order_acquire); f != int(KTileForm::automatic)) return KTileForm(f);
    if (active_isa() != Isa::avx512) return KTileForm::automatic;
    const std::lock_guard<std::mutex> lock(g_k_tile_mutex);
    if (const int f = g_k_tile_form.load(std::memory_order_relaxed); f != int(KTileForm::automatic)) return KTileForm(f);
    KTileTimes t;
    avx512::measure_k_tile_forms(t.dpbusd_ns, t.maddubs_ns);
    // dpbusd unless maddubs is more than 2 % faster (timings within noise keep the older form).
    const KTileForm f = t.maddubs_ns * 1.02 < t.dpbusd_ns ? KTileForm::maddubs : KTileForm::dpbusd;
    g_k_tile_times = t;
    g_k_tile_form.store(int(f), std::memory_order_release);
    return f;
}

KTileTimes k_tile_times() {
    const std::lock_guard<std::mutex> lock(g_k_tile_mutex);
    return g_k_tile_times;
}

const char* k_tile_form_name(KTileForm form) {
    return form == KTileForm::dpbusd ? "dpbusd" : form == KTileForm::maddubs ? "maddubs" : "auto";
}

int default_decode_streams(Isa isa) {
    return isa == Isa::avx512 ? avx512::weight_rows_per_group() : isa == Isa::avx2 ? avx2::weight_rows_per_group() : 1;
}

std::vector<int> decode_stream_layouts(Isa isa) {
    if (isa == Isa::scalar) return {};
    std::vector<int> out{1};
    for (int s = default_decode_streams(isa); s <= 8; s *= 2) out.push_back(s);
    return out;
}

size_t act_row_size(Type w, int64_t n) { return row_size(act_traits(w), n); }

void quantize_acts(Type w, const float* x, int64_t m, int64_t n, void* out) {
    const Traits& a = act_traits(w);
    const size_t rb = row_size(a, n);
    for (int64_t t = 0; t < m; ++t) a.from_float(x + t * n, static_cast<uint8_t*>(out) + size_t(t) * rb, n);
}

void gemm(Type w, const void* W, size_t w_row_bytes, int64_t n, const void* acts, int64_t m, float* y,
          int64_t ldy, int64_t row_begin, int64_t row_end) {
    const Traits& t = traits(w);
    const VecDotFn dot = t.vec_dot;
    if (!dot) {
        std::fprintf(stderr, "kinfer: no dot product for weight type %s\n", t.name);
        std::abort();
    }
    const size_t ab = act_row_size(w, n);
    const auto* wb = static_cast<const uint8_t*>(W);
    const auto* xb = static_cast<const uint8_t*>(acts);
    // Blocks of activation rows small enough to stay in L2 while every weight row of the range
    // streams past them once; within a block each weight row is reused from L1.
    constexpr int64_t kActBlock = 16;
    if (m == 1 && t.vec_dot_rows) {
        // Decode: several weight rows per call against the one activation row. Before the tiles:
        // these kernels read in the calibrated stream layout (Q4_K has both).
        t.vec_dot_rows(n, wb + size_t(row_begin) * w_row_bytes, w_row_bytes, int(row_end - row_begin), xb, y + row_begin);
        return;
    }
    if (t.vec_dot_tile) {
        // Register tiles over weight rows x activation rows (decode too, for the types without
        // the kernels above). All the activation rows in one call: the tiles block them for the
        // cache themselves, and weights streamed once per 16 rows made prefill wait on memory.
        t.vec_dot_tile(n, wb + size_t(row_begin) * w_row_bytes, w_row_bytes, int(row_end - row_begin), xb, ab, int(m),
                       y + row_begin, size_t(ldy));
        return;
    }
    for (int64_t k0 = 0; k0 < m; k0 += kActBlock) {
        const int64_t k1 = m < k0 + kActBlock ? m : k0 + kActBlock;
        for (int64_t r = row_begin; r < row_end; ++r) {
            const uint8_t* row = wb + size_t(r) * w_row_bytes;
            if (t.vec_dot_multi && k1 - k0 > 1) {
                // Decode each weight block once for the whole activation block.
                float out[kActBlock];
                t.vec_dot_multi(n, row, xb + size_t(k0) * ab, ab, int(k1 - k0), out);
                for (int64_t k = k0; k < k1; ++k) y[k * ldy + r] = out[k - k0];
            } else {
                for (int64_t k = k0; k < k1; ++k) y[k * ldy + r] = dot(n, row, xb + size_t(k) * ab);
            }
        }
    }
}

}  // namespace kinfer::quant
