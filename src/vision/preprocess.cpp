#include "vision/preprocess.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>

namespace kinfer::vision {

Size2 target_size(int w, int h, const PreprocConfig& cfg) {
    if (w < 2 || h < 2) fail("{} x {} pixels is too small to resample (each side needs at least 2)", w, h);
    // float32 throughout, as llama.cpp's calc_size_preserved_ratio; std::round: .5 away from zero.
    const float a = float(cfg.align());
    const float fw = float(w), fh = float(h);
    int tw = std::max(cfg.align(), int(std::round(fw / a) * a));
    int th = std::max(cfg.align(), int(std::round(fh / a) * a));
    if (cfg.max_pixels > 0 && int64_t(tw) * th > cfg.max_pixels) {
        const float beta = std::sqrt(fh * fw / float(cfg.max_pixels));
        th = std::max(cfg.align(), int(std::floor(fh / beta / a) * a));
        tw = std::max(cfg.align(), int(std::floor(fw / beta / a) * a));
    } else if (cfg.min_pixels > 0 && int64_t(tw) * th < cfg.min_pixels) {
        const float beta = std::sqrt(float(cfg.min_pixels) / (fh * fw));
        th = int(std::ceil(fh * beta / a) * a);
        tw = int(std::ceil(fw * beta / a) * a);
    }
    return {tw, th};
}

Image resize_bilinear(const Image& src, int new_w, int new_h) {
    Image dst;
    dst.w = new_w, dst.h = new_h, dst.channels = 3;
    dst.px.resize(size_t(new_w) * size_t(new_h) * 3);
    // Align corners: output pixel 0 samples source 0 and the last samples the last source pixel.
    const float rx = new_w > 1 ? float(src.w - 1) / float(new_w - 1) : 0.0f;
    const float ry = new_h > 1 ? float(src.h - 1) / float(new_h - 1) : 0.0f;
    for (int y = 0; y < new_h; ++y) {
        const float sy = ry * float(y);
        const int y0 = std::min(int(sy), src.h - 1), y1 = std::min(y0 + 1, src.h - 1);
        const float ty = sy - float(y0);
        for (int x = 0; x < new_w; ++x) {
            const float sx = rx * float(x);
            const int x0 = std::min(int(sx), src.w - 1), x1 = std::min(x0 + 1, src.w - 1);
            const float tx = sx - float(x0);
            for (int c = 0; c < 3; ++c) {
                const float p00 = src.at(x0, y0, c), p01 = src.at(x1, y0, c);
                const float p10 = src.at(x0, y1, c), p11 = src.at(x1, y1, c);
                const float top = p00 + (p01 - p00) * tx;
                const float bot = p10 + (p11 - p10) * tx;
                dst.px[(size_t(y) * size_t(new_w) + size_t(x)) * 3 + size_t(c)] = uint8_t(top + (bot - top) * ty);
            }
        }
    }
    return dst;
}

Canvas make_canvas(const Image& rgb, const PreprocConfig& cfg, const std::string& name) {
    if (rgb.channels != 3) fail("{}: expected RGB pixels, got {} channels", name, rgb.channels);
    Size2 t;
    try {
        t = target_size(rgb.w, rgb.h, cfg);
    } catch (const Error& e) {
        fail("{}: {}", name, e.what());
    }
    Canvas c;
    if (t.w == rgb.w && t.h == rgb.h) {
        c.img = rgb;
        c.new_w = rgb.w, c.new_h = rgb.h;
        return c;
    }
    // Fit inside the target keeping the aspect ratio (PAD_CEIL), then centre on black.
    const float s = std::min(float(t.w) / float(rgb.w), float(t.h) / float(rgb.h));
    c.new_w = std::min(int(std::ceil(float(rgb.w) * s)), t.w);
    c.new_h = std::min(int(std::ceil(float(rgb.h) * s)), t.h);
    const Image r = resize_bilinear(rgb, c.new_w, c.new_h);
    c.off_x = (t.w - c.new_w) / 2, c.off_y = (t.h - c.new_h) / 2;
    c.img.w = t.w, c.img.h = t.h, c.img.channels = 3;
    c.img.px.assign(size_t(t.w) * size_t(t.h) * 3, 0);
    for (int y = 0; y < c.new_h; ++y)
        std::copy_n(&r.px[size_t(y) * size_t(c.new_w) * 3], size_t(c.new_w) * 3,
                    &c.img.px[(size_t(y + c.off_y) * size_t(t.w) + size_t(c.off_x)) * 3]);
    return c;
}

std::vector<float> normalize_planar(const Image& canvas, const PreprocConfig& cfg) {
    const size_t hw = size_t(canvas.w) * size_t(canvas.h);
    std::vector<float> out(3 * hw);
    for (size_t i = 0; i < hw; ++i)
        for (size_t c = 0; c < 3; ++c)
            out[c * hw + i] = (float(canvas.px[i * 3 + c]) / 255.0f - cfg.mean[c]) / cfg.std[c];
    return out;
}

}  // namespace kinfer::vision
