#include "vision/moonshot_rules.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>

namespace kinfer::vision {

namespace {

double bicubic(double x) {
    constexpr double a = -0.5;
    x = std::fabs(x);
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

constexpr int kPrecisionBits = 32 - 8 - 2;

// The taps of one axis: for each output index, the first input index and the fixed-point weights.
struct Taps {
    std::vector<int> first;
    std::vector<std::vector<int32_t>> w;
};

Taps make_taps(int in, int out) {
    Taps t;
    const double scale = double(in) / double(out);
    const double fscale = std::max(scale, 1.0);
    const double support = 2.0 * fscale;
    for (int o = 0; o < out; ++o) {
        const double center = (o + 0.5) * scale;
        int lo = int(center - support + 0.5);
        lo = std::max(lo, 0);
        int hi = std::min(int(center + support + 0.5), in);
        std::vector<double> k;
        double sum = 0;
        for (int x = lo; x < hi; ++x) {
            const double v = bicubic((x - center + 0.5) / fscale);
            k.push_back(v);
            sum += v;
        }
        std::vector<int32_t> q;
        for (double v : k) {
            const double n = sum != 0.0 ? v / sum : v;
            q.push_back(int32_t(n < 0 ? -0.5 + n * (1 << kPrecisionBits) : 0.5 + n * (1 << kPrecisionBits)));
        }
        t.first.push_back(lo);
        t.w.push_back(std::move(q));
    }
    return t;
}

uint8_t clip8(int64_t acc) {
    const int64_t v = acc >> kPrecisionBits;
    return uint8_t(std::clamp<int64_t>(v, 0, 255));
}

}  // namespace

Size2 moonshot_resize_size(int w, int h, int64_t in_patch_limit, int patch, int side_limit) {
    double scale = 1.0;
    const int64_t patches = int64_t(w / patch) * (h / patch);
    if (patches > 0) scale = std::min(scale, std::sqrt(double(in_patch_limit) / double(patches)));
    scale = std::min(scale, double(side_limit) * patch / w);
    scale = std::min(scale, double(side_limit) * patch / h);
    return {std::max(1, int(w * scale)), std::max(1, int(h * scale))};
}

Image resize_bicubic_pil(const Image& src, int new_w, int new_h) {
    const int C = src.channels;
    Image cur = src;
    if (new_w != src.w) {   // horizontal pass
        const Taps t = make_taps(src.w, new_w);
        Image o;
        o.w = new_w, o.h = src.h, o.channels = C;
        o.px.resize(size_t(new_w) * size_t(src.h) * size_t(C));
        for (int y = 0; y < src.h; ++y)
            for (int x = 0; x < new_w; ++x)
                for (int c = 0; c < C; ++c) {
                    int64_t acc = int64_t(1) << (kPrecisionBits - 1);
                    const auto& w = t.w[size_t(x)];
                    for (size_t i = 0; i < w.size(); ++i) acc += int64_t(cur.at(t.first[size_t(x)] + int(i), y, c)) * w[i];
                    o.px[(size_t(y) * size_t(new_w) + size_t(x)) * size_t(C) + size_t(c)] = clip8(acc);
                }
        cur = std::move(o);
    }
    if (new_h != src.h) {   // vertical pass
        const Taps t = make_taps(src.h, new_h);
        Image o;
        o.w = cur.w, o.h = new_h, o.channels = C;
        o.px.resize(size_t(cur.w) * size_t(new_h) * size_t(C));
        for (int y = 0; y < new_h; ++y)
            for (int x = 0; x < cur.w; ++x)
                for (int c = 0; c < C; ++c) {
                    int64_t acc = int64_t(1) << (kPrecisionBits - 1);
                    const auto& w = t.w[size_t(y)];
                    for (size_t i = 0; i < w.size(); ++i) acc += int64_t(cur.at(x, t.first[size_t(y)] + int(i), c)) * w[i];
                    o.px[(size_t(y) * size_t(cur.w) + size_t(x)) * size_t(C) + size_t(c)] = clip8(acc);
                }
        cur = std::move(o);
    }
    return cur;
}

Image composite_chessboard(const Image& rgba, int square, uint8_t first, uint8_t second) {
    Image o;
    o.w = rgba.w, o.h = rgba.h, o.channels = 3;
    o.px.resize(size_t(o.w) * size_t(o.h) * 3);
    for (int y = 0; y < o.h; ++y)
        for (int x = 0; x < o.w; ++x) {
            const int bg = ((x / square) + (y / square)) % 2 == 0 ? first : second;
            const int a = rgba.at(x, y, 3);
            for (int c = 0; c < 3; ++c)
                o.px[(size_t(y) * size_t(o.w) + size_t(x)) * 3 + size_t(c)] =
                    uint8_t((rgba.at(x, y, c) * a + bg * (255 - a) + 127) / 255);
        }
    return o;
}

Canvas make_canvas_moonshot(const Image& img, const PreprocConfig& cfg, const std::string& name) {
    if (img.channels != 3 && img.channels != 4) fail("{}: expected RGB or RGBA pixels, got {} channels", name, img.channels);
    const int64_t limit = cfg.max_pixels > 0 ? cfg.max_pixels / (int64_t(cfg.patch) * cfg.patch) : INT64_MAX / 4;
    const Size2 t = moonshot_resize_size(img.w, img.h, limit, cfg.patch);
    Image r = t.w == img.w && t.h == img.h ? img : resize_bicubic_pil(img, t.w, t.h);
    if (r.channels == 4) r = composite_chessboard(r);
    Canvas c;
    const int a = cfg.align();
    c.new_w = r.w, c.new_h = r.h;
    c.img.w = (r.w + a - 1) / a * a, c.img.h = (r.h + a - 1) / a * a, c.img.channels = 3;
    c.img.px.assign(size_t(c.img.w) * size_t(c.img.h) * 3, 0);
    for (int y = 0; y < r.h; ++y)
        std::copy_n(&r.px[size_t(y) * size_t(r.w) * 3], size_t(r.w) * 3, &c.img.px[size_t(y) * size_t(c.img.w) * 3]);
    return c;
}

}  // namespace kinfer::vision
