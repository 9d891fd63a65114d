#include "vision/image_prompt.h"

#include "common/error.h"

#include <cstdio>

namespace kinfer::vision {

std::vector<std::span<const float>> ImagePrompt::rows() const {
    std::vector<std::span<const float>> r;
    for (const auto& im : images) r.emplace_back(im.embd);
    return r;
}

std::vector<int32_t> ImagePrompt::text_tokens() const {
    std::vector<int32_t> ids;
    for (const auto& c : chunks) ids.insert(ids.end(), c.tokens.begin(), c.tokens.end());
    return ids;
}

std::unique_ptr<Mmproj> load_mmproj_for(const std::string& path, int64_t text_n_embd, backend::Backend& be) {
    auto mm = Mmproj::load(path, be);
    if (mm->hparams().proj_dim != text_n_embd)
        fail("{}: the projector writes {}-wide rows but the text model's n_embd is {}: not this model's mmproj", path,
             mm->hparams().proj_dim, text_n_embd);
    return mm;
}

void report_encoded(const EncodedImage& im) {
    std::fprintf(stderr, "kinfer: image %s: %d x %d -> %d x %d patches, %lld tokens, encoded in %.1f ms (preprocessing %.1f ms)\n",
                 im.name.c_str(), im.src_w, im.src_h, im.gw, im.gh, (long long)im.n_tokens, im.seconds * 1e3,
                 im.preprocess_seconds * 1e3);
}

ImagePrompt prepare_image_prompt(const ImagePromptArgs& a, std::string_view prompt, const text::Tokenizer& tok,
                                 int64_t text_n_embd, backend::Backend& be) {
    ImagePrompt p;
    p.chunks = layout_media_prompt(tok, prompt, a.images.size(), a.tower.moonshot_rules);
    if (!a.images.empty()) {
        if (a.mmproj.empty()) fail("--image needs the vision projector: pass --mmproj FILE");
        auto mm = load_mmproj_for(a.mmproj, text_n_embd, be);
        ImageEncoder enc(*mm, a.tower);
        for (const auto& path : a.images) {
            p.images.push_back(enc.encode_file(path));
            if (a.verbose) report_encoded(p.images.back());
        }
    }
    std::vector<int64_t> n_rows;
    for (const auto& im : p.images) n_rows.push_back(im.n_tokens);
    p.n_positions = chunk_positions(p.chunks, n_rows);
    return p;
}

}  // namespace kinfer::vision
