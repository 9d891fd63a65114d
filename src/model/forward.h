// Internal: the per-architecture forward passes (forward.cpp), called by Session.
#pragma once
#include "model/forward_ctx.h"

namespace kinfer::model {

// Computes the final residual stream h [c.n x n_embd] (before output_norm) for tokens.
void forward_kimi_k3(FwdCtx& c, const int32_t* tokens, const LayerHook& hook, float* h);
void forward_kimi_linear(FwdCtx& c, const int32_t* tokens, const LayerHook& hook, float* h);

}  // namespace kinfer::model
