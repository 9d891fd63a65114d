// Decode + preprocessing against llama.cpp's stored canvases (README section 6): bit-exact.
#include "vision/image_decode.h"
#include "vision/preprocess.h"
#include "vision_data.h"

#include "common/error.h"

using namespace kinfer;

namespace {

vision::PreprocConfig golden_config() {
    vision::PreprocConfig cfg;   // the tiny mmproj's keys: patch 14, merge 2, 8 patches .. 1024 patches
    cfg.min_pixels = 1568;
    cfg.max_pixels = 200704;
    return cfg;
}

}  // namespace

TEST_CASE("vision: target sizes follow llama.cpp's rounding and pixel limits") {
    const auto cfg = golden_config();
    struct Want { int w, h, tw, th; } cases[] = {
        {150, 97, 140, 84}, {61, 203, 56, 196}, {110, 115, 112, 112}, {24, 20, 56, 56}, {560, 380, 532, 364},
        {14, 14, 56, 56},     // 28 x 28 = 784 < 1568: scaled by sqrt(1568 / 196) = 2.83, then up to 56
    };
    for (const auto& c : cases) {
        const auto t = vision::target_size(c.w, c.h, cfg);
        CHECK_MESSAGE(t.w == c.tw, c.w << "x" << c.h);
        CHECK_MESSAGE(t.h == c.th, c.w << "x" << c.h);
    }
    CHECK_THROWS_AS(vision::target_size(1, 40, cfg), Error);
}

TEST_CASE("vision: decode + canvas are bit-exact to llama.cpp's for every case") {
    const auto cfg = golden_config();
    for (const std::string c : test::kVisionCases) {
        CAPTURE(c);
        // Paths appended piece by piece: GCC 12 warns (-Warray-bounds, a known false positive) on
        // "literal" + std::string chains here.
        std::string img_rel = "images/";
        img_rel.append(test::case_image(c));
        const std::string img_path = test::vision_file(img_rel);
        std::string canvas_rel = "cases/";
        canvas_rel.append(c).append("/").append(c).append(".img0.preproc_u8.png");
        const std::string canvas_path = test::vision_file(canvas_rel);
        if (img_path.empty() || canvas_path.empty()) continue;
        const vision::Image img = vision::load_image_file(img_path);
        if (c == "tall") {
            // stb's JPEG decoder, not libjpeg's: the stored bytes are llama.cpp's decode.
            const std::string rgb = test::vision_file("cases/tall/tall.img0.decoded.rgb");
            if (!rgb.empty()) CHECK(test::read_bytes(rgb) == img.px);
        }
        const vision::Canvas cv = vision::make_canvas(img, cfg, img_path);
        const vision::Image want = vision::load_image_file(canvas_path);
        REQUIRE(cv.img.w == want.w);
        REQUIRE(cv.img.h == want.h);
        size_t diff = 0;
        for (size_t i = 0; i < want.px.size(); ++i) diff += cv.img.px[i] != want.px[i];
        CHECK_MESSAGE(diff == 0, diff << " of " << want.px.size() << " bytes differ");
    }
}

TEST_CASE("vision: normalisation maps 0 and 255 to -1 and 1, planar") {
    vision::Image im;
    im.w = 2, im.h = 1, im.px = {0, 255, 51, 255, 0, 102};
    const auto x = vision::normalize_planar(im, golden_config());
    REQUIRE(x.size() == 6);
    CHECK(x[0] == -1.0f);   // R of pixel 0
    CHECK(x[1] == 1.0f);    // R of pixel 1
    CHECK(x[2] == 1.0f);    // G of pixel 0
    CHECK(x[3] == -1.0f);
    CHECK(x[4] == (51.0f / 255.0f - 0.5f) / 0.5f);
}
