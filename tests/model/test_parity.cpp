// Golden parity: kinfer's logits vs llama.cpp's (exact mode: no flash attention, F32 cache) for
// every tiny model and quantization, in batch (one prefill) and decode (token by token) modes,
// plus the greedy continuation. See ../shared/golden/llama.cpp/README.md sections 4-5.
#include "test_util.h"
#include "parity_util.h"

#include "quant/types.h"

#include <doctest/doctest.h>

using namespace kinfer;
using namespace kinfer::test;

namespace {

const int64_t V = 4352;

// Bounds per quantization. F32 must match everywhere at 1e-4 (10x llama.cpp's own batch/decode
// spread; we measure 2-5e-6). Quantized models run ggml's exact activation quantizers and dot
// kernels (quant/) and ggml's fp32 operation order, so they match llama.cpp bit for bit until
// the first activation-rounding event. Measured (batch / decode, first position off by > 1e-4;
// -1 = none): k3 Q8_0 54 / -1 (llama.cpp's own batch-vs-decode event is at 54), Q4_K_M 45 / 46
// (llama.cpp: 45), MXFP4_MOE -1 / -1; kl Q8_0 -1 / -1, Q4_K_M 12 / 12 (llama.cpp: 22),
// MXFP4_MOE -1 / -1. min_exact is set a little below those; after the event the comparison is
// statistical, bounded at about 1.5x the measured figures (k3 max 0.17, kl 0.09), which is the
// order of llama.cpp's own default-mode noise floor (noise_floor.tsv: 0.07-0.6 per position).
struct Bound {
    double max_abs;       // over all positions and logits
    double p50_pos;       // median over positions of the per-position max
    int min_exact;        // leading positions that must match at 1e-4
    int min_argmax;       // of 64 positions
    double soft_margin;   // greedy picks below this top1-top2 margin may flip
};

// Bit-level agreement needs the kernels of the golden build's level: llama.cpp ran with AVX-512,
// and its AVX2 and AVX-512 builds compute SiLU's exp differently, so kinfer matches those logits
// bit for bit only at its own AVX-512 level. At AVX2 (a CPU without AVX-512, or KINFER_ISA=avx2,
// which scripts/test.sh runs) and with the scalar reference kernels (KINFER_ISA=scalar) the
// comparison is statistical from the first rounding event on, with bounds per model and type at
// about 1.5x what each level measured (batch / decode, max |d|, p50, first event, argmax of 64):
//   AVX2:   k3 Q8_0 0.374 / 0.064 / 12 / 62, Q4_K_M 0.175 / 0 / 45 / 63, MXFP4_MOE 0.305 / 0.076 / 12 / 63;
//           kl Q8_0 0.064 / 0.036 / 3 / 64, Q4_K_M 0.088 / 0.060 / 12 / 64, MXFP4_MOE 0 (bit-identical).
//   scalar: k3 Q8_0 0.569 / 0.073 / 3 / 62, Q4_K_M 0.175 / 2e-6 / 45 / 63, MXFP4_MOE as AVX2;
//           kl Q8_0 0.086 / 0.058 / 19 / 63, Q4_K_M 0.100 / 0.059 / 22 / 64, MXFP4_MOE 0.207 / 0.056 / 19 / 64.
Bound bound_for(const std::string& model, const std::string& quant) {
    const bool k3 = model.rfind("k3", 0) == 0;
    if (quant == "F32") return {1e-4, 1e-4, 64, 64, 0.01};
    const auto isa = kinfer::quant::active_isa();
    if (isa == kinfer::quant::Isa::avx512) {
        if (quant == "Q8_0") return k3 ? Bound{0.1, 1e-4, 50, 63, 0.05} : Bound{0.05, 1e-4, 60, 64, 0.05};
        if (quant == "Q4_K_M") return k3 ? Bound{0.3, 1e-4, 40, 62, 0.05} : Bound{0.15, 0.1, 10, 63, 0.05};
        return k3 ? Bound{0.05, 1e-4, 60, 64, 0.05} : Bound{0.05, 1e-4, 60, 64, 0.05};   // MXFP4_MOE
    }
    const bool avx2 = isa == kinfer::quant::Isa::avx2;
    if (quant == "Q8_0") {
        if (k3) return avx2 ? Bound{0.56, 0.1, 10, 61, 0.1} : Bound{0.85, 0.11, 2, 61, 0.1};
        return avx2 ? Bound{0.1, 0.055, 2, 63, 0.1} : Bound{0.13, 0.09, 15, 62, 0.1};
    }
    if (quant == "Q4_K_M") return k3 ? Bound{0.27, 1e-4, 40, 62, 0.1} : Bound{0.15, 0.09, 10, 63, 0.1};
    if (k3) return Bound{0.46, 0.12, 10, 62, 0.1};   // MXFP4_MOE
    return avx2 ? Bound{0.05, 1e-4, 60, 64, 0.05} : Bound{0.31, 0.085, 15, 63, 0.1};
}

void check_greedy(const std::vector<int32_t>& mine, const nlohmann::json& j, double soft_margin, const std::string& tag) {
    auto ref = j["generated_ids"].get<std::vector<int32_t>>();
    auto margins = json_numbers(j["generated_top1_minus_top2"]);
    REQUIRE(mine.size() == ref.size());
    size_t i = 0;
    while (i < ref.size() && mine[i] == ref[i]) ++i;
    if (i < ref.size()) {
        // A flip is only acceptable on a near-tie; everything after it follows another path.
        std::printf("%-36s greedy: %zu/%zu equal, first difference at a pick with margin %.4f\n", tag.c_str(), i,
                    ref.size(), margins[i]);
        CHECK_MESSAGE(margins[i] < soft_margin, tag << ": greedy pick " << i << " differs with margin " << margins[i]);
    } else {
            std::printf("%-36s greedy: %zu/%zu equal\n", tag.c_str(), i, ref.size());
    }
}

void run_p64(const std::string& model, const std::string& quant) {
    const std::string name = model + "-" + quant;
    const std::string dir = "llama.cpp/logits/" + name + "/exact/";
    if (!have_golden("llama.cpp/models/" + name + ".gguf") || !have_golden(dir + "p64.batch.f32")) return;
    auto m = model::Model::load(golden("llama.cpp/models/" + name + ".gguf"));
    auto ids = read_ids(golden("llama.cpp/prompts/prompt64.ids.txt"));
    const Bound b = bound_for(model, quant);

    for (const char* mode : {"batch", "decode"}) {
        auto ref = read_f32(golden(dir + "p64." + mode + ".f32"));
        auto mine = eval_logits(*m, ids, std::string(mode) == "batch");
        REQUIRE(mine.size() == ref.size());
        Diff d = compare(mine.data(), ref.data(), 64, V);
        print_diff(name + " p64 " + mode, d);
        CHECK(d.max_abs <= b.max_abs);
        CHECK(d.p50_pos <= b.p50_pos);
        CHECK((d.first_over < 0 || d.first_over >= b.min_exact));
        CHECK(d.argmax_agree >= b.min_argmax);
    }

    model::Session s(*m, {.n_ctx = 128, .n_threads = 2});
    check_greedy(greedy(s, ids, 32), read_json(golden(dir + "p64.json")), b.soft_margin, name + " p64");
}

}  // namespace

TEST_CASE("parity: k3-tiny-a F32 p64") { run_p64("k3-tiny-a", "F32"); }
TEST_CASE("parity: k3-tiny-a Q8_0 p64") { run_p64("k3-tiny-a", "Q8_0"); }
TEST_CASE("parity: k3-tiny-a Q4_K_M p64") { run_p64("k3-tiny-a", "Q4_K_M"); }
TEST_CASE("parity: k3-tiny-a MXFP4_MOE p64") { run_p64("k3-tiny-a", "MXFP4_MOE"); }
TEST_CASE("parity: kl-tiny-a F32 p64") { run_p64("kl-tiny-a", "F32"); }
TEST_CASE("parity: kl-tiny-a Q8_0 p64") { run_p64("kl-tiny-a", "Q8_0"); }
TEST_CASE("parity: kl-tiny-a Q4_K_M p64") { run_p64("kl-tiny-a", "Q4_K_M"); }
TEST_CASE("parity: kl-tiny-a MXFP4_MOE p64") { run_p64("kl-tiny-a", "MXFP4_MOE"); }

// 700 tokens: 44 KDA chunks, several AttnRes blocks, MLA over 700 keys. F32 only (the
// quantized runs diverge statistically after the first rounding event, as llama.cpp's own do).
// The batch half also checks the greedy continuation; the decode half runs the 700 prompt tokens
// one at a time and compares the last 32 positions llama.cpp stored.
static void run_p700(const std::string& model, bool decode) {
    if (decode && sanitized()) {
        // 700 single-token steps take minutes under the sanitizers; the p64 cases run the decode
        // path there.
        skip_case(SkipKind::machine, "the p700 token-by-token half is a Release-suite case (too slow under the sanitizers)");
        return;
    }
    const std::string name = model + "-F32";
    const std::string dir = "llama.cpp/logits/" + name + "/exact/";
    const std::string half = decode ? "decode" : "batch";
    if (!have_golden("llama.cpp/models/" + name + ".gguf") || !have_golden(dir + "p700." + half + ".f32")) return;
    auto m = model::Model::load(golden("llama.cpp/models/" + name + ".gguf"));
    auto ids = read_ids(golden("llama.cpp/prompts/prompt700.ids.txt"));
    auto j = read_json(golden(dir + "p700.json"));
    REQUIRE(ids.size() == 700);

    const auto logits = eval_logits(*m, ids, !decode);
    const auto pos = j[half + "_positions"].get<std::vector<int>>();
    const auto ref = read_f32(golden(dir + "p700." + half + ".f32"));
    REQUIRE(ref.size() == pos.size() * size_t(V));
    std::vector<float> sel;
    for (int p : pos) sel.insert(sel.end(), logits.begin() + p * V, logits.begin() + (p + 1) * V);
    const Diff d = compare(sel.data(), ref.data(), int(pos.size()), V);
    print_diff(name + " p700 " + half, d);
    CHECK(d.max_abs <= 1e-4);
    if (decode) return;

    model::Session s(*m, {.n_ctx = 768, .n_threads = 2});
    check_greedy(greedy(s, ids, 32), j, 0.01, name + " p700");
}

TEST_CASE("parity: k3-tiny-a F32 p700") { run_p700("k3-tiny-a", false); }
TEST_CASE("parity: kl-tiny-a F32 p700") { run_p700("kl-tiny-a", false); }
TEST_CASE("parity: k3-tiny-a F32 p700 decode") { run_p700("k3-tiny-a", true); }
TEST_CASE("parity: kl-tiny-a F32 p700 decode") { run_p700("kl-tiny-a", true); }

// Shipped with the repository, so a fresh clone without ../shared/golden still checks parity.
TEST_CASE("parity: shipped Q4_K_M models (tests/data)") {
    auto ids = read_ids(data("prompt64.ids.txt"));
    for (const char* model : {"k3-tiny-a", "kl-tiny-a"}) {
        const std::string name = std::string(model) + "-Q4_K_M";
        auto m = model::Model::load(data("models/" + name + ".gguf"));
        const Bound b = bound_for(model, "Q4_K_M");
        for (const char* mode : {"batch", "decode"}) {
            auto ref = read_f32(data("logits/" + name + "/p64." + mode + ".f32"));
            auto mine = eval_logits(*m, ids, std::string(mode) == "batch");
            REQUIRE(mine.size() == ref.size());
            Diff d = compare(mine.data(), ref.data(), 64, V);
            print_diff(name + " p64 " + mode + " (tests/data)", d);
            INFO(name << " " << mode);
            CHECK(d.max_abs <= b.max_abs);
            CHECK(d.p50_pos <= b.p50_pos);
            CHECK((d.first_over < 0 || d.first_over >= b.min_exact));
            CHECK(d.argmax_agree >= b.min_argmax);
        }
        model::Session s(*m, {.n_ctx = 128, .n_threads = 2});
        check_greedy(greedy(s, ids, 32), read_json(data("logits/" + name + "/p64.json")), b.soft_margin, name);
    }
}
