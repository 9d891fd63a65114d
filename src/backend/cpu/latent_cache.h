// The paged MLA latent cache on the CPU (backend::LatentPages): rows converted to and from the
// cache type (f32 copied, f16 rounded to nearest, q8_0 in blocks of 32 with an f16 scale).
#pragma once
#include "backend/backend.h"

namespace kinfer::backend::cpu {

// Rows [j0, j0 + n) of c from f32 rows ld floats apart (0: c.R).
void latent_store(const LatentPages& c, int64_t j0, int64_t n, const float* rows, int64_t ld = 0);
// Rows [j0, j0 + n) of c as f32, R floats each, packed.
void latent_load(const LatentPages& c, int64_t j0, int64_t n, float* rows);

}  // namespace kinfer::backend::cpu
