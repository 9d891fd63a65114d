// Scale searches shared by the K-quant reference quantizers. They reproduce ggml's
// make_qx_quants / make_q3_quants / make_qkx2_quants step by step (same float expressions in the
// same order), because the chosen integer levels, and so the bytes, depend on every rounding.
#pragma once
#include <cstdint>
#include <cstring>

namespace kinfer::quant::detail {

// Sub-blocks whose largest |x| is below this are stored as all-zero.
inline constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even, by adding 1.5 * 2^23 and reading the low mantissa bits.
// Valid for |v| < 2^22, which every caller guarantees.
inline int nearest_int(float v) {
    const float biased = v + 12582912.0f;
    int32_t bits;
    std::memcpy(&bits, &biased, 4);
    return (bits & 0x007fffff) - 0x00400000;
}

// Symmetric levels in [-nmax, nmax-1] (stored + nmax) for Q6_K: the scale that maximises the
// x^2-weighted fit over 19 candidate inverse scales around -nmax/max. Returns the scale.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L);

// Q3_K's search: start from -nmax/max, then up to 5 passes of single-level moves that improve
// the x^2-weighted least-squares fit. L gets levels + nmax. Returns the scale.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L);

// Asymmetric levels 0..nmax with a min <= 0 (Q2_K, Q4_K, Q5_K): tries nstep+1 inverse scales
// (rmin + rdelta*is + nmax) / (max - min), each refined by a weighted least-squares fit of
// scale and min. Returns the scale; *neg_min gets -min (>= 0).
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad);

}  // namespace kinfer::quant::detail
