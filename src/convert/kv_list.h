// An ordered GGUF metadata list with gguf-py's semantics: setting a key that already exists
// replaces its value in place (the key keeps its first position), which is how llama.cpp's
// converter ends up with e.g. attention.head_count_kv written as a scalar and then an array.
// apply() hands the final list to the streaming writer.
#pragma once
#include "gguf/writer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::convert {

class KvList {
public:
    void set_u32(const std::string& k, uint32_t v);
    void set_i32(const std::string& k, int32_t v);
    void set_f32(const std::string& k, float v);
    void set_bool(const std::string& k, bool v);
    void set_string(const std::string& k, std::string v);
    void set_i32_array(const std::string& k, std::vector<int32_t> v);
    void set_string_array(const std::string& k, std::vector<std::string> v);
    bool has(const std::string& k) const;

    void apply(gguf::Writer& w) const;
    // One line per key, "key TYPE value" (arrays and long strings abbreviated), for --dry-run.
    std::vector<std::string> describe() const;
    size_t size() const { return kv_.size(); }

private:
    struct Entry {
        std::string key;
        gguf::ValueType type = gguf::ValueType::UINT32;
        uint64_t u = 0;
        int64_t i = 0;
        float f = 0;
        bool b = false;
        std::string s;
        std::vector<int32_t> ai;
        std::vector<std::string> as;
    };
    Entry& slot(const std::string& k);
    std::vector<Entry> kv_;
};

}  // namespace kinfer::convert
