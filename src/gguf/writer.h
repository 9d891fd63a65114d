// Streaming GGUF v3 writer. The caller declares every metadata pair and every tensor info up
// front, then streams each tensor's bytes in declaration order, so a 600 GB model is written
// without ever holding its tensor data in memory. The layout is byte-for-byte what ggml's
// gguf.cpp and gguf-py produce: header, KV pairs, tensor infos, zero padding to the alignment
// (`general.alignment`, default 32), then each tensor's data padded to the alignment.
//
// The file is written to a uniquely named temporary beside `path` (common/safe_file.h: created
// with O_EXCL, so a planted symlink cannot redirect it; removed on SIGINT / SIGTERM / SIGHUP) and
// fsync'd and renamed onto `path` by finish(); if the Writer is destroyed before that (an
// exception, a failed quantization), the temp file is removed, so a half-written model never
// appears under the final name. Errors throw kinfer::Error naming the file.
#pragma once
#include "gguf/reader.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer {
class TempFile;
}

namespace kinfer::gguf {

class Writer {
public:
    // `path` is the final name; nothing is created until the first tensor byte (or finish()).
    explicit Writer(std::string path);
    ~Writer();
    Writer(const Writer&) = delete;
    Writer& operator=(const Writer&) = delete;

    // ---- metadata (before any tensor data) ----
    // Keys must be unique: adding an existing key throws. remove() then add to move a key to the
    // end, which is what gguf_set_val_* does (llama-quantize relies on that order).
    void add_u8(std::string_view key, uint8_t v);
    void add_i8(std::string_view key, int8_t v);
    void add_u16(std::string_view key, uint16_t v);
    void add_i16(std::string_view key, int16_t v);
    void add_u32(std::string_view key, uint32_t v);
    void add_i32(std::string_view key, int32_t v);
    void add_u64(std::string_view key, uint64_t v);
    void add_i64(std::string_view key, int64_t v);
    void add_f32(std::string_view key, float v);
    void add_f64(std::string_view key, double v);
    void add_bool(std::string_view key, bool v);
    void add_string(std::string_view key, std::string_view v);
    // Array of a fixed-size element type: `data` holds n little-endian elements (bools as 1 byte).
    void add_array(std::string_view key, ValueType elem, const void* data, size_t n);
    void add_array_i32(std::string_view key, std::span<const int32_t> v) { add_array(key, ValueType::INT32, v.data(), v.size()); }
    void add_array_u32(std::string_view key, std::span<const uint32_t> v) { add_array(key, ValueType::UINT32, v.data(), v.size()); }
    void add_array_f32(std::string_view key, std::span<const float> v) { add_array(key, ValueType::FLOAT32, v.data(), v.size()); }
    void add_string_array(std::string_view key, std::span<const std::string> v);
    void add_string_array(std::string_view key, std::span<const std::string_view> v);
    // Copies a reader value verbatim (type, element type and payload), under its own key or `key`.
    void add_value(const Value& v) { add_value(v.key, v); }
    void add_value(std::string_view key, const Value& v);
    bool has_key(std::string_view key) const;
    bool remove(std::string_view key);   // false when absent
    size_t n_kv() const { return kv_.size(); }

    // ---- tensor infos (before any tensor data) ----
    // ne in ggml order (ne[0] contiguous); n_dims entries of ne are written (1..4). ne[0] must be
    // a multiple of the type's block size. Returns the tensor's index.
    size_t add_tensor(std::string_view name, quant::Type type, const int64_t* ne, int n_dims);
    size_t n_tensors() const { return tensors_.size(); }
    size_t tensor_nbytes(size_t i) const { return tensors_.at(i).nbytes; }
    uint64_t tensor_offset(size_t i) const;   // within the data section, padded as written
    size_t alignment() const;               // general.alignment if set, else 32
    // Size of the finished file as declared so far (header + padded data); for --dry-run.
    uint64_t expected_file_size() const;
    // The metadata declared so far as a complete GGUF image with no tensors, for File::from_memory:
    // convert reads its planned metadata back through the model loader before writing a byte.
    std::vector<uint8_t> metadata_image() const;

    // ---- data ----
    // Appends bytes to the current tensor (declaration order); may be called in any number of
    // chunks. When a tensor's bytes are complete its padding is written and the next one starts.
    // Writing more than a tensor's size throws.
    void write(const void* data, size_t n);
    // Convenience: the whole of the current tensor in one call (n must equal its size).
    void write_tensor(const void* data, size_t n);
    size_t current_tensor() const { return cur_; }   // index of the tensor being written
    // Checks every tensor is complete, flushes, fsyncs, renames onto the final path and fsyncs
    // its directory. `sync` is kept for callers; the file is always synced.
    void finish(bool sync = true);
    const std::string& path() const { return path_; }
    const std::string& temp_path() const { return tmp_path_; }   // empty until the first byte
    uint64_t bytes_written() const { return pos_; }

private:
    struct KV {
        std::string key;
        std::vector<uint8_t> enc;   // type id + value, exactly as stored in the file
    };
    struct Tensor {
        std::string name;
        quant::Type type;
        int n_dims;
        int64_t ne[4];
        size_t nbytes;
    };
    void add_encoded(std::string_view key, std::vector<uint8_t> enc);
    void require_header_open(const char* what) const;
    void write_header();
    void put(const void* p, size_t n);
    void pad_zeros(size_t n);
    [[noreturn]] void io_fail(const char* what) const;

    std::string path_;
    std::string tmp_path_;
    std::unique_ptr<TempFile> tmp_;
    std::FILE* f_ = nullptr;   // tmp_'s stream
    bool header_written_ = false;
    bool finished_ = false;
    std::vector<KV> kv_;
    std::vector<Tensor> tensors_;
    size_t align_ = 32;         // fixed when the header is written
    size_t cur_ = 0;            // tensor being streamed
    size_t cur_done_ = 0;       // its bytes written so far
    uint64_t pos_ = 0;          // bytes written to the file
    std::vector<char> buf_;     // stdio buffer
};

}  // namespace kinfer::gguf
