// `kinfer quantize` end to end against llama-quantize's own output for the tiny golden models:
// the files must be equal tensor by tensor (names, order, types, shapes, bytes) and key by key
// (no metadata key differs: llama-quantize copies every key, then re-appends
// general.quantization_version = 2 and general.file_type), and in fact byte for byte.
#include "quantize_util.h"

#include <filesystem>

namespace fs = std::filesystem;
using namespace kinfer;
using namespace kinfer::test::qz;

namespace {
const char* const kModels[] = {"k3-tiny-a", "kl-tiny-a"};
const char* const kQuants[] = {"Q8_0", "Q4_K_M", "MXFP4_MOE"};
std::string model_rel(const std::string& m, const std::string& q) { return "llama.cpp/models/" + m + "-" + q + ".gguf"; }
}  // namespace

TEST_CASE("quantize: F32 golden models -> Q8_0 / Q4_K_M / MXFP4_MOE equal llama-quantize's files") {
    for (const char* m : kModels) {
        if (!test::have_golden(model_rel(m, "F32"))) return;
        for (const char* q : kQuants) {
            const std::string want = test::golden(model_rel(m, q));
            if (!test::have_golden(model_rel(m, q))) continue;
            const std::string out = tmp_dir() + "/" + m + "-" + q + ".gguf";
            const std::string log = std::string(m) + "-" + q;
            INFO(m << " " << q);
            REQUIRE(run_quantize(test::golden(model_rel(m, "F32")) + " " + out + " " + q + " 2", log) == 0);
            auto a = gguf::File::open(out);
            auto b = gguf::File::open(want);
            check_same_metadata(*a, *b);
            check_same_tensors(*a, *b);
            CHECK(a->data_offset() == b->data_offset());
            CHECK(a->file_size() == b->file_size());
            CHECK(slurp_text(out) == slurp_text(want));
            // The per-tensor log reads like llama-quantize's.
            const std::string text = slurp_text(tmp_dir() + "/" + log + ".out");
            const std::string glog = slurp_text(test::golden("llama.cpp/models/" + std::string(m) + "-" + q + ".llama-quantize.log"));
            const auto first = text.substr(0, text.find('\n'));
            CHECK_MESSAGE(glog.find(first) != std::string::npos, first);
            fs::remove(out);
        }
    }
}

TEST_CASE("quantize: -t and the NTHREADS positional give the same bytes with any thread count") {
    if (!test::have_golden(model_rel("k3-tiny-a", "Q4_K_M"))) return;
    const std::string in = test::golden(model_rel("k3-tiny-a", "F32"));
    const std::string out = tmp_dir() + "/threads.gguf";
    REQUIRE(run_quantize("-t 5 " + in + " " + out + " q4_k_m", "threads") == 0);
    CHECK(slurp_text(out) == slurp_text(test::golden(model_rel("k3-tiny-a", "Q4_K_M"))));
    fs::remove(out);
}

TEST_CASE("quantize: --dry-run prints the plan and the output size and writes nothing") {
    if (!test::have_golden(model_rel("kl-tiny-a", "Q4_K_M"))) return;
    const std::string out = tmp_dir() + "/dry.gguf";
    REQUIRE(run_quantize("--dry-run " + test::golden(model_rel("kl-tiny-a", "F32")) + " " + out + " Q4_K_M", "dry") == 0);
    CHECK_FALSE(fs::exists(out));
    for (const auto& e : fs::directory_iterator(tmp_dir())) CHECK(e.path().string().find("dry.gguf.tmp") == std::string::npos);
    const std::string text = slurp_text(tmp_dir() + "/dry.out");
    const auto size = fs::file_size(test::golden(model_rel("kl-tiny-a", "Q4_K_M")));
    CHECK_MESSAGE(text.find("output file size = " + std::to_string(size) + " bytes") != std::string::npos, text);
    CHECK(text.find("blk.0.attn_output.weight") != std::string::npos);
    CHECK(text.find("-> ") != std::string::npos);
    // OUT may be left out in a dry run, as with llama-quantize.
    CHECK(run_quantize("--dry-run " + test::golden(model_rel("kl-tiny-a", "F32")) + " Q8_0", "dry2") == 0);
}

TEST_CASE("quantize: requantizing needs --allow-requantize; an unchanged type is copied") {
    if (!test::have_golden(model_rel("k3-tiny-a", "Q8_0"))) return;
    const std::string q8 = test::golden(model_rel("k3-tiny-a", "Q8_0"));
    const std::string out = tmp_dir() + "/requant.gguf";
    CHECK(run_quantize(q8 + " " + out + " Q4_K_M", "requant_no") != 0);
    CHECK_FALSE(fs::exists(out));
    CHECK(slurp_text(tmp_dir() + "/requant_no.err").find("--allow-requantize") != std::string::npos);

    REQUIRE(run_quantize("--allow-requantize " + q8 + " " + out + " Q4_K_M", "requant_yes") == 0);
    {
        auto f = gguf::File::open(out);
        CHECK(f->get_int("general.file_type") == 15);
        CHECK(f->tensor("output.weight").type == quant::Type::Q6_K);
        CHECK(f->tensor("blk.0.attn_norm.weight").type == quant::Type::F32);
    }
    fs::remove(out);

    // Q8_0 -> Q8_0 touches no tensor and re-appends the same two keys: the very same file.
    REQUIRE(run_quantize(q8 + " " + out + " Q8_0", "requant_same") == 0);
    CHECK(slurp_text(out) == slurp_text(q8));
    fs::remove(out);
}

TEST_CASE("quantize: bad arguments fail with a message and leave no file") {
    if (!test::have_golden(model_rel("k3-tiny-a", "F32"))) return;
    const std::string in = test::golden(model_rel("k3-tiny-a", "F32"));
    const std::string out = tmp_dir() + "/bad.gguf";
    CHECK(run_quantize(in + " " + out + " Q7_X", "bad_type") != 0);
    CHECK(slurp_text(tmp_dir() + "/bad_type.err").find("unknown type") != std::string::npos);
    CHECK(run_quantize(in + " " + in + " Q8_0", "same_file") != 0);
    CHECK(run_quantize(tmp_dir() + "/missing.gguf " + out + " Q8_0", "missing") != 0);
    CHECK(run_quantize("--output-tensor-type q9 " + in + " " + out + " Q8_0", "bad_override") != 0);
    CHECK_FALSE(fs::exists(out));
}
