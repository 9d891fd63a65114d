// The tiled (flash-attention) MLA kernels, written once in plain C++ and compiled twice: by
// attention_tiled.cpp for any x86-64 and by attention_tiled_avx2.cpp with -mavx2 -mfma, where the
// fixed-width inner loops below vectorize. Include only from those two files, inside a namespace
// of their own (each gets its own copy of everything here).
//
// Shape of the work: a query tile (TQ queries of one head) walks the key tiles (TK keys) it may
// see. Each step is two small GEMMs, scores S = Q . K^T [TQ x TK] and acc += P . V [TQ x Dv],
// with the softmax taken online (running max m, running sum l, acc rescaled when m grows), so
// no query ever holds a row of N probabilities. Work items are (query tile, head) pairs, the
// longest (latest) tiles dealt first. The MHA (prefill) form takes its scores transposed,
// S^T = K . Q^T, so that the softmax runs one query per vector lane (ColumnSoftmax).
//
// Needs from the includer: runtime::ThreadPool, backend::LatentPages / MlaShape / Mat, latent_load
// (latent_cache.h: f32 rows; f16 ones through F16C in dequantize_row_f16), and in the AVX2 build
// ops::exp8 (exp_avx2.h: ggml's vector exp).
// The includer includes attention_tiled_std.h first (standard headers cannot be included inside
// a namespace).

constexpr int TK = 32;   // keys per tile: one score row is four 8-lane registers
constexpr int TQ = 32;   // queries per tile: a key tile is reused by 32 queries

// e^x for x <= 0 (x = -inf gives 0): Cody-Waite reduction to r in [-ln2/2, ln2/2], degree-7
// Taylor polynomial (relative error < 1e-8 before rounding), scaled by 2^k through the exponent
// bits. The AVX2 build runs it eight lanes at a time; the portable loop is the same arithmetic
// without fused multiply-adds.
#if defined(__AVX2__) && defined(__FMA__)
inline __m256 exp8_nonpos(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.0f);
    const __m256 v = _mm256_max_ps(x, lo);
    const __m256 k = _mm256_floor_ps(_mm256_fmadd_ps(v, _mm256_set1_ps(1.44269504f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145752f), v);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 y = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_and_ps(y, _mm256_cmp_ps(x, lo, _CMP_GE_OQ));
}
#endif

inline float exp_nonpos(float x) {
    const float v = std::max(x, -87.0f);
    const float k = std::floor(v * 1.44269504f + 0.5f);
    const float r = (v - k * 0.693145752f) - k * 1.42860677e-6f;
    float p = 1.0f / 5040;
    p = p * r + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const int32_t e = (int32_t(k) + 127) << 23;
    return x < -87.0f ? 0.0f : p * std::bit_cast<float>(e);
}

// One score row of TK: x[j] = e^(x[j] - m); returns the row's sum.
inline float exp_row_sub(float* x, float m) {
#if defined(__AVX2__) && defined(__FMA__)
    const __m256 mm = _mm256_set1_ps(m);
    __m256 sum = _mm256_setzero_ps();
    for (int j = 0; j < TK; j += 8) {
        const __m256 y = exp8_nonpos(_mm256_sub_ps(_mm256_loadu_ps(x + j), mm));
        _mm256_storeu_ps(x + j, y);
        sum = _mm256_add_ps(sum, y);
    }
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
#else
    float sum = 0.0f;
    for (int j = 0; j < TK; ++j) sum += (x[j] = exp_nonpos(x[j] - m));
    return sum;
#endif
}

// The largest of a score row of TK.
inline float row_max(const float* x) {
#if defined(__AVX2__) && defined(__FMA__)
    __m256 m = _mm256_loadu_ps(x);
    for (int j = 8; j < TK; j += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + j));
    const __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    const __m128 q = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(q, _mm_shuffle_ps(q, q, 1)));
#else
    float m = x[0];
    for (int j = 1; j < TK; ++j) m = std::max(m, x[j]);
    return m;
#endif
}

#if defined(__AVX2__) && defined(__FMA__)
// Keeps four loaded vectors in registers. Each is used by two FMAs; left alone, the compiler
// folds the load into both (a memory operand each), and on cores that load one 256-bit vector
// per cycle (Zen 1) the inner loops then wait on loads instead of on the FMA units.
inline void in_registers(__m256& a, __m256& b, __m256& c, __m256& d) { asm("" : "+x"(a), "+x"(b), "+x"(c), "+x"(d)); }
#endif

// out[i][0..TK) = A[i] . B[.][0..TK) for i < rows: A rows lda apart with D values, B [D][TK] rows
// ldb apart (a transposed tile, or a 32-column slice of a wider matrix), out rows ldo apart. Two
// rows at a time share each load of B.
inline void rows_times_cols(const float* A, int64_t lda, int64_t rows, const float* B, int64_t ldb, int64_t D,
                            float* out, int64_t ldo) {
    int64_t i = 0;
#if defined(__AVX2__) && defined(__FMA__)
    static_assert(TK == 32);
    for (; i + 2 <= rows; i += 2) {
        const float* a0 = A + i * lda;
        const float* a1 = a0 + lda;
        __m256 s00 = _mm256_setzero_ps(), s01 = s00, s02 = s00, s03 = s00, s10 = s00, s11 = s00, s12 = s00, s13 = s00;
        for (int64_t d = 0; d < D; ++d) {
            const float* b = B + d * ldb;
            __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8), b2 = _mm256_loadu_ps(b + 16),
                   b3 = _mm256_loadu_ps(b + 24);
            in_registers(b0, b1, b2, b3);
            const __m256 x0 = _mm256_broadcast_ss(a0 + d), x1 = _mm256_broadcast_ss(a1 + d);
            s00 = _mm256_fmadd_ps(x0, b0, s00); s01 = _mm256_fmadd_ps(x0, b1, s01);
            s02 = _mm256_fmadd_ps(x0, b2, s02); s03 = _mm256_fmadd_ps(x0, b3, s03);
            s10 = _mm256_fmadd_ps(x1, b0, s10); s11 = _mm256_fmadd_ps(x1, b1, s11);
            s12 = _mm256_fmadd_ps(x1, b2, s12); s13 = _mm256_fmadd_ps(x1, b3, s13);
        }
        float* o0 = out + i * ldo;
        float* o1 = o0 + ldo;
        _mm256_storeu_ps(o0, s00); _mm256_storeu_ps(o0 + 8, s01); _mm256_storeu_ps(o0 + 16, s02); _mm256_storeu_ps(o0 + 24, s03);
        _mm256_storeu_ps(o1, s10); _mm256_storeu_ps(o1 + 8, s11); _mm256_storeu_ps(o1 + 16, s12); _mm256_storeu_ps(o1 + 24, s13);
    }
#else
    for (; i + 2 <= rows; i += 2) {
        float s0[TK] = {}, s1[TK] = {};
        const float* a0 = A + i * lda;
        const float* a1 = a0 + lda;
        for (int64_t d = 0; d < D; ++d) {
            const float x0 = a0[d], x1 = a1[d];
            const float* b = B + d * ldb;
            for (int j = 0; j < TK; ++j) {
                s0[j] += x0 * b[j];
                s1[j] += x1 * b[j];
            }
        }
        std::memcpy(out + i * ldo, s0, sizeof s0);
        std::memcpy(out + (i + 1) * ldo, s1, sizeof s1);
    }
#endif
    for (; i < rows; ++i) {
        float s0[TK] = {};
        const float* a0 = A + i * lda;
        for (int64_t d = 0; d < D; ++d) {
            const float x0 = a0[d];
            const float* b = B + d * ldb;
            for (int j = 0; j < TK; ++j) s0[j] += x0 * b[j];
        }
        std::memcpy(out + i * ldo, s0, sizeof s0);
    }
}

// out[i][0..TK) = A[i] . Bt[.][j] with Bt [D][TK] (a transposed tile), out [rows][TK].
inline void rows_times_tile(const float* A, int64_t lda, int64_t rows, const float* Bt, int64_t D, float* out) {
    rows_times_cols(A, lda, rows, Bt, TK, D, out, TK);
}

// acc[0..Dv) += sum over j < nk of p[j * ps] * V[j][0..Dv); V rows ldv apart (0: Dv).
inline void acc_pv(float* acc, const float* p, const float* V, int nk, int64_t Dv, int64_t ldv = 0, int64_t ps = 1) {
    if (ldv == 0) ldv = Dv;
    int64_t a0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; a0 + 32 <= Dv; a0 += 32) {
        __m256 v0 = _mm256_loadu_ps(acc + a0), v1 = _mm256_loadu_ps(acc + a0 + 8), v2 = _mm256_loadu_ps(acc + a0 + 16),
               v3 = _mm256_loadu_ps(acc + a0 + 24);
        for (int j = 0; j < nk; ++j) {
            const __m256 pj = _mm256_broadcast_ss(p + j * ps);
            const float* vr = V + j * ldv + a0;
            v0 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr), v0);
            v1 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 8), v1);
            v2 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 16), v2);
            v3 = _mm256_fmadd_ps(pj, _mm256_loadu_ps(vr + 24), v3);
        }
        _mm256_storeu_ps(acc + a0, v0); _mm256_storeu_ps(acc + a0 + 8, v1);
        _mm256_storeu_ps(acc + a0 + 16, v2); _mm256_storeu_ps(acc + a0 + 24, v3);
    }
#endif
    for (; a0 + 32 <= Dv; a0 += 32) {
        float v[32];
        std::memcpy(v, acc + a0, sizeof v);
        for (int j = 0; j < nk; ++j) {
            const float pj = p[j * ps];
            const float* vr = V + j * ldv + a0;
            for (int a = 0; a < 32; ++a) v[a] += pj * vr[a];
        }
        std::memcpy(acc + a0, v, sizeof v);
    }
    for (; a0 < Dv; ++a0) {
        float v = acc[a0];
        for (int j = 0; j < nk; ++j) v += p[j * ps] * V[j * ldv + a0];
        acc[a0] = v;
    }
}

// acc_pv for two rows, sharing each load of V; their probabilities ps apart (1: rows of a P
// tile; TQ: two query columns of a P^T tile, p1 = p0 + 1).
inline void acc_pv2(float* acc0, float* acc1, const float* p0, const float* p1, const float* V, int nk, int64_t Dv,
                    int64_t ldv, int64_t ps = 1) {
    int64_t a0 = 0;
#if defined(__AVX2__) && defined(__FMA__)
    for (; a0 + 32 <= Dv; a0 += 32) {
        __m256 u0 = _mm256_loadu_ps(acc0 + a0), u1 = _mm256_loadu_ps(acc0 + a0 + 8), u2 = _mm256_loadu_ps(acc0 + a0 + 16),
               u3 = _mm256_loadu_ps(acc0 + a0 + 24);
        __m256 w0 = _mm256_loadu_ps(acc1 + a0), w1 = _mm256_loadu_ps(acc1 + a0 + 8), w2 = _mm256_loadu_ps(acc1 + a0 + 16),
               w3 = _mm256_loadu_ps(acc1 + a0 + 24);
        for (int j = 0; j < nk; ++j) {
            const float* vr = V + j * ldv + a0;
            __m256 v0 = _mm256_loadu_ps(vr), v1 = _mm256_loadu_ps(vr + 8), v2 = _mm256_loadu_ps(vr + 16),
                   v3 = _mm256_loadu_ps(vr + 24);
            in_registers(v0, v1, v2, v3);
            const __m256 x = _mm256_broadcast_ss(p0 + j * ps), y = _mm256_broadcast_ss(p1 + j * ps);
            u0 = _mm256_fmadd_ps(x, v0, u0); u1 = _mm256_fmadd_ps(x, v1, u1);
            u2 = _mm256_fmadd_ps(x, v2, u2); u3 = _mm256_fmadd_ps(x, v3, u3);
            w0 = _mm256_fmadd_ps(y, v0, w0); w1 = _mm256_fmadd_ps(y, v1, w1);
            w2 = _mm256_fmadd_ps(y, v2, w2); w3 = _mm256_fmadd_ps(y, v3, w3);
        }
        _mm256_storeu_ps(acc0 + a0, u0); _mm256_storeu_ps(acc0 + a0 + 8, u1);
        _mm256_storeu_ps(acc0 + a0 + 16, u2); _mm256_storeu_ps(acc0 + a0 + 24, u3);
        _mm256_storeu_ps(acc1 + a0, w0); _mm256_storeu_ps(acc1 + a0 + 8, w1);
        _mm256_storeu_ps(acc1 + a0 + 16, w2); _mm256_storeu_ps(acc1 + a0 + 24, w3);
    }
#endif
    if (a0 < Dv) {   // the rest (or all of it, portable): one row at a time
        acc_pv(acc0 + a0, p0, V + a0, nk, Dv - a0, ldv, ps);
        acc_pv(acc1 + a0, p1, V + a0, nk, Dv - a0, ldv, ps);
    }
}

// a . b over D values (the few-query path: decode).
inline float dot_row(const float* a, const float* b, int64_t D) {
    int64_t d = 0;
    float s = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    for (; d + 16 <= D; d += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + d + 8), _mm256_loadu_ps(b + d + 8), s1);
    }
    s0 = _mm256_add_ps(s0, s1);
    const __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
    s = _mm_cvtss_f32(_mm_add_ss(q, _mm_shuffle_ps(q, q, 1)));
#endif
    for (; d < D; ++d) s += a[d] * b[d];
    return s;
}

// One row's online-softmax step over a tile: s (TK scores, the first vis visible) becomes the
// tile's probabilities (0 beyond vis) relative to the new running max m; l and acc[Dv] are
// rescaled when m grows. The caller adds P . V.
inline void online_row(float& m, float& l, float* acc, int64_t Dv, float* s, int vis) {
    if (vis == 0) {                                       // no key of this tile: p = 0
        std::fill(s, s + TK, 0.0f);
        return;
    }
    for (int j = vis; j < TK; ++j) s[j] = -std::numeric_limits<float>::infinity();   // masked: e^-inf = 0
    const float m_new = std::max(m, row_max(s));
    const float sum = exp_row_sub(s, m_new);
    if (m_new > m) {
        const float c = exp_nonpos(m - m_new);
        l *= c;
        for (int64_t a = 0; a < Dv; ++a) acc[a] *= c;
        m = m_new;
    }
    l += sum;
}

// The running softmax of up to TQ query rows.
struct Online {
    float m[TQ], l[TQ];
    float* acc = nullptr;   // [TQ][Dv]
    int64_t Dv = 0;
    void start(int nq, float* a, int64_t dv) {
        acc = a;
        Dv = dv;
        for (int i = 0; i < nq; ++i) {
            m[i] = -std::numeric_limits<float>::infinity();
            l[i] = 0.0f;
        }
        std::fill(acc, acc + nq * Dv, 0.0f);
    }
    // s [nq][TK] scaled scores of keys k0.. (nk of them); query i sees keys <= qpos0 + i. V: the
    // keys' values, rows ldv apart (0: Dv).
    void update(float* s, int nq, int nk, int64_t k0, int64_t qpos0, const float* V, int64_t ldv = 0) {
        if (ldv == 0) ldv = Dv;
        int vis_of[TQ];
        for (int i = 0; i < nq; ++i) {
            float* si = s + i * TK;
            const int64_t last = qpos0 + i - k0;                  // last key index this row sees
            vis_of[i] = int(std::max<int64_t>(0, std::min<int64_t>(nk, last + 1)));
            online_row(m[i], l[i], acc + i * Dv, Dv, si, vis_of[i]);
        }
        // acc += P . V, two rows at a time (masked probabilities are 0, so a pair runs to the
        // longer of its two rows).
        int i = 0;
        for (; i + 2 <= nq; i += 2)
            acc_pv2(acc + i * Dv, acc + (i + 1) * Dv, s + i * TK, s + (i + 1) * TK, V,
                    std::max(vis_of[i], vis_of[i + 1]), Dv, ldv);
        if (i < nq) acc_pv(acc + i * Dv, s + i * TK, V, vis_of[i], Dv, ldv);
    }
    // out row i (ld apart) = acc_i / l_i.
    void finish(int nq, float* out, int64_t ld) const {
        for (int i = 0; i < nq; ++i) {
            const float inv = 1.0f / l[i];
            for (int64_t a = 0; a < Dv; ++a) out[i * ld + a] = acc[i * Dv + a] * inv;
        }
    }
};

// Items (query tile, head), latest tiles first, claimed one at a time by the pool's threads.
template <class Fn>
void for_tiles(runtime::ThreadPool& pool, int64_t n, int64_t H, Fn&& fn) {
    const int64_t n_qt = (n + TQ - 1) / TQ, items = n_qt * H;
    std::atomic<int64_t> next{0};
    pool.run([&](int ith, int) {
        for (int64_t k; (k = next.fetch_add(1)) < items;) fn(ith, n_qt - 1 - k / H, k % H);
    });
}

struct TiledScratch {
    std::vector<float> q, kt, s, acc, rows, kv;
    void size(int64_t D, int64_t Dv, int64_t R) {
        kv.resize(size_t(TK * ((std::max(D, Dv) + TK - 1) / TK * TK)));
        q.resize(size_t(TQ * D));
        kt.resize(size_t(D * TK));
        s.resize(size_t(TQ * TK));
        acc.resize(size_t(TQ * Dv));
        rows.resize(size_t(TK * R));
    }
};

inline std::vector<TiledScratch>& scratch_for(int n) {
    thread_local std::vector<TiledScratch> per_thread;
    if (per_thread.size() < size_t(n)) per_thread.resize(size_t(n));
    return per_thread;
}

// Absorbed with a few queries (decode): the keys are split into chunks across the threads, each
// tile converted once for every head and query, and the chunks' partial softmaxes merged at the
// end (flash decoding), so a long cache is read once per token, not once per head.
inline void few_query_absorbed(runtime::ThreadPool& pool, const backend::LatentPages& c, const float* Q, float* lat,
                               const backend::MlaShape& sh) {
    const int64_t H = sh.H, r = sh.r, R = sh.r + sh.dr, n = sh.n, pos0 = sh.pos0, n_keys = pos0 + n, rows_q = n * H;
    const int64_t per = std::max<int64_t>(8 * TK, (n_keys + 4 * pool.size() - 1) / (4 * pool.size()) / TK * TK + TK);
    const int64_t n_chunks = (n_keys + per - 1) / per;
    std::vector<float> pm(size_t(n_chunks * rows_q)), pl(size_t(n_chunks * rows_q)), pacc(size_t(n_chunks * rows_q * r));
    std::vector<float> q(size_t(rows_q * R));
    for (int64_t i = 0; i < rows_q * R; ++i) q[size_t(i)] = Q[i] * sh.scale;
    auto& scr = scratch_for(pool.size());
    for (int i = 0; i < pool.size(); ++i) scr[size_t(i)].size(R, r, R);
    const bool in_place = c.type == backend::CacheType::f32 && c.page_rows % TK == 0;
    std::atomic<int64_t> next{0};
    pool.run([&](int ith, int) {
        TiledScratch& w = scr[size_t(ith)];
        for (int64_t ci; (ci = next.fetch_add(1)) < n_chunks;) {
            float* m = pm.data() + ci * rows_q;
            float* l = pl.data() + ci * rows_q;
            float* acc = pacc.data() + ci * rows_q * r;
            std::fill(m, m + rows_q, -std::numeric_limits<float>::infinity());
            std::fill(l, l + rows_q, 0.0f);
            std::fill(acc, acc + rows_q * r, 0.0f);
            const int64_t k_end = std::min(n_keys, (ci + 1) * per);
            for (int64_t k0 = ci * per; k0 < k_end; k0 += TK) {
                const int nk = int(std::min<int64_t>(TK, k_end - k0));
                const float* rows = w.rows.data();
                if (in_place) rows = reinterpret_cast<const float*>(c.row(k0));
                else latent_load(c, k0, nk, w.rows.data());
                for (int64_t t = 0; t < n; ++t) {
                    const int vis = int(std::max<int64_t>(0, std::min<int64_t>(nk, pos0 + t - k0 + 1)));
                    for (int64_t h = 0; h < H; ++h) {
                        const int64_t th = t * H + h;
                        float* sc = w.s.data();
                        for (int j = 0; j < vis; ++j) sc[j] = dot_row(&q[size_t(th * R)], rows + j * R, R);
                        online_row(m[th], l[th], acc + th * r, r, sc, vis);
                        if (vis) acc_pv(acc + th * r, sc, rows, vis, r, R);
                    }
                }
            }
        }
    });
    // Merge: out = sum_c e^(m_c - M) acc_c / sum_c e^(m_c - M) l_c.
    for (int64_t th = 0; th < rows_q; ++th) {
        float M = -std::numeric_limits<float>::infinity();
        for (int64_t ci = 0; ci < n_chunks; ++ci) M = std::max(M, pm[size_t(ci * rows_q + th)]);
        float L = 0.0f;
        float* out = lat + th * r;
        std::fill(out, out + r, 0.0f);
        for (int64_t ci = 0; ci < n_chunks; ++ci) {
            const float wgt = exp_nonpos(pm[size_t(ci * rows_q + th)] - M);
            if (wgt == 0.0f) continue;
            L += wgt * pl[size_t(ci * rows_q + th)];
            const float* a = &pacc[size_t((ci * rows_q + th) * r)];
            for (int64_t d = 0; d < r; ++d) out[d] += wgt * a[d];
        }
        const float inv = 1.0f / L;
        for (int64_t d = 0; d < r; ++d) out[d] *= inv;
    }
}

// Absorbed: keys and values are the latent rows themselves (K = [c | k_pe], V = c).
inline void tiled_absorbed(runtime::ThreadPool& pool, const backend::LatentPages& c, const float* Q, float* lat,
                           const backend::MlaShape& sh) {
    const int64_t H = sh.H, r = sh.r, R = sh.r + sh.dr, n = sh.n, pos0 = sh.pos0;
    if (n < 4) return few_query_absorbed(pool, c, Q, lat, sh);
    auto& scr = scratch_for(pool.size());
    for (int i = 0; i < pool.size(); ++i) scr[size_t(i)].size(R, r, R);
    for_tiles(pool, n, H, [&](int ith, int64_t qt, int64_t h) {
        TiledScratch& w = scr[size_t(ith)];
        const int64_t t0 = qt * TQ;
        const int nq = int(std::min<int64_t>(TQ, n - t0));
        for (int i = 0; i < nq; ++i) {        // queries pre-scaled by 1/sqrt(dk)
            const float* src = Q + ((t0 + i) * H + h) * R;
            for (int64_t d = 0; d < R; ++d) w.q[size_t(i * R + d)] = src[d] * sh.scale;
        }
        Online on;
        on.start(nq, w.acc.data(), r);
        const int64_t qpos0 = pos0 + t0, n_keys = qpos0 + nq;
        // An f32 tile inside one page is read where it lies; other types are converted first.
        const bool in_place = c.type == backend::CacheType::f32 && c.page_rows % TK == 0;
        for (int64_t k0 = 0; k0 < n_keys; k0 += TK) {
            const int nk = int(std::min<int64_t>(TK, n_keys - k0));
            const float* rows = w.rows.data();
            if (in_place) rows = reinterpret_cast<const float*>(c.row(k0));
            else latent_load(c, k0, nk, w.rows.data());
            if (nq < 4) {
                // A few queries (decode): scores straight from the rows, no transposed tile.
                for (int i = 0; i < nq; ++i)
                    for (int j = 0; j < nk; ++j) w.s[size_t(i * TK + j)] = dot_row(&w.q[size_t(i * R)], rows + j * R, R);
                on.update(w.s.data(), nq, nk, k0, qpos0, rows, R);
                continue;
            }
            for (int j = 0; j < nk; ++j)
                for (int64_t d = 0; d < R; ++d) w.kt[size_t(d * TK + j)] = rows[j * R + d];
            for (int j = nk; j < TK; ++j)
                for (int64_t d = 0; d < R; ++d) w.kt[size_t(d * TK + j)] = 0.0f;
            rows_times_tile(w.q.data(), R, nq, w.kt.data(), R, w.s.data());
            on.update(w.s.data(), nq, nk, k0, qpos0, rows, R);
        }
        on.finish(nq, lat + (t0 * H + h) * r, H * r);
    });
}

// The running softmax of TQ query columns (S^T tiles [TK][TQ], one lane per query). Every key
// tile rescales every row of acc by e^(m_old - m_new): one multiply per value, cheaper than a
// branch per row.
static_assert(TQ == TK, "S^T tiles are made by rows_times_tile, whose width is TK");
struct ColumnSoftmax {
    alignas(32) float m[TQ], l[TQ];
    float* acc = nullptr;   // [TQ][Dv]
    int64_t Dv = 0;
    void start() {
        for (int i = 0; i < TQ; ++i) {
            m[i] = -std::numeric_limits<float>::infinity();
            l[i] = 0.0f;
        }
        std::fill(acc, acc + TQ * Dv, 0.0f);
    }
    // st [TK][TQ]: scaled scores of keys k0.. (nk of them, rows past nk unset); query i sees keys
    // <= qpos0 + i. st becomes the probabilities. V: the keys' values [TK][Dv].
    void update(float* st, int nk, int64_t k0, int64_t qpos0, const float* V) {
        constexpr float ninf = -std::numeric_limits<float>::infinity();
        for (int j = nk; j < TK; ++j) std::fill(st + j * TQ, st + (j + 1) * TQ, ninf);
        if (k0 + nk - 1 > qpos0)                              // a key some query may not see
            for (int j = 0; j < nk; ++j) {
                const int64_t first = k0 + j - qpos0;         // queries i < first do not see key j
                for (int i = 0; i < TQ && i < first; ++i) st[j * TQ + i] = ninf;
            }
        alignas(32) float c[TQ];
#if defined(__AVX2__) && defined(__FMA__)
        for (int g = 0; g < TQ; g += 8) {
            __m256 mx = _mm256_loadu_ps(st + g);
            for (int j = 1; j < TK; ++j) mx = _mm256_max_ps(mx, _mm256_loadu_ps(st + j * TQ + g));
            const __m256 mo = _mm256_load_ps(m + g), mn = _mm256_max_ps(mo, mx);
            // A query that has seen no key yet keeps m = -inf; subtract 0 there (e^-inf = 0).
            const __m256 safe = _mm256_and_ps(mn, _mm256_cmp_ps(mn, _mm256_set1_ps(ninf), _CMP_NEQ_OQ));
            __m256 s0 = _mm256_setzero_ps(), s1 = s0;
            for (int j = 0; j < TK; j += 2) {
                const __m256 p0 = ops::exp8(_mm256_sub_ps(_mm256_loadu_ps(st + j * TQ + g), safe));
                const __m256 p1 = ops::exp8(_mm256_sub_ps(_mm256_loadu_ps(st + (j + 1) * TQ + g), safe));
                _mm256_storeu_ps(st + j * TQ + g, p0);
                _mm256_storeu_ps(st + (j + 1) * TQ + g, p1);
                s0 = _mm256_add_ps(s0, p0);
                s1 = _mm256_add_ps(s1, p1);
            }
            const __m256 cg = ops::exp8(_mm256_sub_ps(mo, safe));
            _mm256_store_ps(c + g, cg);
            _mm256_store_ps(l + g, _mm256_fmadd_ps(_mm256_load_ps(l + g), cg, _mm256_add_ps(s0, s1)));
            _mm256_store_ps(m + g, mn);
        }
#else
        for (int i = 0; i < TQ; ++i) {
            float mx = st[i];
            for (int j = 1; j < TK; ++j) mx = std::max(mx, st[j * TQ + i]);
            const float mn = std::max(m[i], mx), safe = mn == ninf ? 0.0f : mn;
            float s0 = 0.0f, s1 = 0.0f;
            for (int j = 0; j < TK; j += 2) {
                s0 += (st[j * TQ + i] = exp_nonpos(st[j * TQ + i] - safe));
                s1 += (st[(j + 1) * TQ + i] = exp_nonpos(st[(j + 1) * TQ + i] - safe));
            }
            c[i] = exp_nonpos(m[i] - safe);
            l[i] = l[i] * c[i] + (s0 + s1);
            m[i] = mn;
        }
#endif
        for (int i = 0; i < TQ; ++i) {
            float* a = acc + i * Dv;
            const float ci = c[i];
            for (int64_t d = 0; d < Dv; ++d) a[d] *= ci;
        }
        // acc += P . V, two queries at a time: P[i][j] = st[j][i].
        for (int i = 0; i < TQ; i += 2) acc_pv2(acc + i * Dv, acc + (i + 1) * Dv, st + i, st + i + 1, V, nk, Dv, Dv, TQ);
    }
};

// Decompressed (MHA): per head, K_h = [attn_k_b[h]^T c | k_pe] and V_h = attn_v_b[h] c. The keys
// are expanded once per call in blocks of kb keys (shared by every query tile of the chunk),
// then the query tiles walk that block; the running softmax lives in `state` between blocks.
inline void tiled_mha(runtime::ThreadPool& pool, const backend::Mat& k_b, const backend::Mat& v_b,
                      const backend::LatentPages& c, const float* q, float* o, const backend::MlaShape& sh,
                      void (*dequant)(const backend::Mat&, int64_t, float*)) {
    const int64_t H = sh.H, r = sh.r, R = sh.r + sh.dr, n = sh.n, pos0 = sh.pos0;
    const int64_t dn = sh.dn, dr = sh.dr, dk = dn + dr, dv = sh.dv, n_keys = pos0 + n;
    // Key block: expanded K^T and V tiles of all heads, about 16 MiB at most.
    const int64_t per_key = H * (dk + dv) * int64_t(sizeof(float));
    const int64_t kb = std::clamp<int64_t>((int64_t(16) << 20) / per_key / TK * TK, TK, 4096);
    const int64_t tiles_per_block = kb / TK;
    // wk [h][r][dn] (attn_k_b's rows as they are) and wv^T [h][r][dv], their columns padded with
    // zeros to whole tiles, so that a tile's K and V rows are C . wk and C . wv^T: small GEMMs over
    // the cache rows as they lie, no transposes.
    const int64_t dn_p = (dn + TK - 1) / TK * TK, dv_p = (dv + TK - 1) / TK * TK;
    std::vector<float> wk(size_t(H * r * dn_p)), wvT(size_t(H * r * dv_p));
    {
        std::vector<float> row(size_t(std::max(dn, r)));
        for (int64_t h = 0; h < H; ++h) {
            const backend::Mat mk = k_b.slice(h), mv = v_b.slice(h);
            for (int64_t i = 0; i < r; ++i) dequant(mk, i, wk.data() + (h * r + i) * dn_p);
            for (int64_t a = 0; a < dv; ++a) {
                dequant(mv, a, row.data());
                for (int64_t i = 0; i < r; ++i) wvT[size_t((h * r + i) * dv_p + a)] = row[size_t(i)];
            }
        }
    }
    std::vector<float> kt(size_t(H * tiles_per_block * TK * dk)), vt(size_t(H * tiles_per_block * TK * dv));
    std::vector<float> st_m(size_t(n * H)), st_l(size_t(n * H)), st_acc(size_t(n * H * dv));
    auto& scr = scratch_for(pool.size());
    for (int i = 0; i < pool.size(); ++i) scr[size_t(i)].size(std::max(dk, r), dv, R);

    for (int64_t b0 = 0; b0 < n_keys; b0 += kb) {
        const int64_t bn = std::min(kb, n_keys - b0), bt = (bn + TK - 1) / TK;
        // 1. Expand the block: per (key tile, head), K = [C . wk | k_pe] [TK][dk] and V = C . wv^T
        //    [TK][dv], C the tile's latent rows. Rows past the last key are never read.
        std::atomic<int64_t> next{0};
        pool.run([&](int ith, int) {
            TiledScratch& w = scr[size_t(ith)];
            for (int64_t k; (k = next.fetch_add(1)) < bt * H;) {
                const int64_t ti = k / H, h = k % H, k0 = b0 + ti * TK;
                const int nk = int(std::min<int64_t>(TK, n_keys - k0));
                latent_load(c, k0, nk, w.rows.data());
                float* K = kt.data() + (h * tiles_per_block + ti) * TK * dk;
                float* V = vt.data() + (h * tiles_per_block + ti) * TK * dv;
                float* t = w.kv.data();                                   // [TK][dn_p], then [TK][dv_p]
                for (int64_t a0 = 0; a0 < dn_p; a0 += TK)
                    rows_times_cols(w.rows.data(), R, nk, wk.data() + h * r * dn_p + a0, dn_p, r, t + a0, dn_p);
                for (int j = 0; j < nk; ++j) {
                    std::memcpy(K + j * dk, t + j * dn_p, size_t(dn) * sizeof(float));
                    std::memcpy(K + j * dk + dn, &w.rows[size_t(j * R + r)], size_t(dr) * sizeof(float));
                }
                if (dv == dv_p) {
                    for (int64_t a0 = 0; a0 < dv; a0 += TK)
                        rows_times_cols(w.rows.data(), R, nk, wvT.data() + h * r * dv + a0, dv, r, V + a0, dv);
                } else {
                    for (int64_t a0 = 0; a0 < dv_p; a0 += TK)
                        rows_times_cols(w.rows.data(), R, nk, wvT.data() + h * r * dv_p + a0, dv_p, r, t + a0, dv_p);
                    for (int j = 0; j < nk; ++j) std::memcpy(V + j * dv, t + j * dv_p, size_t(dv) * sizeof(float));
                }
            }
        });
        // 2. Every query tile that sees part of the block walks its tiles. Scores are taken
        // transposed, S^T = K . Q^T [TK][TQ], so that each vector lane is one query: the running
        // max, the sum and the rescale are then lane-wise, with no horizontal reductions and no
        // branch per row.
        for_tiles(pool, n, H, [&](int ith, int64_t qt, int64_t h) {
            TiledScratch& w = scr[size_t(ith)];
            const int64_t t0 = qt * TQ;
            const int nq = int(std::min<int64_t>(TQ, n - t0));
            const int64_t qpos0 = pos0 + t0, q_keys = qpos0 + nq;
            if (q_keys <= b0) return;
            float* QT = w.q.data();                               // Q^T [dk][TQ], pre-scaled
            for (int i = 0; i < TQ; ++i) {
                const float* src = q + ((t0 + i) * H + h) * dk;
                for (int64_t d = 0; d < dk; ++d) QT[d * TQ + i] = i < nq ? src[d] * sh.scale : 0.0f;
            }
            ColumnSoftmax on;
            on.acc = w.acc.data();
            on.Dv = dv;
            if (b0 == 0) {
                on.start();
            } else {
                for (int i = 0; i < TQ; ++i) {
                    const int64_t th = (t0 + std::min(i, nq - 1)) * H + h;
                    on.m[i] = st_m[size_t(th)];
                    on.l[i] = st_l[size_t(th)];
                    std::memcpy(on.acc + i * dv, &st_acc[size_t(th * dv)], size_t(dv) * sizeof(float));
                }
            }
            for (int64_t ti = 0; ti < bt; ++ti) {
                const int64_t k0 = b0 + ti * TK;
                if (k0 >= q_keys) break;
                const int nk = int(std::min<int64_t>(TK, n_keys - k0));
                const float* K = kt.data() + (h * tiles_per_block + ti) * dk * TK;
                rows_times_tile(K, dk, nk, QT, dk, w.s.data());
                on.update(w.s.data(), nk, k0, qpos0, vt.data() + (h * tiles_per_block + ti) * TK * dv);
            }
            for (int i = 0; i < nq; ++i) {
                const int64_t th = (t0 + i) * H + h;
                st_m[size_t(th)] = on.m[i];
                st_l[size_t(th)] = on.l[i];
                std::memcpy(&st_acc[size_t(th * dv)], on.acc + i * dv, size_t(dv) * sizeof(float));
            }
        });
    }
    for (int64_t th = 0; th < n * H; ++th) {
        const float inv = 1.0f / st_l[size_t(th)];
        for (int64_t a = 0; a < dv; ++a) o[th * dv + a] = st_acc[size_t(th * dv + a)] * inv;
    }
}
