// Kernel lab for the CPU prefill / decode products: one weight matrix (random, quantized with the
// reference quantizer) against M activation rows, on one thread, through each kernel kind the
// trait table offers at the active ISA level (KINFER_ISA chooses it), every result checked bit for
// bit against that level's one-row vec_dot (which follows ggml's SIMD order, not the scalar one).
//
//   build/bin/kinfer_kernel_lab q4_K 512 7168 64      # TYPE ROWS K M [REPS]
//
// Prints, per kind: ns per 256 weights per activation row (the unit that compares across shapes)
// and GB/s of weights streamed. "gemm" is quant::gemm, what the model calls; the others are the
// kinds it chooses between (multi: 1 weight row x up to 4 activation rows; tile: register tiles;
// rows: decode's several weight rows x one activation row; dpbusd / maddubs: the AVX-512 K-quant
// tiles in each instruction form, quant::k_tile_form).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "quant/matmul.h"
#include "quant/types.h"

using namespace kinfer::quant;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class F>
double best_of(int reps, F&& f) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const double t0 = now_s();
        f();
        best = std::min(best, now_s() - t0);
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 5) {
        std::fprintf(stderr, "usage: %s TYPE ROWS K M [REPS]   (e.g. q4_K 512 7168 64)\n", argv[0]);
        return 2;
    }
    const auto type = type_from_name(argv[1]);
    if (!type) {
        std::fprintf(stderr, "unknown type %s\n", argv[1]);
        return 2;
    }
    const int64_t rows = std::atoll(argv[2]), K = std::atoll(argv[3]), M = std::atoll(argv[4]);
    const int reps = argc > 5 ? std::atoi(argv[5]) : 5;
    const Traits& t = traits(*type);
    if (rows <= 0 || M <= 0 || K <= 0 || K % 256 != 0 || !t.from_float_ref) {
        std::fprintf(stderr, "need ROWS, M > 0, K a multiple of 256 and a quantizable type\n");
        return 2;
    }
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> w(size_t(rows * K)), x(size_t(M * K));
    for (float& v : w) v = nd(rng);
    for (float& v : x) v = nd(rng);
    const size_t wrb = row_size(t, K);
    std::vector<uint8_t> W(wrb * size_t(rows));
    for (int64_t r = 0; r < rows; ++r) t.from_float_ref(w.data() + r * K, W.data() + size_t(r) * wrb, K);
    const size_t ab = act_row_size(*type, K);
    std::vector<uint8_t> A(ab * size_t(M));
    quantize_acts(*type, x.data(), M, K, A.data());

    std::vector<float> want(size_t(rows * M));
    for (int64_t m = 0; m < M; ++m)
        for (int64_t r = 0; r < rows; ++r)
            want[size_t(m * rows + r)] = t.vec_dot(K, W.data() + size_t(r) * wrb, A.data() + size_t(m) * ab);

    std::printf("%s %lld x %lld x %lld acts, isa %s, best of %d\n", t.name, (long long)rows, (long long)K,
                (long long)M, isa_name(active_isa()), reps);
    std::vector<float> got(want.size());
    auto report = [&](const char* kind, int64_t m_used, double s) {
        size_t bad = 0;
        for (int64_t m = 0; m < m_used; ++m)
            for (int64_t r = 0; r < rows; ++r) {
                const float a = got[size_t(m * rows + r)], b = want[size_t(m * rows + r)];
                if (std::memcmp(&a, &b, 4) != 0) ++bad;
            }
        const double units = double(rows) * double(K / 256) * double(m_used);
        std::printf("  %-7s %8.2f ns / 256 weights / act row   %6.2f GB/s of weights   %s\n", kind, s * 1e9 / units,
                    double(W.size()) / s / 1e9, bad ? "BITS DIFFER" : "bits equal");
        return bad == 0;
    };
    bool ok = true;
    // What the model calls.
    double s = best_of(reps, [&] { gemm(*type, W.data(), wrb, K, A.data(), M, got.data(), rows, 0, rows); });
    ok &= report("gemm", M, s);
    if (t.vec_dot_multi) {
        s = best_of(reps, [&] {
            float out[16];
            for (int64_t k0 = 0; k0 < M; k0 += 16) {
                const int64_t k1 = std::min<int64_t>(M, k0 + 16);
                for (int64_t r = 0; r < rows; ++r) {
                    t.vec_dot_multi(K, W.data() + size_t(r) * wrb, A.data() + size_t(k0) * ab, ab, int(k1 - k0), out);
                    for (int64_t k = k0; k < k1; ++k) got[size_t(k * rows + r)] = out[k - k0];
                }
            }
        });
        ok &= report("multi", M, s);
    }
    if (t.vec_dot_tile) {
        // The tile 16 activation rows a call (how quant::gemm called it before the tiles blocked
        // for the cache themselves), then all of them in one call.
        s = best_of(reps, [&] {
            for (int64_t k0 = 0; k0 < M; k0 += 16) {
                const int64_t k1 = std::min<int64_t>(M, k0 + 16);
                t.vec_dot_tile(K, W.data(), wrb, int(rows), A.data() + size_t(k0) * ab, ab, int(k1 - k0),
                               got.data() + k0 * rows, size_t(rows));
            }
        });
        ok &= report("tile16", M, s);
        s = best_of(reps, [&] { t.vec_dot_tile(K, W.data(), wrb, int(rows), A.data(), ab, int(M), got.data(), size_t(rows)); });
        ok &= report("tile", M, s);
        // The K-quant tiles' two instruction forms (quant::k_tile_form), each forced in turn.
        if ((*type == Type::Q2_K || *type == Type::Q3_K || *type == Type::Q4_K || *type == Type::Q5_K || *type == Type::Q6_K) &&
            k_tile_form() != KTileForm::automatic) {
            const KTileTimes mt = k_tile_times();
            std::printf("  (k_tile_form measured %s: dpbusd %.2f, maddubs %.2f ns, Q4_K + Q6_K in cache)\n",
                        k_tile_form_name(k_tile_form()), mt.dpbusd_ns, mt.maddubs_ns);
            for (const KTileForm f : {KTileForm::dpbusd, KTileForm::maddubs}) {
                set_k_tile_form(f);
                s = best_of(reps, [&] { t.vec_dot_tile(K, W.data(), wrb, int(rows), A.data(), ab, int(M), got.data(), size_t(rows)); });
                ok &= report(k_tile_form_name(f), M, s);
            }
            set_k_tile_form(KTileForm::automatic);
        }
    }
    if (t.vec_dot_rows) {
        s = best_of(reps, [&] { t.vec_dot_rows(K, W.data(), wrb, int(rows), A.data(), got.data()); });
        ok &= report("rows", 1, s);
    }
    return ok ? 0 : 1;
}
