// `kinfer convert --mmproj` on the tiny K3 vision checkpoint gives llama.cpp's mmproj: the same
// keys and values in order, the same tensors (names, order, types, shapes, bytes: the Q/K
// de-interleave included), in fact the same file; and `kinfer info` describes it.
#include "convert/mmproj_convert.h"
#include "gguf/reader.h"
#include "vision_data.h"

#include <cstring>
#include <filesystem>
#include <unistd.h>

using namespace kinfer;

TEST_CASE("vision: the Q/K de-interleave moves row a*4 + b*2 + c of a head to b*(d/2) + a*2 + c") {
    const auto from = convert::qkv_deinterleave_rows(2, 8);   // q_dim 16, rows 0..47
    REQUIRE(from.size() == 48);
    // Head 0 of Q: output rows 0..3 are the x pairs (a = 0, 1), rows 4..7 the y pairs.
    CHECK(std::vector<int64_t>(from.begin(), from.begin() + 8) == std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7});
    CHECK(from[16 + 8 + 5] == 16 + 8 + 3);   // K, head 1: out b=1,a=0,c=1 <- in a=0,b=1,c=1
    for (int64_t r = 32; r < 48; ++r) CHECK(from[size_t(r)] == r);   // V is unchanged
}

TEST_CASE("vision: convert --mmproj reproduces llama.cpp's mmproj, and info describes it") {
    if (!test::have_golden("vision/hf/k3v-tiny/config.json")) return;
    const std::string golden = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    if (golden.empty()) return;
    const auto out = (std::filesystem::temp_directory_path() / ("kinfer_mmproj_" + std::to_string(::getpid()) + ".gguf")).string();
    std::FILE* devnull = std::fopen("/dev/null", "w");
    convert::convert_mmproj(test::golden("vision/hf/k3v-tiny"), out, convert::OutType::F32, devnull);
    std::fclose(devnull);
    {
        auto a = gguf::File::open(out), b = gguf::File::open(golden);
        REQUIRE(a->kv().size() == b->kv().size());
        for (size_t i = 0; i < a->kv().size(); ++i) {
            const auto &x = a->kv()[i], &y = b->kv()[i];
            CAPTURE(y.key);
            CHECK(x.key == y.key);
            CHECK(x.type() == y.type());
            CHECK(x.raw_size() == y.raw_size());
            CHECK(std::memcmp(x.raw(), y.raw(), std::min(x.raw_size(), y.raw_size())) == 0);
        }
        REQUIRE(a->tensors().size() == b->tensors().size());
        for (size_t i = 0; i < a->tensors().size(); ++i) {
            const auto &x = a->tensors()[i], &y = b->tensors()[i];
            CAPTURE(y.name);
            CHECK(x.name == y.name);
            CHECK(x.type == y.type);
            CHECK(x.shape_str() == y.shape_str());
            REQUIRE(x.nbytes == y.nbytes);
            CHECK(std::memcmp(x.data, y.data, x.nbytes) == 0);
        }
    }
    CHECK(test::read_bytes(out) == test::read_bytes(golden));

    const auto r = test::run_command(test::kinfer_bin() + " info " + out + " --no-tensors");
    CHECK(r.rc == 0);
    CHECK(r.out.find("vision projector (mmproj):") != std::string::npos);
    CHECK(r.out.find("projector kimik3") != std::string::npos);
    CHECK(r.out.find("tower: 3 blocks, width 48, 3 heads x 24, ffn 96") != std::string::npos);
    CHECK(r.out.find("at most 256 tokens per image") != std::string::npos);
    std::filesystem::remove(out);
}
