// The reader against hand-made files: a tiny valid GGUF parses and every accessor works; each
// kind of defect is rejected with a kinfer::Error naming the file, the byte and what was expected.
#include "gguf/reader.h"
#include "test_util.h"
#include "tiny_gguf.h"

#include <filesystem>
#include <fstream>
#include <unistd.h>

using kinfer::gguf::File;
using kinfer::gguf::ValueType;
using kinfer::test::TinyGguf;

namespace {

const std::string kName = "tiny.gguf";

// Parses and returns the error message ("" when it parsed).
std::string parse_error(const std::vector<uint8_t>& bytes, const std::string& name = kName) {
    try {
        File::from_memory(bytes.data(), bytes.size(), name);
    } catch (const kinfer::Error& e) {
        return e.what();
    }
    return "";
}

// The message names the file and the byte, and says what was expected.
void check_error(const std::vector<uint8_t>& bytes, size_t at, const std::string& expected) {
    std::string msg = parse_error(bytes);
    CAPTURE(expected);
    CAPTURE(msg);
    REQUIRE(!msg.empty());
    CHECK(msg.rfind(kName + ": at byte " + std::to_string(at) + ": ", 0) == 0);
    CHECK(msg.find("expected") != std::string::npos);
    CHECK(msg.find(expected) != std::string::npos);
}

}  // namespace

TEST_CASE("gguf broken: the tiny file itself is valid and every accessor works") {
    TinyGguf g;
    auto bytes = g.build();
    auto f = File::from_memory(bytes.data(), bytes.size(), kName);
    CHECK(f->version() == 3);
    CHECK(f->path() == kName);
    CHECK(f->alignment() == 32);
    CHECK(f->data_offset() == g.data_offset);
    CHECK(f->kv().size() == 8);
    CHECK(f->architecture() == "kimi-k3");
    CHECK(f->get_string("general.name") == "tiny");
    CHECK(f->get_int("general.alignment") == 32);
    const auto& hkv = f->get("kimi-k3.attention.head_count_kv");
    CHECK(hkv.is_array());
    CHECK(hkv.array_type() == ValueType::INT32);
    CHECK(hkv.ints() == std::vector<int64_t>{0, 0, 0, 1});
    CHECK(hkv.floats() == std::vector<float>{0, 0, 0, 1});
    CHECK(hkv.raw_size() == 16);
    const auto& tok = f->get("tokenizer.ggml.tokens");
    CHECK(tok.size() == 3);
    CHECK(tok.string_at(2) == "def");
    CHECK(tok.strings() == std::vector<std::string_view>{"a", "bc", "def"});
    CHECK(f->get_float("kimi-k3.attention.layer_norm_rms_epsilon") == doctest::Approx(1e-5));
    CHECK(f->get_bool_or("kimi-k3.expert_weights_norm", false));
    CHECK(f->get("general.big").as_uint() == ~uint64_t(0));
    CHECK(f->get_int_or("absent", -7) == -7);
    CHECK(f->get_string_or("absent", "x") == "x");
    CHECK(f->get_float_or("absent", 2.5) == 2.5);
    CHECK(f->find("absent") == nullptr);

    // Wrong-type and out-of-range accesses throw kinfer::Error naming the file and the key.
    auto throws_with = [](auto fn, const std::string& what) {
        try {
            fn();
        } catch (const kinfer::Error& e) {
            std::string m = e.what();
            CAPTURE(m);
            CHECK(m.find(kName) != std::string::npos);
            CHECK(m.find(what) != std::string::npos);
            return;
        }
        FAIL("no error");
    };
    throws_with([&] { f->get("absent"); }, "'absent' missing");
    throws_with([&] { f->get_int("general.name"); }, "expected an integer");
    throws_with([&] { f->get_string("general.alignment"); }, "expected string");
    throws_with([&] { f->get("general.big").as_int(); }, "does not fit in int64");
    throws_with([&] { tok.string_at(3); }, "out of range");
    throws_with([&] { tok.int_at(0); }, "expected an integer array");
    throws_with([&] { hkv.string_at(0); }, "expected a string array");
    throws_with([&] { hkv.as_int(); }, "expected an integer");
    throws_with([&] { f->tensor("nope"); }, "tensor 'nope' missing");

    REQUIRE(f->tensors().size() == 3);
    const auto& a = f->tensor("blk.0.attn_q.weight");
    CHECK(a.type == kinfer::quant::Type::F32);
    CHECK(a.n_dims == 2);
    CHECK(a.ne[0] == 8);
    CHECK(a.ne[1] == 2);
    CHECK(a.ne[2] == 1);
    CHECK(a.nelements() == 16);
    CHECK(a.nrows() == 2);
    CHECK(a.row_bytes() == 32);
    CHECK(a.nbytes == 64);
    CHECK(a.shape_str() == "{8, 2}");
    CHECK(a.data == bytes.data() + g.data_offset);
    CHECK(a.info_offset == g.pos_tensor[0]);
    const auto& q = f->tensor("blk.0.ffn_down.weight");
    CHECK(q.type == kinfer::quant::Type::Q8_0);
    CHECK(q.nbytes == 34);
    CHECK(q.data == bytes.data() + g.data_offset + 64);
    CHECK(f->find_tensor("output_norm.weight")->nbytes == 8);
    CHECK(f->find_tensor("output_norm") == nullptr);
}

TEST_CASE("gguf broken: version 2 is accepted, File::open maps a real file") {
    TinyGguf g;
    g.version = 2;
    auto bytes = g.build();
    CHECK(parse_error(bytes) == "");
    auto path = std::filesystem::temp_directory_path() / ("kinfer_test_reader_" + std::to_string(::getpid()) + ".gguf");
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    {
        auto f = File::open(path.string());
        CHECK(f->version() == 2);
        CHECK(f->file_size() == bytes.size());
        CHECK(std::memcmp(f->tensor("output_norm.weight").data, bytes.data() + g.data_offset + 128, 8) == 0);
    }
    // A broken file on disk: the message names the path.
    bytes[0] = 'X';
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    try {
        File::open(path.string());
        FAIL("no error");
    } catch (const kinfer::Error& e) {
        CHECK(std::string(e.what()).rfind(path.string() + ": at byte 0: expected magic \"GGUF\"", 0) == 0);
    }
    std::filesystem::remove(path);
    CHECK_THROWS_AS(File::open(path.string()), kinfer::Error);                  // missing
    CHECK_THROWS_AS(File::open(std::filesystem::temp_directory_path().string()), kinfer::Error);  // a directory
}

TEST_CASE("gguf broken: bad magic and version") {
    TinyGguf g;
    auto bytes = g.build();
    auto b = bytes;
    b[3] = 'X';
    check_error(b, 0, "expected magic \"GGUF\", got \"GGUX\"");
    check_error({}, 0, "got only 0 bytes");
    for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
        g.build();
        g.patch<uint32_t>(g.pos_version, v);
        check_error(g.b, g.pos_version, "expected GGUF version 2 or 3, got " + std::to_string(v));
    }
}

TEST_CASE("gguf broken: truncated at every byte") {
    TinyGguf g;
    auto bytes = g.build();
    for (size_t n = 0; n < bytes.size(); ++n) {
        CAPTURE(n);
        std::vector<uint8_t> b(bytes.begin(), bytes.begin() + std::ptrdiff_t(n));
        std::string msg = parse_error(b);
        CAPTURE(msg);
        REQUIRE(!msg.empty());
        CHECK(msg.rfind(kName + ": at byte ", 0) == 0);
        CHECK(msg.find("expected") != std::string::npos);
        CHECK(msg.find("got") != std::string::npos);
    }
}

TEST_CASE("gguf broken: huge counts") {
    TinyGguf g;
    for (uint64_t n : {uint64_t(4), uint64_t(1) << 40, ~uint64_t(0)}) {
        g.build();
        g.patch<uint64_t>(g.pos_n_tensors, n);
        if (n == 4) check_error(g.b, g.pos_tensor_offset[2] + 8, "tensor name");  // runs into the padding
        else check_error(g.b, g.pos_n_tensors, "expected a tensor count the remaining");
        g.build();
        g.patch<uint64_t>(g.pos_n_kv, n == 4 ? 1000 : n);
        check_error(g.b, g.pos_n_kv, "expected a metadata key/value count the remaining");
    }
}

TEST_CASE("gguf broken: string and array lengths past the end") {
    TinyGguf g;
    g.build();
    g.patch<uint64_t>(g.pos_kv[0], uint64_t(1) << 50);  // the first key's length
    check_error(g.b, g.pos_kv[0], "expected metadata key of 1125899906842624 bytes within the file");
    g.build();
    g.patch<uint64_t>(g.pos_kv[0], ~uint64_t(0));
    check_error(g.b, g.pos_kv[0], "metadata key");
    // The general.architecture value: key record = 8 + 20 + 4 bytes, then the string.
    g.build();
    size_t val = g.pos_kv[0] + 8 + 20 + 4;
    g.patch<uint64_t>(val, 1u << 30);
    check_error(g.b, val, "expected string value of 1073741824 bytes");
    // The string array's length (after key 8+21, type 4, element type 4).
    g.build();
    size_t alen = g.pos_tokens_kv + 8 + 21 + 4 + 4;
    g.patch<uint64_t>(alen, uint64_t(1) << 61);
    check_error(g.b, alen, "expected an array length the remaining");
    // One string element's length.
    g.build();
    g.patch<uint64_t>(alen + 8, 1u << 20);
    check_error(g.b, alen + 8, "expected array string element of 1048576 bytes");
    // The int array's length: 2^62 int32s overflow a naive count * 4.
    g.build();
    size_t ilen = g.pos_kv[3] + 8 + 31 + 4 + 4;
    g.patch<uint64_t>(ilen, uint64_t(1) << 62);
    check_error(g.b, ilen, "expected an array length the remaining");
}

TEST_CASE("gguf broken: bad value types, nested arrays, bad bools, duplicate keys") {
    TinyGguf g;
    g.build();
    size_t type_at = g.pos_kv[1] + 8 + 12;  // general.name's type
    g.patch<uint32_t>(type_at, 13);
    check_error(g.b, type_at, "expected a value type 0..12 for key 'general.name', got 13");
    g.build();
    size_t et = g.pos_tokens_kv + 8 + 21 + 4;
    g.patch<uint32_t>(et, 99);
    check_error(g.b, et, "expected an array element type 0..12");
    g.build();
    g.patch<uint32_t>(et, 9);
    check_error(g.b, et, "nested arrays");
    g.build();
    size_t bv = g.pos_bool_kv + 8 + 27 + 4;
    g.patch<uint8_t>(bv, 2);
    check_error(g.b, bv, "expected bool 0 or 1");
}

TEST_CASE("gguf broken: duplicate keys and duplicate tensor names") {
    TinyGguf k;
    k.big_key = "general.name";
    k.build();
    check_error(k.b, k.pos_kv[7], "expected unique metadata keys, got a second 'general.name' (first at byte " +
                                      std::to_string(k.pos_kv[1]) + ")");
    TinyGguf t;
    t.tensors[1].name = "blk.0.attn_q.weight";
    t.build();
    check_error(t.b, t.pos_tensor[1], "expected unique tensor names, got a second 'blk.0.attn_q.weight' (first at byte " +
                                          std::to_string(t.pos_tensor[0]) + ")");
    TinyGguf e;
    e.big_key = "";
    e.build();
    check_error(e.b, e.pos_kv[7], "expected a non-empty metadata key");
}

TEST_CASE("gguf broken: alignment") {
    for (uint32_t a : {0u, 3u, 48u, 0x80000001u}) {
        TinyGguf g;
        g.build();
        g.patch<uint32_t>(g.pos_alignment_kv + 8 + 17 + 4, a);
        check_error(g.b, g.pos_alignment_kv, "expected general.alignment to be a non-zero power of two, got " + std::to_string(a));
    }
    TinyGguf g;
    g.build();
    g.patch<uint32_t>(g.pos_alignment_kv + 8 + 17, 5);  // type INT32
    check_error(g.b, g.pos_alignment_kv, "expected general.alignment of type uint32, got int32");
    // A different valid alignment changes where the data section starts.
    TinyGguf h;
    h.alignment = 64;
    h.tensors[1].offset = 64;
    h.tensors[2].offset = 128;
    h.build();
    auto f = File::from_memory(h.b.data(), h.b.size(), kName);
    CHECK(f->alignment() == 64);
    CHECK(f->data_offset() % 64 == 0);
}

TEST_CASE("gguf broken: tensor infos") {
    auto with = [](auto edit) {
        TinyGguf g;
        edit(g);
        g.build();
        return g;
    };
    // Misaligned offset.
    auto g = with([](TinyGguf& t) { t.tensors[2].offset = 132; });
    check_error(g.b, g.pos_tensor_offset[2], "expected tensor 'output_norm.weight' data offset to be a multiple of the alignment 32, got 132");
    // Overlap.
    g = with([](TinyGguf& t) { t.tensors[1].offset = 32; });
    check_error(g.b, g.pos_tensor[1], "not to overlap tensor 'blk.0.attn_q.weight'");
    // Past the end.
    g = with([](TinyGguf& t) { t.tensors[2].offset = 1 << 20; t.tensors[2].nbytes = 0; });  // no data written
    check_error(g.b, g.pos_tensor[2], "to end within the file");
    g = with([](TinyGguf& t) { t.tensors[2].offset = ~uint64_t(31); t.tensors[2].nbytes = 0; });
    check_error(g.b, g.pos_tensor[2], "got end at more than 2^64");
    // n_dims.
    for (uint32_t nd : {0u, 5u, 0xffffffffu}) {
        g = with([](TinyGguf&) {});
        g.patch<uint32_t>(g.pos_tensor_ndims[0], nd);
        check_error(g.b, g.pos_tensor_ndims[0], "n_dims 1..4, got " + std::to_string(nd));
    }
    // Negative and overflowing dimensions.
    g = with([](TinyGguf& t) { t.tensors[0].ne = {8, -2}; });
    check_error(g.b, g.pos_tensor_ndims[0] + 12, "ne[1] >= 0, got -2");
    g = with([](TinyGguf& t) { t.tensors[0].ne = {int64_t(1) << 32, int64_t(1) << 32}; });
    check_error(g.b, g.pos_tensor_ndims[0] + 12, "element count to fit in int64");
    // A zero dimension does not excuse the others: nrows() would overflow (found by fuzz_gguf).
    g = with([](TinyGguf& t) { t.tensors[0].ne = {0, (int64_t(1) << 40) + 1, int64_t(30) << 32}; t.tensors[0].nbytes = 0; });
    check_error(g.b, g.pos_tensor_ndims[0] + 20, "element count to fit in int64");
    g = with([](TinyGguf& t) { t.tensors[0].ne = {int64_t(1) << 62, 1, 1, 1}; });
    check_error(g.b, g.pos_tensor_ndims[0], "byte size to fit in 64 bits");
    // Unknown type, block size.
    g = with([](TinyGguf& t) { t.tensors[1].type = 99; });
    check_error(g.b, g.pos_tensor_type[1], "expected a known ggml tensor type for 'blk.0.ffn_down.weight', got type id 99");
    g = with([](TinyGguf& t) { t.tensors[1].type = 4; });  // Q4_2: removed from ggml
    check_error(g.b, g.pos_tensor_type[1], "got type id 4");
    g = with([](TinyGguf& t) { t.tensors[1].ne = {16}; });
    check_error(g.b, g.pos_tensor_ndims[1], "ne[0] to be a multiple of q8_0's block size 32, got 16");
    // Names: empty and too long for ggml.
    g = with([](TinyGguf& t) { t.tensors[1].name = ""; });
    check_error(g.b, g.pos_tensor[1], "non-empty tensor name");
    g = with([](TinyGguf& t) { t.tensors[1].name = std::string(64, 'x'); });
    check_error(g.b, g.pos_tensor[1], "at most 63 bytes, got 64");
    // Zero-sized dimensions are allowed (an empty tensor).
    g = with([](TinyGguf& t) { t.tensors[0].ne = {8, 0}; t.tensors[0].nbytes = 0; });
    auto b = g.b;
    b.resize(b.size() + 64);  // keep the other tensors' data in place
    CHECK(parse_error(b) == "");
}

TEST_CASE("gguf broken: no tensors, no data section") {
    TinyGguf g;
    g.tensors.clear();
    g.build();
    auto f = File::from_memory(g.b.data(), g.b.size(), kName);
    CHECK(f->tensors().empty());
    CHECK(f->kv().size() == 8);
}
