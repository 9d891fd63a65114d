// libFuzzer target for the GGUF reader and `kinfer info`'s report: any input must either parse,
// after which every accessor (metadata values, string arrays, tensor views, the info report) works
// or throws kinfer::Error, or throw kinfer::Error itself. Crashes, hangs, sanitizer reports and
// other exception types are bugs.
//
// The reader and the report come from the libraries, which the fuzzing build compiles with the
// fuzzer's coverage instrumentation and the sanitizers (KINFER_FUZZ in CMakeLists.txt).
#include "gguf/reader.h"
#include "cli/lib/info_report.h"

#include <cstdint>
#include <cstring>
#include <vector>

namespace {

template <typename F>
void tolerate(F&& f) {
    try {
        f();
    } catch (const kinfer::Error&) {
    }
}

volatile uint64_t g_sink = 0;

void touch(const uint8_t* p, size_t n) {
    if (n == 0) return;
    g_sink = g_sink + p[0] + p[n - 1];
}

void exercise_value(const kinfer::gguf::File& f, const kinfer::gguf::Value& v) {
    using kinfer::gguf::ValueType;
    if (f.find(v.key) == nullptr) __builtin_trap();
    g_sink = g_sink + v.key.size();
    touch(v.raw(), v.raw_size());
    (void)kinfer::gguf::value_type_name(v.type());
    if (!v.is_array()) {
        tolerate([&] { g_sink = g_sink + uint64_t(v.as_int()); });
        tolerate([&] { g_sink = g_sink + v.as_uint(); });
        tolerate([&] { g_sink = g_sink + uint64_t(v.as_float() != 0); });
        tolerate([&] { g_sink = g_sink + v.as_bool(); });
        tolerate([&] { auto s = v.as_string(); touch(reinterpret_cast<const uint8_t*>(s.data()), s.size()); });
        tolerate([&] { v.int_at(0); });
        return;
    }
    (void)kinfer::gguf::value_type_name(v.array_type());
    const size_t n = v.size();
    auto at = [&](size_t i) {
        tolerate([&] { g_sink = g_sink + uint64_t(v.int_at(i)); });
        tolerate([&] { g_sink = g_sink + uint64_t(v.float_at(i) != 0); });
        tolerate([&] {
            auto s = v.string_at(i);
            touch(reinterpret_cast<const uint8_t*>(s.data()), s.size());
        });
    };
    for (size_t i = 0; i < std::min<size_t>(n, 16); ++i) at(i);
    if (n > 0) at(n - 1);
    at(n);  // out of range: must throw
    tolerate([&] { v.as_int(); });
    if (n <= 4096) {
        tolerate([&] { g_sink = g_sink + v.ints().size(); });
        tolerate([&] { g_sink = g_sink + v.floats().size(); });
        tolerate([&] {
            for (auto s : v.strings()) touch(reinterpret_cast<const uint8_t*>(s.data()), s.size());
        });
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    // Copy into an exactly-sized buffer so that ASan catches any read past the end.
    std::vector<uint8_t> buf(data, data + size);
    std::unique_ptr<kinfer::gguf::File> f;
    try {
        f = kinfer::gguf::File::from_memory(buf.data(), buf.size(), "fuzz.gguf");
    } catch (const kinfer::Error&) {
        return 0;
    }
    for (const auto& v : f->kv()) exercise_value(*f, v);
    tolerate([&] { f->get("general.architecture"); });
    tolerate([&] { g_sink = g_sink + f->get_int_or("general.alignment", 0); });
    tolerate([&] { g_sink = g_sink + f->get_string_or("general.name", "").size(); });
    tolerate([&] { g_sink = g_sink + uint64_t(f->get_float_or("x", 1.0)); });
    tolerate([&] { g_sink = g_sink + f->get_bool_or("x", false); });
    tolerate([&] { f->tensor("missing tensor name"); });
    for (const auto& t : f->tensors()) {
        if (f->find_tensor(t.name) != &t) __builtin_trap();
        if (t.data < f->base() || t.nbytes > f->file_size() || t.data + t.nbytes > f->base() + f->file_size())
            __builtin_trap();
        touch(t.data, t.nbytes);
        g_sink = g_sink + t.row_bytes() + t.shape_str().size() + uint64_t(t.nelements()) + uint64_t(t.nrows());
    }
    // The info report over whatever parsed: it must not crash on odd but valid metadata.
    tolerate([&] {
        kinfer::cli::InfoOptions opt;
        auto r = kinfer::cli::info_report(*f, opt);
        g_sink = g_sink + kinfer::cli::info_text(r).size();
        g_sink = g_sink + r.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size();
    });
    return 0;
}
