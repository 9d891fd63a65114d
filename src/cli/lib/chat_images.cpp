#include "cli/lib/chat_images.h"

#include "backend/cpu_backend.h"
#include "common/error.h"
#include "common/fnv1a.h"
#include "vision/encoder.h"
#include "vision/image_prompt.h"

#include <chrono>
#include <filesystem>

namespace kinfer::cli {

std::string scrub_image_slots(std::string s) {
    for (size_t at = s.find(kImageSlot); at != std::string::npos; at = s.find(kImageSlot, at))
        s.replace(at, kImageSlot.size(), "\xEF\xBF\xBD");   // U+FFFD: what a terminal shows for it anyway
    return s;
}

ChatImageEncoder::ChatImageEncoder(const std::string& mmproj, int64_t text_n_embd, int n_threads, bool moonshot_rules)
    : be_(std::make_unique<backend::CpuBackend>(n_threads)),
      mm_(vision::load_mmproj_for(mmproj, text_n_embd, *be_)),
      enc_(std::make_unique<vision::ImageEncoder>(*mm_, vision::TowerOptions{.moonshot_rules = moonshot_rules})),
      moonshot_(moonshot_rules) {}

ChatImageEncoder::~ChatImageEncoder() = default;

ImageRef ChatImageEncoder::encode(const std::string& path) {
    vision::EncodedImage im = enc_->encode_file(path);
    auto out = std::make_shared<ChatImage>();
    // Absolute, so a saved chat finds the file again from another directory.
    std::error_code ec;
    const auto abs = std::filesystem::absolute(path, ec);
    out->path = ec ? path : abs.lexically_normal().string();
    out->serial = next_serial_++;
    out->width = im.src_w;
    out->height = im.src_h;
    out->n_rows = im.n_tokens;
    out->embd = std::move(im.embd);
    out->hash = fnv1a(out->embd.data(), out->embd.size() * sizeof(float));
    return out;
}

std::vector<text::Token> tokenize_with_images(const text::Tokenizer& tok, std::string_view text,
                                              std::span<const ImageRef> images) {
    std::vector<text::Token> out;
    size_t pos = 0, k = 0;
    auto add_text = [&](std::string_view piece) {
        const auto ids = tok.encode(piece, /*parse_special=*/true);
        out.insert(out.end(), ids.begin(), ids.end());
    };
    for (size_t at = text.find(kImageSlot); at != std::string_view::npos; at = text.find(kImageSlot, pos)) {
        if (k >= images.size()) fail("chat: the rendering has more image slots than the conversation has images");
        add_text(text.substr(pos, at - pos));
        out.insert(out.end(), size_t(images[k]->n_rows), image_row_id(images[k]->serial));
        ++k;
        pos = at + kImageSlot.size();
    }
    add_text(text.substr(pos));
    return out;
}

size_t prefill_with_images(model::Session& s, std::span<const text::Token> ids,
                           const std::function<const ChatImage&(int serial)>& image_of, Timings& t, int64_t cut_every,
                           const std::function<void()>& after_chunk) {
    size_t done = 0;
    while (done < ids.size() && !interrupted()) {
        size_t end = done;
        if (!is_image_row(ids[done])) {
            while (end < ids.size() && !is_image_row(ids[end])) ++end;
            done += prefill_chunked(s, ids.subspan(done, end - done), t, cut_every, after_chunk);
            if (done < end) break;   // interrupted inside the text
            continue;
        }
        while (end < ids.size() && ids[end] == ids[done]) ++end;
        const ChatImage& im = image_of(image_serial(ids[done]));
        if (int64_t(end - done) != im.n_rows)
            fail("chat: {} rows held for image {}, which has {}", end - done, im.path, im.n_rows);
        const auto t0 = std::chrono::steady_clock::now();
        s.prefill_embd(im.embd);
        t.n_prompt += im.n_rows;
        t.prompt_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (after_chunk) after_chunk();
        done = end;
    }
    return done;
}

}  // namespace kinfer::cli
