// GGUF v2/v3 reader. Every count, length, type, dimension and offset is checked against the bytes
// that are actually there before anything is trusted; all reads go through Cursor, which never
// steps past the end of the buffer.
#include "gguf/reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kinfer::gguf {

namespace {

constexpr uint64_t kMaxNameLen = 63;  // ggml's GGML_MAX_NAME (64) including the terminator

bool is_integer(ValueType t) {
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
        case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
        case ValueType::BOOL:
            return true;
        default: return false;
    }
}

bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

template <typename T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// Reads one element of an integer type as int64 or uint64 (exactly one of them is meaningful,
// chosen by the sign of the type). Returns false for a UINT64 that does not fit in int64 etc.
struct IntVal {
    bool negative = false;
    uint64_t mag = 0;  // when !negative: the value; when negative: the value as int64 bits
};

IntVal load_int(ValueType t, const uint8_t* p) {
    IntVal r;
    auto s = [&](int64_t v) { r.negative = v < 0; r.mag = uint64_t(v); };
    switch (t) {
        case ValueType::UINT8: r.mag = load<uint8_t>(p); break;
        case ValueType::BOOL: r.mag = load<uint8_t>(p) != 0; break;
        case ValueType::INT8: s(load<int8_t>(p)); break;
        case ValueType::UINT16: r.mag = load<uint16_t>(p); break;
        case ValueType::INT16: s(load<int16_t>(p)); break;
        case ValueType::UINT32: r.mag = load<uint32_t>(p); break;
        case ValueType::INT32: s(load<int32_t>(p)); break;
        case ValueType::UINT64: r.mag = load<uint64_t>(p); break;
        case ValueType::INT64: s(load<int64_t>(p)); break;
        default: break;
    }
    return r;
}

double load_float(ValueType t, const uint8_t* p) {
    if (t == ValueType::FLOAT32) return double(load<float>(p));
    if (t == ValueType::FLOAT64) return load<double>(p);
    IntVal v = load_int(t, p);
    return v.negative ? double(int64_t(v.mag)) : double(v.mag);
}

// Bounds-checked reader over the file's bytes. All failures name the file and the byte offset.
class Cursor {
public:
    Cursor(const uint8_t* base, size_t size, const std::string& name) : base_(base), size_(size), name_(name) {}

    size_t pos() const { return pos_; }
    size_t remaining() const { return size_ - pos_; }
    const uint8_t* ptr() const { return base_ + pos_; }

    template <typename... Args>
    [[noreturn]] void fail_at(size_t at, fmt::format_string<Args...> f, Args&&... args) const {
        throw Error(fmt::format("{}: at byte {}: {}", name_, at, fmt::format(f, std::forward<Args>(args)...)));
    }

    void need(size_t n, const char* what) const {
        if (n > remaining())
            fail_at(pos_, "expected {} ({} bytes), got end of file after {} bytes", what, n, remaining());
    }
    template <typename T>
    T read(const char* what) {
        need(sizeof(T), what);
        T v = load<T>(base_ + pos_);
        pos_ += sizeof(T);
        return v;
    }
    void skip(size_t n, const char* what) {
        need(n, what);
        pos_ += n;
    }
    std::string_view read_string(const char* what) {
        size_t at = pos_;
        uint64_t len = read<uint64_t>(what);
        if (len > remaining())
            fail_at(at, "expected {} of {} bytes within the file, got only {} bytes left", what, len, remaining());
        std::string_view s(reinterpret_cast<const char*>(base_ + pos_), size_t(len));
        pos_ += size_t(len);
        return s;
    }

private:
    const uint8_t* base_;
    size_t size_;
    size_t pos_ = 0;
    const std::string& name_;
};

std::string printable(std::string_view s) {
    std::string r;
    for (char c : s.substr(0, 80)) {
        unsigned char u = static_cast<unsigned char>(c);
        if (u >= 0x20 && u < 0x7f) r += c;
        else r += fmt::format("\\x{:02x}", u);
    }
    if (s.size() > 80) r += "...";
    return r;
}

}  // namespace

const char* value_type_name(ValueType t) {
    switch (t) {
        case ValueType::UINT8: return "uint8";
        case ValueType::INT8: return "int8";
        case ValueType::UINT16: return "uint16";
        case ValueType::INT16: return "int16";
        case ValueType::UINT32: return "uint32";
        case ValueType::INT32: return "int32";
        case ValueType::FLOAT32: return "float32";
        case ValueType::BOOL: return "bool";
        case ValueType::STRING: return "string";
        case ValueType::ARRAY: return "array";
        case ValueType::UINT64: return "uint64";
        case ValueType::INT64: return "int64";
        case ValueType::FLOAT64: return "float64";
    }
    return "unknown";
}

// ---------------------------------------------------------------------------------------------
// Value

namespace {
[[noreturn]] void value_fail(const Value& v, std::string_view what) {
    throw Error(fmt::format("{}: metadata key '{}' (at byte {}) {}", v.file_name_ ? *v.file_name_ : std::string("<memory>"),
                            printable(v.key), v.file_offset_, what));
}
std::string type_desc(const Value& v) {
    if (v.type_ == ValueType::ARRAY) return fmt::format("array of {}", value_type_name(v.elem_type_));
    return value_type_name(v.type_);
}
}  // namespace

int64_t Value::as_int() const {
    if (!is_integer(type_)) value_fail(*this, fmt::format("has type {}, expected an integer", type_desc(*this)));
    IntVal r = load_int(type_, data_);
    if (!r.negative && r.mag > uint64_t(std::numeric_limits<int64_t>::max()))
        value_fail(*this, fmt::format("holds {}, which does not fit in int64", r.mag));
    return int64_t(r.mag);
}

uint64_t Value::as_uint() const {
    if (!is_integer(type_)) value_fail(*this, fmt::format("has type {}, expected an integer", type_desc(*this)));
    IntVal r = load_int(type_, data_);
    if (r.negative) value_fail(*this, fmt::format("holds {}, expected a non-negative integer", int64_t(r.mag)));
    return r.mag;
}

double Value::as_float() const {
    if (!is_integer(type_) && !is_float(type_))
        value_fail(*this, fmt::format("has type {}, expected a number", type_desc(*this)));
    return load_float(type_, data_);
}

bool Value::as_bool() const {
    if (!is_integer(type_)) value_fail(*this, fmt::format("has type {}, expected bool", type_desc(*this)));
    return load_int(type_, data_).mag != 0;
}

std::string_view Value::as_string() const {
    if (type_ != ValueType::STRING) value_fail(*this, fmt::format("has type {}, expected string", type_desc(*this)));
    return {reinterpret_cast<const char*>(data_), nbytes_};
}

namespace {
void check_index(const Value& v, size_t i) {
    if (v.type_ != ValueType::ARRAY) value_fail(v, fmt::format("has type {}, expected an array", type_desc(v)));
    if (i >= v.count_) value_fail(v, fmt::format("has {} elements, index {} is out of range", v.count_, i));
}
}  // namespace

int64_t Value::int_at(size_t i) const {
    check_index(*this, i);
    if (!is_integer(elem_type_))
        value_fail(*this, fmt::format("has type {}, expected an integer array", type_desc(*this)));
    IntVal r = load_int(elem_type_, data_ + i * value_type_size(elem_type_));
    if (!r.negative && r.mag > uint64_t(std::numeric_limits<int64_t>::max()))
        value_fail(*this, fmt::format("element {} holds {}, which does not fit in int64", i, r.mag));
    return int64_t(r.mag);
}

double Value::float_at(size_t i) const {
    check_index(*this, i);
    if (!is_integer(elem_type_) && !is_float(elem_type_))
        value_fail(*this, fmt::format("has type {}, expected a numeric array", type_desc(*this)));
    return load_float(elem_type_, data_ + i * value_type_size(elem_type_));
}

std::string_view Value::string_at(size_t i) const {
    check_index(*this, i);
    if (elem_type_ != ValueType::STRING)
        value_fail(*this, fmt::format("has type {}, expected a string array", type_desc(*this)));
    const uint8_t* p = data_ + str_offsets_[i];
    uint64_t len = load<uint64_t>(p);  // validated at load
    return {reinterpret_cast<const char*>(p + 8), size_t(len)};
}

std::vector<int64_t> Value::ints() const {
    if (type_ != ValueType::ARRAY || !is_integer(elem_type_))
        value_fail(*this, fmt::format("has type {}, expected an integer array", type_desc(*this)));
    std::vector<int64_t> r(count_);
    for (size_t i = 0; i < count_; ++i) r[i] = int_at(i);
    return r;
}

std::vector<float> Value::floats() const {
    if (type_ != ValueType::ARRAY || (!is_integer(elem_type_) && !is_float(elem_type_)))
        value_fail(*this, fmt::format("has type {}, expected a numeric array", type_desc(*this)));
    std::vector<float> r(count_);
    for (size_t i = 0; i < count_; ++i) r[i] = float(float_at(i));
    return r;
}

std::vector<std::string_view> Value::strings() const {
    if (type_ != ValueType::ARRAY || elem_type_ != ValueType::STRING)
        value_fail(*this, fmt::format("has type {}, expected a string array", type_desc(*this)));
    std::vector<std::string_view> r(count_);
    for (size_t i = 0; i < count_; ++i) r[i] = string_at(i);
    return r;
}

// ---------------------------------------------------------------------------------------------
// TensorInfo

size_t TensorInfo::row_bytes() const { return quant::row_size(quant::traits(type), ne[0]); }

std::string TensorInfo::shape_str() const {
    std::string s = "{";
    for (int i = 0; i < n_dims; ++i) {
        if (i) s += ", ";
        s += std::to_string(ne[i]);
    }
    return s + "}";
}

// ---------------------------------------------------------------------------------------------
// File

std::unique_ptr<File> File::open(const std::string& path) {
    std::unique_ptr<File> f(new File());
    f->path_ = path;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        fail("{}: cannot stat: {}", path, std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail("{}: expected a regular file, got {}", path, S_ISDIR(st.st_mode) ? "a directory" : "a special file");
    }
    f->size_ = size_t(st.st_size);
    if (f->size_ > 0) {
        void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            fail("{}: cannot mmap {} bytes: {}", path, f->size_, std::strerror(e));
        }
        f->base_ = static_cast<const uint8_t*>(p);
        f->mapped_ = true;
    } else {
        static const uint8_t empty[1] = {0};
        f->base_ = empty;
    }
    ::close(fd);
    f->parse();
    return f;
}

std::unique_ptr<File> File::from_memory(const uint8_t* data, size_t size, std::string name) {
    std::unique_ptr<File> f(new File());
    static const uint8_t empty[1] = {0};
    f->path_ = std::move(name);
    f->base_ = data ? data : empty;
    f->size_ = data ? size : 0;
    f->parse();
    return f;
}

File::~File() {
    if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void File::parse() {
    Cursor c(base_, size_, path_);

    // Header.
    if (size_ < 4 || std::memcmp(base_, "GGUF", 4) != 0) {
        std::string got = size_ < 4 ? fmt::format("only {} bytes", size_)
                                    : fmt::format("\"{}\"", printable(std::string_view(reinterpret_cast<const char*>(base_), 4)));
        c.fail_at(0, "expected magic \"GGUF\", got {}", got);
    }
    c.skip(4, "magic");
    size_t at = c.pos();
    version_ = c.read<uint32_t>("GGUF version");
    if (version_ != 2 && version_ != 3) c.fail_at(at, "expected GGUF version 2 or 3, got {}", version_);
    at = c.pos();
    uint64_t n_tensors = c.read<uint64_t>("tensor count");
    // A tensor-info record is at least 8 (name length) + 4 (n_dims) + 8 (ne[0]) + 4 (type) + 8 (offset).
    constexpr uint64_t kMinTensorInfo = 32;
    constexpr uint64_t kMinKv = 8 + 4 + 1;  // key length, type, smallest value
    if (n_tensors > (c.remaining() - std::min<size_t>(c.remaining(), 8)) / kMinTensorInfo)
        c.fail_at(at, "expected a tensor count the remaining {} bytes can hold, got {}", c.remaining(), n_tensors);
    at = c.pos();
    uint64_t n_kv = c.read<uint64_t>("metadata key/value count");
    if (n_kv > (c.remaining() - std::min<size_t>(c.remaining(), size_t(n_tensors * kMinTensorInfo))) / kMinKv)
        c.fail_at(at, "expected a metadata key/value count the remaining {} bytes can hold, got {}", c.remaining(), n_kv);

    // Metadata.
    kv_.reserve(size_t(std::min<uint64_t>(n_kv, 4096)));
    for (uint64_t i = 0; i < n_kv; ++i) {
        Value v;
        v.file_name_ = &path_;
        v.file_offset_ = c.pos();
        v.key = c.read_string("metadata key");
        if (v.key.empty()) c.fail_at(v.file_offset_, "expected a non-empty metadata key, got an empty string");
        size_t type_at = c.pos();
        uint32_t t = c.read<uint32_t>("value type");
        if (t > uint32_t(ValueType::FLOAT64))
            c.fail_at(type_at, "expected a value type 0..12 for key '{}', got {}", printable(v.key), t);
        v.type_ = ValueType(t);
        if (v.type_ == ValueType::STRING) {
            std::string_view s = c.read_string("string value");
            v.data_ = reinterpret_cast<const uint8_t*>(s.data());
            v.nbytes_ = s.size();
        } else if (v.type_ == ValueType::ARRAY) {
            size_t et_at = c.pos();
            uint32_t et = c.read<uint32_t>("array element type");
            if (et > uint32_t(ValueType::FLOAT64))
                c.fail_at(et_at, "expected an array element type 0..12 for key '{}', got {}", printable(v.key), et);
            if (ValueType(et) == ValueType::ARRAY)
                c.fail_at(et_at, "expected a scalar or string element type for key '{}', got nested arrays (not supported)",
                          printable(v.key));
            v.elem_type_ = ValueType(et);
            size_t n_at = c.pos();
            v.count_ = c.read<uint64_t>("array length");
            v.data_ = c.ptr();
            if (v.elem_type_ == ValueType::STRING) {
                if (v.count_ > c.remaining() / 8)
                    c.fail_at(n_at, "expected an array length the remaining {} bytes can hold, got {} strings", c.remaining(), v.count_);
                v.str_offsets_.resize(size_t(v.count_));
                size_t start = c.pos();
                for (uint64_t j = 0; j < v.count_; ++j) {
                    size_t off = c.pos() - start;
                    if (off > std::numeric_limits<uint32_t>::max())
                        c.fail_at(c.pos(), "expected a string array under 4 GiB for key '{}', got more", printable(v.key));
                    v.str_offsets_[size_t(j)] = uint32_t(off);
                    c.read_string("array string element");
                }
                v.nbytes_ = c.pos() - start;
            } else {
                size_t es = value_type_size(v.elem_type_);
                if (v.count_ > c.remaining() / es)
                    c.fail_at(n_at, "expected an array length the remaining {} bytes can hold, got {} elements of {} bytes",
                              c.remaining(), v.count_, es);
                v.nbytes_ = size_t(v.count_) * es;
                if (v.elem_type_ == ValueType::BOOL)
                    for (size_t j = 0; j < v.nbytes_; ++j)
                        if (v.data_[j] > 1) c.fail_at(c.pos() + j, "expected bool 0 or 1, got {}", v.data_[j]);
                c.skip(v.nbytes_, "array data");
            }
        } else {
            size_t n = value_type_size(v.type_);
            v.data_ = c.ptr();
            v.nbytes_ = n;
            c.skip(n, value_type_name(v.type_));
            if (v.type_ == ValueType::BOOL && v.data_[0] > 1)
                c.fail_at(c.pos() - 1, "expected bool 0 or 1 for key '{}', got {}", printable(v.key), v.data_[0]);
        }
        kv_.push_back(std::move(v));
    }
    // Duplicate keys.
    {
        std::vector<size_t> idx(kv_.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        std::stable_sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return kv_[a].key < kv_[b].key; });
        for (size_t i = 1; i < idx.size(); ++i)
            if (kv_[idx[i]].key == kv_[idx[i - 1]].key)
                c.fail_at(kv_[idx[i]].file_offset_, "expected unique metadata keys, got a second '{}' (first at byte {})",
                          printable(kv_[idx[i]].key), kv_[idx[i - 1]].file_offset_);
    }
    // Alignment.
    if (const Value* a = find("general.alignment")) {
        if (a->type_ != ValueType::UINT32)
            c.fail_at(a->file_offset_, "expected general.alignment of type uint32, got {}", type_desc(*a));
        uint32_t al = load<uint32_t>(a->data_);
        if (al == 0 || (al & (al - 1)) != 0)
            c.fail_at(a->file_offset_, "expected general.alignment to be a non-zero power of two, got {}", al);
        alignment_ = al;
    }

    // Tensor infos.
    tensors_.reserve(size_t(std::min<uint64_t>(n_tensors, 65536)));
    for (uint64_t i = 0; i < n_tensors; ++i) {
        TensorInfo ti;
        ti.info_offset = c.pos();
        std::string_view name = c.read_string("tensor name");
        if (name.empty()) c.fail_at(ti.info_offset, "expected a non-empty tensor name (tensor {}), got an empty string", i);
        if (name.size() > kMaxNameLen)
            c.fail_at(ti.info_offset, "expected a tensor name of at most {} bytes, got {} bytes (\"{}\")", kMaxNameLen,
                      name.size(), printable(name));
        ti.name.assign(name);
        size_t nd_at = c.pos();
        uint32_t nd = c.read<uint32_t>("tensor n_dims");
        if (nd < 1 || nd > 4) c.fail_at(nd_at, "expected tensor '{}' n_dims 1..4, got {}", printable(name), nd);
        ti.n_dims = int(nd);
        // The product of the non-zero dimensions must fit: a zero ne[0] would otherwise let
        // ne[1] * ne[2] (nrows(), and every partial product a caller forms) overflow unchecked.
        int64_t span = 1;
        for (uint32_t d = 0; d < nd; ++d) {
            size_t ne_at = c.pos();
            ti.ne[d] = c.read<int64_t>("tensor dimension");
            if (ti.ne[d] < 0) c.fail_at(ne_at, "expected tensor '{}' ne[{}] >= 0, got {}", printable(name), d, ti.ne[d]);
            if (ti.ne[d] > 0 && __builtin_mul_overflow(span, ti.ne[d], &span))
                c.fail_at(ne_at, "expected tensor '{}' element count to fit in int64, got shape overflowing at ne[{}] = {}",
                          printable(name), d, ti.ne[d]);
        }
        size_t type_at = c.pos();
        uint32_t tid = c.read<uint32_t>("tensor type");
        const quant::Traits* tr = quant::traits_or_null(tid);
        if (!tr) c.fail_at(type_at, "expected a known ggml tensor type for '{}', got type id {}", printable(name), tid);
        ti.type = tr->type;
        if (tr->block_size <= 0 || ti.ne[0] % tr->block_size != 0)
            c.fail_at(nd_at, "expected tensor '{}' ne[0] to be a multiple of {}'s block size {}, got {}", printable(name),
                      tr->name, tr->block_size, ti.ne[0]);
        uint64_t nrows = uint64_t(ti.ne[1]) * uint64_t(ti.ne[2]) * uint64_t(ti.ne[3]);  // <= span or 0: no overflow
        uint64_t row = uint64_t(ti.ne[0] / tr->block_size) * tr->type_size;             // may overflow: check
        uint64_t nbytes = 0;
        if ((tr->type_size != 0 && uint64_t(ti.ne[0] / tr->block_size) > std::numeric_limits<uint64_t>::max() / tr->type_size) ||
            __builtin_mul_overflow(row, nrows, &nbytes) || nbytes > std::numeric_limits<size_t>::max())
            c.fail_at(nd_at, "expected tensor '{}' byte size to fit in 64 bits, got shape {}", printable(name), ti.shape_str());
        ti.nbytes = size_t(nbytes);
        size_t off_at = c.pos();
        ti.offset = c.read<uint64_t>("tensor data offset");
        if (ti.offset % alignment_ != 0)
            c.fail_at(off_at, "expected tensor '{}' data offset to be a multiple of the alignment {}, got {}",
                      printable(name), alignment_, ti.offset);
        tensors_.push_back(std::move(ti));
    }

    // Data section.
    size_t end_of_infos = c.pos();
    size_t pad = (alignment_ - end_of_infos % alignment_) % alignment_;
    data_offset_ = end_of_infos + pad;  // cannot overflow: end_of_infos <= size_ and alignment is a uint32
    size_t data_avail = data_offset_ <= size_ ? size_ - data_offset_ : 0;
    for (TensorInfo& ti : tensors_) {
        if (data_offset_ > size_ || ti.offset > data_avail || ti.nbytes > data_avail - ti.offset)
        {
            uint64_t end = 0;
            bool ovf = __builtin_add_overflow(uint64_t(data_offset_), ti.offset, &end) ||
                       __builtin_add_overflow(end, uint64_t(ti.nbytes), &end);
            c.fail_at(ti.info_offset,
                      "expected tensor '{}' data ({} bytes at data section {} + offset {}) to end within the file of {} bytes, got end at {}",
                      printable(ti.name), ti.nbytes, data_offset_, ti.offset, size_,
                      ovf ? std::string("more than 2^64") : std::to_string(end));
        }
        ti.data = base_ + data_offset_ + ti.offset;
    }
    // Overlaps and duplicate names.
    {
        std::vector<size_t> idx(tensors_.size());
        for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
        std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
            return tensors_[a].offset != tensors_[b].offset ? tensors_[a].offset < tensors_[b].offset : a < b;
        });
        const TensorInfo* prev = nullptr;
        for (size_t i : idx) {
            const TensorInfo& t = tensors_[i];
            if (t.nbytes == 0) continue;
            if (prev && t.offset < prev->offset + prev->nbytes)
                c.fail_at(t.info_offset, "expected tensor '{}' data [{}, {}) not to overlap tensor '{}' [{}, {}), got an overlap",
                          printable(t.name), t.offset, t.offset + t.nbytes, printable(prev->name), prev->offset,
                          prev->offset + prev->nbytes);
            prev = &t;
        }
        tensor_index_.reserve(tensors_.size());
        for (size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace_back(tensors_[i].name, i);
        std::stable_sort(tensor_index_.begin(), tensor_index_.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (size_t i = 1; i < tensor_index_.size(); ++i)
            if (tensor_index_[i].first == tensor_index_[i - 1].first) {
                const TensorInfo& t = tensors_[std::max(tensor_index_[i].second, tensor_index_[i - 1].second)];
                const TensorInfo& first = tensors_[std::min(tensor_index_[i].second, tensor_index_[i - 1].second)];
                c.fail_at(t.info_offset, "expected unique tensor names, got a second '{}' (first at byte {})",
                          printable(t.name), first.info_offset);
            }
    }
}

const Value* File::find(std::string_view key) const {
    for (const Value& v : kv_)
        if (v.key == key) return &v;
    return nullptr;
}

const Value& File::get(std::string_view key) const {
    const Value* v = find(key);
    if (!v) fail("{}: metadata key '{}' missing", path_, key);
    return *v;
}

std::string File::get_string_or(std::string_view key, std::string_view def) const {
    const Value* v = find(key);
    return std::string(v ? v->as_string() : def);
}

int64_t File::get_int_or(std::string_view key, int64_t def) const {
    const Value* v = find(key);
    return v ? v->as_int() : def;
}

double File::get_float_or(std::string_view key, double def) const {
    const Value* v = find(key);
    return v ? v->as_float() : def;
}

bool File::get_bool_or(std::string_view key, bool def) const {
    const Value* v = find(key);
    return v ? v->as_bool() : def;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
    auto it = std::lower_bound(tensor_index_.begin(), tensor_index_.end(), name,
                               [](const auto& e, std::string_view n) { return e.first < n; });
    if (it == tensor_index_.end() || it->first != name) return nullptr;
    return &tensors_[it->second];
}

const TensorInfo& File::tensor(std::string_view name) const {
    const TensorInfo* t = find_tensor(name);
    if (!t) fail("{}: tensor '{}' missing", path_, name);
    return *t;
}

}  // namespace kinfer::gguf
