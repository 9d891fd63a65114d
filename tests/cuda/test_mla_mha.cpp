// The decompressed (MHA) MLA prefill attention (src/backend/cuda/mla_mha.cu) in CPU mode, against
// the CPU backend's two decompressed ops: mla_attend_tiled_mha through the pages of the latent
// cache (every cache type) and mla_attend_decompressed over contiguous f32 rows. Both sides are
// fp32 from the same dequantized weights and the same cache values; they differ only in the order
// of their sums (the GPU form's GEMMs and per-tile dots, the CPU's tiles and its polynomial exp),
// so the bound is a few fp32 roundings of the largest terms: 2e-6 relative plus 2e-6 of the
// largest |o| absolute. Worst seen here: 0.13 of that bound (the case prints it); with the causal
// mask moved by one key (a query not seeing itself), or the softmax state not set up by the first
// key block (the workspace starts as NaN), 48 of the 49 comparisons fail.
// Shapes: odd query counts (partial query tiles), pos0 > 0 (the chunk after a cached prefix),
// key blocks smaller than the keys (the softmax state carried between blocks), pages of odd row
// counts, and dk / dv that are not equal.
#include "backend/cuda/blas.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/types.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

using namespace kinfer;
using kinfer::cuda::testing::check_close;
using kinfer::cuda::testing::cpu;
using kinfer::cuda::testing::randn;
using MhaPages = kinfer::cuda::testing::HostPages;

namespace {

// H slices of `rows` rows of `cols` random values, quantized to t: a 3-D weight as backend::Mat
// sees it (attn_k_b: H x r rows of dn; attn_v_b: H x dv rows of r).
struct HeadMat {
    std::vector<uint8_t> bytes;
    backend::Mat m;
    HeadMat(quant::Type t, int64_t H, int64_t rows, int64_t cols, uint32_t seed, float scale) {
        const size_t rb = quant::row_size(quant::traits(t), cols);
        const std::vector<float> w = randn(size_t(H * rows * cols), seed, scale);
        bytes.resize(rb * size_t(H * rows));
        for (int64_t i = 0; i < H * rows; ++i) quant::traits(t).quantize(w.data() + i * cols, bytes.data() + size_t(i) * rb, cols);
        m.type = t, m.cols = cols, m.rows = H * rows, m.data = bytes.data(), m.row_bytes = rb, m.slice_rows = rows;
        m.name = "test.attn_b";
    }
    cuda::emu::HeadWeights heads() const { return {m.type, m.data, m.row_bytes}; }
};

struct MhaCase {
    int64_t n, pos0, H, r, dr, dn, dv, page_rows, key_block;
};

double mha_max_abs(const std::vector<float>& v) {
    double m = 0;
    for (float x : v) m = std::max(m, double(std::fabs(x)));
    return m;
}

using MhaBlas = std::unique_ptr<cuda::emu::Blas, void (*)(cuda::emu::Blas*)>;

// The shapes both forms run.
constexpr MhaCase kMhaShapes[] = {
    {37, 0, 2, 64, 32, 64, 32, 16, 0},     // a chunk from position 0, a partial last query tile
    {20, 45, 3, 32, 32, 32, 64, 7, 16},    // after a cached prefix, four key blocks of 16 + a partial one
    {1, 30, 2, 32, 32, 64, 32, 5, 0},      // one query (the MHA form is for prefill, but must be right)
    {16, 16, 1, 64, 64, 32, 32, 32, 32},   // exactly one query tile and whole key blocks
};

// The tensor-core forms' shapes: kMhaShapes, dk and dv that are not multiples of 16 or 8 (a
// partial k step, a partial value tile); a chunk of two blocks, the first of four warps, the
// second of 6 queries, with dv past 128 (the 32-tile accumulators) and key blocks of 48 (a 32-key
// tile and a partial one); K3's head dims (dk 192, dv 128), 40 queries (three warps, the last
// partial) after 24 keys; rows past 256 (r 288, dk 288: the fp16 staging keeps only a row's first
// 256 values in registers and reads the rest again).
std::vector<MhaCase> mma_shapes() {
    std::vector<MhaCase> shapes(std::begin(kMhaShapes), std::end(kMhaShapes));
    shapes.push_back({9, 5, 2, 32, 32, 28, 20, 4, 0});
    shapes.push_back({70, 13, 2, 32, 32, 32, 136, 9, 48});
    shapes.push_back({40, 24, 1, 64, 64, 128, 128, 16, 0});
    shapes.push_back({8, 8, 1, 288, 32, 256, 32, 16, 0});
    return shapes;
}

// The CPU op's shape and the GPU op's arguments for a case, its scale 1 / sqrt(dk).
backend::MlaShape mla_shape(const MhaCase& s) {
    backend::MlaShape ms;
    ms.n = s.n, ms.pos0 = s.pos0, ms.H = s.H, ms.r = s.r, ms.dr = s.dr, ms.dn = s.dn, ms.dv = s.dv;
    ms.scale = 1.0f / std::sqrt(float(s.dn + s.dr));
    return ms;
}
cuda::emu::MlaMhaArgs mha_args(const MhaCase& s, cuda::emu::F32Math math) {
    cuda::emu::MlaMhaArgs a;
    a.n = s.n, a.pos0 = s.pos0, a.H = s.H, a.r = s.r, a.dr = s.dr, a.dn = s.dn, a.dv = s.dv;
    a.scale = mla_shape(s).scale, a.key_block = s.key_block, a.math = math;
    return a;
}

}  // namespace

TEST_CASE("cuda mla_attend_mha (cpu mode): the decompressed prefill form == the CPU's, paged and contiguous") {
    MhaBlas blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    const quant::Type weight_types[] = {quant::Type::F32, quant::Type::F16, quant::Type::Q8_0};
    const backend::CacheType cache_types[] = {backend::CacheType::f32, backend::CacheType::f16, backend::CacheType::q8_0};
    double worst = 0;   // the largest error over its bound, over every case
    for (const MhaCase& s : kMhaShapes) {
        const int64_t R = s.r + s.dr, dk = s.dn + s.dr, n_kv = s.pos0 + s.n;
        const std::vector<float> rows = randn(size_t(n_kv * R), 41, 0.5f), q = randn(size_t(s.n * s.H * dk), 42);
        const backend::MlaShape ms = mla_shape(s);
        const cuda::emu::MlaMhaArgs a = mha_args(s, cuda::emu::F32Math::fp32);
        for (const quant::Type wt : weight_types) {
            const HeadMat k_b(wt, s.H, s.r, s.dn, 43, 0.3f), v_b(wt, s.H, s.dv, s.r, 44, 0.3f);
            for (const backend::CacheType ct : cache_types) {
                INFO("n ", s.n, " pos0 ", s.pos0, " H ", s.H, " r ", s.r, " dr ", s.dr, " dn ", s.dn, " dv ", s.dv,
                     " key_block ", s.key_block, " weights ", std::string(quant::traits(wt).name), " cache ",
                     std::string(backend::cache_type_name(ct)));
                MhaPages p(ct, R, s.page_rows, n_kv);
                cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
                // NaN in the workspace: the softmax state must be set up by the first key block, not
                // found as zeros.
                const float nan = std::numeric_limits<float>::quiet_NaN();
                std::vector<float> ws(cuda::emu::mla_mha_workspace_bytes(a, p.args()) / sizeof(float), nan);
                std::vector<float> got(size_t(s.n * s.H * s.dv), -1.0f), want(got.size(), -2.0f);
                cuda::emu::mla_attend_mha_paged(blas.get(), k_b.heads(), v_b.heads(), p.args(), q.data(), got.data(), a,
                                                ws.data(), ws.size() * sizeof(float), nullptr);
                cpu().mla_attend_tiled_mha(k_b.m, v_b.m, p.c, q.data(), want.data(), ms);
                const double abs = 2e-6 * mha_max_abs(want);
                check_close(got, want, 2e-6, abs, "paged MHA output");
                for (size_t i = 0; i < got.size(); ++i)
                    worst = std::max(worst, std::fabs(double(got[i]) - want[i]) / (2e-6 * std::fabs(want[i]) + abs));
                if (ct != backend::CacheType::f32) continue;
                // The contiguous form over the same f32 rows, against the CPU's untiled op.
                std::vector<float> ws2(cuda::emu::mla_mha_workspace_bytes(a) / sizeof(float), nan);
                std::vector<float> got2(got.size(), -3.0f), want2(got.size(), -4.0f);
                cuda::emu::mla_attend_mha(blas.get(), k_b.heads(), v_b.heads(), rows.data(), q.data(), got2.data(), a,
                                          ws2.data(), ws2.size() * sizeof(float), nullptr);
                cpu().mla_attend_decompressed(k_b.m, v_b.m, rows.data(), q.data(), want2.data(), ms);
                check_close(got2, want2, 2e-6, 2e-6 * mha_max_abs(want2), "contiguous MHA output");
            }
        }
    }
    MESSAGE("worst error over its bound: ", worst);
}

// The flash kernel's tensor-core form (mla_mha_mma.cuh, MlaMhaArgs::math) on mma_shapes(). 3xTF32
// keeps about 2^-21 of each product, so it is held to the fp32 form's bound; single TF32 (11 bits
// of each operand) to 1e-2 relative plus 1e-3 of the largest |o|, and must be farther off than
// 3xTF32 (the split is not a no-op). The key expansion takes the same form (mla_mha.cu: rows split
// three wide on TF32 GEMMs, or one TF32 GEMM). The weights' type only feeds the key expansion:
// F32 here (any width, and more bits than TF32 keeps: with F16 weights, exact in TF32, the
// weights' low parts would be zero and dropping them would go unseen).
TEST_CASE("cuda mla_attend_mha (cpu mode): the flash kernel on TF32 tensor cores, 3xTF32 at the fp32 bound") {
    MhaBlas blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    const std::vector<MhaCase> shapes = mma_shapes();
    const backend::CacheType cache_types[] = {backend::CacheType::f32, backend::CacheType::f16, backend::CacheType::q8_0};
    double worst[2] = {0, 0};   // per form, the largest error over the fp32 bound
    for (const MhaCase& s : shapes) {
        const int64_t R = s.r + s.dr, dk = s.dn + s.dr, n_kv = s.pos0 + s.n;
        const std::vector<float> rows = randn(size_t(n_kv * R), 51, 0.5f), q = randn(size_t(s.n * s.H * dk), 52);
        const backend::MlaShape ms = mla_shape(s);
        const HeadMat k_b(quant::Type::F32, s.H, s.r, s.dn, 53, 0.3f), v_b(quant::Type::F32, s.H, s.dv, s.r, 54, 0.3f);
        for (const backend::CacheType ct : cache_types) {
            MhaPages p(ct, R, s.page_rows, n_kv);
            cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
            std::vector<float> want(size_t(s.n * s.H * s.dv), -2.0f);
            cpu().mla_attend_tiled_mha(k_b.m, v_b.m, p.c, q.data(), want.data(), ms);
            const double abs = 2e-6 * mha_max_abs(want);
            for (const bool split : {true, false}) {
                INFO("n ", s.n, " pos0 ", s.pos0, " H ", s.H, " dk ", dk, " dv ", s.dv, " key_block ", s.key_block, " cache ",
                     std::string(backend::cache_type_name(ct)), " 3xTF32 ", split);
                const cuda::emu::MlaMhaArgs a = mha_args(s, split ? cuda::emu::F32Math::tf32x3 : cuda::emu::F32Math::tf32);
                std::vector<float> ws(cuda::emu::mla_mha_workspace_bytes(a, p.args()) / sizeof(float),
                                      std::numeric_limits<float>::quiet_NaN());
                std::vector<float> got(want.size(), -1.0f);
                cuda::emu::mla_attend_mha_paged(blas.get(), k_b.heads(), v_b.heads(), p.args(), q.data(), got.data(), a,
                                                ws.data(), ws.size() * sizeof(float), nullptr);
                if (split) check_close(got, want, 2e-6, abs, "paged MHA output, 3xTF32");
                else check_close(got, want, 1e-2, 1e-3 * mha_max_abs(want), "paged MHA output, TF32");
                // The 3xTF32 expansion's split rows lie past the fp32 form's workspace, and were
                // written; single TF32 asks for nothing more than fp32.
                const size_t fp32_floats =
                    cuda::emu::mla_mha_workspace_bytes(mha_args(s, cuda::emu::F32Math::fp32), p.args()) / sizeof(float);
                if (split)
                    CHECK(std::count_if(ws.begin() + std::ptrdiff_t(std::min(fp32_floats, ws.size())), ws.end(),
                                        [](float x) { return !std::isnan(x); }) > 0);
                else CHECK(ws.size() == fp32_floats);
                for (size_t i = 0; i < got.size(); ++i)
                    worst[split] = std::max(worst[split], std::fabs(double(got[i]) - want[i]) / (2e-6 * std::fabs(want[i]) + abs));
                if (ct != backend::CacheType::f32 || !split) continue;
                std::vector<float> ws2(cuda::emu::mla_mha_workspace_bytes(a) / sizeof(float),
                                       std::numeric_limits<float>::quiet_NaN());
                std::vector<float> got2(want.size(), -3.0f), want2(want.size(), -4.0f);
                cuda::emu::mla_attend_mha(blas.get(), k_b.heads(), v_b.heads(), rows.data(), q.data(), got2.data(), a,
                                          ws2.data(), ws2.size() * sizeof(float), nullptr);
                cpu().mla_attend_decompressed(k_b.m, v_b.m, rows.data(), q.data(), want2.data(), ms);
                check_close(got2, want2, 2e-6, 2e-6 * mha_max_abs(want2), "contiguous MHA output, 3xTF32");
            }
        }
    }
    MESSAGE("worst error over the fp32 bound: 3xTF32 ", worst[1], ", single TF32 ", worst[0]);
    CHECK(worst[0] > 10 * worst[1]);
}

// Over an f16 cache, f16x2 / f16 expand the keys on fp16 tensor cores (mla_mha.cu): the weights'
// rows scaled into fp16's range and split in two (or rounded once) against the cache's exact
// values, one GEMM of k = 2r; the flash kernel then as 3xTF32 / TF32. f16x2 at the fp32 bound,
// f16 at single TF32's and farther off, and with the fp16 arrays of the workspace written (which
// shows the fp16 expansion was taken). On the other caches, f16x2 / f16 are the TF32 forms bit
// for bit, expansion included. The weights: F32 near 2e-3 (their remainders under fp16's normal
// range unless scaled, so the bound fails without the scaling) and Q8_0 (d q: more bits than
// fp16 holds).
TEST_CASE("cuda mla_attend_mha (cpu mode): the keys expanded on fp16 tensor cores over an f16 cache") {
    MhaBlas blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    const std::vector<MhaCase> shapes = mma_shapes();
    double worst[2] = {0, 0};   // single, split: the largest error over the fp32 bound
    for (const MhaCase& s : shapes) {
        const int64_t R = s.r + s.dr, dk = s.dn + s.dr, n_kv = s.pos0 + s.n;
        const std::vector<float> rows = randn(size_t(n_kv * R), 61, 0.5f), q = randn(size_t(s.n * s.H * dk), 62);
        const backend::MlaShape ms = mla_shape(s);
        MhaPages p(backend::CacheType::f16, R, s.page_rows, n_kv);
        cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
        for (const auto& weights : {std::pair{quant::Type::F32, 0.3f / 128}, std::pair{quant::Type::Q8_0, 0.3f}}) {
            const quant::Type wt = weights.first;   // (no structured binding: clang cannot capture one in INFO)
            const float wscale = weights.second;
            if (wt == quant::Type::Q8_0 && (s.r % 32 != 0 || s.dn % 32 != 0)) continue;   // Q8_0 rows: whole blocks
            const HeadMat k_b(wt, s.H, s.r, s.dn, 63, wscale), v_b(wt, s.H, s.dv, s.r, 64, wscale);
            std::vector<float> want(size_t(s.n * s.H * s.dv), -2.0f);
            cpu().mla_attend_tiled_mha(k_b.m, v_b.m, p.c, q.data(), want.data(), ms);
            const double abs = 2e-6 * mha_max_abs(want);
            // The output, and how many floats of the workspace past single TF32's own the call wrote
            // (the fp16 arrays are all there is past it).
            auto run = [&](cuda::emu::F32Math math, size_t& written_past_tf32) {
                const cuda::emu::MlaMhaArgs a = mha_args(s, math);
                std::vector<float> ws(cuda::emu::mla_mha_workspace_bytes(a, p.args()) / sizeof(float),
                                      std::numeric_limits<float>::quiet_NaN());
                std::vector<float> got(want.size(), -1.0f);
                cuda::emu::mla_attend_mha_paged(blas.get(), k_b.heads(), v_b.heads(), p.args(), q.data(), got.data(), a,
                                                ws.data(), ws.size() * sizeof(float), nullptr);
                const size_t tf32_floats =
                    cuda::emu::mla_mha_workspace_bytes(mha_args(s, cuda::emu::F32Math::tf32), p.args()) / sizeof(float);
                written_past_tf32 = size_t(std::count_if(ws.begin() + std::ptrdiff_t(std::min(tf32_floats, ws.size())), ws.end(),
                                                         [](float x) { return !std::isnan(x); }));
                return got;
            };
            for (const bool split : {true, false}) {
                INFO("n ", s.n, " pos0 ", s.pos0, " H ", s.H, " dk ", dk, " dv ", s.dv, " key_block ", s.key_block,
                     " weights ", std::string(quant::traits(wt).name), " f16x2 ", split);
                size_t written = 0;
                const std::vector<float> got = run(split ? cuda::emu::F32Math::f16x2 : cuda::emu::F32Math::f16, written);
                if (split) check_close(got, want, 2e-6, abs, "paged MHA output, f16x2");
                else check_close(got, want, 1e-2, 1e-3 * mha_max_abs(want), "paged MHA output, f16");
                // The fp16 expansion was taken: its arrays were written. (Its output cannot tell:
                // single TF32's expansion keeps the same 11 bits of each weight, rounding ties the
                // other way, and f16x2's is fp32-class like 3xTF32's.)
                CHECK(written > 0);
                if (s.H == 2) {
                    // The other caches: the TF32 forms' expansion (the same workspace: no fp16
                    // arrays asked for) and the fp16 flash kernel, within the form's bound of the
                    // CPU's op over the same cache, and not the bits of the TF32 flash kernel.
                    const auto math16 = split ? cuda::emu::F32Math::f16x2 : cuda::emu::F32Math::f16;
                    const auto math32 = split ? cuda::emu::F32Math::tf32x3 : cuda::emu::F32Math::tf32;
                    for (const backend::CacheType ct : {backend::CacheType::f32, backend::CacheType::q8_0}) {
                        if (ct == backend::CacheType::q8_0 && R % 32 != 0) continue;
                        MhaPages o(ct, R, s.page_rows, n_kv);
                        cpu().mla_cache_store(o.c, 0, n_kv, rows.data(), 0);
                        std::vector<float> a16(want.size(), -1.0f), a32(want.size(), -2.0f), want_o(want.size(), -3.0f);
                        for (std::vector<float>* out : {&a16, &a32}) {
                            const cuda::emu::MlaMhaArgs a = mha_args(s, out == &a16 ? math16 : math32);
                            std::vector<float> ws(cuda::emu::mla_mha_workspace_bytes(a, o.args()) / sizeof(float));
                            cuda::emu::mla_attend_mha_paged(blas.get(), k_b.heads(), v_b.heads(), o.args(), q.data(), out->data(),
                                                            a, ws.data(), ws.size() * sizeof(float), nullptr);
                        }
                        cpu().mla_attend_tiled_mha(k_b.m, v_b.m, o.c, q.data(), want_o.data(), ms);
                        if (split)
                            check_close(a16, want_o, 2e-6, 2e-6 * mha_max_abs(want_o), "paged MHA output, f16x2, another cache");
                        else check_close(a16, want_o, 1e-2, 1e-3 * mha_max_abs(want_o), "paged MHA output, f16, another cache");
                        CHECK(a16 != a32);
                        CHECK(cuda::emu::mla_mha_workspace_bytes(mha_args(s, math16), o.args()) ==
                              cuda::emu::mla_mha_workspace_bytes(mha_args(s, math32), o.args()));
                    }
                }
                for (size_t i = 0; i < got.size(); ++i)
                    worst[split] = std::max(worst[split], std::fabs(double(got[i]) - want[i]) / (2e-6 * std::fabs(want[i]) + abs));
            }
        }
    }
    MESSAGE("worst error over the fp32 bound: f16x2 ", worst[1], ", f16 ", worst[0]);
    CHECK(worst[0] > 10 * worst[1]);
}

// The fp16 flash kernel's scaling (mla_mha_mma_f16.cuh) where the values are far from 1: latent
// rows of 1e-3 with two rows of zeros (a zero value row has no scale of its own: taken as the
// tile's largest it pushed every other probability operand into fp16's subnormals, 2e-5 relative
// here), then 1e-3 for the first 32 keys and 1e-1 for the next (the value rows' scales, and so the
// accumulators' units, change by about 2^7 between tiles; rows much larger would make the scores
// large enough that no two fp32 orders of summation agree to the bound); and last, value rows of
// 1e18 for the first 32 keys and 1e-18 for the next (k_nope's weights 1e-20 and k_pe 0.1, so
// the scores stay near 1): the second tile's units would be 2^100 above the first's, which would
// take the accumulators past fp32's range unless the units grow less. f16x2 at the fp32 bound of
// the CPU over the same f32 cache, as everywhere, and 3xTF32 with it.
TEST_CASE("cuda mla_attend_mha (cpu mode): the fp16 flash kernel with zero rows and values far from 1") {
    MhaBlas blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    const MhaCase s{40, 40, 2, 32, 32, 32, 32, 16, 0};
    const int64_t R = s.r + s.dr, dk = s.dn + s.dr, n_kv = s.pos0 + s.n;
    const std::vector<float> q = randn(size_t(s.n * s.H * dk), 82);
    const HeadMat v_b(quant::Type::F32, s.H, s.dv, s.r, 84, 0.3f);
    for (const int kind : {0, 1, 2}) {   // zero rows; uneven; extreme
        const HeadMat k_b(quant::Type::F32, s.H, s.r, s.dn, 83, kind == 2 ? 1e-20f : 0.3f);
        std::vector<float> rows = randn(size_t(n_kv * R), 81);
        for (int64_t j = 0; j < n_kv; ++j)
            for (int64_t i = 0; i < R; ++i) {
                const float f = kind == 0   ? (j == 5 || j == 37 ? 0.0f : 1e-3f)
                                : kind == 1 ? (j < 32 ? 1e-3f : 1e-1f)
                                : i >= s.r  ? 0.1f
                                            : (j < 32 ? 1e18f : 1e-18f);
                rows[size_t(j * R + i)] *= f;
            }
        MhaPages p(backend::CacheType::f32, R, s.page_rows, n_kv);
        cpu().mla_cache_store(p.c, 0, n_kv, rows.data(), 0);
        std::vector<float> want(size_t(s.n * s.H * s.dv), -2.0f), got(want.size(), -1.0f);
        cpu().mla_attend_tiled_mha(k_b.m, v_b.m, p.c, q.data(), want.data(), mla_shape(s));
        for (const auto math : {cuda::emu::F32Math::f16x2, cuda::emu::F32Math::tf32x3}) {
            INFO("kind ", kind, " f16x2 ", math == cuda::emu::F32Math::f16x2);
            const cuda::emu::MlaMhaArgs a = mha_args(s, math);
            std::vector<float> ws(cuda::emu::mla_mha_workspace_bytes(a, p.args()) / sizeof(float));
            cuda::emu::mla_attend_mha_paged(blas.get(), k_b.heads(), v_b.heads(), p.args(), q.data(), got.data(), a,
                                            ws.data(), ws.size() * sizeof(float), nullptr);
            check_close(got, want, 2e-6, 2e-6 * mha_max_abs(want), "paged MHA output, zero rows / uneven values");
        }
    }
}

TEST_CASE("cuda mla_attend_mha (cpu mode): a workspace too small, pages of another width, or the KDA's f16x3 is refused") {
    MhaBlas blas(cuda::emu::blas_create(nullptr), cuda::emu::blas_destroy);
    cuda::emu::MlaMhaArgs a;
    a.n = 4, a.H = 1, a.r = 32, a.dr = 32, a.dn = 32, a.dv = 32, a.scale = 0.1f;
    const HeadMat k_b(quant::Type::F32, 1, 32, 32, 1, 1.0f), v_b(quant::Type::F32, 1, 32, 32, 2, 1.0f);
    std::vector<float> q(4 * 64), o(4 * 32), rows(4 * 64);
    const size_t need = cuda::emu::mla_mha_workspace_bytes(a);
    std::vector<float> ws(need / sizeof(float));
    CHECK_THROWS_AS(cuda::emu::mla_attend_mha(blas.get(), k_b.heads(), v_b.heads(), rows.data(), q.data(), o.data(), a,
                                              ws.data(), need - 4, nullptr),
                    std::invalid_argument);
    MhaPages p(backend::CacheType::f32, 96, 8, 8);   // R = 96, the shape wants 64
    std::vector<float> ws2(cuda::emu::mla_mha_workspace_bytes(a, p.args()) / sizeof(float));
    CHECK_THROWS_AS(cuda::emu::mla_attend_mha_paged(blas.get(), k_b.heads(), v_b.heads(), p.args(), q.data(), o.data(), a,
                                                    ws2.data(), ws2.size() * sizeof(float), nullptr),
                    std::invalid_argument);
    // f16x3 (kernel_math.h: the KDA's form) by both MLA forms, before any work.
    cuda::emu::MlaMhaArgs a3 = a;
    a3.math = cuda::emu::F32Math::f16x3;
    std::vector<float> ws3(cuda::emu::mla_mha_workspace_bytes(a3) / sizeof(float));
    CHECK_THROWS_AS(cuda::emu::mla_attend_mha(blas.get(), k_b.heads(), v_b.heads(), rows.data(), q.data(), o.data(), a3,
                                              ws3.data(), ws3.size() * sizeof(float), nullptr),
                    std::invalid_argument);
    cuda::emu::MlaArgs ab;
    ab.n = 4, ab.H = 1, ab.r = 32, ab.dr = 32, ab.scale = 0.1f, ab.math = cuda::emu::F32Math::f16x3;
    std::vector<float> scratch(cuda::emu::mla_scratch_floats(ab)), lat(4 * 32);
    CHECK_THROWS_AS(cuda::emu::mla_attend_absorbed(rows.data(), q.data(), lat.data(), ab, scratch.data(), nullptr),
                    std::invalid_argument);
}
