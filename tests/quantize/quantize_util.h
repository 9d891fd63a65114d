// Helpers for the quantize tests: run the kinfer binary, temp paths, whole-file reads, and a
// tensor-by-tensor / key-by-key comparison of two GGUF files.
#pragma once
#include "gguf/reader.h"
#include "test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace kinfer::test::qz {

// KINFER_BIN in the environment overrides the built binary (handy while iterating).
inline std::string bin() {
    const char* e = std::getenv("KINFER_BIN");
    return e && *e ? e : kinfer_bin();
}

inline std::string tmp_dir() {
    static const std::string d = [] {
        auto p = std::filesystem::temp_directory_path() / ("kinfer_qz_" + std::to_string(::getpid()));
        std::filesystem::create_directories(p);
        return p.string();
    }();
    return d;
}

// Runs `kinfer quantize <args>`, output to <tmp>/<log>.{out,err}; returns the exit status.
inline int run_quantize(const std::string& args, const std::string& log) {
    const std::string cmd = bin() + " quantize " + args + " > " + tmp_dir() + "/" + log + ".out 2> " + tmp_dir() + "/" + log + ".err";
    const int rc = std::system(cmd.c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

inline std::string slurp_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// Same keys in the same order with the same types and values.
inline void check_same_metadata(const gguf::File& a, const gguf::File& b) {
    REQUIRE(a.kv().size() == b.kv().size());
    for (size_t i = 0; i < a.kv().size(); ++i) {
        const auto& x = a.kv()[i];
        const auto& y = b.kv()[i];
        INFO("key " << i << ": " << x.key);
        CHECK(x.key == y.key);
        REQUIRE(x.type() == y.type());
        if (x.is_array()) {
            REQUIRE(x.array_type() == y.array_type());
            REQUIRE(x.size() == y.size());
            if (x.array_type() == gguf::ValueType::STRING) {
                for (size_t j = 0; j < x.size(); ++j)
                    if (x.string_at(j) != y.string_at(j)) { CHECK(x.string_at(j) == y.string_at(j)); break; }
            } else {
                REQUIRE(x.raw_size() == y.raw_size());
                CHECK(std::memcmp(x.raw(), y.raw(), x.raw_size()) == 0);
            }
        } else if (x.type() == gguf::ValueType::STRING) {
            CHECK(x.as_string() == y.as_string());
        } else if (x.type() == gguf::ValueType::FLOAT32 || x.type() == gguf::ValueType::FLOAT64) {
            CHECK(x.as_float() == y.as_float());
        } else if (x.type() == gguf::ValueType::BOOL) {
            CHECK(x.as_bool() == y.as_bool());
        } else {
            CHECK(x.as_int() == y.as_int());
        }
    }
}

// Same tensor names, order, types, dims, shapes, offsets and bytes.
inline void check_same_tensors(const gguf::File& a, const gguf::File& b) {
    REQUIRE(a.tensors().size() == b.tensors().size());
    for (size_t i = 0; i < a.tensors().size(); ++i) {
        const auto& x = a.tensors()[i];
        const auto& y = b.tensors()[i];
        INFO("tensor " << i << ": " << x.name);
        CHECK(x.name == y.name);
        CHECK(x.type == y.type);
        CHECK(x.n_dims == y.n_dims);
        for (int d = 0; d < 4; ++d) CHECK(x.ne[d] == y.ne[d]);
        CHECK(x.offset == y.offset);
        REQUIRE(x.nbytes == y.nbytes);
        CHECK(std::memcmp(x.data, y.data, x.nbytes) == 0);
    }
}

}  // namespace kinfer::test::qz
