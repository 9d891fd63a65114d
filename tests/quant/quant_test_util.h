// Shared helpers for the quant tests: the golden files' LCG input, random rows, hex, and the
// golden-vector parser.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace kinfer::quant::testing {

// The input of ggml_reference_vectors.txt / ggml_quantize_chunk_vectors.txt (see their headers).
inline std::vector<float> lcg_input(int n = 512) {
    std::vector<float> x(static_cast<size_t>(n));
    uint32_t s = 12345;
    for (int i = 0; i < n; ++i) {
        s = s * 1664525u + 1013904223u;
        const int v = int(s >> 21) % 2001 - 1000;
        x[size_t(i)] = float(v) / 250.0f;
    }
    return x;
}

inline std::vector<float> random_row(int64_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> x(static_cast<size_t>(n));
    for (auto& v : x) v = nd(rng);
    return x;
}

inline std::string to_hex(const void* p, size_t n) {
    static const char* digits = "0123456789abcdef";
    std::string s;
    for (size_t i = 0; i < n; ++i) {
        const uint8_t b = static_cast<const uint8_t*>(p)[i];
        s += digits[b >> 4];
        s += digits[b & 15];
    }
    return s;
}

inline uint64_t fnv1a64(const void* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; ++i) { h ^= static_cast<const uint8_t*>(p)[i]; h *= 1099511628211ull; }
    return h;
}

struct GoldenEntry {
    std::string name;  // ggml type name, e.g. "q4_K"
    uint64_t fnv = 0;
    double rmse = 0;
    float y[4] = {};
    std::string all_hex;
};

// Reads the LCG section of a golden file (the 'cos' section is libm-dependent and skipped).
// Reference file lines: "block_<name> bytes=... fnv1a64=... rmse=... y[0..3]=a b c d";
// chunk file lines: "<name> id=... row_bytes=... ...". The next "all:" line holds the hex.
// With cos_section, reads the summary lines after "input: cos" instead (no hex there).
inline std::vector<GoldenEntry> read_golden(const std::string& path, bool cos_section = false) {
    std::vector<GoldenEntry> out;
    std::ifstream f(path);
    std::string line;
    bool in_cos = false;
    while (std::getline(f, line)) {
        if (line.rfind("input: cos", 0) == 0) {
            if (!cos_section) break;
            in_cos = true;
            continue;
        }
        if (cos_section && !in_cos) continue;
        if (line.empty() || line[0] == '#' || line[0] == ' ' || line.find("fnv1a64=") == std::string::npos) continue;
        GoldenEntry e;
        std::istringstream ss(line);
        ss >> e.name;
        if (e.name.rfind("block_", 0) == 0) e.name = e.name.substr(6);
        std::string tok;
        while (ss >> tok) {
            if (tok.rfind("fnv1a64=", 0) == 0) e.fnv = std::stoull(tok.substr(8), nullptr, 16);
            else if (tok.rfind("rmse=", 0) == 0) e.rmse = std::stod(tok.substr(5));
            else if (tok.rfind("y[0..3]=", 0) == 0) {
                e.y[0] = std::stof(tok.substr(8));
                for (int k = 1; k < 4; ++k) ss >> e.y[k];
            }
        }
        while (!cos_section && std::getline(f, line)) {
            const auto p = line.find("all:");
            if (p != std::string::npos) { e.all_hex = line.substr(p + 4); break; }
        }
        out.push_back(e);
    }
    return out;
}

// The shipped copy in tests/data/quant, else ../shared/golden/quant; "" when neither exists.
inline std::string golden_quant_file(const std::string& name) {
    const std::string shipped = kinfer::test::data("quant/" + name);
    if (std::filesystem::exists(shipped)) return shipped;
    if (kinfer::test::have_golden("quant/" + name)) return kinfer::test::golden("quant/" + name);
    return "";
}

}  // namespace kinfer::quant::testing
