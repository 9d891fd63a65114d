// GGUF v3 reader: mmaps the file, validates every count, length, type, dimension and offset
// before trusting it, and hands out zero-copy views of metadata and tensor data.
// Any defect throws kinfer::Error naming the file, the byte offset and what was expected.
#pragma once
#include "common/error.h"
#include "quant/types.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::gguf {

enum class ValueType : uint32_t {
    UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);
// Bytes of one element of a fixed-size value type; 0 for STRING, ARRAY and unknown types.
constexpr size_t value_type_size(ValueType t) {
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
        case ValueType::UINT16: case ValueType::INT16: return 2;
        case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
        case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
        default: return 0;
    }
}

// A metadata value: a view into the mapped file (valid while the File lives).
class Value {
public:
    ValueType type() const { return type_; }
    bool is_array() const { return type_ == ValueType::ARRAY; }
    // Scalars. Integers convert between widths when the value fits; otherwise these throw.
    int64_t as_int() const;
    uint64_t as_uint() const;
    double as_float() const;         // FLOAT32/FLOAT64, or any integer
    bool as_bool() const;
    std::string_view as_string() const;
    // Arrays.
    ValueType array_type() const { return elem_type_; }
    size_t size() const { return count_; }
    int64_t int_at(size_t i) const;
    double float_at(size_t i) const;
    std::string_view string_at(size_t i) const;   // O(1): string offsets are indexed at load
    std::vector<int64_t> ints() const;
    std::vector<float> floats() const;
    std::vector<std::string_view> strings() const;
    // Raw bytes of a scalar or of a fixed-size array's payload (for copying into a writer).
    const uint8_t* raw() const { return data_; }
    size_t raw_size() const { return nbytes_; }

    // Filled by the reader.
    std::string_view key;
    ValueType type_ = ValueType::UINT8;
    ValueType elem_type_ = ValueType::UINT8;
    uint64_t count_ = 0;                 // array length
    const uint8_t* data_ = nullptr;      // scalar or array payload
    size_t nbytes_ = 0;
    uint64_t file_offset_ = 0;           // where the value starts, for error messages
    std::vector<uint32_t> str_offsets_;  // string arrays: offset of each element in data_
    const std::string* file_name_ = nullptr;
};

struct TensorInfo {
    std::string name;
    quant::Type type = quant::Type::F32;
    int n_dims = 0;
    int64_t ne[4] = {1, 1, 1, 1};   // ggml order: ne[0] is the contiguous (input) dimension
    uint64_t offset = 0;            // relative to the start of the data section
    size_t nbytes = 0;
    const uint8_t* data = nullptr;  // into the mapping
    uint64_t info_offset = 0;       // where its tensor-info record starts in the file

    int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
    int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
    size_t row_bytes() const;       // bytes of one ne[0] row
    std::string shape_str() const;  // "{256, 64}"
};

class File {
public:
    // Maps and validates the whole header; throws kinfer::Error on any defect.
    static std::unique_ptr<File> open(const std::string& path);
    // The same, over a caller-owned buffer (fuzzing, tests). The buffer must outlive the File.
    static std::unique_ptr<File> from_memory(const uint8_t* data, size_t size, std::string name);
    ~File();
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    const std::string& path() const { return path_; }
    uint32_t version() const { return version_; }
    size_t alignment() const { return alignment_; }
    size_t data_offset() const { return data_offset_; }
    size_t file_size() const { return size_; }
    const uint8_t* base() const { return base_; }

    const std::vector<Value>& kv() const { return kv_; }
    const Value* find(std::string_view key) const;   // nullptr when absent
    // Typed getters: throw "<file>: metadata key '<key>' missing" / "... has type X, expected Y".
    const Value& get(std::string_view key) const;
    std::string_view get_string(std::string_view key) const { return get(key).as_string(); }
    int64_t get_int(std::string_view key) const { return get(key).as_int(); }
    double get_float(std::string_view key) const { return get(key).as_float(); }
    std::string get_string_or(std::string_view key, std::string_view def) const;
    int64_t get_int_or(std::string_view key, int64_t def) const;
    double get_float_or(std::string_view key, double def) const;
    bool get_bool_or(std::string_view key, bool def) const;
    std::string architecture() const { return get_string_or("general.architecture", ""); }

    const std::vector<TensorInfo>& tensors() const { return tensors_; }
    const TensorInfo* find_tensor(std::string_view name) const;   // nullptr when absent
    const TensorInfo& tensor(std::string_view name) const;        // throws when absent

private:
    File() = default;
    void parse();

    std::string path_;
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    uint32_t version_ = 0;
    size_t alignment_ = 32;
    size_t data_offset_ = 0;
    std::vector<Value> kv_;
    std::vector<TensorInfo> tensors_;
    std::vector<std::pair<std::string_view, size_t>> tensor_index_;  // sorted by name
};

}  // namespace kinfer::gguf
