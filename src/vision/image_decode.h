// Image files to RGB pixels, the way llama.cpp's mtmd helper reads them: stb_image asked for 3
// channels, so grayscale is replicated to R = G = B and an alpha channel is dropped (the stored
// RGB is kept, with no compositing; the Moonshot rules in moonshot_rules.h composite instead).
// PNG, JPEG (stb's own decoder, which differs from libjpeg by a few levels), BMP, GIF (first
// frame), and the other formats stb reads.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kinfer::vision {

// 8-bit pixels, row-major, channels interleaved (HWC).
struct Image {
    int w = 0, h = 0;
    int channels = 3;              // 3 (RGB) or 4 (RGBA, only when asked for alpha)
    std::vector<uint8_t> px;
    uint8_t at(int x, int y, int c) const { return px[(size_t(y) * size_t(w) + size_t(x)) * size_t(channels) + size_t(c)]; }
};

// The largest image accepted: 2^26 pixels (8192 x 8192 or any other shape of that area), so a
// forged header (100000 x 100000) is refused before anything is allocated for it.
constexpr int64_t kMaxImagePixels = int64_t(1) << 26;

// Decodes an image held in memory; `name` is used in error messages. keep_alpha: return RGBA
// (channels = 4). Throws kinfer::Error ("NAME: not an image (...)", "NAME: 0 x 0 pixels", ...).
// max_pixels: the largest width x height accepted (fuzzing passes a smaller one).
Image decode_image(std::span<const uint8_t> bytes, const std::string& name, bool keep_alpha = false,
                   int64_t max_pixels = kMaxImagePixels);
// Reads and decodes a file (refusing directories, FIFOs and files over 256 MiB).
Image load_image_file(const std::string& path, bool keep_alpha = false);

}  // namespace kinfer::vision
