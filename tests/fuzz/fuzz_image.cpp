// libFuzzer target for image decoding and preprocessing (src/vision): any bytes must either give
// a canvas of whole patches with every pixel normalised into [-1, 1], or throw kinfer::Error.
// Crashes, hangs, sanitizer reports and other exception types are bugs.
//
// The decoder (stb_image) and the preprocessing come from libkinfer_vision, which the fuzzing
// build compiles with the coverage instrumentation and the sanitizers.
#include "common/error.h"
#include "vision/image_decode.h"
#include "vision/preprocess.h"

#include <cstdint>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Copy so that reads past the end of the input are caught by ASan.
    std::vector<uint8_t> buf(data, data + size);
    try {
        // A small pixel budget keeps each run fast; the limits are what the real files use.
        const auto img = kinfer::vision::decode_image(buf, "fuzz.img", size > 0 && (data[0] & 1), int64_t(1) << 20);
        kinfer::vision::Image rgb = img;
        if (img.channels == 4) {
            rgb.channels = 3;
            rgb.px.clear();
            for (size_t i = 0; i < img.px.size(); i += 4) rgb.px.insert(rgb.px.end(), &img.px[i], &img.px[i + 3]);
        }
        kinfer::vision::PreprocConfig cfg;
        cfg.min_pixels = 1568;
        cfg.max_pixels = 64 * 14 * 14;
        const auto cv = kinfer::vision::make_canvas(rgb, cfg, "fuzz.img");
        if (cv.img.w % cfg.align() || cv.img.h % cfg.align()) __builtin_trap();
        const auto x = kinfer::vision::normalize_planar(cv.img, cfg);
        for (float v : x)
            if (!(v >= -1.0f && v <= 1.0f)) __builtin_trap();
    } catch (const kinfer::Error&) {
    }
    return 0;
}
