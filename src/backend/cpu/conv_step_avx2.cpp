// The causal short convolution of the models' kernel size (ssm.conv_kernel 4) for one token
// (decode), channel by channel: what conv_silu_channels' general form (kda_kernels.cpp) computes
// for n = 1, without its transposed copies of the taps and the state. Those copies were most of its
// time in decode: k3-bench (1024 channels a call, too few to share over the pool) spent 4 % of a
// token's time in them on the calling thread; this takes 1.2 us for those channels (hot cache; a
// loop over a run-time tap count took 4.6). Compiled with FMA so that each tap is one fused
// multiply-add, as in fma_f32.
#include <cstdint>

namespace kinfer::backend::cpu {

// For channels [0, di): out = sum over the 4 taps j of in_j * taps[j] (in = the state's 3 inputs,
// oldest first, then x), accumulated from 0 in tap order with one rounding a tap; the state moves
// on by one input.
void conv4_step_avx2(const float* x, int64_t di, const float* taps, float* state, float* out) {
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
}

}  // namespace kinfer::backend::cpu
