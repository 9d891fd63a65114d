#include "text/pretokenize.h"

#include "text/unicode.h"

#include <array>

namespace kinfer::text {
namespace {

using unicode::Char;
namespace uc = unicode;

// ASCII flags are looked up on every character: keep them in a tiny local table.
struct AsciiFlags {
    std::array<uint16_t, 128> f{};
    AsciiFlags() {
        for (uint32_t c = 0; c < 128; ++c) f[c] = uc::flags(c);
    }
};
const AsciiFlags& ascii() {
    static const AsciiFlags a;
    return a;
}

// Cursor over the fragment: at(p) decodes the character at byte p (p < n), with an ASCII fast path.
struct Text {
    std::string_view s;
    const std::array<uint16_t, 128>& af;
    size_t n() const { return s.size(); }
    Char at(size_t p) const {
        const auto b = static_cast<uint8_t>(s[p]);
        if (b < 0x80) return {b, 1, af[b]};
        return uc::decode(s, p);
    }
};

constexpr uint16_t kUpperish = uc::kLu | uc::kLt | uc::kLm | uc::kLo | uc::kMark;  // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
constexpr uint16_t kLowerish = uc::kLl | uc::kLm | uc::kLo | uc::kMark;            // [\p{Ll}\p{Lm}\p{Lo}\p{M}]

bool is_cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
// [^\r\n\p{L}\p{N}]
bool is_prefix(const Char& c) { return !is_cr_lf(c.cp) && !(c.fl & (uc::kLetter | uc::kNumber)); }
// [^\s\p{L}\p{N}]
bool is_symbol(const Char& c) { return !(c.fl & (uc::kSpace | uc::kLetter | uc::kNumber)); }
bool is_space(const Char& c) { return (c.fl & uc::kSpace) != 0; }

// Case-insensitive ASCII letter test for the contraction suffixes. Under (?i) the regex crate
// also lets U+017F LATIN SMALL LETTER LONG S match 's' (simple case folding); no other
// non-ASCII character folds to one of the letters used here (d, l, m, r, s, t, v, e).
bool ci_is(const Char& c, char lower) {
    if (c.cp < 128) return (c.cp | 0x20) == static_cast<uint32_t>(lower) && ((c.cp | 0x20) >= 'a');
    return lower == 's' && c.cp == 0x017F;
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)? at p: returns the end of the optional suffix.
size_t contraction(const Text& t, size_t p) {
    if (p >= t.n() || t.s[p] != '\'') return p;
    size_t q = p + 1;
    if (q >= t.n()) return p;
    const Char c1 = t.at(q);
    if (ci_is(c1, 's') || ci_is(c1, 't') || ci_is(c1, 'm') || ci_is(c1, 'd')) return q + c1.len;
    const size_t r = q + c1.len;
    if (r >= t.n()) return p;
    const Char c2 = t.at(r);
    if ((ci_is(c1, 'r') && ci_is(c2, 'e')) || (ci_is(c1, 'v') && ci_is(c2, 'e')) || (ci_is(c1, 'l') && ci_is(c2, 'l')))
        return r + c2.len;
    return p;
}

// Whitespace run starting at pos: its end, the start of its last character, and the end of
// its last \r or \n (0 when it has none).
struct SpaceRun {
    size_t end = 0, last_start = 0, last_crlf_end = 0;
    size_t count = 0;
};
SpaceRun space_run(const Text& t, size_t pos) {
    SpaceRun r;
    size_t p = pos;
    while (p < t.n()) {
        const Char c = t.at(p);
        if (!is_space(c)) break;
        r.last_start = p;
        p += c.len;
        if (is_cr_lf(c.cp)) r.last_crlf_end = p;
        ++r.count;
    }
    r.end = p;
    return r;
}

// End of the run of characters in `set` (minus Han when no_han) starting at p. When
// last_lower_end is given, it receives the end of the run's last character that is also in
// kLowerish (0 if none). ASCII bytes take a table lookup, the rest a full decode.
size_t scan_run(const Text& t, size_t p, uint16_t set, bool no_han, size_t* last_lower_end = nullptr) {
    const uint16_t han = no_han ? uc::kHan : 0;
    const size_t n = t.n();
    const auto* s = reinterpret_cast<const uint8_t*>(t.s.data());
    while (p < n) {
        uint16_t fl;
        size_t len;
        if (s[p] < 0x80) {
            fl = t.af[s[p]];
            len = 1;
        } else {
            const Char c = uc::decode(t.s, p);
            fl = c.fl;
            len = c.len;
        }
        if (!(fl & set) || (fl & han)) break;
        p += len;
        if (last_lower_end && (fl & kLowerish)) *last_lower_end = p;
    }
    return p;
}

// The two letter branches shared by kimi-k2 (no_han = true) and o200k (no_han = false).
// Branch A: P?U*L+C?   Branch B: P?U+L*C?   (P prefix, U upperish, L lowerish, C contraction)
// Returns 0 when neither matches at pos.
size_t letter_branches(const Text& t, size_t pos, bool no_han) {
    const Char c0 = t.at(pos);
    const bool can_prefix = is_prefix(c0);
    // Branch A, first with the prefix (the greedy `?`), then without it.
    for (int with_prefix = can_prefix ? 1 : 0; with_prefix >= 0; --with_prefix) {
        const size_t p0 = with_prefix ? pos + c0.len : pos;
        size_t last_lower_end = 0;   // end of the last U-run character that is also in L
        const size_t u_end = scan_run(t, p0, kUpperish, no_han, &last_lower_end);
        size_t e = scan_run(t, u_end, kLowerish, no_han);
        if (e == u_end) e = last_lower_end;   // U* gives back its last lowerish character to L+
        if (e) return contraction(t, e);
    }
    // Branch B.
    for (int with_prefix = can_prefix ? 1 : 0; with_prefix >= 0; --with_prefix) {
        const size_t p0 = with_prefix ? pos + c0.len : pos;
        const size_t u_end = scan_run(t, p0, kUpperish, no_han);
        if (u_end == p0) continue;
        return contraction(t, scan_run(t, u_end, kLowerish, no_han));
    }
    return 0;
}

// The branches o200k and kimi-k2 share after the letters.
size_t o200k_tail(const Text& t, size_t pos, bool slash) {
    const Char c0 = t.at(pos);
    // \p{N}{1,3}
    if (c0.fl & uc::kNumber) {
        size_t p = pos + c0.len;
        for (int k = 1; k < 3 && p < t.n(); ++k) {
            const Char c = t.at(p);
            if (!(c.fl & uc::kNumber)) break;
            p += c.len;
        }
        return p;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*   (kimi-k2)  /  [\r\n/]*  (o200k)
    {
        size_t p = pos;
        if (c0.cp == ' ' && pos + 1 < t.n() && is_symbol(t.at(pos + 1))) p = pos + 1;
        const Char c = p == pos ? c0 : t.at(p);
        if (is_symbol(c)) {
            while (p < t.n()) {
                const Char d = t.at(p);
                if (!is_symbol(d)) break;
                p += d.len;
            }
            while (p < t.n() && (t.s[p] == '\r' || t.s[p] == '\n' || (slash && t.s[p] == '/'))) ++p;
            return p;
        }
    }
    // \s*[\r\n]+ | \s+(?!\S) | \s+
    if (is_space(c0)) {
        const SpaceRun r = space_run(t, pos);
        if (r.last_crlf_end) return r.last_crlf_end;
        if (r.end == t.n()) return r.end;
        if (r.count >= 2) return r.last_start;
        return r.end;
    }
    return pos + c0.len;  // not reachable: every character falls in one branch
}

size_t next_kimi(const Text& t, size_t pos) {
    const Char c0 = t.at(pos);
    if (c0.fl & uc::kHan) {  // [\p{Han}]+
        size_t p = pos + c0.len;
        while (p < t.n()) {
            const Char c = t.at(p);
            if (!(c.fl & uc::kHan)) break;
            p += c.len;
        }
        return p;
    }
    if (size_t e = letter_branches(t, pos, true)) return e;
    return o200k_tail(t, pos, false);
}

size_t next_o200k(const Text& t, size_t pos) {
    if (size_t e = letter_branches(t, pos, false)) return e;
    return o200k_tail(t, pos, true);
}

size_t next_cl100k(const Text& t, size_t pos) {
    const Char c0 = t.at(pos);
    // '(?i:[sdmt]|ll|ve|re)
    if (c0.cp == '\'' && pos + 1 < t.n()) {
        const Char c1 = t.at(pos + 1);
        if (ci_is(c1, 's') || ci_is(c1, 'd') || ci_is(c1, 'm') || ci_is(c1, 't')) return pos + 1 + c1.len;
        const size_t r = pos + 1 + c1.len;
        if (r < t.n()) {
            const Char c2 = t.at(r);
            if ((ci_is(c1, 'l') && ci_is(c2, 'l')) || (ci_is(c1, 'v') && ci_is(c2, 'e')) ||
                (ci_is(c1, 'r') && ci_is(c2, 'e')))
                return r + c2.len;
        }
    }
    // [^\r\n\p{L}\p{N}]?+\p{L}++  (possessive: a prefix character is never given back)
    {
        size_t p = is_prefix(c0) ? pos + c0.len : pos;
        size_t e = p;
        while (e < t.n()) {
            const Char c = t.at(e);
            if (!(c.fl & uc::kLetter)) break;
            e += c.len;
        }
        if (e > p) return e;
    }
    // \p{N}{1,3}+
    if (c0.fl & uc::kNumber) {
        size_t p = pos + c0.len;
        for (int k = 1; k < 3 && p < t.n(); ++k) {
            const Char c = t.at(p);
            if (!(c.fl & uc::kNumber)) break;
            p += c.len;
        }
        return p;
    }
    //  ?[^\s\p{L}\p{N}]++[\r\n]*+
    {
        size_t p = pos;
        if (c0.cp == ' ' && pos + 1 < t.n() && is_symbol(t.at(pos + 1))) p = pos + 1;
        const Char c = p == pos ? c0 : t.at(p);
        if (is_symbol(c)) {
            while (p < t.n()) {
                const Char d = t.at(p);
                if (!is_symbol(d)) break;
                p += d.len;
            }
            while (p < t.n() && (t.s[p] == '\r' || t.s[p] == '\n')) ++p;
            return p;
        }
    }
    // \s++$ | \s*[\r\n] | \s+(?!\S) | \s
    if (is_space(c0)) {
        const SpaceRun r = space_run(t, pos);
        if (r.end == t.n()) return r.end;
        if (r.last_crlf_end) return r.last_crlf_end;
        if (r.count >= 2) return r.last_start;
        return pos + c0.len;
    }
    return pos + c0.len;
}

}  // namespace

const char* pretokenizer_name(PreTokenizer p) {
    switch (p) {
        case PreTokenizer::KimiK2: return "kimi-k2";
        case PreTokenizer::O200k: return "o200k_base";
        case PreTokenizer::Cl100k: return "cl100k_base";
    }
    return "?";
}

std::optional<PreTokenizer> pretokenizer_from_name(std::string_view name) {
    if (name == "kimi-k2") return PreTokenizer::KimiK2;
    if (name == "o200k" || name == "o200k_base") return PreTokenizer::O200k;
    if (name == "cl100k" || name == "cl100k_base") return PreTokenizer::Cl100k;
    return std::nullopt;
}

size_t next_piece(PreTokenizer kind, std::string_view text, size_t pos) {
    const Text t{text, ascii().f};
    switch (kind) {
        case PreTokenizer::KimiK2: return next_kimi(t, pos);
        case PreTokenizer::O200k: return next_o200k(t, pos);
        case PreTokenizer::Cl100k: return next_cl100k(t, pos);
    }
    return pos + 1;
}

}  // namespace kinfer::text
