// Safetensors reader: mmaps each file and validates its JSON header completely before any tensor
// is used (header length inside the file, known dtypes, shape x dtype size == byte range, ranges
// inside the data section and non-overlapping, unique names). A Checkpoint joins the shards of a
// Hugging Face model directory through model.safetensors.index.json and checks that the index
// and the shards agree. Every defect throws kinfer::Error naming the file and the tensor.
#pragma once
#include "common/error.h"

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::convert {

enum class DType { BOOL, U8, I8, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64, F8_E4M3, F8_E5M2 };

const char* dtype_name(DType t);
size_t dtype_size(DType t);
bool dtype_is_float(DType t);   // convertible to f32 by to_f32()

class SafetensorsFile;

struct StTensor {
    std::string name;
    DType dtype = DType::F32;
    std::vector<int64_t> shape;      // torch order (row-major, last dim contiguous)
    uint64_t begin = 0, end = 0;     // byte range relative to the data section
    const uint8_t* data = nullptr;   // into the mapping
    const SafetensorsFile* file = nullptr;

    size_t nbytes() const { return size_t(end - begin); }
    int64_t numel() const;
    std::string shape_str() const;   // "[256, 64]"
    const std::string& path() const;
};

class SafetensorsFile {
public:
    static std::unique_ptr<SafetensorsFile> open(const std::string& path);
    // Over a caller-owned buffer (fuzzing, tests); the buffer must outlive the object.
    static std::unique_ptr<SafetensorsFile> from_memory(const uint8_t* data, size_t size, std::string name);
    ~SafetensorsFile();
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;

    const std::string& path() const { return path_; }
    // Sorted by name (byte order), which is the order safetensors and llama.cpp iterate in.
    const std::vector<StTensor>& tensors() const { return tensors_; }
    const StTensor* find(std::string_view name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    size_t file_size() const { return size_; }

    // Drops the mapped pages of a tensor once it has been consumed, so that streaming through a
    // checkpoint does not grow the resident set to the size of the model.
    void release(const StTensor& t) const { release_range(t.data, t.nbytes()); }
    // The same for part of a tensor (whole pages inside [p, p + n) only).
    void release_range(const uint8_t* p, size_t n) const;

private:
    SafetensorsFile() = default;
    void parse();

    std::string path_;
    const uint8_t* base_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    size_t data_offset_ = 0;
    std::vector<StTensor> tensors_;
    std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint directory: model.safetensors.index.json + shards, or a single
// model*.safetensors set without an index.
class Checkpoint {
public:
    static Checkpoint open(const std::string& dir);

    const std::string& dir() const { return dir_; }
    const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
    // Reading order: shards by file name, names sorted inside each shard (llama.cpp's order).
    const std::vector<const StTensor*>& tensors() const { return order_; }
    const StTensor* find(std::string_view name) const;
    const StTensor& get(std::string_view name) const;   // throws naming the checkpoint
    uint64_t total_bytes() const;

private:
    std::string dir_;
    std::vector<std::unique_ptr<SafetensorsFile>> shards_;
    std::vector<const StTensor*> order_;
    std::map<std::string, const StTensor*, std::less<>> by_name_;
};

// Converts n elements of a float dtype to f32 (exactly; every supported dtype embeds in f32).
void to_f32(DType t, const uint8_t* src, float* dst, size_t n);

}  // namespace kinfer::convert
