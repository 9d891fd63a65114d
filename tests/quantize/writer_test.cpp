// gguf::Writer: round trip through the reader (every value type, alignment, tensor bytes),
// streaming in chunks, temp-file cleanup, and a byte-exact rewrite of a llama.cpp file.
#include "gguf/reader.h"
#include "gguf/writer.h"
#include "test_util.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace kinfer;
using gguf::ValueType;

namespace {

std::string tmp_file(const std::string& name) {
    return (fs::temp_directory_path() / ("kinfer_writer_" + std::to_string(::getpid()) + "_" + name)).string();
}

std::vector<uint8_t> slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = uint8_t(seed + i * 7);
    return v;
}

}  // namespace

TEST_CASE("writer: every metadata type and tensor data round-trip through the reader") {
    const std::string path = tmp_file("all.gguf");
    const int32_t ai32[] = {0, -1, 7, 1 << 30};
    const float af32[] = {1.5f, -2.25f, 0.0f};
    const uint8_t abool[] = {1, 0, 1};
    const std::vector<std::string> strs = {"a", "", "Ġhello wörld", std::string(300, 'x')};
    const int64_t ne_a[] = {64, 3};
    const int64_t ne_b[] = {32, 2, 2};
    const int64_t ne_c[] = {5};
    const auto da = pattern(64 * 3 * 4, 1);
    const size_t q8_bytes = quant::row_size(quant::traits(quant::Type::Q8_0), 32) * 4;
    const auto db = pattern(q8_bytes, 9);
    const auto dc = pattern(5 * 4, 3);
    {
        gguf::Writer w(path);
        w.add_string("general.architecture", "kimi-k3");
        w.add_u8("t.u8", 200);
        w.add_i8("t.i8", -100);
        w.add_u16("t.u16", 60000);
        w.add_i16("t.i16", -30000);
        w.add_u32("t.u32", 4000000000u);
        w.add_i32("t.i32", -2000000000);
        w.add_u64("t.u64", 0xFFFFFFFFFFFFull);
        w.add_i64("t.i64", -(int64_t(1) << 40));
        w.add_f32("t.f32", 1e-5f);
        w.add_f64("t.f64", 3.141592653589793);
        w.add_bool("t.bool", true);
        w.add_array_i32("t.ai32", ai32);
        w.add_array_f32("t.af32", af32);
        w.add_array("t.abool", ValueType::BOOL, abool, 3);
        w.add_string_array("t.astr", strs);
        w.add_array_i32("t.empty", {});
        CHECK_THROWS_AS(w.add_u8("t.u8", 1), Error);
        w.add_tensor("a", quant::Type::F32, ne_a, 2);
        w.add_tensor("b", quant::Type::Q8_0, ne_b, 3);
        w.add_tensor("c", quant::Type::F32, ne_c, 1);
        CHECK_THROWS_AS(w.add_tensor("a", quant::Type::F32, ne_c, 1), Error);
        w.write_tensor(da.data(), da.size());
        w.write(db.data(), 10);   // chunked
        w.write(db.data() + 10, db.size() - 10);
        w.write_tensor(dc.data(), dc.size());
        CHECK(fs::exists(w.temp_path()));
        CHECK_FALSE(fs::exists(path));
        w.finish();
        CHECK_FALSE(fs::exists(w.temp_path()));
    }
    auto f = gguf::File::open(path);
    CHECK(f->version() == 3);
    CHECK(f->alignment() == 32);
    CHECK(f->data_offset() % 32 == 0);
    CHECK(f->kv().size() == 17);
    CHECK(f->get_string("general.architecture") == "kimi-k3");
    CHECK(f->get("t.u8").type() == ValueType::UINT8);
    CHECK(f->get_int("t.u8") == 200);
    CHECK(f->get_int("t.i8") == -100);
    CHECK(f->get_int("t.u16") == 60000);
    CHECK(f->get_int("t.i16") == -30000);
    CHECK(f->get("t.u32").as_uint() == 4000000000u);
    CHECK(f->get_int("t.i32") == -2000000000);
    CHECK(f->get("t.u64").as_uint() == 0xFFFFFFFFFFFFull);
    CHECK(f->get_int("t.i64") == -(int64_t(1) << 40));
    CHECK(f->get("t.f32").type() == ValueType::FLOAT32);
    CHECK(float(f->get_float("t.f32")) == 1e-5f);
    CHECK(f->get_float("t.f64") == 3.141592653589793);
    CHECK(f->get("t.bool").as_bool());
    CHECK(f->get("t.ai32").ints() == std::vector<int64_t>{0, -1, 7, 1 << 30});
    CHECK(f->get("t.af32").floats() == std::vector<float>{1.5f, -2.25f, 0.0f});
    CHECK(f->get("t.abool").array_type() == ValueType::BOOL);
    CHECK(f->get("t.abool").size() == 3);
    const auto& as = f->get("t.astr");
    REQUIRE(as.size() == strs.size());
    for (size_t i = 0; i < strs.size(); ++i) CHECK(as.string_at(i) == strs[i]);
    CHECK(f->get("t.empty").size() == 0);

    REQUIRE(f->tensors().size() == 3);
    const auto& ta = f->tensor("a");
    const auto& tb = f->tensor("b");
    const auto& tc = f->tensor("c");
    CHECK(ta.n_dims == 2);
    CHECK(tb.n_dims == 3);
    CHECK(tb.type == quant::Type::Q8_0);
    CHECK(tb.ne[2] == 2);
    CHECK(tc.n_dims == 1);
    for (const auto* t : {&ta, &tb, &tc}) CHECK(t->offset % 32 == 0);
    CHECK(std::memcmp(ta.data, da.data(), da.size()) == 0);
    CHECK(std::memcmp(tb.data, db.data(), db.size()) == 0);
    CHECK(std::memcmp(tc.data, dc.data(), dc.size()) == 0);
    // Every tensor, the last one included, is padded to the alignment (as gguf.cpp does).
    CHECK(f->file_size() % 32 == 0);
    CHECK(f->file_size() == f->data_offset() + tc.offset + 32);

    // Copying every value verbatim gives byte-identical metadata.
    const std::string path2 = tmp_file("copy.gguf");
    {
        gguf::Writer w(path2);
        for (const auto& v : f->kv()) w.add_value(v);
        for (const auto& t : f->tensors()) w.add_tensor(t.name, t.type, t.ne, t.n_dims);
        for (const auto& t : f->tensors()) w.write_tensor(t.data, t.nbytes);
        w.finish(/*sync=*/true);
    }
    CHECK(slurp(path) == slurp(path2));
    f.reset();
    fs::remove(path);
    fs::remove(path2);
}

TEST_CASE("writer: general.alignment sets header and tensor padding") {
    const std::string path = tmp_file("align.gguf");
    const int64_t ne[] = {3};
    const auto d = pattern(12, 5);
    {
        gguf::Writer w(path);
        w.add_u32("general.alignment", 64);
        w.add_tensor("x", quant::Type::F32, ne, 1);
        w.add_tensor("y", quant::Type::F32, ne, 1);
        CHECK(w.alignment() == 64);
        CHECK(w.tensor_offset(1) == 64);
        w.write_tensor(d.data(), d.size());
        w.write_tensor(d.data(), d.size());
        w.finish();
    }
    auto f = gguf::File::open(path);
    CHECK(f->alignment() == 64);
    CHECK(f->data_offset() % 64 == 0);
    CHECK(f->tensor("y").offset == 64);
    CHECK(f->file_size() == f->data_offset() + 128);
    f.reset();
    fs::remove(path);

    gguf::Writer bad(tmp_file("bad.gguf"));
    bad.add_u32("general.alignment", 48);
    CHECK_THROWS_AS(bad.finish(), Error);
}

TEST_CASE("writer: an unfinished or failed write leaves no file behind") {
    const std::string path = tmp_file("fail.gguf");
    const int64_t ne[] = {32};
    const auto d = pattern(128, 1);
    std::string tmp;
    CHECK_THROWS_AS(([&] {
        gguf::Writer w(path);
        w.add_string("k", "v");
        w.add_tensor("x", quant::Type::F32, ne, 1);
        w.write(d.data(), 64);
        tmp = w.temp_path();
        CHECK(fs::exists(tmp));
        throw Error("quantization failed");
    }()), Error);
    CHECK_FALSE(fs::exists(tmp));
    CHECK_FALSE(fs::exists(path));

    {
        gguf::Writer w(path);
        w.add_tensor("x", quant::Type::F32, ne, 1);
        w.write(d.data(), 64);
        CHECK_THROWS_AS(w.finish(), Error);            // incomplete tensor
        CHECK_THROWS_AS(w.write(d.data(), 128), Error);  // past the last tensor
        CHECK_THROWS_AS(w.add_u8("late", 1), Error);     // metadata after data started
        tmp = w.temp_path();
    }
    CHECK_FALSE(fs::exists(tmp));
    CHECK_FALSE(fs::exists(path));
}

TEST_CASE("writer: rewriting a llama-quantize file through reader + writer is byte-identical") {
    for (const char* name : {"k3-tiny-a-Q4_K_M.gguf", "kl-tiny-a-MXFP4_MOE.gguf"}) {
        const std::string rel = std::string("llama.cpp/models/") + name;
        if (!test::have_golden(rel)) continue;
        auto in = gguf::File::open(test::golden(rel));
        const std::string out = tmp_file(std::string("rw_") + name);
        {
            gguf::Writer w(out);
            for (const auto& v : in->kv()) w.add_value(v);
            for (const auto& t : in->tensors()) w.add_tensor(t.name, t.type, t.ne, t.n_dims);
            for (const auto& t : in->tensors()) w.write_tensor(t.data, t.nbytes);
            w.finish();
        }
        CHECK_MESSAGE(slurp(out) == slurp(test::golden(rel)), name);
        fs::remove(out);
    }
}
