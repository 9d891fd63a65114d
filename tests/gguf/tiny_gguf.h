// A tiny GGUF built byte by byte for the reader's tests: a few metadata values of every kind and
// three small tensors, with the byte offset of every field recorded so that a test can break
// exactly one thing and check that the error names that byte.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::test {

struct TinyGguf {
    struct Tensor {
        std::string name;
        std::vector<int64_t> ne;
        uint32_t type;
        uint64_t offset;
        size_t nbytes;
    };

    uint32_t version = 3;
    uint32_t alignment = 32;
    std::string big_key = "general.big";  // the last record's key (a uint64); tests rename it
    std::vector<Tensor> tensors = {
        {"blk.0.attn_q.weight", {8, 2}, 0 /*F32*/, 0, 64},
        {"blk.0.ffn_down.weight", {32}, 8 /*Q8_0*/, 64, 34},
        {"output_norm.weight", {4}, 1 /*F16*/, 128, 8},
    };

    // Filled by build(): where each field landed.
    size_t pos_version = 0, pos_n_tensors = 0, pos_n_kv = 0;
    std::vector<size_t> pos_kv;             // start of each key/value record
    size_t pos_alignment_kv = 0;            // the general.alignment record
    size_t pos_tokens_kv = 0;               // the string-array record
    size_t pos_bool_kv = 0;
    std::vector<size_t> pos_tensor;         // start of each tensor-info record
    std::vector<size_t> pos_tensor_ndims, pos_tensor_type, pos_tensor_offset;
    size_t data_offset = 0;

    std::vector<uint8_t> b;

    template <typename T>
    void put(T v) {
        uint8_t tmp[sizeof(T)];
        std::memcpy(tmp, &v, sizeof v);
        b.insert(b.end(), tmp, tmp + sizeof v);
    }
    void str(std::string_view s) {
        put<uint64_t>(s.size());
        for (char c : s) b.push_back(uint8_t(c));
    }
    template <typename T>
    void patch(size_t at, T v) {
        std::memcpy(b.data() + at, &v, sizeof v);
    }

    std::vector<uint8_t> build() {
        b.clear();
        pos_kv.clear();
        pos_tensor.clear();
        pos_tensor_ndims.clear();
        pos_tensor_type.clear();
        pos_tensor_offset.clear();
        put<uint32_t>(0x46554747);  // "GGUF"
        pos_version = b.size();
        put<uint32_t>(version);
        pos_n_tensors = b.size();
        put<uint64_t>(tensors.size());
        pos_n_kv = b.size();
        put<uint64_t>(8);
        auto key = [&](std::string_view k, uint32_t type) {
            pos_kv.push_back(b.size());
            str(k);
            put<uint32_t>(type);
        };
        key("general.architecture", 8);
        str("kimi-k3");
        key("general.name", 8);
        str("tiny");
        pos_alignment_kv = b.size();
        key("general.alignment", 4);
        put<uint32_t>(alignment);
        key("kimi-k3.attention.head_count_kv", 9);
        put<uint32_t>(5);  // INT32
        put<uint64_t>(4);
        for (int32_t x : {0, 0, 0, 1}) put<int32_t>(x);
        pos_tokens_kv = b.size();
        key("tokenizer.ggml.tokens", 9);
        put<uint32_t>(8);  // STRING
        put<uint64_t>(3);
        for (const char* s : {"a", "bc", "def"}) str(s);
        key("kimi-k3.attention.layer_norm_rms_epsilon", 6);
        put<float>(1e-5f);
        pos_bool_kv = b.size();
        key("kimi-k3.expert_weights_norm", 7);
        put<uint8_t>(1);
        key(big_key, 10);
        put<uint64_t>(~uint64_t(0));
        for (const auto& t : tensors) {
            pos_tensor.push_back(b.size());
            str(t.name);
            pos_tensor_ndims.push_back(b.size());
            put<uint32_t>(uint32_t(t.ne.size()));
            for (int64_t n : t.ne) put<int64_t>(n);
            pos_tensor_type.push_back(b.size());
            put<uint32_t>(t.type);
            pos_tensor_offset.push_back(b.size());
            put<uint64_t>(t.offset);
        }
        while (b.size() % alignment) b.push_back(0);
        data_offset = b.size();
        size_t end = 0;
        for (const auto& t : tensors)
            if (t.nbytes) end = std::max<size_t>(end, size_t(t.offset) + t.nbytes);  // nbytes 0: no data written
        for (size_t i = 0; i < end; ++i) b.push_back(uint8_t(i * 7 + 1));
        return b;
    }
};

}  // namespace kinfer::test
