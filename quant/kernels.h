// Per-type row kernels behind the trait table (types.h). Most callers should go through
// traits(type); these names exist for the dispatch table, the tests and the activation path.
// Every row length n is a multiple of the type's block size; x / y are arrays of its blocks.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kinfer::quant {

// ---- ggml's reference quantizers (quantize_row_*_ref), byte-identical ----------------------
void quantize_row_q4_0_ref(const float* x, void* y, int64_t n);
void quantize_row_q4_1_ref(const float* x, void* y, int64_t n);
void quantize_row_q5_0_ref(const float* x, void* y, int64_t n);
void quantize_row_q5_1_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_0_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_1_ref(const float* x, void* y, int64_t n);
void quantize_row_q2_K_ref(const float* x, void* y, int64_t n);
void quantize_row_q3_K_ref(const float* x, void* y, int64_t n);
void quantize_row_q4_K_ref(const float* x, void* y, int64_t n);
void quantize_row_q5_K_ref(const float* x, void* y, int64_t n);
void quantize_row_q6_K_ref(const float* x, void* y, int64_t n);
void quantize_row_q8_K_ref(const float* x, void* y, int64_t n);
void quantize_row_iq4_nl_ref(const float* x, void* y, int64_t n);  // one scale guess (ntry = -1)
void quantize_row_iq4_xs_ref(const float* x, void* y, int64_t n);  // = quantize_iq4_xs, no imatrix
void quantize_row_mxfp4_ref(const float* x, void* y, int64_t n);
// ggml_quantize_chunk's IQ4_NL path without imatrix (quantize_iq4_nl: 15 scale candidates).
void quantize_iq4_nl(const float* x, void* y, int64_t n);
void quantize_row_f16(const float* x, void* y, int64_t n);
void quantize_row_bf16(const float* x, void* y, int64_t n);
void quantize_row_f32(const float* x, void* y, int64_t n);  // a copy

// ---- activation quantizers ggml-cpu runs before each quantized matmul ------------------------
// Q8_0 / Q8_1 as ggml's x86 AVX/AVX2 path computes them: scale 127/amax and round-half-even.
// This can differ from the _ref (1/(amax/127), round-half-away) in rare last-bit cases; the
// tests measure how often. Q8_K on x86 is the reference itself.
void quantize_row_q8_0(const float* x, void* y, int64_t n);
void quantize_row_q8_1(const float* x, void* y, int64_t n);
void quantize_row_q8_K(const float* x, void* y, int64_t n);

// ---- exact dequantization ---------------------------------------------------------------------
void dequantize_row_q4_0(const void* x, float* y, int64_t n);
void dequantize_row_q4_1(const void* x, float* y, int64_t n);
void dequantize_row_q5_0(const void* x, float* y, int64_t n);
void dequantize_row_q5_1(const void* x, float* y, int64_t n);
void dequantize_row_q8_0(const void* x, float* y, int64_t n);
void dequantize_row_q8_1(const void* x, float* y, int64_t n);
void dequantize_row_q2_K(const void* x, float* y, int64_t n);
void dequantize_row_q3_K(const void* x, float* y, int64_t n);
void dequantize_row_q4_K(const void* x, float* y, int64_t n);
void dequantize_row_q5_K(const void* x, float* y, int64_t n);
void dequantize_row_q6_K(const void* x, float* y, int64_t n);
void dequantize_row_q8_K(const void* x, float* y, int64_t n);
void dequantize_row_iq4_nl(const void* x, float* y, int64_t n);
void dequantize_row_iq4_xs(const void* x, float* y, int64_t n);
void dequantize_row_mxfp4(const void* x, float* y, int64_t n);
void dequantize_row_f16(const void* x, float* y, int64_t n);
void dequantize_row_bf16(const void* x, float* y, int64_t n);
void dequantize_row_f32(const void* x, float* y, int64_t n);

// ---- dot products: one weight row x against one activation row y -------------------------------
// Named <weight>_<activation>; the same names exist in namespaces ref (scalar, portable),
// avx2 and avx512 (every pair has SIMD kernels today; dispatch.cpp copes with fewer).
#define KINFER_QUANT_VEC_DOTS(X)                                                               \
    X(q4_0_q8_0) X(q4_1_q8_1) X(q5_0_q8_0) X(q5_1_q8_1) X(q8_0_q8_0) X(q2_K_q8_K) X(q3_K_q8_K) \
    X(q4_K_q8_K) X(q5_K_q8_K) X(q6_K_q8_K) X(iq4_nl_q8_0) X(iq4_xs_q8_K) X(mxfp4_q8_0)        \
    X(f32_f32) X(f16_f32) X(bf16_f32)

#define KINFER_DECLARE_VEC_DOT(name) float vec_dot_##name(int64_t n, const void* x, const void* y);
namespace ref { KINFER_QUANT_VEC_DOTS(KINFER_DECLARE_VEC_DOT) }

// SIMD kernels: defined in *_avx2.cpp / *_avx512.cpp, only ever called after a CPU check.
#define KINFER_SIMD_VEC_DOTS(X) X(q4_0_q8_0) X(q4_1_q8_1) X(q5_0_q8_0) X(q5_1_q8_1) X(q8_0_q8_0) \
    X(q2_K_q8_K) X(q3_K_q8_K) X(q4_K_q8_K) X(q5_K_q8_K) X(q6_K_q8_K) X(iq4_nl_q8_0) X(iq4_xs_q8_K)    \
    X(mxfp4_q8_0) X(f32_f32) X(f16_f32) X(bf16_f32)
namespace avx2 { KINFER_SIMD_VEC_DOTS(KINFER_DECLARE_VEC_DOT) }
namespace avx512 { KINFER_SIMD_VEC_DOTS(KINFER_DECLARE_VEC_DOT) }
#undef KINFER_DECLARE_VEC_DOT

// Multi-row variants (VecDotMultiFn, types.h) of the types that matter most for prefill.
#define KINFER_SIMD_VEC_DOTS_MULTI(X) X(q4_0_q8_0) X(q5_0_q8_0) X(q8_0_q8_0) X(q2_K_q8_K) X(q3_K_q8_K) X(q4_K_q8_K) X(q5_K_q8_K) X(iq4_xs_q8_K) \
    X(q6_K_q8_K) X(mxfp4_q8_0) X(iq4_nl_q8_0)
#define KINFER_DECLARE_VEC_DOT_MULTI(name) \
    void vec_dot_multi_##name(int64_t n, const void* x, const void* y, size_t y_stride, int ny, float* out);
namespace avx2 { KINFER_SIMD_VEC_DOTS_MULTI(KINFER_DECLARE_VEC_DOT_MULTI) }
namespace avx512 { KINFER_SIMD_VEC_DOTS_MULTI(KINFER_DECLARE_VEC_DOT_MULTI) }
#undef KINFER_DECLARE_VEC_DOT_MULTI

// Several-weight-row variants (VecDotRowsFn, types.h) for decode's most common types.
#define KINFER_SIMD_VEC_DOTS_ROWS(X) X(q2_K_q8_K) X(q3_K_q8_K) X(q4_K_q8_K) X(q5_K_q8_K) X(q6_K_q8_K) X(iq4_xs_q8_K)
#define KINFER_DECLARE_VEC_DOT_ROWS(name) \
    void vec_dot_rows_##name(int64_t n, const void* x, size_t x_stride, int nx, const void* y, float* out);
// AVX2 also has them for the formats dotted against Q8_0 (AVX-512 decodes those with its tiles).
#define KINFER_SIMD_VEC_DOTS_ROWS_Q8_0(X) X(q8_0_q8_0) X(q4_0_q8_0) X(q5_0_q8_0) X(iq4_nl_q8_0) X(mxfp4_q8_0)
namespace avx2 { KINFER_SIMD_VEC_DOTS_ROWS(KINFER_DECLARE_VEC_DOT_ROWS) KINFER_SIMD_VEC_DOTS_ROWS_Q8_0(KINFER_DECLARE_VEC_DOT_ROWS) }
namespace avx512 { KINFER_SIMD_VEC_DOTS_ROWS(KINFER_DECLARE_VEC_DOT_ROWS) }
#undef KINFER_DECLARE_VEC_DOT_ROWS
// Weight rows those kernels compute together (the unit decode_streams() groups, quant/matmul.h).
namespace avx2 { int weight_rows_per_group(); }
namespace avx512 { int weight_rows_per_group(); }
// The decode kernels' prefetch distance in bytes (set_decode_prefetch, quant/matmul.h): a plain
// int, not an atomic, so that the compiler may load it once outside their inner loops.
namespace detail { extern int g_decode_prefetch; }

// Times both instruction forms of the K-quant tiles (k_tile_form, quant/matmul.h): ns per 256
// weights and activation row, the five types' added.
namespace avx512 { void measure_k_tile_forms(double& dpbusd_ns, double& maddubs_ns); }

// Tiled variants (VecDotTileFn): on AVX-512 VNNI for the formats dotted against Q8_0
// (vec_dot_tiles_avx512.cpp) and for Q4_K / Q6_K (vec_dot_k_tiles_avx512.cpp); on AVX2 for the
// same formats (vec_dot_simd.inc, vec_dot_k_tiles_avx2.cpp). Q2_K, Q3_K and Q5_K have AVX-512
// tiles only (KINFER_SIMD_VEC_DOTS_TILE_AVX512 below; on AVX2 vec_dot_multi).
#define KINFER_SIMD_VEC_DOTS_TILE_Q8_0(X) X(q8_0_q8_0) X(q4_0_q8_0) X(q5_0_q8_0) X(iq4_nl_q8_0) X(mxfp4_q8_0)
#define KINFER_SIMD_VEC_DOTS_TILE(X) KINFER_SIMD_VEC_DOTS_TILE_Q8_0(X) X(q4_K_q8_K) X(q6_K_q8_K)
#define KINFER_DECLARE_VEC_DOT_TILE(name)                                                                     \
    void vec_dot_tile_##name(int64_t n, const void* x, size_t x_stride, int nx, const void* y, size_t y_stride, \
                             int ny, float* out, size_t out_stride);
// Tiles on AVX-512 only (AVX2 takes vec_dot_multi for these).
#define KINFER_SIMD_VEC_DOTS_TILE_AVX512(X) X(q2_K_q8_K) X(q3_K_q8_K) X(q5_K_q8_K)
namespace avx512 { KINFER_SIMD_VEC_DOTS_TILE(KINFER_DECLARE_VEC_DOT_TILE) KINFER_SIMD_VEC_DOTS_TILE_AVX512(KINFER_DECLARE_VEC_DOT_TILE) }
namespace avx2 { KINFER_SIMD_VEC_DOTS_TILE(KINFER_DECLARE_VEC_DOT_TILE) }
#undef KINFER_DECLARE_VEC_DOT_TILE

}  // namespace kinfer::quant
