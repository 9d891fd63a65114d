// What the CLI needs to put images into a prompt: load the mmproj, encode every --image in
// order, and lay the prompt out around them (media_prompt.h). Checks that the projector feeds
// this text model (projection_dim == n_embd) before any image is encoded.
#pragma once
#include "vision/encoder.h"
#include "vision/media_prompt.h"

#include <memory>
#include <span>
#include <string>
#include <vector>

namespace kinfer::vision {

struct ImagePrompt {
    std::vector<PromptChunk> chunks;
    std::vector<EncodedImage> images;
    int64_t n_positions = 0;      // text tokens + image rows
    std::vector<std::span<const float>> rows() const;
    std::vector<int32_t> text_tokens() const;   // every text token, in order (for the sampler's penalties)
};

struct ImagePromptArgs {
    std::string mmproj;
    std::vector<std::string> images;
    TowerOptions tower;
    bool verbose = true;          // one "image FILE: WxH -> N tokens in T ms" line per image on stderr
};

// The projector of path on be, checked to write rows text_n_embd wide (throws kinfer::Error
// naming the file otherwise).
std::unique_ptr<Mmproj> load_mmproj_for(const std::string& path, int64_t text_n_embd, backend::Backend& be);

// One "kinfer: image FILE: W x H -> ... tokens, encoded in T ms" line on stderr.
void report_encoded(const EncodedImage& im);

// be: where the tower runs (the session's CPU backend today).
ImagePrompt prepare_image_prompt(const ImagePromptArgs& a, std::string_view prompt, const text::Tokenizer& tok,
                                 int64_t text_n_embd, backend::Backend& be);

}  // namespace kinfer::vision
