// Images in `kinfer chat` (--mmproj, --image, /image FILE): each image is encoded once, when it
// is attached, and its embedding rows are kept with the user message it belongs to, so a
// re-read of the conversation (/regen, an edit going back to a snapshot, /load) feeds the same
// rows again without the file.
//
// How the chat tells its images apart: in the list of tokens the session holds, every row of
// an image is the placeholder id image_row_id(serial) (the session itself records -1), and in
// the chat's rendering each image stands as kImageSlot, which no message can contain. The
// prefix comparison then matches a held image only against the same image at the same place.
#pragma once
#include "cli/lib/generate.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::backend {
class CpuBackend;
}
namespace kinfer::vision {
class Mmproj;
class ImageEncoder;
}  // namespace kinfer::vision

namespace kinfer::cli {

struct ChatImage {
    std::string path;          // absolute: /save writes it, /load encodes it again from there
    int serial = 0;            // unique within the chat
    int width = 0, height = 0; // as decoded
    int64_t n_rows = 0;
    std::vector<float> embd;   // [n_rows x n_embd]
    uint64_t hash = 0;         // of embd: /load-state checks the file still gives these rows
};
using ImageRef = std::shared_ptr<const ChatImage>;

// Placeholders for image rows in the chat's token list: below every token id and below the -1
// the session writes for embedding rows (an image whose identity is not known).
constexpr text::Token image_row_id(int serial) { return -2 - serial; }
constexpr bool is_image_row(text::Token id) { return id <= -2; }
constexpr int image_serial(text::Token id) { return -2 - id; }

// An image's place in the chat's rendering. Not UTF-8 (0xFF never is), so no user message, /read
// file or /load text can hold it; the rare reply that does is scrubbed (scrub_image_slots).
inline constexpr std::string_view kImageSlot = "\xFF" "kinfer-image" "\xFF";
std::string scrub_image_slots(std::string s);

// --mmproj for chat: the projector on its own CPU backend, and the encoder.
class ChatImageEncoder {
public:
    // Throws kinfer::Error naming the file when it is not this model's projector.
    ChatImageEncoder(const std::string& mmproj, int64_t text_n_embd, int n_threads, bool moonshot_rules);
    ~ChatImageEncoder();
    ChatImageEncoder(const ChatImageEncoder&) = delete;
    ChatImageEncoder& operator=(const ChatImageEncoder&) = delete;

    // Decodes and encodes now; throws kinfer::Error naming the file for a bad image.
    ImageRef encode(const std::string& path);
    bool moonshot_rules() const { return moonshot_; }

private:
    std::unique_ptr<backend::CpuBackend> be_;
    std::unique_ptr<vision::Mmproj> mm_;
    std::unique_ptr<vision::ImageEncoder> enc_;
    bool moonshot_;
    int next_serial_ = 0;
};

// text with its image slots: each text piece tokenized on its own (special tokens parsed), each
// slot replaced by the next image's placeholder rows (images in order).
std::vector<text::Token> tokenize_with_images(const text::Tokenizer& tok, std::string_view text,
                                              std::span<const ImageRef> images);

// prefill_chunked over a token list with image placeholders: text runs in chunks (cut at
// cut_every, after_chunk after each), each image as one prefill of its rows (image_of finds it
// by serial), then after_chunk too. Stops between chunks when interrupted(); returns how many
// entries went in (an image goes in whole or not at all).
size_t prefill_with_images(model::Session& s, std::span<const text::Token> ids,
                           const std::function<const ChatImage&(int serial)>& image_of, Timings& t,
                           int64_t cut_every = 0, const std::function<void()>& after_chunk = {});

}  // namespace kinfer::cli
