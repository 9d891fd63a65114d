// Internal: what every layer function of the forward pass needs (model, pool, state, scratch).
// Not part of the public API; include model/session.h instead.
#pragma once
#include "common/error.h"
#include "model/matmul.h"
#include "model/session.h"

#include <initializer_list>
#include <vector>

namespace kinfer::model {

// Grow-only scratch: after the first chunk of a given size nothing is allocated any more.
struct Workspace {
    std::vector<std::vector<float>> bufs;
    size_t next = 0;
    // Returns a buffer of n floats valid until reset(); contents are unspecified.
    float* get(size_t n) {
        if (next == bufs.size()) bufs.emplace_back();
        auto& b = bufs[next++];
        if (b.size() < n) b.resize(n);
        return b.data();
    }
    void reset() { next = 0; }
};

// A scope that hands its buffers back on exit, so nested layer code can borrow freely.
class ScratchScope {
public:
    explicit ScratchScope(Workspace& ws) : ws_(ws), mark_(ws.next) {}
    ~ScratchScope() { ws_.next = mark_; }
    float* get(size_t n) { return ws_.get(n); }
private:
    Workspace& ws_;
    size_t mark_;
};

struct FwdCtx {
    const HParams& hp;
    const Weights& w;
    runtime::ThreadPool& pool;
    Workspace& ws;
    std::vector<Session::LayerState>& states;
    const SessionOptions& opt;
    int64_t pos0;     // position of the first token of this chunk
    int64_t n;        // tokens in this chunk

    // y[n x W.rows] = W . x[n x W.cols]
    void mm(TensorRef W, const float* x, float* y, int64_t nrows_x = -1) const {
        matmul(pool, mat_of(W), x, nrows_x < 0 ? n : nrows_x, y);
    }
    // Several weights applied to the same x [n x cols], as one batch (see matmul_many).
    struct Out {
        TensorRef W;
        float* y;
    };
    void mm_many(std::initializer_list<Out> outs, const float* x) const {
        Mat ms[8];
        float* ys[8];
        size_t k = 0;
        if (outs.size() > 8) fail("mm_many: {} weights, at most 8", outs.size());
        for (const Out& o : outs) ms[k] = mat_of(o.W), ys[k++] = o.y;
        matmul_many(pool, ms, ys, k, x, n);
    }
};

// Layer pieces (one file each). xn is the normed layer input [n x n_embd]; out gets [n x n_embd].
void kda_layer(FwdCtx& c, int il, const float* xn, float* out);
void mla_layer(FwdCtx& c, int il, const float* xn, float* out);
void dense_ffn(FwdCtx& c, int il, const float* xn, float* out);
void moe_ffn(FwdCtx& c, int il, const float* xn, float* out);

// AttnRes: out = mix(stack, p, score) (DESIGN.md 3.1); stack holds m banked [n x d] rows.
void attn_res_mix(FwdCtx& c, const std::vector<float*>& stack, const float* p, const float* score, float* out);

// The KDA core on one head, exposed for the chunked == recurrent property test.
// q,k: L2-normalised [n][ld] rows (head slice at offset 0), v [n][ld], g [n][ld] log-decay,
// beta [n] (stride ldb). M: state [D][D] (value-major), o: [n][ldo].
void kda_recurrent_head(int64_t D, int64_t n, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, int64_t ld, int64_t ldb, float* M, float* o, int64_t ldo);
void kda_chunked_head(int64_t D, int64_t n, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, int64_t ld, int64_t ldb, float* M, float* o, int64_t ldo, float* scratch);
size_t kda_chunk_scratch_floats(int64_t D);
constexpr int64_t kKdaChunk = 16;

}  // namespace kinfer::model
