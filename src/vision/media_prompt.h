// Where images go in a prompt, as llama.cpp's mtmd does it for Kimi K3 (README section 5):
// each `<__media__>` marker becomes `<|media_begin|>` (appended to the text before it), the
// image's embedding rows, and `<|media_end|>` (at the start of the text after it). Each text
// piece is tokenized on its own with special tokens parsed; nothing else is inserted. A prompt
// without markers gets one per image in front of it (mtmd-cli's habit).
#pragma once
#include "model/session.h"
#include "text/tokenizer.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kinfer::vision {

inline constexpr std::string_view kMediaMarker = "<__media__>";

// One chunk of the prompt: text tokens, or image number `image` (its rows come from the encoder).
struct PromptChunk {
    std::vector<int32_t> tokens;
    int image = -1;
    bool is_image() const { return image >= 0; }
};

// The text of one message or prompt with its images placed: unchanged when it has a marker, else
// one marker per image in front of it (mtmd-cli's habit, also for a chat's user message).
std::string with_media_markers(std::string_view text, size_t n_images);
size_t count_media_markers(std::string_view text, std::string_view marker = kMediaMarker);

// Splits and tokenizes; throws kinfer::Error when the markers and n_images disagree or the
// vocabulary lacks the media tokens.
// moonshot_wrapper: Moonshot's serving form, <|media_begin|> image <|media_content|> [rows]
// <|media_end|>, instead of mtmd's bare <|media_begin|> [rows] <|media_end|>.
std::vector<PromptChunk> layout_media_prompt(const text::Tokenizer& tok, std::string_view prompt, size_t n_images,
                                             bool moonshot_wrapper = false);

// The prompt text with each marker written out as the text of the tokens around its image:
// `<|media_begin|>` (+ `image<|media_content|>` for Moonshot's wrapper) before the marker and
// `<|media_end|>` after it. Tokenizing the pieces between markers with special tokens parsed then
// gives exactly layout_media_prompt's chunks. The chat compares this form with the text its
// session holds, so a held image and the tokens around it count as one stretch of the prompt.
// marker: what stands for an image in `prompt` (the chat uses a string no message can hold, so
// that a literal <__media__> in a message without images stays text).
std::string expand_media_markers(std::string_view prompt, bool moonshot_wrapper = false,
                                 std::string_view marker = kMediaMarker);

// Evaluates the chunks in order, one prefill per chunk (text tokens, or the image's rows through
// Session::prefill_embd); images[k] is [rows x n_embd]. all_logits (optional) gets every
// position's logits.
void prefill_chunks(model::Session& s, const std::vector<PromptChunk>& chunks,
                    const std::vector<std::span<const float>>& images, std::vector<float>* all_logits = nullptr);

// Positions the chunks take (text tokens + image rows), for context checks.
int64_t chunk_positions(const std::vector<PromptChunk>& chunks, const std::vector<int64_t>& image_rows);

}  // namespace kinfer::vision
