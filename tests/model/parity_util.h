// Helpers of the model tests: run kinfer's forward pass on a GGUF and compare logits with
// llama.cpp's dumps (../shared/golden/llama.cpp/logits, tests/data/logits).
#pragma once
#include "common/error.h"
#include "model/model.h"
#include "test_util.h"
#include "model/session.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace kinfer::test {

// A golden tiny model at F32 (llama.cpp/models/NAME-F32.gguf), or null when ../shared is absent
// (have_golden has counted the skip).
inline std::unique_ptr<model::Model> f32_model(const char* name) {
    const std::string rel = std::string("llama.cpp/models/") + name + "-F32.gguf";
    if (!have_golden(rel)) return nullptr;
    return model::Model::load(golden(rel));
}

inline std::vector<float> read_f32(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(bool(f), "cannot open " << path);
    f.seekg(0, std::ios::end);
    std::vector<float> v(size_t(f.tellg()) / sizeof(float));
    f.seekg(0);
    f.read(reinterpret_cast<char*>(v.data()), std::streamsize(v.size() * sizeof(float)));
    return v;
}

inline std::vector<int32_t> read_ids(const std::string& path) {
    std::ifstream f(path);
    REQUIRE_MESSAGE(bool(f), "cannot open " << path);
    std::vector<int32_t> ids;
    long long v;
    while (f >> v) ids.push_back(int32_t(v));
    return ids;
}

inline nlohmann::json read_json(const std::string& path) {
    std::ifstream f(path);
    REQUIRE_MESSAGE(bool(f), "cannot open " << path);
    return nlohmann::json::parse(f);
}

// The json stores some lists as strings ("[1, 2, ...]"); accept both.
inline std::vector<double> json_numbers(const nlohmann::json& j) {
    if (j.is_string()) return nlohmann::json::parse(j.get<std::string>()).get<std::vector<double>>();
    return j.get<std::vector<double>>();
}

inline int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

// Row-by-row comparison of [rows x V] logits.
struct Diff {
    double max_abs = 0, p50_pos = 0;
    int first_over = -1;          // first row whose max |diff| exceeds `exact_tol`
    int argmax_agree = 0, rows = 0;
    std::vector<double> per_pos;
};

inline Diff compare(const float* a, const float* b, int rows, int64_t V, double exact_tol = 1e-4) {
    Diff d;
    d.rows = rows;
    for (int r = 0; r < rows; ++r) {
        double m = 0;
        for (int64_t i = 0; i < V; ++i) {
            // A NaN on either side counts as an infinite difference (std::max would skip it, and a
            // run that produced NaNs everywhere would compare as equal).
            const double diff = a[r * V + i] == b[r * V + i] ? 0.0 : double(std::fabs(a[r * V + i] - b[r * V + i]));
            m = std::isnan(diff) ? INFINITY : std::max(m, diff);
        }
        d.per_pos.push_back(m);
        d.max_abs = std::max(d.max_abs, m);
        if (m > exact_tol && d.first_over < 0) d.first_over = r;
        d.argmax_agree += argmax(a + r * V, V) == argmax(b + r * V, V);
    }
    auto s = d.per_pos;
    std::sort(s.begin(), s.end());
    d.p50_pos = s.empty() ? 0 : s[s.size() / 2];
    return d;
}

inline void print_diff(const std::string& tag, const Diff& d) {
    std::printf("%-36s max|d| %.3g  p50(pos max) %.3g  first>1e-4 %d  argmax %d/%d\n", tag.c_str(), d.max_abs,
                d.p50_pos, d.first_over, d.argmax_agree, d.rows);
}

// Logits of every position: one prefill (batch) or one decode() per token.
inline std::vector<float> eval_logits(const model::Model& m, const std::vector<int32_t>& ids, bool batch,
                                      model::SessionOptions so = {}) {
    so.n_ctx = int64_t(ids.size()) + 64;
    if (so.n_threads == 0) so.n_threads = 2;
    model::Session s(m, so);
    std::vector<float> out;
    if (batch) {
        s.prefill(ids, &out);
    } else {
        for (int32_t id : ids) {
            s.decode(id);
            out.insert(out.end(), s.logits().begin(), s.logits().end());
        }
    }
    return out;
}

// Greedy continuation after a prefill of ids (argmax ties -> lowest id).
inline std::vector<int32_t> greedy(model::Session& s, const std::vector<int32_t>& ids, int n) {
    s.prefill(ids);
    std::vector<int32_t> gen;
    const int64_t V = s.model().hparams().n_vocab;
    for (int i = 0; i < n; ++i) {
        gen.push_back(argmax(s.logits().data(), V));
        if (i + 1 < n) s.decode(gen.back());
    }
    return gen;
}

}  // namespace kinfer::test
