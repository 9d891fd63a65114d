// The AVX2/FMA build of the tiled MLA kernels: the same source as the portable build
// (attention_tiled_body.h), compiled with -mavx2 -mfma so its fixed-width loops vectorize.
#include "backend/cpu/attention_tiled.h"

#include "backend/cpu/latent_cache.h"
#include "backend/cpu/matmul.h"
#include "backend/cpu/attention_tiled_std.h"
#include "backend/cpu/exp_avx2.h"

namespace kinfer::backend::cpu {

namespace tiled_avx2 {
// f16 rows through F16C (eight values per instruction; the shared latent_load converts one at a
// time), everything else through latent_load.
inline void load_rows(const LatentPages& c, int64_t j0, int64_t n, float* out) {
    if (c.type != CacheType::f16 || c.R % 8 != 0) return latent_load(c, j0, n, out);
    for (int64_t j = 0; j < n; ++j) {
        const auto* src = reinterpret_cast<const uint16_t*>(c.row(j0 + j));
        float* y = out + j * c.R;
        for (int64_t d = 0; d < c.R; d += 8)
            _mm256_storeu_ps(y + d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + d))));
    }
}
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
