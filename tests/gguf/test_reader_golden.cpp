// The reader against real files: every GGUF under ../shared/golden and tests/data/models opens,
// metadata matches the *.gguf-kv.json / kv.txt listings and every tensor's name, type and shape
// matches the *.tensors.tsv listings exactly.
#include "gguf/reader.h"
#include "gguf_files.h"
#include "test_util.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace fs = std::filesystem;
using kinfer::gguf::File;
using kinfer::gguf::ValueType;

namespace {


std::vector<int64_t> ints_in(const std::string& s) {  // "[256, 4352]" or "{64,32,32}"
    std::vector<int64_t> r;
    for (size_t i = 0; i < s.size();) {
        if (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '-') {
            size_t used = 0;
            r.push_back(std::stoll(s.substr(i), &used));
            i += used;
        } else {
            ++i;
        }
    }
    return r;
}

std::string upper(std::string s) {
    for (auto& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// The listing next to a GGUF: <stem>.tensors.tsv in the same folder, or for tests/data copies the
// golden one of the same name.
std::string tsv_for(const fs::path& gguf) {
    fs::path p = gguf.parent_path() / (gguf.stem().string() + ".tensors.tsv");
    if (fs::exists(p)) return p.string();
    p = fs::path(kinfer::test::golden("llama.cpp/models")) / (gguf.stem().string() + ".tensors.tsv");
    if (fs::exists(p)) return p.string();
    return {};
}

}  // namespace

TEST_CASE("gguf: every golden and shipped GGUF opens, tensors match the .tensors.tsv listing") {
    auto files = kinfer::test::all_test_ggufs();
    REQUIRE(!files.empty());  // tests/data/models always ships two
    int checked_tsv = 0;
    for (const auto& path : files) {
        CAPTURE(path);
        auto f = File::open(path);
        CHECK(f->version() == 3);
        CHECK((f->architecture() == "kimi-k3" || f->architecture() == "kimi-linear"));
        CHECK(!f->tensors().empty());
        for (const auto& t : f->tensors()) {
            CHECK(f->find_tensor(t.name) == &t);
            CHECK(t.data >= f->base() + f->data_offset());
            CHECK(t.data + t.nbytes <= f->base() + f->file_size());
            CHECK(t.nbytes == t.row_bytes() * size_t(t.nrows()));
        }
        std::string tsv = tsv_for(path);
        if (tsv.empty()) continue;
        std::ifstream in(tsv);
        std::string line;
        size_t n = 0;
        while (std::getline(in, line)) {
            if (line.empty() || line[0] == '#' || line.rfind("name\t", 0) == 0) continue;
            std::vector<std::string> cols;
            std::stringstream ss(line);
            for (std::string c; std::getline(ss, c, '\t');) cols.push_back(c);
            REQUIRE(cols.size() >= 4);
            CAPTURE(line);
            const auto* t = f->find_tensor(cols[0]);
            REQUIRE(t != nullptr);
            CHECK(upper(kinfer::quant::traits(t->type).name) == upper(cols[1]));
            auto ne = ints_in(cols[2]);
            REQUIRE(int(ne.size()) == t->n_dims);
            for (int d = 0; d < t->n_dims; ++d) CHECK(ne[size_t(d)] == t->ne[d]);
            // llama.cpp's listing: name type ne bytes; the hf listing: name type ne offset bytes ...
            if (tsv.find("/hf/") != std::string::npos) {
                REQUIRE(cols.size() >= 5);
                CHECK(std::stoull(cols[3]) == t->offset);
                CHECK(std::stoull(cols[4]) == t->nbytes);
            } else {
                CHECK(std::stoull(cols[3]) == t->nbytes);
            }
            ++n;
        }
        CHECK(n == f->tensors().size());
        ++checked_tsv;
    }
    MESSAGE("checked " << files.size() << " GGUFs, " << checked_tsv << " against tensor listings");
}

TEST_CASE("gguf: metadata matches llama.cpp's gguf-kv.json listings") {
    if (!kinfer::test::have_golden("llama.cpp/models")) return;
    int n_files = 0;
    for (auto& e : fs::directory_iterator(kinfer::test::golden("llama.cpp/models"))) {
        std::string p = e.path().string();
        if (p.size() < 13 || p.substr(p.size() - 13) != ".gguf-kv.json") continue;
        std::string gguf = p.substr(0, p.size() - 8);
        CAPTURE(gguf);
        auto f = File::open(gguf);
        nlohmann::json j = nlohmann::json::parse(std::ifstream(p));
        for (auto& item : j.items()) {   // no structured binding: clang 14 cannot capture one in CAPTURE
            const std::string key = item.key();
            const auto& v = item.value();
            CAPTURE(key);
            const auto* val = f->find(key);
            REQUIRE(val != nullptr);
            std::string type = v["type"];
            CHECK(upper(kinfer::gguf::value_type_name(val->type())) == type);
            if (type == "STRING") {
                CHECK(val->as_string() == v["value"].get<std::string>());
            } else if (type == "ARRAY") {
                const auto& a = v["value"];
                CHECK(upper(kinfer::gguf::value_type_name(val->array_type())) == a["array_of"].get<std::string>());
                CHECK(val->size() == a["length"].get<size_t>());
                size_t i = 0;
                for (const auto& h : a["head"]) {
                    if (h.is_string()) CHECK(val->string_at(i) == h.get<std::string>());
                    else if (h.is_number_float()) CHECK(val->float_at(i) == doctest::Approx(h.get<double>()));
                    else if (h.is_number()) CHECK(val->int_at(i) == h.get<int64_t>());
                    ++i;
                }
            } else if (type == "BOOL") {
                CHECK(val->as_bool() == v["value"].get<bool>());
            } else if (type == "FLOAT32" || type == "FLOAT64") {
                CHECK(val->as_float() == v["value"].get<double>());
            } else {
                CHECK(val->as_int() == v["value"].get<int64_t>());
            }
        }
        CHECK(f->kv().size() >= j.size());
        ++n_files;
    }
    CHECK(n_files >= 2);
}

TEST_CASE("gguf: metadata matches the hf converter's kv.txt listings") {
    if (!kinfer::test::have_golden("hf/gguf")) return;
    int n_files = 0;
    for (auto& e : fs::directory_iterator(kinfer::test::golden("hf/gguf"))) {
        std::string p = e.path().string();
        if (p.size() < 7 || p.substr(p.size() - 7) != ".kv.txt") continue;
        std::string gguf = p.substr(0, p.size() - 7) + ".gguf";
        if (!fs::exists(gguf)) continue;
        CAPTURE(gguf);
        auto f = File::open(gguf);
        std::ifstream in(p);
        std::string line;
        size_t n_keys = 0;
        while (std::getline(in, line)) {
            std::vector<std::string> cols;
            std::stringstream ss(line);
            for (std::string c; std::getline(ss, c, '\t');) cols.push_back(c);
            if (cols.size() < 4) continue;
            CAPTURE(line);
            const std::string &key = cols[1], &type = cols[2], &value = cols[3];
            if (key == "GGUF.version") { CHECK(f->version() == std::stoul(value)); continue; }
            if (key == "GGUF.tensor_count") { CHECK(f->tensors().size() == std::stoull(value)); continue; }
            if (key == "GGUF.kv_count") { CHECK(f->kv().size() == std::stoull(value)); continue; }
            const auto* val = f->find(key);
            REQUIRE(val != nullptr);
            ++n_keys;
            if (type.rfind("ARRAY[", 0) == 0) {
                CHECK(val->is_array());
                CHECK("ARRAY[" + upper(kinfer::gguf::value_type_name(val->array_type())) + "]" == type);
                CHECK(val->size() == std::stoull(value.substr(2)));
                continue;
            }
            CHECK(upper(kinfer::gguf::value_type_name(val->type())) == type);
            if (type == "STRING") {
                if (value.size() >= 2 && value.front() == '\'' && value.find('\\') == std::string::npos)
                    CHECK(val->as_string() == value.substr(1, value.size() - 2));
                else if (value.rfind("<string len=", 0) == 0)
                    CHECK(val->as_string().size() == std::stoull(value.substr(12)));
            } else if (type == "BOOL") {
                CHECK(val->as_bool() == (value == "True"));
            } else if (type == "FLOAT32" || type == "FLOAT64") {
                CHECK(val->as_float() == doctest::Approx(std::stod(value)).epsilon(1e-12));
            } else {
                CHECK(val->as_int() == std::stoll(value));
            }
        }
        CHECK(n_keys > 20);
        ++n_files;
    }
    CHECK(n_files >= 2);
}
