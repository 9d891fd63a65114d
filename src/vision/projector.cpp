#include "vision/projector.h"

#include "common/error.h"

namespace kinfer::vision {

std::vector<int64_t> merge_order(int gw, int gh, int merge) {
    if (gw % merge || gh % merge) fail("vision: a {} x {} patch grid does not split into {} x {} tokens", gw, gh, merge, merge);
    std::vector<int64_t> idx;
    idx.reserve(size_t(gw) * size_t(gh));
    for (int Y = 0; Y < gh / merge; ++Y)
        for (int X = 0; X < gw / merge; ++X)
            for (int dy = 0; dy < merge; ++dy)
                for (int dx = 0; dx < merge; ++dx) idx.push_back(int64_t(Y * merge + dy) * gw + (X * merge + dx));
    return idx;
}

float* project_tokens(const Mmproj& mm, backend::Workspace& ws, const float* vit, int gw, int gh,
                      const TowerOptions& opt, const StageHook& hook) {
    const VisionHParams& hp = mm.hparams();
    backend::Backend& be = ws.backend();
    const int mg = hp.pre.merge;
    const int64_t n_tok = int64_t(gw / mg) * (gh / mg), M = hp.merged_dim(), D = hp.proj_dim;
    // Gathering the patches in merge order makes the [n_tok][merge^2 * C] rows contiguous.
    const auto idx = merge_order(gw, gh, mg);
    float* m = ws.get(size_t(n_tok * M));
    be.gather_rows(vit, hp.n_embd, idx, 1, m);
    emit_stage(hook, be, "pixel_shuffle", m, n_tok, M);
    float* a = ws.get(size_t(n_tok * M));
    be.matmul(mm.mm1(), m, n_tok, a);
    be.gelu(a, n_tok * M, opt.erf_gelu_projector);
    float* y = ws.get(size_t(n_tok * D));
    be.matmul(mm.mm2(), a, n_tok, y);
    emit_stage(hook, be, "proj_mlp_out", y, n_tok, D);
    be.rms_norm(y, mm.mm_post_norm(), y, n_tok, D, hp.eps);
    emit_stage(hook, be, "proj_out", y, n_tok, D);
    return y;
}

}  // namespace kinfer::vision
