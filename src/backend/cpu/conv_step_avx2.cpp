// The causal short convolution for one token (decode), channel by channel: what
// conv_silu_channels' general form (kda_kernels.cpp) computes for n = 1, without its transposed
// copies of the taps and the state. Those copies were most of its time in decode: k3-bench (1024
// channels a call, too few to share over the pool) spent 4 % of a token's time in them on the
// calling thread. Compiled with FMA so that each tap is one fused multiply-add, as in fma_f32.
#include <cstdint>

namespace kinfer::backend::cpu {

// For channels [0, di): out = sum over taps j of in_j * taps[j] (in = the state's W - 1 inputs,
// oldest first, then x), accumulated from 0 in tap order with one rounding a tap; the state moves
// on by one input.
void conv_step_avx2(const float* x, int64_t di, int64_t W, const float* taps, float* state, float* out) {
    if (W == 4) {   // the models' kernel size (ssm.conv_kernel): unrolled, about 4x the loop below
        for (int64_t ch = 0; ch < di; ++ch) {
            const float* w = taps + ch * 4;
            float* s = state + ch * 3;
            const float s0 = s[0], s1 = s[1], s2 = s[2], xc = x[ch];
            float o = __builtin_fmaf(s0, w[0], 0.0f);
            o = __builtin_fmaf(s1, w[1], o);
            o = __builtin_fmaf(s2, w[2], o);
            out[ch] = __builtin_fmaf(xc, w[3], o);
            s[0] = s1, s[1] = s2, s[2] = xc;
        }
        return;
    }
    const int64_t S = W - 1;
    for (int64_t ch = 0; ch < di; ++ch) {
        const float* w = taps + ch * W;
        float* s = state + ch * S;
        float o = 0.0f;
        for (int64_t j = 0; j < S; ++j) o = __builtin_fmaf(s[j], w[j], o);
        o = __builtin_fmaf(x[ch], w[S], o);
        out[ch] = o;
        for (int64_t j = 0; j + 1 < S; ++j) s[j] = s[j + 1];
        if (S > 0) s[S - 1] = x[ch];
    }
}

}  // namespace kinfer::backend::cpu
