// CPU kernels of the vision tower (MoonViT): ggml's tanh-GELU table, 2-D RoPE, full attention.
// They follow ggml-cpu's arithmetic (the f16 table, the iterated rotation angle, softmax summed
// in double) so the tower stays within float noise of llama.cpp's mtmd.
#pragma once
#include "runtime/thread_pool.h"

#include <cstdint>

namespace kinfer::backend::cpu {

// The f16 bit pattern of GELU_tanh(x) for every f16 bit pattern x (ggml's table_gelu_f16).
const uint16_t* gelu_f16_table();
void gelu(float* x, int64_t n);
// 0.5 x (1 + erf(x / sqrt 2)) in float (PyTorch's exact GELU).
void gelu_erf(float* x, int64_t n);
void rope_2d(float* x, int64_t n, int64_t H, int64_t D, const int32_t* pos_x, const int32_t* pos_y, float theta,
             int64_t ld);
void attend_full(runtime::ThreadPool& pool, const float* q, const float* k, const float* v, float* o, int64_t n,
                 int64_t H, int64_t D, float scale);

}  // namespace kinfer::backend::cpu
