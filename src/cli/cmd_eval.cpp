// kinfer eval: evaluate token ids and write raw float32 logits, for parity checks against
// llama.cpp (tests/model, ../shared/golden/llama.cpp/logits) and for bisecting a divergence
// layer by layer (--dump-layer / --dump-layers).
#include "backend/cpu_backend.h"
#include "cli/command.h"
#include "cli/lib/cache_flags.h"
#include "cli/lib/moe_flag.h"
#include "cli/lib/expert_session.h"
#include "cli/lib/flag_check.h"
#include "cli/lib/prompt_text.h"
#include "cli/lib/split_session.h"
#include "common/error.h"
#include "common/safe_file.h"
#include "model/layer_stats.h"
#include "model/session.h"
#include "runtime/expert_flags.h"
#include "text/tokenizer.h"
#include "vision/image_prompt.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>

namespace kinfer::cli {

namespace {

std::vector<int32_t> read_ids(const std::string& path) {
    check_input_file(path, "eval: --tokens");
    std::ifstream f(path);
    if (!f) fail("cannot open token file '{}'", path);
    std::vector<int32_t> ids;
    long long v;
    while (f >> v) ids.push_back(int32_t(v));
    if (!f.eof()) fail("token file '{}': not a whitespace-separated list of integers", path);
    if (ids.empty()) fail("token file '{}' holds no ids", path);
    return ids;
}

int32_t argmax(const std::vector<float>& x) {
    // Ties go to the lowest id (as the golden greedy runs do).
    return int32_t(std::max_element(x.begin(), x.end()) - x.begin());
}

struct EvalArgs {
    std::string model, tokens, logits_out, mode = "batch", kda = "recurrent", mla = "absorbed";
    std::string prompt_file, image_embd_out;   // -f: prompt text with <__media__> markers; --image-embd
    vision::ImagePromptArgs vision;
    std::string image_rules = "llama.cpp";
    std::string cache_type = "f32";   // eval compares with llama.cpp's exact mode
    int threads = 0;
    int64_t batch = 512, ctx = 0;
    int64_t mla_tiled_from = model::SessionOptions{}.tiled_min_keys;   // --mla-tiled-from
    std::string mla_tiled_form = "cost";                                 // --mla-tiled-form
    std::string moe = "auto";                                            // --moe
    bool graphs = false;                // --cuda-graphs
    int dump_layer = -1;
    bool dump_layers = false;
    int greedy = 0;
    runtime::ExpertFlags experts;
};

int run_eval(const EvalArgs& a) {
    check_input_file(a.model, "eval: model");
    if (!a.logits_out.empty()) check_output_path(a.logits_out, "eval: --logits");
    if (!a.image_embd_out.empty()) check_output_path(a.image_embd_out, "eval: --image-embd");
    if (a.tokens.empty() == a.prompt_file.empty()) usage_fail("eval: give the input one way: --tokens FILE or -f PROMPT.txt");
    if (!a.vision.images.empty() && a.prompt_file.empty()) usage_fail("eval: --image needs -f PROMPT.txt");
    const std::string prompt = a.prompt_file.empty() ? std::string() : read_text_file(a.prompt_file);
    auto model = model::Model::load(a.model);
    const auto& hp = model->hparams();
    std::vector<int32_t> ids;
    std::optional<vision::ImagePrompt> media;   // -f: text chunks and encoded images
    if (a.tokens.empty()) {
        auto tok = text::Tokenizer::from_gguf(model->file());
        backend::CpuBackend vision_be(a.threads);
        vision::ImagePromptArgs va = a.vision;
        va.tower.moonshot_rules = a.image_rules == "moonshot";
        media = vision::prepare_image_prompt(va, prompt, *tok, hp.n_embd, vision_be);
        ids.assign(size_t(media->n_positions), 0);   // sizes the context; the chunks are what runs
    } else {
        ids = read_ids(a.tokens);
    }
    model::SessionOptions so;
    so.n_threads = a.threads;
    so.n_batch = a.batch;
    so.n_ctx = a.ctx > 0 ? a.ctx : int64_t(ids.size()) + a.greedy + 1;
    so.kda_chunked = a.kda == "chunked";
    so.mla_decompressed = a.mla == "decompressed";
    so.tiled_min_keys = a.mla_tiled_from;
    so.mla_tiled_form = a.mla_tiled_form == "absorbed" ? 0 : a.mla_tiled_form == "decompressed" ? 1 : -1;
    so.moe_slots = moe_slots_of(a.moe);
    so.graphs = a.graphs;
    so.cache_type = cache_type_of(a.cache_type);
    auto ex = cli::attach_experts(*model, a.experts, so);
    auto split = cli::attach_split(*model, so);
    model::Session s(*model, so);

    if (a.dump_layers || a.dump_layer >= 0) {
        s.on_layer = [&](int layer, int64_t pos0, int64_t n, const float* x) {
            if (!a.dump_layers && layer != a.dump_layer) return;
            for (int64_t t = 0; t < n; ++t) {
                auto st = model::stats(x + t * hp.n_embd, hp.n_embd);
                std::printf("layer %3d pos %5lld  mean % .6e  rms %.6e  max|x| %.6e\n", layer,
                            (long long)(pos0 + t), st.mean, st.rms, st.max_abs);
            }
        };
    }

    auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits;
    if (media) {
        const auto rows = media->rows();
        if (a.mode == "batch") {
            vision::prefill_chunks(s, media->chunks, rows, &logits);
        } else {
            // One position at a time: a token, or one embedding row.
            logits.reserve(ids.size() * size_t(hp.n_vocab));
            for (const auto& c : media->chunks) {
                const int64_t n = c.is_image() ? media->images[size_t(c.image)].n_tokens : int64_t(c.tokens.size());
                for (int64_t i = 0; i < n; ++i) {
                    if (c.is_image()) s.prefill_embd(rows[size_t(c.image)].subspan(size_t(i * hp.n_embd), size_t(hp.n_embd)));
                    else s.decode(c.tokens[size_t(i)]);
                    logits.insert(logits.end(), s.logits().begin(), s.logits().end());
                }
            }
        }
    } else if (a.mode == "batch") {
        s.prefill(ids, &logits);
    } else if (a.mode == "decode") {
        logits.reserve(ids.size() * size_t(hp.n_vocab));
        for (int32_t id : ids) {
            s.decode(id);
            logits.insert(logits.end(), s.logits().begin(), s.logits().end());
        }
    } else {
        fail("--mode must be batch or decode (got '{}')", a.mode);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "eval: %zu tokens (%s) in %.3f s, %d threads\n", ids.size(), a.mode.c_str(), secs,
                 s.n_threads());

    if (!a.logits_out.empty()) {
        TempFile f(a.logits_out);
        if (std::fwrite(logits.data(), sizeof(float), logits.size(), f.file()) != logits.size())
            fail("writing '{}' failed", f.temp_path());
        f.commit();
    }

    if (!a.image_embd_out.empty()) {
        TempFile f(a.image_embd_out);
        for (const auto& im : media ? media->images : std::vector<vision::EncodedImage>{})
            if (std::fwrite(im.embd.data(), sizeof(float), im.embd.size(), f.file()) != im.embd.size())
                fail("writing '{}' failed", f.temp_path());
        f.commit();
    }

    if (a.greedy > 0) {
        std::vector<int32_t> gen;
        int32_t next = argmax(s.logits());
        for (int i = 0; i < a.greedy; ++i) {
            gen.push_back(next);
            if (i + 1 == a.greedy) break;
            s.decode(next);
            next = argmax(s.logits());
        }
        for (size_t i = 0; i < gen.size(); ++i) std::printf("%s%d", i ? " " : "", gen[i]);
        std::printf("\n");
    }
    if (ex) ex->finish();
    return 0;
}

}  // namespace

KINFER_COMMAND("eval", "Debug: evaluate token ids and write raw logits", [](CLI::App& app) {
    auto a = std::make_shared<EvalArgs>();
    app.add_option("-m,--model", a->model, "GGUF model")->required();
    app.add_option("--tokens", a->tokens, "file of whitespace-separated token ids (or -f)");
    app.add_option("-f,--file", a->prompt_file, "prompt text file, special tokens parsed; <__media__> marks where an --image goes");
    app.add_option("--mmproj", a->vision.mmproj, "vision projector GGUF (llama.cpp's mmproj) for --image");
    app.add_option("--image", a->vision.images, "image file for the next <__media__> marker of -f (repeatable, in order)");
    app.add_option("--image-rules", a->image_rules,
                   "llama.cpp (default: mtmd's kimik3 preprocessing and numerics) or moonshot (Moonshot's own: no upscaling, "
                   "bicubic, right/bottom padding, alpha on a chessboard, tower eps 2^-7, erf GELU, image wrapper tokens; docs/vision.md)")
        ->check(CLI::IsMember({"llama.cpp", "moonshot"}));
    app.add_option("--image-embd", a->image_embd_out, "write the images' embeddings here, float32 [tokens x n_embd], images in order");
    app.add_option("--logits", a->logits_out, "write float32 logits [n_tokens x n_vocab] here");
    app.add_option("--mode", a->mode, "batch (one prefill) or decode (token by token)")->check(CLI::IsMember({"batch", "decode"}));
    app.add_option("-t,--threads", a->threads, "threads (default: physical cores)")->check(int_in(1, kMaxThreads));
    app.add_option("-b,--batch-size", a->batch, "prefill chunk size")->check(int_in(1, kMaxBatch));
    app.add_option("-c,--ctx-size", a->ctx, "context size (default: prompt + generation)")->check(int_in(1, kMaxCtx));
    app.add_option("--dump-layer", a->dump_layer, "print residual statistics after layer N (n_layer = final)")->check(int_in(-1, 1 << 20));
    app.add_flag("--dump-layers", a->dump_layers, "print residual statistics after every layer");
    app.add_option("--greedy", a->greedy, "continue greedily N tokens after the prompt and print the ids")->check(int_in(0, kMaxCtx));
    app.add_option("--kda", a->kda, "prefill KDA form: chunked or recurrent")->check(CLI::IsMember({"chunked", "recurrent"}));
    add_cache_type_flag(app, a->cache_type);
    app.add_option("--mla", a->mla, "prefill MLA form: absorbed or decompressed")->check(CLI::IsMember({"absorbed", "decompressed"}));
    add_moe_flag(app, a->moe);
    add_graphs_flag(app, a->graphs);
    app.add_option("--mla-tiled-from", a->mla_tiled_from,
                   "MLA attention past this many keys runs the tiled (flash) kernels over the cache pages: absorbed for "
                   "decode, decompressed (MHA) for prefill chunks where that costs fewer operations (0: always, to check "
                   "the tiled kernels on a short prompt)")
        ->capture_default_str()
        ->check(int_in(0, kMaxCtx));
    app.add_option("--mla-tiled-form", a->mla_tiled_form,
                   "the tiled MLA form of prefill chunks: cost (by operation count: decompressed where it costs fewer "
                   "operations, as run and chat choose), absorbed, or decompressed (to check one form's kernels on a "
                   "short prompt, with --mla-tiled-from 0); decode is absorbed always")
        ->capture_default_str()
        ->check(CLI::IsMember({"cost", "absorbed", "decompressed"}));
    cli::add_expert_flags(app, a->experts);
    add_split_flags(app);
    return [a] { return run_eval(*a); };
});

}  // namespace kinfer::cli
