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
#include <cstdlib>
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

// A PNG of these chunks (type, data) after the signature; the CRCs are left 0 (stb does not
// check them).
std::vector<uint8_t> png_chunks(const std::vector<std::pair<std::string, std::vector<uint8_t>>>& chunks) {
    std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    for (const auto& c : chunks) {
        const auto n = uint32_t(c.second.size());
        for (int i = 0; i < 4; ++i) out.push_back(uint8_t(n >> (24 - 8 * i)));
        out.insert(out.end(), c.first.begin(), c.first.end());
        out.insert(out.end(), c.second.begin(), c.second.end());
        out.insert(out.end(), 4, 0);
    }
    return out;
}

// 1 x 1 pixel, 8-bit gray (filter byte + pixel: 2 bytes), its pixel stream `raw` bytes long.
std::vector<uint8_t> gray_1x1_png(size_t raw) {
    std::vector<uint8_t> zeros(raw, 0);
    int zlen = 0;
    unsigned char* z = stbi_zlib_compress(zeros.data(), int(zeros.size()), &zlen, 8);
    const std::vector<uint8_t> idat(z, z + zlen);
    std::free(z);
    return png_chunks({{"IHDR", {0, 0, 0, 1, 0, 0, 0, 1, 8, 0, 0, 0, 0}}, {"IDAT", idat}, {"IEND", {}}});
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

// What stb_image would take far more memory for than the image needs is refused; the unusual
// files it reads today still decode.
TEST_CASE("vision: PNGs that would make stb allocate past the image's size are refused, odd valid ones are not") {
    // A 1 x 1 image whose pixel stream inflates to 16 MiB (a 160 KiB file): stb's inflate output
    // doubles for as long as the stream goes on (to 2-4 GiB), and decodes the first 2 bytes.
    // The cap (stb_alloc.h) fails it at about 1.4 MiB.
    const std::string bomb = error_of([] { (void)vision::decode_image(gray_1x1_png(size_t(16) << 20), "bomb.png"); });
    CHECK(bomb.find("bomb.png: cannot decode the image (1 x 1): Out of memory") != std::string::npos);
    // The same image with its 2 bytes, and with a 64 KiB stream (under the cap): decoded.
    CHECK(error_of([] { (void)vision::decode_image(gray_1x1_png(2), "ok.png"); }).empty());
    CHECK(error_of([] { (void)vision::decode_image(gray_1x1_png(size_t(64) << 10), "ok.png"); }).empty());

    // stb never reads IEND's length: a bad one must not be refused.
    auto good = png_of(8, 8, 3, 7);
    const std::string iend = "IEND";
    const auto at = std::search(good.begin(), good.end(), iend.begin(), iend.end()) - good.begin();
    for (int i = 0; i < 4; ++i) good[size_t(at - 4 + i)] = 0xff;
    CHECK(error_of([&] { (void)vision::decode_image(good, "iend.png"); }).empty());
    // An empty IDAT chunk before the real one, and bytes after IEND: decoded.
    auto extra = png_of(8, 8, 3, 7);
    const std::string idat = "IDAT";
    const auto id = std::search(extra.begin(), extra.end(), idat.begin(), idat.end()) - extra.begin() - 4;
    const std::vector<uint8_t> empty_idat = {0, 0, 0, 0, 'I', 'D', 'A', 'T', 0, 0, 0, 0};
    extra.insert(extra.begin() + id, empty_idat.begin(), empty_idat.end());
    extra.insert(extra.end(), {1, 2, 3, 4, 5});
    CHECK(error_of([&] { (void)vision::decode_image(extra, "extra.png"); }).empty());
}
