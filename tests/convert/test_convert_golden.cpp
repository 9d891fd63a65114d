// `kinfer convert` against llama.cpp's own conversions of the golden checkpoints
// (golden/hf/gguf): bf16 files byte for byte; f32 files (not stored) through their listings:
// every metadata key, type and value in order, every tensor's name, type, shape, offset and
// sha256 of its bytes.
#include "cli/lib/quantize_plan.h"
#include "convert/converter.h"
#include "gguf/reader.h"
#include "sha256.h"
#include "test_util.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace kinfer;

namespace {

std::string read_all(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::vector<std::string>> read_tsv(const std::string& p) {
    std::vector<std::vector<std::string>> rows;
    std::ifstream in(p);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::vector<std::string> f;
        size_t s = 0;
        for (size_t t; (t = line.find('\t', s)) != std::string::npos; s = t + 1) f.push_back(line.substr(s, t - s));
        f.push_back(line.substr(s));
        rows.push_back(f);
    }
    return rows;
}

std::string upper(std::string s) {
    for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

struct TmpDir {
    std::string path;
    TmpDir() {
        path = (fs::temp_directory_path() / ("kinfer-conv-" + std::to_string(::getpid()) + "-" + std::to_string(rand()))).string();
        fs::create_directories(path);
    }
    ~TmpDir() { fs::remove_all(path); }
};

std::string run_convert(const std::string& model, const char* outtype, const std::string& dir) {
    convert::ConvertOptions o;
    o.checkpoint_dir = test::golden("hf/" + model);
    o.output = dir + "/" + model + "-" + outtype + ".gguf";
    o.outtype = *convert::outtype_from_name(outtype);
    o.progress = false;
    std::FILE* devnull = std::fopen("/dev/null", "w");
    convert::convert_checkpoint(o, devnull, devnull);
    std::fclose(devnull);
    return o.output;
}

// Compares a GGUF with the golden kv.txt and tensors.tsv listings of llama.cpp's file.
void check_listings(const std::string& path, const std::string& golden_stem) {
    auto f = gguf::File::open(path);
    const auto kv = read_tsv(test::golden("hf/gguf/" + golden_stem + ".kv.txt"));
    REQUIRE(kv.size() >= 3);
    CHECK(std::stoul(kv[1][3]) == f->tensors().size());
    REQUIRE(std::stoul(kv[2][3]) == f->kv().size());
    for (size_t i = 0; i < f->kv().size(); ++i) {
        const auto& want = kv[i + 3];
        const gguf::Value& v = f->kv()[i];
        CAPTURE(want[1]);
        CHECK(std::string(v.key) == want[1]);
        const std::string type = v.is_array() ? "ARRAY[" + upper(gguf::value_type_name(v.array_type())) + "]"
                                              : upper(gguf::value_type_name(v.type()));
        CHECK(type == want[2]);
        const std::string& val = want[3];
        switch (v.type()) {
            case gguf::ValueType::UINT32: case gguf::ValueType::INT32: CHECK(std::to_string(v.as_int()) == val); break;
            case gguf::ValueType::FLOAT32: CHECK(v.as_float() == std::stod(val)); break;
            case gguf::ValueType::BOOL: CHECK((v.as_bool() ? "True" : "False") == val); break;
            case gguf::ValueType::STRING: {
                const std::string s(v.as_string());
                if (val.rfind("<string len=", 0) == 0) {
                    CHECK(val.find("len=" + std::to_string(s.size()) + " ") != std::string::npos);
                    const std::string h = test::sha256_hex(reinterpret_cast<const uint8_t*>(s.data()), s.size());
                    CHECK(val.find("sha256=" + h.substr(0, 16)) != std::string::npos);
                } else {
                    CHECK("'" + s + "'" == val);
                }
                break;
            }
            case gguf::ValueType::ARRAY: {
                CHECK(val.rfind("n=" + std::to_string(v.size()) + " ", 0) == 0);
                if (v.array_type() == gguf::ValueType::INT32 && val.find("first=") == std::string::npos) {
                    std::string list = "[";
                    for (size_t k = 0; k < v.size(); ++k) {
                        if (k) list += ", ";
                        list += std::to_string(v.int_at(k));
                    }
                    list += ']';
                    CHECK(val.substr(val.find('[')) == list);
                }
                break;
            }
            default: FAIL("unexpected type in golden listing");
        }
    }
    const auto ts = read_tsv(test::golden("hf/gguf/" + golden_stem + ".tensors.tsv"));
    REQUIRE(ts.size() == f->tensors().size());
    for (size_t i = 0; i < ts.size(); ++i) {
        const auto& t = f->tensors()[i];
        CAPTURE(ts[i][0]);
        CHECK(t.name == ts[i][0]);
        CHECK(upper(quant::traits(t.type).name) == upper(ts[i][1]));
        std::string ne = "{";
        for (int d = 0; d < t.n_dims; ++d) {
            if (d) ne += ',';
            ne += std::to_string(t.ne[d]);
        }
        ne += '}';
        CHECK(ne == ts[i][2]);
        CHECK(std::to_string(t.offset) == ts[i][3]);
        CHECK(std::to_string(t.nbytes) == ts[i][4]);
        CHECK(test::sha256_hex(t.data, t.nbytes).substr(0, 16) == ts[i][5]);
    }
}

}  // namespace

TEST_CASE("convert: bf16 output is byte-identical to llama.cpp's") {
    for (const char* m : {"hf-k3-tiny", "hf-kl-tiny"}) {
        if (!test::have_golden(std::string("hf/gguf/") + m + "-bf16.gguf")) return;
        CAPTURE(m);
        TmpDir tmp;
        const std::string out = run_convert(m, "bf16", tmp.path);
        const std::string want = read_all(test::golden(std::string("hf/gguf/") + m + "-bf16.gguf"));
        const std::string got = read_all(out);
        CHECK(got.size() == want.size());
        CHECK(got == want);
        check_listings(out, std::string(m) + "-bf16");
        // Nothing but the output is left behind (no temp file).
        CHECK(std::distance(fs::directory_iterator(tmp.path), fs::directory_iterator()) == 1);
    }
}

TEST_CASE("convert: f32 output matches llama.cpp's listings (metadata, tensors, sha256)") {
    for (const char* m : {"hf-k3-tiny", "hf-kl-tiny"}) {
        if (!test::have_golden(std::string("hf/gguf/") + m + "-f32.tensors.tsv")) return;
        CAPTURE(m);
        TmpDir tmp;
        check_listings(run_convert(m, "f32", tmp.path), std::string(m) + "-f32");
    }
}

TEST_CASE("convert: the CLI converts, and --dry-run prints the plan without writing") {
    if (!test::have_golden("hf/hf-kl-tiny/config.json")) return;
    TmpDir tmp;
    const std::string out = tmp.path + "/kl.gguf";
    const std::string cmd = test::kinfer_bin() + " convert " + test::golden("hf/hf-kl-tiny") + " -o " + out +
                            " --outtype bf16 --dry-run > " + tmp.path + "/plan.txt 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    CHECK(!fs::exists(out));
    const std::string plan = read_all(tmp.path + "/plan.txt");
    CHECK(plan.find("blk.1.ffn_gate_exps.weight") != std::string::npos);
    CHECK(plan.find("total tensor data") != std::string::npos);
    const std::string run = test::kinfer_bin() + " convert " + test::golden("hf/hf-kl-tiny") + " -o " + out +
                            " --outtype bf16 --no-progress 2>/dev/null";
    REQUIRE(std::system(run.c_str()) == 0);
    CHECK(read_all(out) == read_all(test::golden("hf/gguf/hf-kl-tiny-bf16.gguf")));
    // With the progress bar on but stderr not a terminal: the summary line, no progress lines.
    const std::string logged = test::kinfer_bin() + " convert " + test::golden("hf/hf-kl-tiny") + " -o " + out +
                               ".2 --outtype bf16 2> " + tmp.path + "/stderr.txt";
    REQUIRE(std::system(logged.c_str()) == 0);
    const std::string err = read_all(tmp.path + "/stderr.txt");
    CHECK(err.find("kinfer convert:") != std::string::npos);   // stderr was captured
    CHECK(err.find(" left") == std::string::npos);
    CHECK(err.find("MB/s") == std::string::npos);
}

TEST_CASE("convert: --outtype Q4_K_M types tensors as llama-quantize would, experts stay MXFP4") {
    if (!test::have_golden("hf/hf-k3-tiny/config.json")) return;
    TmpDir tmp;
    const std::string f32 = run_convert("hf-k3-tiny", "f32", tmp.path);
    const std::string out = tmp.path + "/q4km.gguf";
    const std::string cmd = test::kinfer_bin() + " convert " + test::golden("hf/hf-k3-tiny") + " -o " + out +
                            " --outtype Q4_K_M --no-progress 2>/dev/null";
    REQUIRE(std::system(cmd.c_str()) == 0);
    auto ref = gguf::File::open(f32);
    auto q = gguf::File::open(out);
    cli::QuantizeOptions o;
    o.ftype = cli::Ftype::Q4_K_M;
    const cli::QuantizePlan plan = cli::make_quantize_plan(cli::describe(*ref), o);
    REQUIRE(q->tensors().size() == plan.tensors.size());
    CHECK(q->get_int("general.file_type") == int64_t(cli::Ftype::Q4_K_M));
    for (const auto& p : plan.tensors) {
        const auto& t = *q->find_tensor(p.name);
        CAPTURE(p.name);
        if (ref->tensors()[p.src].type == quant::Type::MXFP4) CHECK(t.type == quant::Type::MXFP4);
        else CHECK(t.type == p.to);
    }
    // Bytes, held to llama.cpp at one remove: the MXFP4 experts are llama.cpp's own conversion's
    // (hf/gguf/hf-k3-tiny-bf16.gguf), every other tensor is what `kinfer quantize ... Q4_K_M`
    // makes from the F32 conversion (the quantize tests hold that to llama-quantize's bytes).
    if (!test::have_golden("hf/gguf/hf-k3-tiny-bf16.gguf")) return;
    auto llama = gguf::File::open(test::golden("hf/gguf/hf-k3-tiny-bf16.gguf"));
    const std::string requant = tmp.path + "/requant.gguf";
    REQUIRE(std::system((test::kinfer_bin() + " quantize " + f32 + " " + requant + " Q4_K_M 2 --allow-requantize >/dev/null 2>&1").c_str()) == 0);
    auto rq = gguf::File::open(requant);
    int mxfp4 = 0, other = 0;
    for (const auto& t : q->tensors()) {
        CAPTURE(t.name);
        const gguf::TensorInfo* w = t.type == quant::Type::MXFP4 ? llama->find_tensor(t.name) : rq->find_tensor(t.name);
        REQUIRE(w != nullptr);
        CHECK(w->type == t.type);
        REQUIRE(w->nbytes == t.nbytes);
        CHECK(std::memcmp(w->data, t.data, t.nbytes) == 0);
        ++(t.type == quant::Type::MXFP4 ? mxfp4 : other);
    }
    CHECK(mxfp4 > 0);
    CHECK(other > 0);
}
