// --image-rules moonshot: each of Moonshot's rules (src/vision/moonshot_rules.h, README
// section 10) on its own, against small references written here from the stated facts.
#include "backend/cpu/vision_kernels.h"
#include "backend/cpu_backend.h"
#include "gguf/reader.h"
#include "model/model.h"
#include "vision/encoder.h"
#include "vision/media_prompt.h"
#include "vision/moonshot_rules.h"
#include "vision_data.h"

#include <cmath>
#include <map>

using namespace kinfer;

namespace {

vision::Image pattern(int w, int h, int channels) {
    vision::Image im;
    im.w = w, im.h = h, im.channels = channels;
    for (int y = 0; y < h; ++y)
        for (int x = 0; x < w; ++x)
            for (int c = 0; c < channels; ++c) im.px.push_back(uint8_t((x * 37 + y * 11 + c * 90 + (x * y) % 23) & 255));
    return im;
}

// The bicubic (a = -0.5) resample in double, straight from the definition: each axis a weighted
// sum of the inputs within 2 * max(1, in/out) of the output centre, weights normalised;
// horizontal then vertical, each rounded to uint8.
std::vector<double> taps_ref(int in, int out, int o, int& lo) {
    const double scale = double(in) / out, fs = std::max(1.0, scale), c = (o + 0.5) * scale;
    auto f = [](double x) {
        x = std::fabs(x);
        return x < 1 ? (1.5 * x - 2.5) * x * x + 1 : x < 2 ? ((-0.5 * x + 2.5) * x - 4) * x + 2 : 0.0;
    };
    lo = std::max(0, int(c - 2 * fs + 0.5));
    const int hi = std::min(in, int(c + 2 * fs + 0.5));
    std::vector<double> w;
    double s = 0;
    for (int x = lo; x < hi; ++x) s += w.emplace_back(f((x - c + 0.5) / fs));
    for (double& v : w) v /= s;
    return w;
}

vision::Image bicubic_ref(const vision::Image& in, int nw, int nh) {
    vision::Image mid = in;
    mid.w = nw;
    mid.px.assign(size_t(nw) * size_t(in.h) * size_t(in.channels), 0);
    for (int x = 0; x < nw; ++x) {
        int lo;
        const auto w = taps_ref(in.w, nw, x, lo);
        for (int y = 0; y < in.h; ++y)
            for (int c = 0; c < in.channels; ++c) {
                double s = 0;
                for (size_t i = 0; i < w.size(); ++i) s += w[i] * in.at(lo + int(i), y, c);
                mid.px[(size_t(y) * size_t(nw) + size_t(x)) * size_t(in.channels) + size_t(c)] = uint8_t(std::clamp(std::lround(s), 0L, 255L));
            }
    }
    vision::Image out = mid;
    out.h = nh;
    out.px.assign(size_t(nw) * size_t(nh) * size_t(in.channels), 0);
    for (int y = 0; y < nh; ++y) {
        int lo;
        const auto w = taps_ref(in.h, nh, y, lo);
        for (int x = 0; x < nw; ++x)
            for (int c = 0; c < in.channels; ++c) {
                double s = 0;
                for (size_t i = 0; i < w.size(); ++i) s += w[i] * mid.at(x, lo + int(i), c);
                out.px[(size_t(y) * size_t(nw) + size_t(x)) * size_t(in.channels) + size_t(c)] = uint8_t(std::clamp(std::lround(s), 0L, 255L));
            }
    }
    return out;
}

vision::PreprocConfig tiny_config() { return vision::PreprocConfig{14, 2, 1568, 200704, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}}; }

}  // namespace

TEST_CASE("moonshot rule 1: never upscale, shrink to the patch budget and the side limit") {
    // Under the budget: kept as it is (photo: 150 x 97, 24 tokens once padded to 168 x 112).
    CHECK(vision::moonshot_resize_size(150, 97, 1024, 14).w == 150);
    CHECK(vision::moonshot_resize_size(150, 97, 1024, 14).h == 97);
    CHECK(vision::moonshot_resize_size(24, 20, 1024, 14).w == 24);   // small: no upscaling
    // Over the budget: 40 x 27 = 1080 patches > 1024, scale sqrt(1024 / 1080).
    const double s = std::sqrt(1024.0 / 1080.0);
    CHECK(vision::moonshot_resize_size(560, 380, 1024, 14).w == int(560 * s));
    CHECK(vision::moonshot_resize_size(560, 380, 1024, 14).h == int(380 * s));
    // The side limit: 512 patches of 14 on the long side.
    CHECK(vision::moonshot_resize_size(8000, 100, 1 << 30, 14).w == int(8000 * (512.0 * 14 / 8000)));
    CHECK(vision::moonshot_resize_size(8000, 100, 1 << 30, 14).h == int(100 * (512.0 * 14 / 8000)));
}

TEST_CASE("moonshot rule 1: PIL-style bicubic within one level of the exact resample") {
    for (const std::array<int, 4>& sz : {std::array<int, 4>{40, 30, 17, 11}, {23, 31, 23, 9}, {64, 48, 61, 47}, {12, 12, 12, 12}}) {
        const int w = sz[0], h = sz[1], nw = sz[2], nh = sz[3];   // not a structured binding: clang 14 (CAPTURE)
        CAPTURE(w);
        CAPTURE(nw);
        CAPTURE(nh);
        const auto in = pattern(w, h, 3);
        const auto got = vision::resize_bicubic_pil(in, nw, nh), want = bicubic_ref(in, nw, nh);
        REQUIRE(got.px.size() == want.px.size());
        int worst = 0;
        for (size_t i = 0; i < got.px.size(); ++i) worst = std::max(worst, std::abs(int(got.px[i]) - int(want.px[i])));
        CHECK(worst <= 1);
        if (nw == w && nh == h) CHECK(got.px == in.px);
    }
    vision::Image flat;
    flat.w = 30, flat.h = 20, flat.px.assign(30 * 20 * 3, 77);
    const auto r = vision::resize_bicubic_pil(flat, 13, 7);
    CHECK(std::all_of(r.px.begin(), r.px.end(), [](uint8_t v) { return v == 77; }));
}

TEST_CASE("moonshot rule 1: zero padding at the right and bottom only") {
    const auto in = pattern(150, 97, 3);
    const auto cv = vision::make_canvas_moonshot(in, tiny_config(), "photo");
    CHECK(cv.img.w == 168);
    CHECK(cv.img.h == 112);
    CHECK(cv.off_x == 0);
    CHECK(cv.off_y == 0);
    for (int y : {0, 50, 96})
        for (int x : {0, 75, 149}) CHECK(cv.img.at(x, y, 1) == in.at(x, y, 1));
    for (int c = 0; c < 3; ++c) {
        CHECK(cv.img.at(150, 0, c) == 0);
        CHECK(cv.img.at(167, 111, c) == 0);
        CHECK(cv.img.at(0, 97, c) == 0);
    }
}

TEST_CASE("moonshot rule 2: transparency composited onto an 8-pixel chessboard") {
    vision::Image im;
    im.w = 24, im.h = 16, im.channels = 4;
    im.px.assign(24 * 16 * 4, 0);   // fully transparent black
    auto set = [&](int x, int y, uint8_t r, uint8_t a) {
        uint8_t* p = &im.px[(size_t(y) * 24 + size_t(x)) * 4];
        p[0] = p[1] = p[2] = r;
        p[3] = a;
    };
    set(20, 12, 10, 255);   // opaque
    set(3, 3, 200, 128);    // half over the white square
    const auto o = vision::composite_chessboard(im);
    CHECK(o.channels == 3);
    CHECK(o.at(0, 0, 0) == 255);     // top-left square is the white one
    CHECK(o.at(8, 0, 0) == 180);
    CHECK(o.at(8, 8, 0) == 255);
    CHECK(o.at(0, 8, 2) == 180);
    CHECK(o.at(20, 12, 1) == 10);
    CHECK(o.at(3, 3, 0) == (200 * 128 + 255 * 127 + 127) / 255);
    // llama.cpp's rules drop alpha instead: a transparent black pixel stays black.
}

TEST_CASE("moonshot rules 3 and 4: tower eps 2^-7, erf GELU in the projector") {
    std::vector<float> x, want;
    for (int i = -400; i <= 400; ++i) x.push_back(float(i) * 0.0125f);
    for (float v : x) want.push_back(float(0.5 * v * (1.0 + std::erf(double(v) / std::sqrt(2.0)))));
    backend::CpuBackend be(1);
    be.gelu(x.data(), int64_t(x.size()), /*erf=*/true);
    float worst = 0;
    for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - want[i]));
    CHECK(worst <= 1e-6f);

    const std::string mp = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    const std::string img = test::vision_file("images/photo_150x97.png");
    if (mp.empty() || img.empty()) return;
    auto mm = vision::Mmproj::load(mp, be);
    vision::TowerOptions opt;
    opt.moonshot_rules = true;
    vision::ImageEncoder enc(*mm, opt);
    std::map<std::string, std::vector<float>> st;
    const auto e = enc.encode_file(img, [&](const std::string& s, const float* p, int64_t r, int64_t c) {
        st[s].assign(p, p + r * c);
    });
    CHECK(e.n_tokens == 24);   // 150 x 97 padded to 168 x 112: 12 x 8 patches
    // The first block's norm against x / sqrt(mean(x^2) + 2^-7) * ln1.
    auto f = gguf::File::open(mp);
    const auto& ln = f->tensor("v.blk.0.ln1.weight");
    const float* w = reinterpret_cast<const float*>(ln.data);
    const auto& in = st["embd_inp"];
    const auto& out = st["layer_inp_normed-0"];
    REQUIRE(in.size() == out.size());
    float d = 0;
    for (size_t r = 0; r < in.size() / 48; ++r) {
        double ss = 0;
        for (int c = 0; c < 48; ++c) ss += double(in[r * 48 + size_t(c)]) * in[r * 48 + size_t(c)];
        const double inv = 1.0 / std::sqrt(ss / 48 + 1.0 / 128);
        for (int c = 0; c < 48; ++c) d = std::max(d, std::fabs(float(in[r * 48 + size_t(c)] * inv * w[c]) - out[r * 48 + size_t(c)]));
    }
    CHECK(d <= 1e-6f);
}

TEST_CASE("moonshot rules: an image giving fewer than 8 patches is refused, naming it") {
    const std::string mp = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    const std::string img = test::vision_file("images/rgba_24x20.png");
    if (mp.empty() || img.empty()) return;
    backend::CpuBackend be(1);
    auto mm = vision::Mmproj::load(mp, be);
    vision::TowerOptions opt;
    opt.moonshot_rules = true;
    vision::ImageEncoder enc(*mm, opt);
    std::string msg;
    try {
        enc.encode_file(img);
    } catch (const Error& e) {
        msg = e.what();
    }
    CHECK(msg.find(img) != std::string::npos);
    CHECK(msg.find("4 patches, fewer than the 8") != std::string::npos);
}

TEST_CASE("moonshot rule 5: the image wrapper tokens") {
    const std::string gguf = test::vision_file("gguf/k3v-tiny-f32.gguf");
    if (gguf.empty()) return;
    auto model = model::Model::load(gguf);
    auto tok = text::Tokenizer::from_gguf(model->file());
    const auto ch = vision::layout_media_prompt(*tok, "a<__media__>b", 1, /*moonshot_wrapper=*/true);
    REQUIRE(ch.size() == 3);
    const auto a = tok->encode("a", false), word = tok->encode("image", false);
    std::vector<int32_t> want(a.begin(), a.end());
    want.push_back(4114);   // <|media_begin|>
    want.insert(want.end(), word.begin(), word.end());
    want.push_back(4115);   // <|media_content|>
    CHECK(ch[0].tokens == want);
    CHECK(ch[1].image == 0);
    CHECK(ch[2].tokens.front() == 4116);   // <|media_end|>
}
