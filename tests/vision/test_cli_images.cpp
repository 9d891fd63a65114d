// `kinfer run` with images end to end, and the flag errors a user meets first.
#include "vision_data.h"

using namespace kinfer;

namespace {

struct Paths {
    std::string gguf, mmproj, photo, tall;
    bool ok() const { return !gguf.empty() && !mmproj.empty() && !photo.empty() && !tall.empty(); }
};

Paths paths() {
    return {test::vision_file("gguf/k3v-tiny-f32.gguf"), test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf"),
            test::vision_file("images/photo_150x97.png"), test::vision_file("images/tall_61x203.jpg")};
}

}  // namespace

TEST_CASE("vision: kinfer run --mmproj --image generates after the image rows") {
    const Paths p = paths();
    if (!p.ok()) return;
    for (const std::string rules : {"llama.cpp", "moonshot"}) {
        CAPTURE(rules);
        const auto r = test::run_command(test::kinfer_bin() + " run -m " + p.gguf + " --mmproj " + p.mmproj + " --image " +
                                         p.photo + " --image " + p.tall + " --image-rules " + rules +
                                         " -p 'Compare <__media__> and <__media__>.' -n 6 --json -t 2 --temp 0");
        REQUIRE_MESSAGE(r.rc == 0, r.out);
        // 15 + 14 image rows with llama.cpp's rules, 24 + 24 with Moonshot's (no resize, padding only).
        const std::string rows = rules == "moonshot" ? "24 tokens" : "15 tokens";
        CHECK(r.out.find(rows) != std::string::npos);
        CHECK(r.out.find("\"generated_tokens\":6") != std::string::npos);
    }
}

TEST_CASE("vision: image flags refuse what cannot work, with one line") {
    const Paths p = paths();
    if (!p.ok()) return;
    const std::string base = test::kinfer_bin() + " run -m " + p.gguf + " -n 2 -t 1 ";
    auto r = test::run_command(base + "--image " + p.photo + " -p hi");
    CHECK(r.rc == 1);
    CHECK(r.out.find("--mmproj") != std::string::npos);
    r = test::run_command(base + "--mmproj " + p.mmproj + " --image " + p.photo + " -p 'one <__media__> two <__media__>'");
    CHECK(r.rc == 1);
    CHECK(r.out.find("2 <__media__> marker(s) but 1 image(s)") != std::string::npos);
    r = test::run_command(base + "--mmproj " + p.gguf + " --image " + p.photo + " -p hi");   // the text GGUF as mmproj
    CHECK(r.rc == 1);
    CHECK(r.out.find("not a vision projector") != std::string::npos);
    r = test::run_command(base + "--mmproj " + p.mmproj + " --image " + p.photo + " --image-rules pil -p hi");
    CHECK(r.rc == 2);
}
