// Image pixels to the tower's input, as llama.cpp's mtmd does it for the kimik3 projector
// (../shared/golden/vision/README.md section 6):
//   1. target size: each side rounded to the nearest multiple of patch * merge (28), then scaled
//      into [min_pixels, max_pixels] keeping the aspect ratio (float32 arithmetic);
//   2. when the size changes: align-corners bilinear resample to fit inside the target, uint8
//      truncation, pasted centred on a black canvas;
//   3. x = (u8 / 255 - mean) / std per channel, planar [3][H][W].
// The Moonshot rules (moonshot_rules.h) replace steps 1 and 2.
#pragma once
#include "vision/image_decode.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::vision {

struct PreprocConfig {
    int patch = 14;
    int merge = 2;                 // tokens are merge x merge patches
    int64_t min_pixels = 0;        // image_min_pixels (0: no floor)
    int64_t max_pixels = 0;        // image_max_pixels (0: no ceiling)
    float mean[3] = {0.5f, 0.5f, 0.5f};
    float std[3] = {0.5f, 0.5f, 0.5f};
    int align() const { return patch * merge; }
};

struct Size2 {
    int w = 0, h = 0;
};

// The uint8 canvas the tower sees, and where the resized image lies in it.
struct Canvas {
    Image img;                     // RGB, w x h = the target size
    int new_w = 0, new_h = 0;      // the resampled image
    int off_x = 0, off_y = 0;      // its top-left corner on the canvas
};

// Step 1. Throws when the image is too small to resample (a side under 2 pixels).
Size2 target_size(int w, int h, const PreprocConfig& cfg);
// llama.cpp's bilinear (align-corners, lerp in float, truncated to uint8) of an RGB image.
Image resize_bilinear(const Image& src, int new_w, int new_h);
// Steps 1-2 for an RGB image; `name` for error messages.
Canvas make_canvas(const Image& rgb, const PreprocConfig& cfg, const std::string& name);
// Step 3: planar [3][H][W] floats.
std::vector<float> normalize_planar(const Image& canvas, const PreprocConfig& cfg);

}  // namespace kinfer::vision
