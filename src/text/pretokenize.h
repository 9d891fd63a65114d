// Regex pre-tokenizers, written out by hand: each splits text into the pieces that BPE then
// encodes one by one. They reproduce the leftmost-first, backtracking semantics of the regex
// engine tiktoken uses (fancy-regex over the regex crate: \s = White_Space, \p{Han} =
// Script=Han, (?i) = simple case folding) for these exact patterns:
//
// kimi-k2 (tokenization_kimi.py; llama.cpp `tokenizer.ggml.pre = kimi-k2`), the alternation of
//   [\p{Han}]+
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?
//   \p{N}{1,3}
//    ?[^\s\p{L}\p{N}]+[\r\n]*
//   \s*[\r\n]+
//   \s+(?!\S)
//   \s+
// o200k_base: the same without the Han branch and the Han exclusions, and `[\r\n/]*` in the
//   punctuation branch.
// cl100k_base:
//   '(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s
//
// `$` and the lookahead see the end of the fragment being split (text between special tokens),
// as in tiktoken and llama.cpp. Invalid UTF-8 bytes count as one character of no class.
#pragma once
#include <cstddef>
#include <optional>
#include <string_view>

namespace kinfer::text {

enum class PreTokenizer { KimiK2, O200k, Cl100k };

const char* pretokenizer_name(PreTokenizer p);
// "kimi-k2", "o200k" / "o200k_base", "cl100k" / "cl100k_base".
std::optional<PreTokenizer> pretokenizer_from_name(std::string_view name);

// End (exclusive byte offset) of the piece that starts at pos (pos < text.size()). Pieces are
// never empty, so `for (pos = 0; pos < n; pos = next_piece(...))` covers the text exactly.
size_t next_piece(PreTokenizer kind, std::string_view text, size_t pos);

}  // namespace kinfer::text
