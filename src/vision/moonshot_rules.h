// Moonshot's own image processing for Kimi K3, where it differs from llama.cpp's kimik3 path
// (../shared/golden/vision/README.md section 10, as public ports of Moonshot's code show it).
// kinfer follows llama.cpp by default (existing mmproj files are checked against it);
// `--image-rules moonshot` switches every rule below at once:
//   1. resize: never upscale; scale = min(1, sqrt(in_patch_limit / ((w/14) (h/14))), 512*14/w,
//      512*14/h), new size int(w scale) x int(h scale), PIL's bicubic (a = -0.5, support widened
//      when downscaling, 22-bit fixed-point taps, horizontal pass then vertical), then zero
//      padding at the right and bottom up to a multiple of 28;
//   2. transparency: RGBA is composited onto an 8-pixel chessboard (255 at the top-left, 180)
//      after the resize (llama.cpp drops alpha);
//   3. tower RMSNorm eps 2^-7 (torch.finfo(bfloat16).eps, what nn.RMSNorm(dim) uses), the
//      projector's post-norm keeps projector_ln_eps;
//   4. the projector's GELU is the exact erf form (nn.GELU());
//   5. each image is wrapped as <|media_begin|> image <|media_content|> rows <|media_end|>.
// Not reproduced: PIL resamples RGBA premultiplied by alpha; here the four channels are
// resampled independently (it only matters at partly transparent edges).
#pragma once
#include "vision/preprocess.h"

namespace kinfer::vision {

inline constexpr float kMoonshotTowerEps = 1.0f / 128.0f;   // 2^-7
inline constexpr int kMoonshotSideLimit = 512;               // patch_limit_on_one_side

// Rule 1's target size (before padding). in_patch_limit: the budget in patches.
Size2 moonshot_resize_size(int w, int h, int64_t in_patch_limit, int patch, int side_limit = kMoonshotSideLimit);
// PIL's Image.resize(..., BICUBIC) of an 8-bit image of 3 or 4 channels.
Image resize_bicubic_pil(const Image& src, int new_w, int new_h);
// Rule 2: RGBA onto the chessboard, (fg a + bg (255 - a) + 127) / 255 per channel; returns RGB.
Image composite_chessboard(const Image& rgba, int square = 8, uint8_t first = 255, uint8_t second = 180);
// Rules 1 + 2 on a decoded image (RGB or RGBA): the canvas, image at (0, 0).
Canvas make_canvas_moonshot(const Image& img, const PreprocConfig& cfg, const std::string& name);

}  // namespace kinfer::vision
