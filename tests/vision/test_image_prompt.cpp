// Images in the text model (README sections 5 and 8): the prompt layout around <__media__>,
// the embedding rows through Session::prefill_embd, the logits at llama.cpp's stored positions
// within its own batch-vs-decode spread (or 1e-4), and the 16 greedy ids where the margin allows.
#include "backend/cpu_backend.h"
#include "model/model.h"
#include "quant/types.h"
#include "vision/image_prompt.h"
#include "vision_data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <unistd.h>
#include <nlohmann/json.hpp>
#include <sstream>

using namespace kinfer;

namespace {

struct CaseData {
    nlohmann::json js;
    std::vector<float> spread;   // maxabs_batch_vs_decode per position (summary.tsv)
};

CaseData read_case(const std::string& dir, const std::string& c) {
    CaseData d;
    std::ifstream jf(dir + "/" + c + ".json");
    d.js = nlohmann::json::parse(jf);
    std::ifstream tf(dir + "/" + c + ".summary.tsv");
    std::string line;
    std::getline(tf, line);   // header
    while (std::getline(tf, line)) {
        std::istringstream ls(line);
        std::string f[10];
        for (auto& x : f) std::getline(ls, x, '\t');
        d.spread.push_back(std::stof(f[8]));
    }
    return d;
}

int32_t argmax(const float* x, int64_t n) { return int32_t(std::max_element(x, x + n) - x); }

// Runs one case through the text model with the given image rows; returns the max |logit diff|
// over llama.cpp's stored positions divided by each position's tolerance, the largest raw
// difference, and how many greedy ids agreed before the first one whose margin is under
// `margin_floor` (and whether all compared agreed).
struct CaseResult {
    float worst_ratio = 0, worst_abs = 0;
    size_t compared = 0;
    bool ids_equal = true;
};

CaseResult run_case(const model::Model& model, const vision::ImagePrompt& ip, const std::vector<std::span<const float>>& rows,
                    const CaseData& cd, const std::string& dir, const std::string& c, float margin_floor) {
    const int64_t V = model.hparams().n_vocab;
    model::SessionOptions so;
    so.n_threads = 2;
    so.n_ctx = ip.n_positions + 32;
    so.n_batch = 1024;
    model::Session s(model, so);
    std::vector<float> logits;
    vision::prefill_chunks(s, ip.chunks, rows, &logits);
    REQUIRE(logits.size() == size_t(ip.n_positions * V));
    const auto want = test::read_f32(dir + "/" + c + ".logits_batch.f32");
    const auto positions = cd.js["logits_batch_positions"].get<std::vector<int64_t>>();
    CaseResult r;
    for (size_t k = 0; k < positions.size(); ++k) {
        const int64_t p = positions[k];
        const float tol = std::max(1e-4f, cd.spread[size_t(p)]);
        float d = 0;
        for (int64_t i = 0; i < V; ++i) d = std::max(d, std::fabs(logits[size_t(p * V + i)] - want[k * size_t(V) + size_t(i)]));
        r.worst_ratio = std::max(r.worst_ratio, d / tol);
        r.worst_abs = std::max(r.worst_abs, d);
    }
    // Greedy: 16 tokens fed, then the argmax after the last.
    const auto gen = cd.js["generated_ids"].get<std::vector<int32_t>>();
    const auto margin = cd.js["generated_top1_minus_top2"].get<std::vector<float>>();
    std::vector<int32_t> mine{argmax(s.logits().data(), V)};
    for (size_t i = 0; i + 1 < gen.size(); ++i) {
        s.decode(mine.back());
        mine.push_back(argmax(s.logits().data(), V));
    }
    for (size_t i = 0; i < gen.size() && margin[i] >= margin_floor; ++i) {
        ++r.compared;
        if (mine[i] != gen[i]) {
            r.ids_equal = false;
            break;
        }
    }
    return r;
}

}  // namespace

TEST_CASE("vision: text logits and greedy ids with images match llama.cpp per case") {
    const std::string gguf = test::vision_file("gguf/k3v-tiny-f32.gguf");
    const std::string mmproj = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    if (gguf.empty() || mmproj.empty()) return;
    auto model = model::Model::load(gguf);
    auto tok = text::Tokenizer::from_gguf(model->file());
    const auto& hp = model->hparams();
    for (const std::string c : {"photo", "tall", "gray", "rgba", "wide", "two"}) {
        CAPTURE(c);
        const std::string dir = test::golden(std::string("vision/cases/") + c);
        if (!test::have_golden(std::string("vision/cases/") + c + "/" + c + ".json")) continue;
        const CaseData cd = read_case(dir, c);
        const std::string two = c == "two" ? "_two_images" : "";
        const auto prompt = test::read_bytes(test::vision_file("prompts/prompt" + two + ".txt"));
        vision::ImagePromptArgs ia;
        ia.mmproj = mmproj;
        ia.verbose = false;
        for (const auto& im : cd.js["images"]) ia.images.push_back(test::vision_file(im["file"].get<std::string>()));
        backend::CpuBackend be(2);
        const auto ip = vision::prepare_image_prompt(ia, std::string(prompt.begin(), prompt.end()), *tok, hp.n_embd, be);
        REQUIRE(ip.n_positions == cd.js["n_positions"].get<int64_t>());

        // 1. llama.cpp's own image rows: the text side (embedding-row prefill at the image
        //    positions) within llama.cpp's batch-vs-decode spread or 1e-4, every greedy id equal
        //    down to a margin of 1e-3.
        std::vector<std::vector<float>> golden_rows;
        for (size_t k = 0; k < ip.images.size(); ++k)
            golden_rows.push_back(test::read_f32(dir + "/" + c + ".img" + std::to_string(k) + ".embd.f32"));
        std::vector<std::span<const float>> gspans(golden_rows.begin(), golden_rows.end());
        const CaseResult g = run_case(*model, ip, gspans, cd, dir, c, 1e-3f);
        MESSAGE(c << " (llama.cpp's image rows): worst logit |diff| " << g.worst_abs << ", " << g.worst_ratio
                  << " x tolerance; greedy ids equal " << g.compared);
        CHECK(g.worst_ratio <= 1.0f);
        CHECK(g.ids_equal);

        // 2. Our own image rows: bit-exact to llama.cpp's on the SIMD paths (test_tower.cpp), so
        //    issue 18's target holds for them too: the same bounds as 1. The scalar path (no
        //    AVX2) rounds differently; there the embeddings' 2e-3 floor (test_tower) is all.
        if (quant::active_isa() == quant::Isa::scalar) continue;
        const CaseResult own = run_case(*model, ip, ip.rows(), cd, dir, c, 1e-3f);
        MESSAGE(c << " (kinfer's image rows): worst logit |diff| " << own.worst_abs << ", " << own.worst_ratio
                  << " x tolerance; greedy ids equal " << own.compared);
        CHECK(own.worst_ratio <= 1.0f);
        CHECK(own.ids_equal);
    }
}

TEST_CASE("vision: prompt layout wraps each image in media_begin / media_end as mtmd does") {
    const std::string gguf = test::vision_file("gguf/k3v-tiny-f32.gguf");
    const std::string prompt_path = test::vision_file("prompts/prompt_two_images.txt");
    if (gguf.empty() || prompt_path.empty()) return;
    auto model = model::Model::load(gguf);
    auto tok = text::Tokenizer::from_gguf(model->file());
    const auto prompt = test::read_bytes(prompt_path);
    const auto chunks = vision::layout_media_prompt(*tok, std::string(prompt.begin(), prompt.end()), 2);
    REQUIRE(chunks.size() == 5);
    CHECK(chunks[0].tokens == std::vector<int32_t>{4099, 2037, 3560, 429, 882, 1, 4101, 4114});
    CHECK(chunks[1].image == 0);
    CHECK(chunks[2].tokens == std::vector<int32_t>{4116, 4114});
    CHECK(chunks[3].image == 1);
    CHECK(chunks[4].tokens.front() == 4116);
    CHECK_THROWS_AS(vision::layout_media_prompt(*tok, "a <__media__> b", 2), Error);
    // No marker: the images go first.
    const auto front = vision::layout_media_prompt(*tok, "hi", 1);
    REQUIRE(front.size() == 3);
    CHECK(front[0].tokens == std::vector<int32_t>{4114});
    CHECK(front[1].image == 0);
    CHECK(front[2].tokens.front() == 4116);
}

TEST_CASE("vision: the written-out markers tokenize to the same chunks as the layout (chat's prefix form)") {
    const std::string gguf = test::vision_file("gguf/k3v-tiny-f32.gguf");
    const std::string prompt_path = test::vision_file("prompts/prompt_two_images.txt");
    if (gguf.empty() || prompt_path.empty()) return;
    auto model = model::Model::load(gguf);
    auto tok = text::Tokenizer::from_gguf(model->file());
    const auto bytes = test::read_bytes(prompt_path);
    const std::string prompt(bytes.begin(), bytes.end());
    for (const bool moonshot : {false, true}) {
        CAPTURE(moonshot);
        const auto chunks = vision::layout_media_prompt(*tok, prompt, 2, moonshot);
        const std::string wide = vision::expand_media_markers(prompt, moonshot);
        // Split at the markers again: text pieces tokenized alone, images between them.
        std::vector<vision::PromptChunk> got;
        size_t pos = 0;
        for (;;) {
            const size_t at = wide.find(vision::kMediaMarker, pos);
            vision::PromptChunk t;
            t.tokens = tok->encode(wide.substr(pos, at == std::string::npos ? std::string::npos : at - pos), true);
            if (!t.tokens.empty()) got.push_back(t);
            if (at == std::string::npos) break;
            vision::PromptChunk im;
            im.image = int(std::count_if(got.begin(), got.end(), [](const auto& c) { return c.is_image(); }));
            got.push_back(im);
            pos = at + vision::kMediaMarker.size();
        }
        REQUIRE(got.size() == chunks.size());
        for (size_t i = 0; i < got.size(); ++i) {
            CHECK(got[i].image == chunks[i].image);
            CHECK(got[i].tokens == chunks[i].tokens);
        }
    }
    CHECK(vision::expand_media_markers("no images") == "no images");
}

TEST_CASE("vision: kinfer eval -f --image writes the image embeddings and every position's logits") {
    const std::string gguf = test::vision_file("gguf/k3v-tiny-f32.gguf");
    const std::string mmproj = test::vision_file("gguf/mmproj-k3v-tiny-f32.gguf");
    const std::string prompt = test::vision_file("prompts/prompt_two_images.txt");
    const std::string photo = test::vision_file("images/photo_150x97.png"), tall = test::vision_file("images/tall_61x203.jpg");
    if (gguf.empty() || mmproj.empty() || prompt.empty() || photo.empty() || tall.empty()) return;
    if (!test::have_golden("vision/cases/two/two.img0.embd.f32")) return;
    const auto dir = std::filesystem::temp_directory_path() / ("kinfer_vision_eval_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string embd = (dir / "embd.f32").string(), logits = (dir / "logits.f32").string();
    for (const std::string mode : {"batch", "decode"}) {
        CAPTURE(mode);
        const auto r = test::run_command(test::kinfer_bin() + " eval -m " + gguf + " --mmproj " + mmproj + " -f " + prompt +
                                         " --image " + photo + " --image " + tall + " --image-embd " + embd +
                                         " --logits " + logits + " -t 2 --mode " + mode);
        REQUIRE_MESSAGE(r.rc == 0, r.out);
        CHECK(r.out.find("15 tokens") != std::string::npos);
        const auto e = test::read_f32(embd);
        auto want = test::read_f32(test::golden("vision/cases/two/two.img0.embd.f32"));
        const auto w1 = test::read_f32(test::golden("vision/cases/two/two.img1.embd.f32"));
        want.insert(want.end(), w1.begin(), w1.end());
        REQUIRE(e.size() == want.size());   // 29 rows of 64
        float d = 0;
        for (size_t i = 0; i < e.size(); ++i) d = std::max(d, std::fabs(e[i] - want[i]));
        CHECK(d <= 2e-3f);
        CHECK(test::read_f32(logits).size() == size_t(63) * 4352);
    }
    std::filesystem::remove_all(dir);
}
