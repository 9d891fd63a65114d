// Unicode helpers for the pre-tokenizers: UTF-8 decoding that never fails (a bad byte becomes
// a one-byte "character" with no class, so byte-level BPE still round-trips it) and the code
// point classes a tiktoken-style regex asks about. The tables come from the Unicode Character
// Database (see tools/text/gen_unicode_tables.py); nothing is looked up at run time.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace kinfer::text::unicode {

// Class bits of one code point (see the generator for their sources).
enum : uint16_t {
    kLu = 1 << 0,    // uppercase letter
    kLl = 1 << 1,    // lowercase letter
    kLt = 1 << 2,    // titlecase letter
    kLm = 1 << 3,    // modifier letter
    kLo = 1 << 4,    // other letter
    kMark = 1 << 5,  // \p{M}: Mn, Mc, Me
    kNumber = 1 << 6,  // \p{N}: Nd, Nl, No
    kSpace = 1 << 7,   // White_Space (the regex crate's \s)
    kHan = 1 << 8,     // Script=Han (the regex crate's bare \p{Han})
    kLetter = kLu | kLl | kLt | kLm | kLo,  // \p{L}
};

// Flags of a code point; 0 for unassigned ones, surrogates and anything above U+10FFFF.
uint16_t flags(uint32_t cp);

// One decoded character: the code point (kInvalid for a byte that does not start a valid,
// shortest-form UTF-8 sequence), its length in bytes (1..4) and its flags.
inline constexpr uint32_t kInvalid = 0xFFFFFFFFu;
struct Char {
    uint32_t cp;
    uint32_t len;
    uint16_t fl;
};
Char decode(std::string_view s, size_t pos);   // pos < s.size()

// Length of the UTF-8 sequence a lead byte announces (1 for continuation / invalid bytes).
inline size_t utf8_len(uint8_t lead) {
    if (lead < 0x80) return 1;
    if ((lead & 0xE0) == 0xC0) return 2;
    if ((lead & 0xF0) == 0xE0) return 3;
    if ((lead & 0xF8) == 0xF0) return 4;
    return 1;
}

// Appends the UTF-8 encoding of cp (cp <= 0x10FFFF).
void append_utf8(std::string& out, uint32_t cp);

// Number of bytes at the end of s that form an incomplete (but so far valid) UTF-8 sequence:
// 0 when s ends on a character boundary. Used to stream text without splitting a character.
size_t incomplete_utf8_tail(std::string_view s);

}  // namespace kinfer::text::unicode
