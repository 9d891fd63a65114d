// The arithmetic of llama.cpp's converter, reproduced bit for bit:
// - fp32 -> fp16 as numpy's astype(float16) (round to nearest even; NaNs keep their top payload
//   bits and stay NaN), which differs from ggml's canonical-NaN rule only for NaN inputs;
// - fp32 -> bf16 as gguf-py's BF16.quantize (= ggml_compute_fp32_to_bf16);
// - fp32 -> Q8_0 as gguf-py (= ggml's reference quantizer);
// - torch's CPU float exp (SLEEF's expf_u10, used by torch.exp on float tensors), which is
//   not correctly rounded: glibc expf differs from it by 1 ulp on some inputs, and the GGUF's
//   ssm_a = -exp(A_log) bytes depend on it.
#pragma once
#include "quant/types.h"

#include <cstddef>
#include <cstdint>

namespace kinfer::convert {

uint16_t fp32_to_fp16_numpy(float f);
float torch_expf(float x);

// Encodes n floats (whole rows of ne0 for block types) as `t` into dst; returns bytes written.
size_t encode_f32(quant::Type t, const float* src, int64_t n, uint8_t* dst);

}  // namespace kinfer::convert
