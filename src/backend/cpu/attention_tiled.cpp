// The portable build of the tiled MLA kernels and the dispatch to the AVX2 one.
#include "backend/cpu/attention_tiled.h"

#include "backend/cpu/latent_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/attention_tiled_std.h"
#include "quant/types.h"

namespace kinfer::backend::cpu {

namespace tiled_portable {
#include "backend/cpu/attention_tiled_body.h"
}  // namespace tiled_portable

namespace {
bool use_avx2() { return quant::active_isa() != quant::Isa::scalar; }
}

void mla_tiled_absorbed(runtime::ThreadPool& pool, const LatentPages& c, const float* Q, float* lat, const MlaShape& s) {
    if (use_avx2()) return mla_tiled_absorbed_avx2(pool, c, Q, lat, s);
    tiled_portable::tiled_absorbed(pool, c, Q, lat, s);
}

void mla_tiled_mha(runtime::ThreadPool& pool, const Mat& k_b, const Mat& v_b, const LatentPages& c, const float* q,
                   float* o, const MlaShape& s) {
    if (use_avx2()) return mla_tiled_mha_avx2(pool, k_b, v_b, c, q, o, s);
    tiled_portable::tiled_mha(pool, k_b, v_b, c, q, o, s, &dequant_row);
}

}  // namespace kinfer::backend::cpu
