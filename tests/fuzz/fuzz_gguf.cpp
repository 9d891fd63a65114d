// libFuzzer target for the GGUF reader: any input must either parse, after which every accessor
// (metadata values, string arrays, tensor views) works or throws kinfer::Error, or throw
// kinfer::Error itself. Crashes, hangs, sanitizer reports and other exception types are bugs.
// `kinfer info`'s report over a parsed file has its own target (fuzz_info.cpp), so this one
// spends its time in the parser.
//
// Each value is read with the accessors its type allows (they must succeed or throw for range
// reasons only); a type mismatch, which must throw, is tried on the first few values and the
// first array element only: a thrown and formatted error costs more than parsing the input.
#include "gguf/reader.h"

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

// An accessor that must throw kinfer::Error (a type mismatch); anything else is a bug.
template <typename F>
void must_throw(F&& f) {
    try {
        f();
    } catch (const kinfer::Error&) {
        return;
    }
    __builtin_trap();
}

volatile uint64_t g_sink = 0;

void touch(const uint8_t* p, size_t n) {
    if (n == 0) return;
    g_sink = g_sink + p[0] + p[n - 1];
}
void touch(std::string_view s) { touch(reinterpret_cast<const uint8_t*>(s.data()), s.size()); }

using kinfer::gguf::Value;
using kinfer::gguf::ValueType;

bool is_int(ValueType t) {
    return t == ValueType::UINT8 || t == ValueType::INT8 || t == ValueType::UINT16 || t == ValueType::INT16 ||
           t == ValueType::UINT32 || t == ValueType::INT32 || t == ValueType::UINT64 || t == ValueType::INT64;
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

void exercise_scalar(const Value& v, bool mismatches) {
    const ValueType t = v.type();
    if (is_int(t)) {
        tolerate([&] { g_sink = g_sink + uint64_t(v.as_int()); });    // may not fit
        tolerate([&] { g_sink = g_sink + v.as_uint(); });
        g_sink = g_sink + uint64_t(v.as_float() != 0);
    } else if (is_float(t)) {
        g_sink = g_sink + uint64_t(v.as_float() != 0);
    } else if (t == ValueType::BOOL) {
        g_sink = g_sink + v.as_bool();
    } else if (t == ValueType::STRING) {
        touch(v.as_string());
    }
    if (!mismatches) return;
    if (t == ValueType::STRING) must_throw([&] { v.as_int(); });
    else must_throw([&] { v.as_string(); });
    must_throw([&] { v.int_at(0); });
}

void exercise_array(const Value& v, bool mismatches) {
    const ValueType et = v.array_type();
    (void)kinfer::gguf::value_type_name(et);
    const size_t n = v.size();
    auto at = [&](size_t i) {
        if (is_int(et) || is_float(et) || et == ValueType::BOOL) {
            tolerate([&] { g_sink = g_sink + uint64_t(v.int_at(i)); });   // floats: not an int
            g_sink = g_sink + uint64_t(v.float_at(i) != 0);
        } else if (et == ValueType::STRING) {
            touch(v.string_at(i));
        } else {
            tolerate([&] { g_sink = g_sink + uint64_t(v.int_at(i)); });   // nested arrays and the like
        }
    };
    for (size_t i = 0; i < std::min<size_t>(n, 16); ++i) at(i);
    if (n > 16) at(n - 1);
    must_throw([&] { v.int_at(n); });   // out of range
    if (mismatches && n > 0) {
        if (et == ValueType::STRING) must_throw([&] { v.int_at(0); });
        else must_throw([&] { v.string_at(0); });
        must_throw([&] { v.as_int(); });
    }
    if (n <= 4096) {
        if (et == ValueType::STRING) {
            for (auto s : v.strings()) touch(s);
        } else {
            tolerate([&] { g_sink = g_sink + v.ints().size(); });
            tolerate([&] { g_sink = g_sink + v.floats().size(); });
        }
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
    size_t i = 0;
    for (const auto& v : f->kv()) {
        if (f->find(v.key) == nullptr) __builtin_trap();
        g_sink = g_sink + v.key.size();
        touch(v.raw(), v.raw_size());
        (void)kinfer::gguf::value_type_name(v.type());
        if (v.is_array()) exercise_array(v, i < 4);
        else exercise_scalar(v, i < 4);
        ++i;
    }
    tolerate([&] { f->get("general.architecture"); });
    tolerate([&] { g_sink = g_sink + f->get_int_or("general.alignment", 0); });
    g_sink = g_sink + f->get_string_or("x", "").size() + uint64_t(f->get_float_or("x", 1.0)) + f->get_bool_or("x", false);
    tolerate([&] { f->tensor("missing tensor name"); });   // an input may name a tensor so
    for (const auto& t : f->tensors()) {
        if (f->find_tensor(t.name) != &t) __builtin_trap();
        if (t.data < f->base() || t.nbytes > f->file_size() || t.data + t.nbytes > f->base() + f->file_size())
            __builtin_trap();
        touch(t.data, t.nbytes);
        g_sink = g_sink + t.row_bytes() + t.shape_str().size() + uint64_t(t.nelements()) + uint64_t(t.nrows());
    }
    return 0;
}
