// Every file type `kinfer quantize` offers, on both tiny models: the output reads back, each
// tensor has the planned type and shape, the metadata says the right file type, and every
// converted tensor dequantizes close to the F32 original (a wiring check for all kernels; the
// kernels' byte-exactness is tested in tests/quant).
#include "cli/lib/quantize_plan.h"
#include "quantize_util.h"

#include <cmath>
#include <filesystem>

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

}  // namespace

TEST_CASE("quantize: every file type on both tiny models") {
    const char* const types[] = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K_S",
                                 "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ4_NL",
                                 "IQ4_XS", "MXFP4_MOE", "Q4_K", "MXFP4"};
    for (const char* m : {"k3-tiny-a", "kl-tiny-a"}) {
        const std::string rel = std::string("llama.cpp/models/") + m + "-F32.gguf";
        if (!test::have_golden(rel)) return;
        auto src = gguf::File::open(test::golden(rel));
        for (const char* tname : types) {
            for (bool pure : {false, true}) {
                if (pure && std::string(m) != "k3-tiny-a") continue;   // --pure once is enough; keeps the suite quick
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
