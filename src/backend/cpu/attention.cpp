// MLA attention over the latent cache, absorbed and decompressed, and the AttnRes mix, on the CPU.
// The absorbed form is what llama.cpp runs for batch and decode alike; the decompressed (MHA)
// form expands K / V per head and serves long prefill and the absorbed == MHA property test.
#include "backend/cpu/attention.h"

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops.h"

#include <algorithm>
#include <atomic>
#include <vector>

namespace kinfer::backend::cpu {

void mla_attend_absorbed(runtime::ThreadPool& pool, const float* cache, const float* Q, float* lat, const MlaShape& s) {
    const int64_t H = s.H, r = s.r, R = s.r + s.dr;
    const int64_t n = s.n, pos0 = s.pos0;
    const int64_t n_kv_max = pos0 + n;
    thread_local std::vector<float> probs_all;
    if (probs_all.size() < size_t(pool.size()) * size_t(n_kv_max)) probs_all.resize(size_t(pool.size()) * size_t(n_kv_max));
    float* probs = probs_all.data();
    // Causal rows grow with t: the (t, h) pairs are claimed a few at a time by whichever thread
    // is free, so every thread ends with a mix of short and long rows (contiguous ranges left the
    // last thread three quarters of the work) and a CPU the scheduler gives two threads does not
    // finish last. Each pair's result is its own, so the bits do not depend on who took it.
    std::atomic<int64_t> next{0};
    constexpr int64_t kClaim = 4;
    const int64_t pairs = n * H;
    pool.run([&](int ith, int) {
        float* p = probs + size_t(ith) * size_t(n_kv_max);
        for (int64_t b; (b = next.fetch_add(kClaim, std::memory_order_relaxed)) < pairs;) {
            for (int64_t th = b; th < std::min(b + kClaim, pairs); ++th) {
                const int64_t t = th / H, h = th % H;
                const int64_t n_kv = pos0 + t + 1;           // causal
                const float* qh = Q + (t * H + h) * R;
                int64_t j = 0;
                for (; j + 4 <= n_kv; j += 4) {
                    const float* rows[4] = {cache + j * R, cache + (j + 1) * R, cache + (j + 2) * R, cache + (j + 3) * R};
                    dot4_f32(qh, rows, R, p + j);
                }
                for (; j < n_kv; ++j) p[j] = dot_f32(qh, cache + j * R, R);
                ops::softmax(p, n_kv, s.scale);
                float* out = lat + (t * H + h) * r;
                std::fill(out, out + r, 0.0f);
                for (int64_t j = 0; j < n_kv; ++j) mad_f32(out, cache + j * R, p[j], r);
            }
        }
    });
}

void mla_attend_decompressed(runtime::ThreadPool& pool, const Mat& k_b, const Mat& v_b, const float* cache,
                             const float* q, float* o, const MlaShape& s) {
    const int64_t H = s.H, r = s.r, R = s.r + s.dr;
    const int64_t dn = s.dn, dr = s.dr, dv = s.dv, dk = dn + dr;
    const int64_t n = s.n, pos0 = s.pos0, n_kv_max = pos0 + n;
    std::vector<float> wk(size_t(r * dn)), wv(size_t(dv * r)), K(size_t(n_kv_max * dn)), V(size_t(n_kv_max * dv)),
        p(static_cast<size_t>(n_kv_max));
    for (int64_t h = 0; h < H; ++h) {
        const Mat mk = k_b.slice(h), mv = v_b.slice(h);    // attn_k_b[h]: r rows of dn; attn_v_b[h]: dv rows of r
        for (int64_t i = 0; i < r; ++i) dequant_row(mk, i, wk.data() + i * dn);
        for (int64_t i = 0; i < dv; ++i) dequant_row(mv, i, wv.data() + i * r);
        pool.parallel_for(n_kv_max, [&](int64_t b, int64_t e, int) {
            for (int64_t j = b; j < e; ++j) {
                const float* cj = cache + j * R;
                float* kj = K.data() + j * dn;
                std::fill(kj, kj + dn, 0.0f);
                for (int64_t i = 0; i < r; ++i)            // k_nope = attn_k_b[h]^T c
                    for (int64_t a = 0; a < dn; ++a) kj[a] += wk[size_t(i * dn + a)] * cj[i];
                for (int64_t a = 0; a < dv; ++a) V[size_t(j * dv + a)] = dot_f32(wv.data() + a * r, cj, r);
            }
        }, 16);
        for (int64_t t = 0; t < n; ++t) {
            const int64_t n_kv = pos0 + t + 1;
            const float* qh = q + (t * H + h) * dk;
            for (int64_t j = 0; j < n_kv; ++j)
                p[size_t(j)] = dot_f32(qh, K.data() + j * dn, dn) + dot_f32(qh + dn, cache + j * R + r, dr);
            ops::softmax(p.data(), n_kv, s.scale);
            float* oh = o + (t * H + h) * dv;
            std::fill(oh, oh + dv, 0.0f);
            for (int64_t j = 0; j < n_kv; ++j)
                for (int64_t a = 0; a < dv; ++a) oh[a] += p[size_t(j)] * V[size_t(j * dv + a)];
        }
    }
}

namespace {
// Score of one row: <RMSNorm_noweight(v), w>, summed in double like ggml_sum_rows.
float res_score(const float* v, const float* w, int64_t d, float eps, float* tmp) {
    ops::rms_norm(v, nullptr, tmp, d, eps);
    for (int64_t i = 0; i < d; ++i) tmp[i] *= w[i];
    return ops::sum(tmp, d);
}

// out = sum_j stack[j] a[j] + p a[m] over elements [i0, i1) of one token's row: banked blocks
// first, in order, then the current stream.
void res_mix_row(std::span<const float* const> stack, const float* pt, const float* a, int64_t off, float* ot,
                 int64_t i0, int64_t i1) {
    const size_t m = stack.size();
    for (int64_t i = i0; i < i1; ++i) {
        float sum = 0.0f;
        for (size_t j = 0; j < m; ++j) sum += stack[j][off + i] * a[j];
        ot[i] = sum + pt[i] * a[m];
    }
}
}  // namespace

void attn_res_mix(runtime::ThreadPool& pool, std::span<const float* const> stack, const float* p, const float* w,
                  float* out, int64_t n, int64_t d, float eps) {
    const int64_t m = int64_t(stack.size());
    auto source = [&](int64_t j, int64_t t) { return j < m ? stack[size_t(j)] + t * d : p + t * d; };
    if (n > 1) {
        pool.parallel_for(n, [&](int64_t t0, int64_t t1, int) {
            std::vector<float> tmp(static_cast<size_t>(d)), a(static_cast<size_t>(m + 1));
            for (int64_t t = t0; t < t1; ++t) {
                for (int64_t j = 0; j <= m; ++j) a[size_t(j)] = res_score(source(j, t), w, d, eps, tmp.data());
                ops::softmax(a.data(), m + 1);
                res_mix_row(stack, p + t * d, a.data(), t * d, out + t * d, 0, d);
            }
        });
        return;
    }
    // Decode: each score is a serial sum in double over the row (12 us at K3's 7168 on the Xeon
    // VM), one source a task; then the mix by elements.
    std::vector<float> a(static_cast<size_t>(m + 1));
    pool.parallel_for(m + 1, [&](int64_t j0, int64_t j1, int) {
        std::vector<float> tmp(static_cast<size_t>(d));
        for (int64_t j = j0; j < j1; ++j) a[size_t(j)] = res_score(source(j, 0), w, d, eps, tmp.data());
    }, d >= 1024 ? 1 : m + 1);
    ops::softmax(a.data(), m + 1);
    pool.parallel_for(d, [&](int64_t i0, int64_t i1, int) { res_mix_row(stack, p, a.data(), 0, out, i0, i1); }, 2048);
}

}  // namespace kinfer::backend::cpu
