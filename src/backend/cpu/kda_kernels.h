// The KDA kernels of the CPU backend, one head at a time (exposed for the chunked == recurrent
// property test). q, k: L2-normalised [n][ld] rows (the head's slice at offset 0), v [n][ld],
// g [n][ld] log-decay, beta [n] (stride ldb). M: the head's state [D][D] (value-major: M[j] is
// column j of S), o: [n][ldo].
#pragma once
#include <cstddef>
#include <cstdint>

namespace kinfer::backend::cpu {

void kda_recurrent_head(int64_t D, int64_t n, const float* q, const float* k, const float* v, const float* g,
                        const float* beta, int64_t ld, int64_t ldb, float* M, float* o, int64_t ldo);
void kda_chunked_head(int64_t D, int64_t n, const float* q, const float* k, const float* v, const float* g,
                      const float* beta, int64_t ld, int64_t ldb, float* M, float* o, int64_t ldo, float* scratch);
size_t kda_chunk_scratch_floats(int64_t D);
constexpr int64_t kKdaChunk = 16;

// Causal depthwise conv over the last W projected inputs (tap W-1 = current token), then SiLU, in
// place, for channels [c0, c1) of x [n][ld] (ld = all channels); state [ld][W-1] (oldest first) is
// updated to the last W-1 inputs. A channel's result does not depend on the others except through
// the vector SiLU's scalar tail (ops.h): parts split at multiples of 16 channels give one call's
// bits (CpuBackend::conv_silu splits them over the pool).
void conv_silu_channels(float* x, int64_t n, int64_t ld, int64_t W, const float* taps, float* state, int64_t c0,
                        int64_t c1);

}  // namespace kinfer::backend::cpu
