// AttnRes (K3), DESIGN.md section 3.1: each layer reads a softmax-weighted mix of the banked block
// sums and the running partial sum. Scores use RMS-normalised values, the sum the raw ones.
#include "model/forward_ctx.h"
#include "model/ops.h"

#include <vector>

namespace kinfer::model {

namespace {
float score(const float* v, const float* w, int64_t d, float eps, float* tmp) {
    ops::rms_norm(v, nullptr, tmp, d, eps);
    for (int64_t i = 0; i < d; ++i) tmp[i] *= w[i];
    return ops::sum(tmp, d);
}
}  // namespace

void attn_res_mix(FwdCtx& c, const std::vector<float*>& stack, const float* p, const float* w, float* out) {
    const int64_t d = c.hp.n_embd, m = int64_t(stack.size());
    ScratchScope s(c.ws);
    float* tmp = s.get(size_t(d));
    std::vector<float> a(static_cast<size_t>(m + 1));
    for (int64_t t = 0; t < c.n; ++t) {
        for (int64_t j = 0; j < m; ++j) a[size_t(j)] = score(stack[size_t(j)] + t * d, w, d, c.hp.rms_eps, tmp);
        const float* pt = p + t * d;
        a[size_t(m)] = score(pt, w, d, c.hp.rms_eps, tmp);
        ops::softmax(a.data(), m + 1);
        float* ot = out + t * d;
        for (int64_t i = 0; i < d; ++i) {
            float sum = 0.0f;   // banked blocks first, in order; then the current stream
            for (int64_t j = 0; j < m; ++j) sum += stack[size_t(j)][t * d + i] * a[size_t(j)];
            ot[i] = sum + pt[i] * a[size_t(m)];
        }
    }
}

}  // namespace kinfer::model
