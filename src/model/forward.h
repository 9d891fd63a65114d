// The forward pass as ranges of layers over an explicit residual, so that a process (or a GPU)
// can own some of the layers and hand the residual on (MPI / NCCL pipeline, issue 17).
#pragma once
#include "model/forward_ctx.h"

#include <cstdint>
#include <span>
#include <vector>

namespace kinfer::model {

// The residual stream of a chunk between layers: where it lives, the running partial sum p
// [n x d], and for K3 the banked AttnRes block sums (stack[0] = the embedding; DESIGN.md 3.1).
// Kimi Linear has no stack: p is the plain residual x.
struct Residual {
    backend::Backend* be = nullptr;
    int64_t n = 0, d = 0;
    float* p = nullptr;
    std::vector<float*> stack;

    // Moves the rows to dst (buffers from ws, valid for the rest of the chunk).
    void move_to(backend::Backend& dst, backend::Workspace& ws);
    // Host bytes and back (n, d, the stack depth, then p and every banked block): what a
    // pipeline stage sends to the next one.
    std::vector<uint8_t> to_bytes() const;
    static Residual from_bytes(std::span<const uint8_t> bytes, backend::Backend& be, backend::Workspace& ws);
};

// The embedding of n tokens as a fresh residual on the placement's embedding backend.
Residual embed(const FwdEnv& env, const int32_t* tokens);
// The same from embedding rows [n x d] in host memory (an image's rows), copied to that backend.
Residual embed_rows(const FwdEnv& env, const float* host_rows);
// Layers [first, last) on r, each on its placed backend (r moves as needed); hook after each.
void forward_layers(const FwdEnv& env, int first, int last, Residual& r, const LayerHook& hook);
// The final stream h [n x d] (before output_norm) on the output backend: K3 mixes it out of
// the residual (output_res_score), Kimi Linear takes p itself.
float* final_stream(const FwdEnv& env, Residual& r, const LayerHook& hook);
// output_norm and the output head for rows [first, n) of h, on the output backend; the
// [(n - first) x n_vocab] logits land in host memory.
void output_logits(const FwdEnv& env, const float* h, int64_t first, float* host);

}  // namespace kinfer::model
