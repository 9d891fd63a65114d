// Bad images give one line naming the file, never a crash: truncated, empty, a forged
// 100000 x 100000 header, a chunk longer than the file, not an image, too small to resample;
// and the CLI exits 1 with it.
#include "vision/encoder.h"
#include "vision/image_decode.h"
#include "vision_data.h"

#include "backend/cpu_backend.h"
#include "common/error.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-function"
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO
#include <stb/stb_image_write.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <filesystem>

using namespace kinfer;

namespace {

std::vector<uint8_t> png_of(int w, int h, int comp, uint8_t value) {
    std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(comp), value), out;
    stbi_write_png_to_func([](void* ctx, void* data, int size) {
        auto* o = static_cast<std::vector<uint8_t>*>(ctx);
        o->insert(o->end(), static_cast<uint8_t*>(data), static_cast<uint8_t*>(data) + size);
    }, &out, w, h, comp, px.data(), w * comp);
    return out;
}

struct TempDir {
    std::filesystem::path dir;
    TempDir() {
        dir = std::filesystem::temp_directory_path() / ("kinfer_bad_images_" + std::to_string(::getpid()));
        std::filesystem::create_directories(dir);
    }
    ~TempDir() { std::filesystem::remove_all(dir); }
    std::string write(const std::string& name, const std::vector<uint8_t>& bytes) const {
        const auto p = (dir / name).string();
        std::ofstream f(p, std::ios::binary);
        f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
        return p;
    }
};

// A PNG header claiming w x h (stb does not check chunk CRCs; the size must be refused first).
std::vector<uint8_t> forged_png(uint32_t w, uint32_t h) {
    auto png = png_of(2, 2, 3, 7);
    for (int i = 0; i < 4; ++i) {
        png[16 + size_t(i)] = uint8_t(w >> (24 - 8 * i));
        png[20 + size_t(i)] = uint8_t(h >> (24 - 8 * i));
    }
    return png;
}

// A good PNG whose IDAT chunk declares 1 GiB: stb would allocate that before reading the chunk.
std::vector<uint8_t> idat_too_long_png() {
    auto png = png_of(8, 8, 3, 7);
    const std::string idat = "IDAT";
    const auto at = std::search(png.begin(), png.end(), idat.begin(), idat.end()) - png.begin();
    const uint32_t len = uint32_t(1) << 30;
    for (int i = 0; i < 4; ++i) png[size_t(at - 4 + i)] = uint8_t(len >> (24 - 8 * i));
    return png;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("vision: bad images are refused with one line naming the file") {
    TempDir t;
    const auto good = png_of(40, 30, 3, 128);
    std::vector<std::pair<std::string, std::vector<uint8_t>>> bad = {
        {"empty.png", {}},
        {"truncated.png", std::vector<uint8_t>(good.begin(), good.begin() + long(good.size() / 2))},
        {"huge.png", forged_png(100000, 100000)},
        {"big.png", forged_png(20000, 20000)},   // under stb's side limit, over kinfer's pixel cap
        {"zero.png", forged_png(0, 10)},
        {"text.png", {'h', 'e', 'l', 'l', 'o', '\n'}},
        {"one_pixel.png", png_of(1, 1, 3, 9)},
        // A DHT declaring 16 x 32 = 512 codes: stb 2.27 would write past its 257-entry table.
        {"bad_huffman.jpg", {0xFF, 0xD8, 0xFF, 0xC4, 0x00, 0x13, 0x00, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32, 32}},
        {"thin.png", png_of(1, 40, 1, 9)},
        {"idat_1GiB.png", idat_too_long_png()},
    };
    const vision::PreprocConfig cfg{14, 2, 1568, 200704, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f}};
    for (const auto& nb : bad) {   // no structured binding: clang 14 cannot capture one in a lambda
        const auto& name = nb.first;
        const auto& bytes = nb.second;
        CAPTURE(name);
        const std::string path = t.write(name, bytes);
        const std::string msg = error_of([&] {
            const auto img = vision::load_image_file(path);
            (void)vision::make_canvas(img, cfg, path);
        });
        REQUIRE(!msg.empty());
        CHECK(msg.find(path) != std::string::npos);
        CHECK(msg.find('\n') == std::string::npos);
    }
    CHECK(error_of([&] { vision::load_image_file(t.dir.string() + "/huge.png"); }).find("100000 x 100000 pixels is larger") !=
          std::string::npos);
    CHECK(error_of([&] { vision::load_image_file(t.dir.string() + "/idat_1GiB.png"); })
              .find("corrupt PNG: chunk 'IDAT' at offset 33 declares 1073741824 bytes") != std::string::npos);
    CHECK(error_of([&] { vision::load_image_file(t.dir.string()); }).find("not a regular file") != std::string::npos);
    CHECK(error_of([&] { vision::load_image_file((t.dir / "missing.png").string()); }).find("missing.png") != std::string::npos);
    // The good one passes, and a 2 x 2 image is upscaled like any other.
    CHECK(error_of([&] { (void)vision::make_canvas(vision::load_image_file(t.write("ok.png", good)), cfg, "ok"); }).empty());
    CHECK(error_of([&] { (void)vision::make_canvas(vision::load_image_file(t.write("2x2.png", png_of(2, 2, 4, 9))), cfg, "ok"); }).empty());
}

TEST_CASE("vision: a tiny image is upscaled to the 8-patch floor of image_min_pixels") {
    const std::string mp = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    if (mp.empty()) return;
    backend::CpuBackend be(1);
    auto mm = vision::Mmproj::load(mp, be);
    vision::ImageEncoder enc(*mm);
    vision::Image img;
    img.w = 28, img.h = 28, img.px.assign(28 * 28 * 3, 100);
    const auto e = enc.encode(img, "small.png");
    CHECK(e.gw * e.gh == 16);   // 28 x 28 is 4 patches, under the floor: upscaled to 56 x 56
    CHECK(e.n_tokens == 4);
}

TEST_CASE("vision: kinfer eval names a bad --image and exits 1") {
    const std::string gguf = test::vision_file("gguf/k3v-tiny-f32.gguf");
    const std::string mp = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    const std::string prompt = test::vision_file("prompts/prompt.txt");
    if (gguf.empty() || mp.empty() || prompt.empty()) return;
    TempDir t;
    const std::string bad = t.write("broken image.png", {'G', 'I', 'F', '8'});
    const auto r = test::run_command(test::kinfer_bin() + " eval -m " + gguf + " --mmproj " + mp + " -f " + prompt +
                                     " --image '" + bad + "' -t 1");
    CHECK(r.rc == 1);
    CHECK(r.out.find(bad) != std::string::npos);
    CHECK(r.out.find("Assertion") == std::string::npos);
}
