// The patch merger and projector of Kimi K3 (patchmergerv2, README section 7.5): each
// merge x merge block of tower outputs is concatenated into one token, then
// y = RMSNorm(mm.2 . GELU(mm.1 . m)) * post_norm becomes one row of the text model's input.
#pragma once
#include "vision/tower.h"

namespace kinfer::vision {

// For a grid of gw x gh patches: the patch index of each of the merge^2 slots of every token,
// token (Y, X) row-major, slots (2Y, 2X), (2Y, 2X+1), (2Y+1, 2X), (2Y+1, 2X+1) for merge 2.
std::vector<int64_t> merge_order(int gw, int gh, int merge);

// vit [gw*gh][n_embd] in ws's backend -> [n_tokens][proj_dim] there (valid until ws resets).
float* project_tokens(const Mmproj& mm, backend::Workspace& ws, const float* vit, int gw, int gh,
                      const TowerOptions& opt, const StageHook& hook);

}  // namespace kinfer::vision
