// The AVX2/FMA build of the tiled MLA kernels: the same source as the portable build
// (attention_tiled_body.h), compiled with -mavx2 -mfma so its fixed-width loops vectorize.
#include "backend/cpu/attention_tiled.h"

#include "backend/cpu/latent_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/attention_tiled_std.h"
#include "backend/cpu/exp_avx2.h"

namespace kinfer::backend::cpu {

namespace tiled_avx2 {
#include "backend/cpu/attention_tiled_body.h"
}  // namespace tiled_avx2

void mla_tiled_absorbed_avx2(runtime::ThreadPool& pool, const LatentPages& c, const float* Q, float* lat,
                             const MlaShape& s) {
    tiled_avx2::tiled_absorbed(pool, c, Q, lat, s);
}

void mla_tiled_mha_avx2(runtime::ThreadPool& pool, const Mat& k_b, const Mat& v_b, const LatentPages& c,
                        const float* q, float* o, const MlaShape& s) {
    tiled_avx2::tiled_mha(pool, k_b, v_b, c, q, o, s, &dequant_row);
}

}  // namespace kinfer::backend::cpu
