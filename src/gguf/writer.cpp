// Streaming GGUF v3 writer; see writer.h for the layout and the temp-file contract.
#include "gguf/writer.h"

#include "common/error.h"
#include "common/safe_file.h"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace kinfer::gguf {

namespace {

constexpr uint32_t kGgufVersion = 3;
constexpr size_t kDefaultAlignment = 32;

size_t pad_to(uint64_t n, size_t align) { return size_t((align - n % align) % align); }

// Little-endian appends (kinfer only targets little-endian hosts, as ggml does).
// resize + memcpy rather than insert(): GCC 12 reports a bogus -Wstringop-overflow for the latter.
void append_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
    if (n == 0) return;
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
}
template <typename T>
void append(std::vector<uint8_t>& out, T v) {
    append_bytes(out, &v, sizeof(T));
}
void append_str(std::vector<uint8_t>& out, std::string_view s) {
    append<uint64_t>(out, s.size());
    append_bytes(out, s.data(), s.size());
}

template <typename T>
std::vector<uint8_t> scalar(ValueType t, T v) {
    std::vector<uint8_t> e;
    append<uint32_t>(e, uint32_t(t));
    append<T>(e, v);
    return e;
}

}  // namespace

Writer::Writer(std::string path) : path_(std::move(path)) {}

// Not finished: the TempFile's destructor removes whatever was written, which is incomplete.
Writer::~Writer() = default;

void Writer::io_fail(const char* what) const {
    fail("{}: {} failed: {}", tmp_path_, what, std::strerror(errno));
}

void Writer::require_header_open(const char* what) const {
    if (header_written_) fail("{}: cannot {} after tensor data has started", path_, what);
}

// ---- metadata ----

void Writer::add_encoded(std::string_view key, std::vector<uint8_t> enc) {
    require_header_open("add metadata");
    if (key.empty()) fail("{}: empty metadata key", path_);
    if (has_key(key)) fail("{}: duplicate metadata key '{}'", path_, key);
    kv_.push_back({std::string(key), std::move(enc)});
}

void Writer::add_u8(std::string_view k, uint8_t v) { add_encoded(k, scalar(ValueType::UINT8, v)); }
void Writer::add_i8(std::string_view k, int8_t v) { add_encoded(k, scalar(ValueType::INT8, v)); }
void Writer::add_u16(std::string_view k, uint16_t v) { add_encoded(k, scalar(ValueType::UINT16, v)); }
void Writer::add_i16(std::string_view k, int16_t v) { add_encoded(k, scalar(ValueType::INT16, v)); }
void Writer::add_u32(std::string_view k, uint32_t v) { add_encoded(k, scalar(ValueType::UINT32, v)); }
void Writer::add_i32(std::string_view k, int32_t v) { add_encoded(k, scalar(ValueType::INT32, v)); }
void Writer::add_u64(std::string_view k, uint64_t v) { add_encoded(k, scalar(ValueType::UINT64, v)); }
void Writer::add_i64(std::string_view k, int64_t v) { add_encoded(k, scalar(ValueType::INT64, v)); }
void Writer::add_f32(std::string_view k, float v) { add_encoded(k, scalar(ValueType::FLOAT32, v)); }
void Writer::add_f64(std::string_view k, double v) { add_encoded(k, scalar(ValueType::FLOAT64, v)); }
void Writer::add_bool(std::string_view k, bool v) { add_encoded(k, scalar(ValueType::BOOL, uint8_t(v ? 1 : 0))); }

void Writer::add_string(std::string_view k, std::string_view v) {
    std::vector<uint8_t> e;
    append<uint32_t>(e, uint32_t(ValueType::STRING));
    append_str(e, v);
    add_encoded(k, std::move(e));
}

void Writer::add_array(std::string_view k, ValueType elem, const void* data, size_t n) {
    const size_t es = value_type_size(elem);
    if (es == 0) fail("{}: metadata key '{}': add_array needs a fixed-size element type, got {}", path_, k, uint32_t(elem));
    std::vector<uint8_t> e;
    e.reserve(16 + n * es);
    append<uint32_t>(e, uint32_t(ValueType::ARRAY));
    append<uint32_t>(e, uint32_t(elem));
    append<uint64_t>(e, n);
    append_bytes(e, data, n * es);
    add_encoded(k, std::move(e));
}

template <typename S>
static std::vector<uint8_t> encode_string_array(std::span<const S> v) {
    std::vector<uint8_t> e;
    size_t total = 16;
    for (const auto& s : v) total += 8 + s.size();
    e.reserve(total);
    append<uint32_t>(e, uint32_t(ValueType::ARRAY));
    append<uint32_t>(e, uint32_t(ValueType::STRING));
    append<uint64_t>(e, v.size());
    for (const auto& s : v) append_str(e, s);
    return e;
}

void Writer::add_string_array(std::string_view k, std::span<const std::string> v) { add_encoded(k, encode_string_array(v)); }
void Writer::add_string_array(std::string_view k, std::span<const std::string_view> v) { add_encoded(k, encode_string_array(v)); }

void Writer::add_value(std::string_view k, const Value& v) {
    // Re-encode through the typed accessors rather than trusting raw pointers, so a copy is
    // exactly the value the reader validated, in the same GGUF type.
    switch (v.type()) {
        case ValueType::UINT8: return add_u8(k, uint8_t(v.as_uint()));
        case ValueType::INT8: return add_i8(k, int8_t(v.as_int()));
        case ValueType::UINT16: return add_u16(k, uint16_t(v.as_uint()));
        case ValueType::INT16: return add_i16(k, int16_t(v.as_int()));
        case ValueType::UINT32: return add_u32(k, uint32_t(v.as_uint()));
        case ValueType::INT32: return add_i32(k, int32_t(v.as_int()));
        case ValueType::UINT64: return add_u64(k, v.as_uint());
        case ValueType::INT64: return add_i64(k, v.as_int());
        case ValueType::FLOAT32: return add_f32(k, float(v.as_float()));
        case ValueType::FLOAT64: return add_f64(k, v.as_float());
        case ValueType::BOOL: return add_bool(k, v.as_bool());
        case ValueType::STRING: return add_string(k, v.as_string());
        case ValueType::ARRAY: break;
        default: fail("{}: metadata key '{}' has unknown type {}", path_, k, uint32_t(v.type()));
    }
    const ValueType et = v.array_type();
    if (et == ValueType::STRING) {
        std::vector<uint8_t> e;
        append<uint32_t>(e, uint32_t(ValueType::ARRAY));
        append<uint32_t>(e, uint32_t(ValueType::STRING));
        append<uint64_t>(e, v.size());
        for (size_t i = 0; i < v.size(); ++i) append_str(e, v.string_at(i));
        return add_encoded(k, std::move(e));
    }
    const size_t es = value_type_size(et);
    if (es == 0) fail("{}: metadata key '{}': arrays of {} cannot be copied", path_, k, uint32_t(et));
    if (v.raw() == nullptr && v.size() != 0) fail("{}: metadata key '{}': array payload missing", path_, k);
    if (v.raw_size() != v.size() * es)
        fail("{}: metadata key '{}': array payload is {} bytes, expected {}", path_, k, v.raw_size(), v.size() * es);
    add_array(k, et, v.raw(), v.size());
}

bool Writer::has_key(std::string_view key) const {
    for (const auto& kv : kv_)
        if (kv.key == key) return true;
    return false;
}

bool Writer::remove(std::string_view key) {
    require_header_open("remove metadata");
    for (auto it = kv_.begin(); it != kv_.end(); ++it)
        if (it->key == key) {
            kv_.erase(it);
            return true;
        }
    return false;
}

size_t Writer::alignment() const {
    for (const auto& kv : kv_) {
        if (kv.key != "general.alignment") continue;
        uint32_t t = 0, a = 0;
        std::memcpy(&t, kv.enc.data(), 4);
        if (t != uint32_t(ValueType::UINT32)) fail("{}: general.alignment must be a UINT32", path_);
        std::memcpy(&a, kv.enc.data() + 4, 4);
        if (a == 0 || (a & (a - 1)) != 0) fail("{}: general.alignment {} is not a power of two", path_, a);
        return a;
    }
    return kDefaultAlignment;
}

// ---- tensor infos ----

size_t Writer::add_tensor(std::string_view name, quant::Type type, const int64_t* ne, int n_dims) {
    require_header_open("add a tensor");
    if (name.empty()) fail("{}: empty tensor name", path_);
    if (n_dims < 1 || n_dims > 4) fail("{}: tensor '{}': n_dims {} not in 1..4", path_, name, n_dims);
    for (const auto& t : tensors_)
        if (t.name == name) fail("{}: duplicate tensor '{}'", path_, name);
    const quant::Traits* tr = quant::traits_or_null(uint32_t(type));
    if (!tr) fail("{}: tensor '{}': unknown type id {}", path_, name, uint32_t(type));
    Tensor t{std::string(name), type, n_dims, {1, 1, 1, 1}, 0};
    int64_t n = 1;
    for (int i = 0; i < n_dims; ++i) {
        if (ne[i] <= 0) fail("{}: tensor '{}': ne[{}] = {} must be positive", path_, name, i, ne[i]);
        t.ne[i] = ne[i];
        n *= ne[i];
    }
    if (t.ne[0] % tr->block_size != 0)
        fail("{}: tensor '{}': ne[0] = {} is not a multiple of {}'s block size {}", path_, name, t.ne[0], tr->name, tr->block_size);
    t.nbytes = quant::row_size(*tr, t.ne[0]) * size_t(n / t.ne[0]);
    tensors_.push_back(std::move(t));
    return tensors_.size() - 1;
}

uint64_t Writer::tensor_offset(size_t i) const {
    const size_t align = alignment();
    uint64_t off = 0;
    for (size_t j = 0; j < i && j < tensors_.size(); ++j) off += tensors_[j].nbytes + pad_to(tensors_[j].nbytes, align);
    return off;
}

uint64_t Writer::expected_file_size() const {
    const size_t align = alignment();
    uint64_t n = 4 + 4 + 8 + 8;
    for (const auto& kv : kv_) n += 8 + kv.key.size() + kv.enc.size();
    for (const auto& t : tensors_) n += 8 + t.name.size() + 4 + 8 * uint64_t(t.n_dims) + 4 + 8;
    n += pad_to(n, align);
    return n + tensor_offset(tensors_.size());
}

// ---- file output ----

void Writer::put(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) io_fail("write");
    pos_ += n;
}

void Writer::pad_zeros(size_t n) {
    static const uint8_t zeros[64] = {};
    while (n) {
        const size_t k = n < sizeof zeros ? n : sizeof zeros;
        put(zeros, k);
        n -= k;
    }
}

std::vector<uint8_t> Writer::metadata_image() const {
    std::vector<uint8_t> h;
    append_bytes(h, "GGUF", 4);
    append<uint32_t>(h, kGgufVersion);
    append<uint64_t>(h, 0);
    append<uint64_t>(h, kv_.size());
    for (const auto& kv : kv_) {
        append_str(h, kv.key);
        h.insert(h.end(), kv.enc.begin(), kv.enc.end());
    }
    h.resize(h.size() + pad_to(h.size(), alignment()), 0);
    return h;
}

void Writer::write_header() {
    const size_t align = align_ = alignment();
    tmp_ = std::make_unique<TempFile>(path_);   // from here on the destructor removes it
    tmp_path_ = tmp_->temp_path();
    f_ = tmp_->file();
    header_written_ = true;
    buf_.resize(size_t(4) << 20);
    std::setvbuf(f_, buf_.data(), _IOFBF, buf_.size());

    std::vector<uint8_t> h;
    append_bytes(h, "GGUF", 4);
    append<uint32_t>(h, kGgufVersion);
    append<uint64_t>(h, tensors_.size());
    append<uint64_t>(h, kv_.size());
    put(h.data(), h.size());
    for (const auto& kv : kv_) {
        h.clear();
        append_str(h, kv.key);
        put(h.data(), h.size());
        put(kv.enc.data(), kv.enc.size());
    }
    uint64_t off = 0;
    for (const auto& t : tensors_) {
        h.clear();
        append_str(h, t.name);
        append<uint32_t>(h, uint32_t(t.n_dims));
        for (int i = 0; i < t.n_dims; ++i) append<int64_t>(h, t.ne[i]);
        append<uint32_t>(h, uint32_t(t.type));
        append<uint64_t>(h, off);
        put(h.data(), h.size());
        off += t.nbytes + pad_to(t.nbytes, align);
    }
    pad_zeros(pad_to(pos_, align));
    cur_ = 0;
    cur_done_ = 0;
}

void Writer::write(const void* data, size_t n) {
    if (finished_) fail("{}: write after finish()", path_);
    if (!header_written_) write_header();
    const auto* p = static_cast<const uint8_t*>(data);
    const size_t align = align_;
    while (n) {
        if (cur_ >= tensors_.size())
            fail("{}: {} bytes written past the last tensor", path_, n);
        const Tensor& t = tensors_[cur_];
        const size_t k = std::min(n, t.nbytes - cur_done_);
        put(p, k);
        p += k;
        n -= k;
        cur_done_ += k;
        if (cur_done_ == t.nbytes) {
            pad_zeros(pad_to(t.nbytes, align));
            ++cur_;
            cur_done_ = 0;
        }
    }
}

void Writer::write_tensor(const void* data, size_t n) {
    if (cur_ >= tensors_.size()) fail("{}: write_tensor: every tensor is already written", path_);
    const Tensor& t = tensors_[cur_];
    if (cur_done_ != 0 || n != t.nbytes)
        fail("{}: tensor '{}' is {} bytes, write_tensor got {}", path_, t.name, t.nbytes, n);
    write(data, n);
}

void Writer::finish(bool sync) {
    if (finished_) return;
    if (!header_written_) write_header();   // a file with no tensors (or all metadata)
    if (cur_ != tensors_.size())
        fail("{}: tensor '{}' incomplete: {} of {} tensors written", path_, tensors_[cur_].name, cur_, tensors_.size());
    (void)sync;   // always synced now: a renamed but unsynced model can be empty after a crash
    f_ = nullptr;
    tmp_->commit();
    finished_ = true;
}

}  // namespace kinfer::gguf
