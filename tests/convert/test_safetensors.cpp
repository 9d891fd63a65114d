// The safetensors reader: the golden checkpoints open, and every kind of malformed header is
// rejected with a message naming the file and the tensor.
#include "convert/safetensors.h"
#include "test_util.h"

#include <cstring>
#include <string>
#include <vector>

using namespace kinfer::convert;

namespace {

// A safetensors image from a header JSON and a data section.
std::vector<uint8_t> make(const std::string& header, const std::string& data) {
    // resize + memcpy: GCC 12 warns falsely about vector::insert here.
    std::vector<uint8_t> out(8 + header.size() + data.size());
    const uint64_t n = header.size();
    std::memcpy(out.data(), &n, 8);
    std::memcpy(out.data() + 8, header.data(), header.size());
    if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
    return out;
}

std::string error_of(const std::vector<uint8_t>& buf) {
    try {
        SafetensorsFile::from_memory(buf.data(), buf.size(), "t.safetensors");
    } catch (const kinfer::Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST_CASE("safetensors: a valid file parses, sorted by name") {
    auto buf = make(R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("a":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})",
                    std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0\x80\x3f\x00\x40", 12));
    auto f = SafetensorsFile::from_memory(buf.data(), buf.size(), "t.safetensors");
    REQUIRE(f->tensors().size() == 2);
    CHECK(f->tensors()[0].name == "a");
    CHECK(f->tensors()[1].name == "b");
    CHECK(f->metadata().at("format") == "pt");
    float v[2];
    to_f32(DType::BF16, f->find("a")->data, v, 2);
    CHECK(v[0] == 1.0f);
    CHECK(v[1] == 2.0f);
    to_f32(DType::F32, f->find("b")->data, v, 2);
    CHECK(v[1] == -2.0f);
}

TEST_CASE("safetensors: malformed headers are rejected naming file and tensor") {
    const std::string d8(8, '\0');
    struct Case {
        const char* what;
        std::vector<uint8_t> buf;
        const char* needle;
    };
    std::vector<uint8_t> short_file = {1, 2, 3};
    std::vector<uint8_t> huge_len(16, 0);
    huge_len[0] = 0xff;
    huge_len[1] = 0xff;
    const Case cases[] = {
        {"too short", short_file, "too short"},
        {"header past end", huge_len, "past the end"},
        {"bad json", make("{\"a\":", d8), "not valid JSON"},
        {"not object", make("[1,2]", d8), "not a JSON object"},
        {"unknown dtype", make(R"({"w":{"dtype":"Q9","shape":[2],"data_offsets":[0,8]}})", d8), "'w'"},
        {"size mismatch", make(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8), "'w'"},
        {"past data", make(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8), "truncated"},
        {"reversed", make(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", d8), "reversed"},
        {"negative dim", make(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8), "'w'"},
        {"overlap", make(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"v":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), "overlaps"},
        {"duplicate", make(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", d8), "twice"},
        {"overflow", make(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", d8), "overflows"},
        {"overflow behind a zero", make(R"({"w":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})", d8), "overflows"},
    };
    for (const auto& c : cases) {
        CAPTURE(c.what);
        const std::string e = error_of(c.buf);
        CHECK(e.find("t.safetensors") != std::string::npos);
        CHECK(e.find(c.needle) != std::string::npos);
    }
}

TEST_CASE("safetensors: the golden checkpoints open through their index") {
    for (const char* dir : {"hf/hf-k3-tiny", "hf/hf-kl-tiny"}) {
        if (!kinfer::test::have_golden(dir)) return;
        auto ck = Checkpoint::open(kinfer::test::golden(dir));
        CHECK(ck.shards().size() == 3);
        CHECK(ck.tensors().size() == (std::string(dir).find("k3") != std::string::npos ? 1770u : 423u));
        // Reading order: shard by shard, names sorted inside each.
        for (size_t i = 1; i < ck.tensors().size(); ++i)
            if (ck.tensors()[i]->file == ck.tensors()[i - 1]->file)
                CHECK(ck.tensors()[i - 1]->name < ck.tensors()[i]->name);
    }
}
