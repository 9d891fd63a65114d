// Tiled (flash-attention) MLA over the paged latent cache, on the CPU; see attention_tiled_body.h
// for the shape of the work. Dispatches to the AVX2/FMA build when the CPU has it.
#pragma once
#include "backend/backend.h"
#include "runtime/thread_pool.h"

namespace kinfer::backend::cpu {

// Absorbed: Q [n][H][r + dr] ([q_abs | q_pe]) -> lat [n][H][r].
void mla_tiled_absorbed(runtime::ThreadPool& pool, const LatentPages& c, const float* Q, float* lat, const MlaShape& s);
// Decompressed (MHA): q [n][H][dn + dr] -> o [n][H][dv], K / V expanded from k_b / v_b.
void mla_tiled_mha(runtime::ThreadPool& pool, const Mat& k_b, const Mat& v_b, const LatentPages& c, const float* q,
                   float* o, const MlaShape& s);

// The AVX2/FMA builds (attention_tiled_avx2.cpp), called only after a CPU check.
void mla_tiled_absorbed_avx2(runtime::ThreadPool& pool, const LatentPages& c, const float* Q, float* lat,
                             const MlaShape& s);
void mla_tiled_mha_avx2(runtime::ThreadPool& pool, const Mat& k_b, const Mat& v_b, const LatentPages& c,
                        const float* q, float* o, const MlaShape& s);

}  // namespace kinfer::backend::cpu
