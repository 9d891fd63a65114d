// The tower, merge and projector against llama.cpp's per-stage dumps (README sections 7-9):
// every stage and the embeddings bit for bit on the SIMD paths (each op follows the golden
// build's arithmetic, its compiler's FMA contractions included); on the scalar path the stages
// up to the first GELU within 1e-5 and the embeddings within the 2e-3 floor of README 7.6.
#include "backend/cpu/vision_kernels.h"
#include "backend/cpu_backend.h"
#include "quant/types.h"
#include "vision/encoder.h"
#include "vision/projector.h"
#include "vision_data.h"

#include <cmath>
#include <map>
#include <set>

using namespace kinfer;

namespace {

struct Stage {
    std::vector<float> x;
    int64_t rows = 0, cols = 0;
};

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    float m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(a[i] - b[i]));
    return m;
}

// llama.cpp's tensor in our row-major [rows][cols] layout (a few of its dumps are transposed).
std::vector<float> golden_as_rows(const std::string& stage, const std::vector<float>& g, int gw, int gh, int64_t C) {
    const int64_t N = int64_t(gw) * gh;
    std::vector<float> r(g.size());
    if (stage == "patch_conv") {   // ne [N, C]: memory [C][N]
        for (int64_t p = 0; p < N; ++p)
            for (int64_t c = 0; c < C; ++c) r[size_t(p * C + c)] = g[size_t(c * N + p)];
        return r;
    }
    if (stage == "pos_embd_interp") {   // ne [gh, gw, C]: memory [C][gw][gh]
        for (int y = 0; y < gh; ++y)
            for (int x = 0; x < gw; ++x)
                for (int64_t c = 0; c < C; ++c)
                    r[size_t((int64_t(y) * gw + x) * C + c)] = g[size_t(c * N + int64_t(x) * gh + y)];
        return r;
    }
    return g;
}

const std::set<std::string> kBeforeGelu = {"patch_conv", "pos_embd_interp", "embd_inp", "layer_inp_normed-0",
                                           "Qcur_pos-0", "Kcur_pos-0", "kqv_out-0", "ffn_inp-0"};
const char* const kAfterGelu[] = {"layer_out-0", "layer_out-1", "layer_out-2", "vit_out", "pixel_shuffle",
                                  "proj_mlp_out", "proj_out"};

std::string mmproj_path() { return test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf"); }

}  // namespace

TEST_CASE("vision: the GELU table equals ggml-cpu's table_gelu_f16") {
    const std::string p = test::vision_file("ggml_gelu_f16_table.u16");
    if (p.empty()) return;
    const auto b = test::read_bytes(p);
    REQUIRE(b.size() == 65536 * 2);
    const uint16_t* mine = backend::cpu::gelu_f16_table();
    int diff = 0;
    for (size_t i = 0; i < 65536; ++i) {
        const uint16_t want = uint16_t(b[2 * i] | (b[2 * i + 1] << 8));
        diff += want != mine[i];
    }
    CHECK(diff == 0);
    // Outside (-10, 10) the table is not used.
    float x[4] = {-10.0f, -20.0f, 10.0f, 12.5f};
    backend::cpu::gelu(x, 4);
    CHECK(x[0] == 0.0f);
    CHECK(x[1] == 0.0f);
    CHECK(x[2] == 10.0f);
    CHECK(x[3] == 12.5f);
}

TEST_CASE("vision: merge order concatenates each 2x2 block row-major") {
    const auto idx = vision::merge_order(4, 2, 2);
    CHECK(idx == std::vector<int64_t>{0, 1, 4, 5, 2, 3, 6, 7});
}

TEST_CASE("vision: tower stages and embeddings match llama.cpp per case") {
    const std::string mp = mmproj_path();
    if (mp.empty()) return;
    backend::CpuBackend be(2);
    auto mm = vision::Mmproj::load(mp, be);
    const auto& hp = mm->hparams();
    CHECK(hp.n_embd == 48);
    CHECK(hp.q_dim() == 72);
    CHECK(hp.proj_dim == 64);
    vision::ImageEncoder enc(*mm);
    for (const std::string c : test::kVisionCases) {
        CAPTURE(c);
        const std::string img = test::vision_file("images/" + test::case_image(c));
        const std::string embd = test::vision_file(std::string("cases/") + c + "/" + c + ".img0.embd.f32");
        if (img.empty() || embd.empty()) continue;
        std::map<std::string, Stage> got;
        auto e = enc.encode_file(img, [&](const std::string& s, const float* x, int64_t rows, int64_t cols) {
            got[s] = Stage{std::vector<float>(x, x + rows * cols), rows, cols};
        });
        const auto want = test::read_f32(embd);
        REQUIRE(e.embd.size() == want.size());
        const float d_embd = max_abs_diff(e.embd, want);
        MESSAGE(c << ": embeddings max |diff| " << d_embd << " (" << e.n_tokens << " tokens, " << e.seconds * 1e3 << " ms)");
        CHECK(d_embd <= 2e-3f);
        // On the SIMD paths every op follows the golden build's arithmetic: the same bits.
        const bool exact = quant::active_isa() != quant::Isa::scalar;
        if (exact) CHECK(d_embd == 0.0f);
        if (c == "wide") continue;   // no intermediates stored for > 256 patches
        for (const auto& [stage, st] : got) {
            if (!kBeforeGelu.count(stage)) continue;
            const std::string& name = stage;
            const std::string f = test::vision_file(std::string("cases/") + c + "/" + c + ".img0." + name + ".f32");
            if (f.empty()) continue;
            const auto g = golden_as_rows(name, test::read_f32(f), e.gw, e.gh, hp.n_embd);
            const float d = max_abs_diff(st.x, g);
            CAPTURE(name);
            MESSAGE(c << " " << name << ": max |diff| " << d);
            CHECK(d <= 1e-5f);
            if (exact) CHECK(d == 0.0f);
        }
        if (c != "gray") CHECK(got.count("pos_embd_interp") == 1);
        for (const std::string name : kAfterGelu) {
            const std::string f = test::vision_file(std::string("cases/") + c + "/" + c + ".img0." + name + ".f32");
            if (f.empty()) continue;
            REQUIRE(got.count(name));
            const float d = max_abs_diff(got[name].x, test::read_f32(f));
            CAPTURE(name);
            MESSAGE(c << " " << name << ": max |diff| " << d);
            CHECK(d <= 2e-3f);
            if (exact) CHECK(d == 0.0f);
        }
    }
}
