// The MoonViT tower of Kimi K3 on a backend (README section 7): f16 patch embedding, the
// learned position grid resampled to the image's patch grid, pre-norm blocks with 2-D RoPE
// full attention and a GELU MLP, then the final RMSNorm.
#pragma once
#include "backend/workspace.h"
#include "vision/mmproj.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace kinfer::vision {

// Receives a stage's rows on the host ([rows x cols], row-major) after it is computed; stage
// names follow llama.cpp's graph (patch_conv, pos_embd_interp, embd_inp, layer_inp_normed-0,
// Qcur_pos-0, Kcur_pos-0, kqv_out-0, ffn_inp-0, layer_out-B, vit_out, pixel_shuffle,
// proj_mlp_out, proj_out).
using StageHook = std::function<void(const std::string& stage, const float* x, int64_t rows, int64_t cols)>;

// Numeric choices that differ between llama.cpp (the defaults) and Moonshot's own code.
struct TowerOptions {
    float tower_eps = 0;          // 0: the file's layer_norm_epsilon
    bool erf_gelu_projector = false;
    // Every Moonshot rule of moonshot_rules.h (the encoder then sets the two above itself).
    bool moonshot_rules = false;
};

// The learned grid [in_h][in_w][C] resampled to [out_h][out_w][C]: bilinear with half-pixel
// centres (align_corners = false, edges clamped), as ggml_interpolate; the grid itself when the
// sizes match.
std::vector<float> resample_pos_grid(const std::vector<float>& grid, int in_h, int in_w, int C, int out_h, int out_w);

// The patch rows [gh*gw][3*P*P] of a planar [3][H][W] image, (c, ky, kx) order, patch index
// p = y * gw + x.
std::vector<float> im2col_patches(const float* planar, int W, int H, int P);

// Runs the tower over an image of gw x gh patches; returns vit_out [gw*gh][n_embd] in ws (valid
// until ws is reset).
float* tower_forward(const Mmproj& mm, backend::Workspace& ws, const float* planar, int W, int H,
                     const TowerOptions& opt, const StageHook& hook);

// Copies rows of the backend to the host for the hook (nothing when there is no hook).
void emit_stage(const StageHook& hook, backend::Backend& be, const std::string& name, const float* x, int64_t rows,
                int64_t cols);

}  // namespace kinfer::vision
