// MLA attention and AttnRes on the CPU backend (DESIGN.md 3.1, 3.3); shapes as in backend.h.
#pragma once
#include "backend/backend.h"
#include "runtime/thread_pool.h"

namespace kinfer::backend::cpu {

void mla_attend_absorbed(runtime::ThreadPool& pool, const float* cache, const float* Q, float* lat, const MlaShape& s);
void mla_attend_decompressed(runtime::ThreadPool& pool, const Mat& k_b, const Mat& v_b, const float* cache,
                             const float* q, float* o, const MlaShape& s);
// Each token's scores, softmax and mix are computed as on one thread whatever the pool: prefill
// splits the tokens, decode the scores (one a source) and then the mix's elements.
void attn_res_mix(runtime::ThreadPool& pool, std::span<const float* const> stack, const float* p, const float* w,
                  float* out, int64_t n, int64_t d, float eps);

}  // namespace kinfer::backend::cpu
