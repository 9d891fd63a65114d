// Safetensors parsing and validation; see safetensors.h for what is checked.
#include "convert/safetensors.h"

#include "quant/fp16.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kinfer::convert {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct DTypeInfo {
    DType t;
    const char* name;
    size_t size;
    bool is_float;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::BOOL, "BOOL", 1, false}, {DType::U8, "U8", 1, false},       {DType::I8, "I8", 1, false},
    {DType::I16, "I16", 2, false},   {DType::U16, "U16", 2, false},     {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},  {DType::I32, "I32", 4, false},     {DType::U32, "U32", 4, false},
    {DType::F32, "F32", 4, true},    {DType::F64, "F64", 8, true},      {DType::I64, "I64", 8, false},
    {DType::U64, "U64", 8, false},   {DType::F8_E4M3, "F8_E4M3", 1, true}, {DType::F8_E5M2, "F8_E5M2", 1, true},
};

const DTypeInfo* dtype_from_name(std::string_view s) {
    for (const auto& d : kDTypes)
        if (s == d.name) return &d;
    return nullptr;
}

// The safetensors crate refuses headers above 100 MB; so do we, before allocating anything.
constexpr uint64_t kMaxHeader = 100u << 20;

// Multiplication that reports overflow instead of wrapping (shapes come from untrusted files).
bool mul_overflows(uint64_t a, uint64_t b, uint64_t* out) { return __builtin_mul_overflow(a, b, out); }

float f8_e4m3_to_f32(uint8_t b) {
    const uint32_t sign = uint32_t(b & 0x80) << 24;
    const uint32_t e = (b >> 3) & 0xf, m = b & 7;
    if (e == 0xf && m == 7) return quant::f32_from_bits(sign | 0x7fc00000);   // the only NaN (fn)
    if (e == 0) {
        const float v = float(m) * 0.001953125f;   // m/8 * 2^-6
        return sign ? -v : v;
    }
    return quant::f32_from_bits(sign | ((e + 120) << 23) | (m << 20));
}

}  // namespace

const char* dtype_name(DType t) {
    for (const auto& d : kDTypes)
        if (d.t == t) return d.name;
    return "?";
}
size_t dtype_size(DType t) {
    for (const auto& d : kDTypes)
        if (d.t == t) return d.size;
    return 0;
}
bool dtype_is_float(DType t) {
    for (const auto& d : kDTypes)
        if (d.t == t) return d.is_float;
    return false;
}

int64_t StTensor::numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

std::string StTensor::shape_str() const {
    std::string s = "[";
    for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
    return s + "]";
}

const std::string& StTensor::path() const { return file->path(); }

// ---- SafetensorsFile ----

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        fail("{}: cannot stat: {}", path, std::strerror(e));
    }
    f->size_ = size_t(st.st_size);
    if (f->size_ > 0) {
        void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const int e = errno;
            ::close(fd);
            fail("{}: cannot mmap: {}", path, std::strerror(e));
        }
        f->base_ = static_cast<const uint8_t*>(p);
        f->mapped_ = true;
    }
    ::close(fd);
    f->parse();
    return f;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::from_memory(const uint8_t* data, size_t size, std::string name) {
    std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
    f->path_ = std::move(name);
    f->base_ = data;
    f->size_ = size;
    f->parse();
    return f;
}

SafetensorsFile::~SafetensorsFile() {
    if (mapped_) ::munmap(const_cast<uint8_t*>(base_), size_);
}

void SafetensorsFile::parse() {
    if (size_ < 8) fail("{}: file is {} bytes, too short for a safetensors header length", path_, size_);
    uint64_t hlen = 0;
    std::memcpy(&hlen, base_, 8);
    if (hlen > kMaxHeader) fail("{}: header length {} exceeds the 100 MB limit (not a safetensors file?)", path_, hlen);
    if (hlen > size_ - 8)
        fail("{}: header length {} runs past the end of the file ({} bytes; truncated?)", path_, hlen, size_);
    data_offset_ = size_t(8 + hlen);
    const std::string_view text(reinterpret_cast<const char*>(base_ + 8), size_t(hlen));

    // The callback sees every top-level key as it is parsed, so duplicates are caught here;
    // a plain parse would silently keep one of them.
    std::set<std::string> seen;
    std::string dup;
    json::parser_callback_t cb = [&](int depth, json::parse_event_t ev, json& parsed) {
        if (depth == 1 && ev == json::parse_event_t::key && parsed.is_string()) {
            const auto& k = parsed.get_ref<const std::string&>();
            if (!seen.insert(k).second && dup.empty()) dup = k;
        }
        return true;
    };
    json h;
    try {
        h = json::parse(text.begin(), text.end(), cb);
    } catch (const json::exception& e) {
        fail("{}: header is not valid JSON: {}", path_, e.what());
    }
    if (!dup.empty()) fail("{}: tensor '{}': name appears twice in the header", path_, dup);
    if (!h.is_object()) fail("{}: header is not a JSON object", path_);

    const uint64_t data_size = size_ - data_offset_;
    for (auto it = h.begin(); it != h.end(); ++it) {
        const std::string& name = it.key();
        const json& v = it.value();
        if (name == "__metadata__") {
            if (!v.is_object()) fail("{}: __metadata__ is not an object", path_);
            for (auto m = v.begin(); m != v.end(); ++m) {
                if (!m.value().is_string()) fail("{}: __metadata__ entry '{}' is not a string", path_, m.key());
                metadata_[m.key()] = m.value().get<std::string>();
            }
            continue;
        }
        if (name.empty()) fail("{}: a tensor has an empty name", path_);
        if (!v.is_object()) fail("{}: tensor '{}': entry is not an object", path_, name);
        auto dt = v.find("dtype");
        auto sh = v.find("shape");
        auto off = v.find("data_offsets");
        if (dt == v.end() || !dt->is_string()) fail("{}: tensor '{}': missing or non-string dtype", path_, name);
        if (sh == v.end() || !sh->is_array()) fail("{}: tensor '{}': missing or non-array shape", path_, name);
        if (off == v.end() || !off->is_array() || off->size() != 2)
            fail("{}: tensor '{}': data_offsets must be [begin, end]", path_, name);
        const DTypeInfo* di = dtype_from_name(dt->get_ref<const std::string&>());
        if (!di) fail("{}: tensor '{}': unknown dtype '{}'", path_, name, dt->get_ref<const std::string&>());

        StTensor t;
        t.name = name;
        t.dtype = di->t;
        t.file = this;
        // The product of the non-zero entries must fit in int64 (as the GGUF reader requires), so
        // that no partial product a caller forms (rows, a reshape) can overflow.
        uint64_t span = 1;
        bool empty = false;
        for (const json& d : *sh) {
            if (!d.is_number_unsigned())
                fail("{}: tensor '{}': shape entries must be non-negative integers", path_, name);
            const uint64_t n = d.get<uint64_t>();
            if (n > uint64_t(INT64_MAX) || (n != 0 && (mul_overflows(span, n, &span) || span > uint64_t(INT64_MAX))))
                fail("{}: tensor '{}': shape overflows", path_, name);
            empty = empty || n == 0;
            t.shape.push_back(int64_t(n));
        }
        const uint64_t numel = empty ? 0 : span;
        if (t.shape.size() > 8) fail("{}: tensor '{}': {} dimensions (at most 8 supported)", path_, name, t.shape.size());
        for (const json& o : *off)
            if (!o.is_number_unsigned()) fail("{}: tensor '{}': data_offsets must be non-negative integers", path_, name);
        t.begin = (*off)[0].get<uint64_t>();
        t.end = (*off)[1].get<uint64_t>();
        if (t.begin > t.end) fail("{}: tensor '{}': data_offsets [{}, {}] are reversed", path_, name, t.begin, t.end);
        if (t.end > data_size)
            fail("{}: tensor '{}': data_offsets [{}, {}] run past the end of the data ({} bytes; truncated?)", path_,
                 name, t.begin, t.end, data_size);
        uint64_t want = 0;
        if (mul_overflows(numel, di->size, &want) || want != t.end - t.begin)
            fail("{}: tensor '{}': shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}", path_, name,
                 t.shape_str(), di->name, numel * di->size, t.begin, t.end, t.end - t.begin);
        t.data = base_ + data_offset_ + t.begin;
        tensors_.push_back(std::move(t));
    }

    // Overlap check over ranges sorted by start; empty tensors occupy nothing.
    std::vector<const StTensor*> by_off;
    for (const auto& t : tensors_)
        if (t.end > t.begin) by_off.push_back(&t);
    std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
    for (size_t i = 1; i < by_off.size(); ++i)
        if (by_off[i]->begin < by_off[i - 1]->end)
            fail("{}: tensor '{}': data [{}, {}] overlaps tensor '{}' [{}, {}]", path_, by_off[i]->name,
                 by_off[i]->begin, by_off[i]->end, by_off[i - 1]->name, by_off[i - 1]->begin, by_off[i - 1]->end);

    std::sort(tensors_.begin(), tensors_.end(), [](const StTensor& a, const StTensor& b) { return a.name < b.name; });
}

const StTensor* SafetensorsFile::find(std::string_view name) const {
    auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                               [](const StTensor& t, std::string_view n) { return t.name < n; });
    return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

void SafetensorsFile::release_range(const uint8_t* p, size_t n) const {
    if (!mapped_ || n == 0) return;
    // Whole pages strictly inside the range only: a neighbour may still be in use.
    const long page = ::sysconf(_SC_PAGESIZE);
    uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + n;
    b = (b + page - 1) / page * page;
    e = e / page * page;
    if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

// ---- Checkpoint ----

namespace {

// Shard names come from a JSON file: keep them inside the checkpoint directory.
void check_shard_name(const std::string& index, const std::string& tensor, const std::string& shard) {
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
        shard == "." || shard == "..")
        fail("{}: tensor '{}': shard name '{}' is not a plain file name", index, tensor, shard);
    // NAME_MAX: a longer name cannot exist, and the filesystem calls would fail on it.
    if (shard.size() > 255)
        fail("{}: tensor '{}': shard name of {} bytes is longer than a file name can be (255)", index, tensor, shard.size());
}

}  // namespace

Checkpoint Checkpoint::open(const std::string& dir) {
    Checkpoint c;
    c.dir_ = dir;
    std::error_code dir_ec;
    if (!fs::is_directory(dir, dir_ec)) fail("{}: not a directory{}", dir, dir_ec ? " (" + dir_ec.message() + ")" : "");
    const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
    std::map<std::string, std::string> weight_map;   // tensor -> shard
    std::vector<std::string> shard_names;
    std::error_code index_ec;
    const bool have_index = fs::is_regular_file(index_path, index_ec);
    if (index_ec && index_ec != std::errc::no_such_file_or_directory)
        fail("{}: cannot be checked: {}", index_path.string(), index_ec.message());
    if (have_index) {
        std::ifstream in(index_path, std::ios::binary);
        json idx;
        try {
            idx = json::parse(in);
        } catch (const json::exception& e) {
            fail("{}: not valid JSON: {}", index_path.string(), e.what());
        }
        if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
            fail("{}: no weight_map object", index_path.string());
        std::set<std::string> names;
        for (auto it = idx["weight_map"].begin(); it != idx["weight_map"].end(); ++it) {
            if (!it.value().is_string()) fail("{}: tensor '{}': shard is not a string", index_path.string(), it.key());
            const std::string shard = it.value().get<std::string>();
            check_shard_name(index_path.string(), it.key(), shard);
            weight_map[it.key()] = shard;
            names.insert(shard);
        }
        shard_names.assign(names.begin(), names.end());   // sorted, like llama.cpp
    } else {
        for (const auto& e : fs::directory_iterator(dir)) {
            const std::string n = e.path().filename().string();
            if (n.starts_with("model") && n.ends_with(".safetensors")) shard_names.push_back(n);
        }
        std::sort(shard_names.begin(), shard_names.end());
        if (shard_names.empty()) fail("{}: no model*.safetensors files and no model.safetensors.index.json", dir);
    }

    for (const auto& n : shard_names) {
        const std::string p = (fs::path(dir) / n).string();
        std::error_code ec;   // the non-throwing form: a bad path is this error, not a filesystem_error
        if (!fs::is_regular_file(p, ec)) {
            std::string first;
            for (const auto& [t, s] : weight_map)
                if (s == n) { first = t; break; }
            fail("{}: shard listed in {} is missing (holds tensor '{}' and others){}", p, index_path.string(), first,
                 ec && ec != std::errc::no_such_file_or_directory ? ": " + ec.message() : "");
        }
        c.shards_.push_back(SafetensorsFile::open(p));
    }
    for (const auto& sh : c.shards_) {
        const std::string shard_file = fs::path(sh->path()).filename().string();
        for (const auto& t : sh->tensors()) {
            if (auto prev = c.by_name_.find(t.name); prev != c.by_name_.end())
                fail("{}: tensor '{}': also present in {}", sh->path(), t.name, prev->second->path());
            if (have_index) {
                auto w = weight_map.find(t.name);
                if (w == weight_map.end())
                    fail("{}: tensor '{}': not listed in {}", sh->path(), t.name, index_path.string());
                if (w->second != shard_file)
                    fail("{}: tensor '{}': {} places it in {}", sh->path(), t.name, index_path.string(), w->second);
            }
            c.by_name_.emplace(t.name, &t);
            c.order_.push_back(&t);
        }
    }
    for (const auto& [t, s] : weight_map)
        if (!c.by_name_.count(t))
            fail("{}: tensor '{}': listed in {} but missing from the shard (truncated or incomplete file?)",
                 (fs::path(dir) / s).string(), t, index_path.string());
    return c;
}

const StTensor* Checkpoint::find(std::string_view name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
}

const StTensor& Checkpoint::get(std::string_view name) const {
    if (const StTensor* t = find(name)) return *t;
    fail("{}: tensor '{}' is missing from the checkpoint", dir_, name);
}

uint64_t Checkpoint::total_bytes() const {
    uint64_t n = 0;
    for (const StTensor* t : order_) n += t->nbytes();
    return n;
}

// ---- dtype conversion ----

void to_f32(DType t, const uint8_t* src, float* dst, size_t n) {
    switch (t) {
        case DType::F32: std::memcpy(dst, src, n * 4); return;
        case DType::BF16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = quant::f32_from_bits(uint32_t(h) << 16);
            }
            return;
        case DType::F16:
            for (size_t i = 0; i < n; ++i) {
                uint16_t h;
                std::memcpy(&h, src + 2 * i, 2);
                dst[i] = quant::fp16_to_fp32(h);
            }
            return;
        case DType::F64:
            for (size_t i = 0; i < n; ++i) {
                double d;
                std::memcpy(&d, src + 8 * i, 8);
                dst[i] = float(d);
            }
            return;
        case DType::F8_E4M3:
            for (size_t i = 0; i < n; ++i) dst[i] = f8_e4m3_to_f32(src[i]);
            return;
        case DType::F8_E5M2:
            for (size_t i = 0; i < n; ++i) dst[i] = quant::fp16_to_fp32(uint16_t(src[i]) << 8);
            return;
        default: fail("to_f32: dtype {} is not a float type", dtype_name(t));
    }
}

}  // namespace kinfer::convert
