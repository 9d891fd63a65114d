#include "vision/media_prompt.h"

#include "common/error.h"

namespace kinfer::vision {

size_t count_media_markers(std::string_view text, std::string_view marker) {
    size_t n = 0;
    for (size_t at = text.find(marker); at != std::string_view::npos; at = text.find(marker, at + marker.size())) ++n;
    return n;
}

std::string with_media_markers(std::string_view text, size_t n_images) {
    std::string out;
    if (count_media_markers(text) == 0)
        for (size_t i = 0; i < n_images; ++i) out += kMediaMarker;
    out += text;
    return out;
}

std::vector<PromptChunk> layout_media_prompt(const text::Tokenizer& tok, std::string_view prompt_in, size_t n_images,
                                             bool moonshot_wrapper) {
    const std::string placed = with_media_markers(prompt_in, n_images);
    const std::string_view prompt = placed;
    const size_t markers = count_media_markers(prompt);
    if (markers != n_images)
        fail("the prompt has {} {} marker(s) but {} image(s) were given (--image)", markers, kMediaMarker, n_images);
    const text::Token begin = n_images ? tok.find("<|media_begin|>") : text::kNoToken;
    const text::Token end = n_images ? tok.find("<|media_end|>") : text::kNoToken;
    if (n_images && (begin == text::kNoToken || end == text::kNoToken))
        fail("the model's vocabulary has no <|media_begin|> / <|media_end|> tokens: it cannot take images");
    std::vector<text::Token> opening{begin};
    if (moonshot_wrapper && n_images) {
        const text::Token content = tok.find("<|media_content|>");
        if (content == text::kNoToken) fail("the model's vocabulary has no <|media_content|> token (--image-rules moonshot)");
        const auto word = tok.encode("image", /*parse_special=*/false);
        opening.insert(opening.end(), word.begin(), word.end());
        opening.push_back(content);
    }

    std::vector<PromptChunk> chunks;
    size_t pos = 0;
    int image = 0;
    bool after_image = false;
    while (true) {
        const size_t at = prompt.find(kMediaMarker, pos);
        const std::string_view piece = prompt.substr(pos, at == std::string_view::npos ? std::string_view::npos : at - pos);
        PromptChunk t;
        if (after_image) t.tokens.push_back(end);
        auto ids = tok.encode(piece, /*parse_special=*/true);
        t.tokens.insert(t.tokens.end(), ids.begin(), ids.end());
        if (at != std::string_view::npos) t.tokens.insert(t.tokens.end(), opening.begin(), opening.end());
        if (!t.tokens.empty()) chunks.push_back(std::move(t));
        if (at == std::string_view::npos) break;
        PromptChunk im;
        im.image = image++;
        chunks.push_back(std::move(im));
        after_image = true;
        pos = at + kMediaMarker.size();
    }
    return chunks;
}

std::string expand_media_markers(std::string_view prompt, bool moonshot_wrapper, std::string_view marker) {
    const std::string opening = moonshot_wrapper ? "<|media_begin|>image<|media_content|>" : "<|media_begin|>";
    std::string out;
    size_t pos = 0;
    for (size_t at = prompt.find(marker); at != std::string_view::npos; at = prompt.find(marker, pos)) {
        out.append(prompt.substr(pos, at - pos));
        out += opening;
        out += marker;
        out += "<|media_end|>";
        pos = at + marker.size();
    }
    out.append(prompt.substr(pos));
    return out;
}

void prefill_chunks(model::Session& s, const std::vector<PromptChunk>& chunks,
                    const std::vector<std::span<const float>>& images, std::vector<float>* all_logits) {
    for (const auto& c : chunks) {
        if (c.is_image()) {
            if (size_t(c.image) >= images.size()) fail("prompt chunk names image {} of {}", c.image, images.size());
            s.prefill_embd(images[size_t(c.image)], all_logits);
        } else {
            s.prefill(c.tokens, all_logits);
        }
    }
}

int64_t chunk_positions(const std::vector<PromptChunk>& chunks, const std::vector<int64_t>& image_rows) {
    int64_t n = 0;
    for (const auto& c : chunks) n += c.is_image() ? image_rows.at(size_t(c.image)) : int64_t(c.tokens.size());
    return n;
}

}  // namespace kinfer::vision
