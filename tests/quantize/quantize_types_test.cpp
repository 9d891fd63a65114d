// Every file type `kinfer quantize` offers, on both tiny models: the output reads back, the
// metadata says the right file type, and for each of llama-quantize's 19 file types every tensor
// has the name, type, shape and bytes (sha256 prefix) llama-quantize gave it
// (../shared/golden/quant/mixtures); the --pure runs and kinfer's two extra names are held to the
// plan and every converted tensor dequantizes close to the F32 original.
#include "cli/lib/quantize_plan.h"
#include "convert/sha256.h"
#include "quantize_util.h"

#include <cmath>
#include <filesystem>
#include <sstream>

namespace fs = std::filesystem;
using namespace kinfer;
using namespace kinfer::test::qz;
using quant::Type;

namespace {

// Relative RMS error allowed for random N(0, s) weights: about twice what each format gives.
double max_rel_rmse(Type t) {
    switch (t) {
        case Type::F32: return 0.0;
        case Type::F16: return 2e-3;
        case Type::BF16: return 1e-2;
        case Type::Q8_0: return 0.02;
        case Type::Q6_K: return 0.04;
        case Type::Q5_0: case Type::Q5_1: case Type::Q5_K: return 0.08;
        case Type::Q4_0: case Type::Q4_1: case Type::Q4_K: case Type::IQ4_NL: case Type::IQ4_XS: return 0.16;
        case Type::MXFP4: return 0.25;
        case Type::Q3_K: return 0.3;
        case Type::Q2_K: return 0.6;
        default: return 0.0;
    }
}

std::vector<float> to_f32(const gguf::TensorInfo& t) {
    std::vector<float> v(size_t(t.nelements()));
    if (t.type == Type::F32) {
        std::memcpy(v.data(), t.data, v.size() * 4);
    } else {
        const auto& tr = quant::traits(t.type);
        const size_t rb = t.row_bytes();
        for (int64_t r = 0; r < t.nrows(); ++r) tr.to_float(t.data + size_t(r) * rb, v.data() + size_t(r) * t.ne[0], t.ne[0]);
    }
    return v;
}

// One line of a mixture listing: name, ggml type id, shape (ne0 first, x-joined), sha256[0:16].
struct GoldenTensor {
    std::string name, shape, sha16;
    uint32_t type = 0;
};

// llama-quantize's listing for <model>-<ftype>, empty when the type is not one of its 19.
std::vector<GoldenTensor> golden_mixture(const std::string& model, const std::string& ftype) {
    std::vector<GoldenTensor> r;
    std::ifstream f(test::golden("quant/mixtures/" + model + "-" + ftype + ".tensors.tsv"));
    std::string line;
    while (std::getline(f, line)) {
        std::istringstream ls(line);
        GoldenTensor g;
        std::string type;
        if (std::getline(ls, g.name, '\t') && std::getline(ls, type, '\t') && std::getline(ls, g.shape, '\t') && std::getline(ls, g.sha16)) {
            g.type = uint32_t(std::stoul(type));
            r.push_back(g);
        }
    }
    return r;
}

std::string shape_of(const gguf::TensorInfo& t) {
    std::string s;
    for (int d = 0; d < int(t.n_dims); ++d) {
        if (d) s += "x";
        s += std::to_string(t.ne[d]);
    }
    return s;
}

constexpr const char* kLlamaQuantizeTypes[] = {"F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                               "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M",
                                               "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL", "IQ4_XS", "MXFP4_MOE"};

bool is_llama_quantize_type(const std::string& t) {
    for (const char* x : kLlamaQuantizeTypes)
        if (t == x) return true;
    return false;
}

}  // namespace

TEST_CASE("quantize: the 19 mixtures are llama-quantize's, tensor by tensor (types and bytes)") {
    int files = 0;
    // Under the sanitizers one model is enough: the second runs the same quantizers over other
    // shapes, and its bytes are held to llama-quantize's in the Release suite.
    const bool both = !test::sanitized();
    for (const char* m : {"k3-tiny-a", "kl-tiny-a"}) {
        if (!both && std::string(m) != "k3-tiny-a") continue;
        const std::string rel = std::string("llama.cpp/models/") + m + "-F32.gguf";
        if (!test::have_golden(rel) || !test::have_golden(std::string("quant/mixtures/") + m + "-Q4_K_M.tensors.tsv")) return;
        for (const char* tname : kLlamaQuantizeTypes) {
            INFO(m << " " << tname);
            const auto want = golden_mixture(m, tname);
            REQUIRE(want.size() > 100);
            const std::string out = tmp_dir() + "/mixture.gguf";
            REQUIRE(run_quantize(test::golden(rel) + " " + out + " " + tname + " 2", "mixture") == 0);
            auto f = gguf::File::open(out);
            CHECK(f->get_int("general.file_type") == int64_t(*cli::ftype_from_name(tname)));
            CHECK(f->get_int("general.quantization_version") == 2);
            REQUIRE(f->tensors().size() == want.size());
            int wrong = 0;
            for (size_t i = 0; i < want.size(); ++i) {
                const auto& t = f->tensors()[i];
                const auto& w = want[i];
                const std::string sha = test::sha256_hex(t.data, t.nbytes).substr(0, 16);
                if (t.name != w.name || uint32_t(t.type) != w.type || shape_of(t) != w.shape || sha != w.sha16) {
                    if (++wrong <= 5)
                        CHECK_MESSAGE(false, "tensor " << i << ": " << t.name << " type " << uint32_t(t.type) << " " << shape_of(t) << " " << sha
                                                       << " | llama-quantize: " << w.name << " type " << w.type << " " << w.shape << " " << w.sha16);
                }
            }
            CHECK_MESSAGE(wrong == 0, wrong << " of " << want.size() << " tensors differ from llama-quantize's");
            ++files;
            f.reset();
            fs::remove(out);
        }
    }
    CHECK(files == (both ? 38 : 19));
}

TEST_CASE("quantize: every file type on both tiny models") {
    const char* const types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S",
                                 "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL",
                                 "IQ4_XS", "MXFP4_MOE", "Q4_K", "MXFP4"};
    for (const char* m : {"k3-tiny-a", "kl-tiny-a"}) {
        // Under the sanitizers: k3-tiny-a only (the Release suite runs both models).
        if (test::sanitized() && std::string(m) != "k3-tiny-a") continue;
        const std::string rel = std::string("llama.cpp/models/") + m + "-F32.gguf";
        if (!test::have_golden(rel)) return;
        auto src = gguf::File::open(test::golden(rel));
        for (const char* tname : types) {
            for (bool pure : {false, true}) {
                if (pure && std::string(m) != "k3-tiny-a") continue;   // --pure once is enough; keeps the suite quick
                if (!pure && is_llama_quantize_type(tname)) continue;  // held to llama-quantize's bytes above
                INFO(m << " " << tname << (pure ? " --pure" : ""));
                const auto ft = cli::ftype_from_name(tname);
                REQUIRE(ft);
                cli::QuantizeOptions opt;
                opt.ftype = *ft;
                opt.pure = pure;
                const cli::QuantizePlan plan = cli::make_quantize_plan(cli::describe(*src), opt);
                const std::string out = tmp_dir() + "/types.gguf";
                REQUIRE(run_quantize(std::string(pure ? "--pure " : "") + test::golden(rel) + " " + out + " " + tname + " 2", "types") == 0);
                auto f = gguf::File::open(out);
                CHECK(f->get_int("general.file_type") == int64_t(*ft));
                CHECK(f->get_int("general.quantization_version") == 2);
                CHECK(f->kv().back().key == "general.file_type");
                REQUIRE(f->tensors().size() == plan.tensors.size());
                for (size_t i = 0; i < plan.tensors.size(); ++i) {
                    const auto& p = plan.tensors[i];
                    const auto& t = f->tensors()[i];
                    INFO(p.name);
                    CHECK(t.name == p.name);
                    CHECK(t.type == p.to);
                    CHECK(t.n_dims == p.n_dims);
                    if (pure && p.from != p.to && !p.fallback) CHECK(p.to == cli::ftype_default_type(*ft));
                    const auto& s = src->tensor(p.name);
                    for (int d = 0; d < 4; ++d) CHECK(t.ne[d] == s.ne[d]);
                    if (t.type == s.type) {
                        CHECK(std::memcmp(t.data, s.data, s.nbytes) == 0);
                        continue;
                    }
                    const auto a = to_f32(s), b = to_f32(t);
                    double err = 0, ref = 0;
                    for (size_t k = 0; k < a.size(); ++k) {
                        err += (a[k] - b[k]) * double(a[k] - b[k]);
                        ref += double(a[k]) * a[k];
                    }
                    const double rel_rmse = std::sqrt(err / std::max(ref, 1e-30));
                    CHECK_MESSAGE(rel_rmse <= max_rel_rmse(t.type), quant::traits(t.type).name << " rel rmse " << rel_rmse);
                }
                f.reset();
                fs::remove(out);
            }
        }
    }
}
