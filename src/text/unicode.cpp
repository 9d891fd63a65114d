#include "text/unicode.h"

#include <algorithm>
#include <array>
#include <vector>

namespace kinfer::text::unicode {
namespace {

#include "text/unicode_tables.inc"

uint16_t lookup_runs(uint32_t cp) {
    // Last run whose start is <= cp.
    const uint32_t key = (cp << 9) | 0x1FF;
    const uint32_t* end = kUnicodeRuns + std::size(kUnicodeRuns);
    const uint32_t* it = std::upper_bound(kUnicodeRuns, end, key);
    return static_cast<uint16_t>(it[-1] & 0x1FF);
}

// The Basic Multilingual Plane as a flat table (128 KiB), built once on first use.
const std::vector<uint16_t>& bmp_table() {
    static const std::vector<uint16_t> table = [] {
        std::vector<uint16_t> t(0x10000);
        size_t run = 0;
        const size_t n = std::size(kUnicodeRuns);
        for (uint32_t cp = 0; cp < 0x10000; ++cp) {
            while (run + 1 < n && (kUnicodeRuns[run + 1] >> 9) <= cp) ++run;
            t[cp] = static_cast<uint16_t>(kUnicodeRuns[run] & 0x1FF);
        }
        return t;
    }();
    return table;
}

}  // namespace

uint16_t flags(uint32_t cp) {
    if (cp < 0x10000) return bmp_table()[cp];
    if (cp > 0x10FFFF) return 0;
    return lookup_runs(cp);
}

Char decode(std::string_view s, size_t pos) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data()) + pos;
    const size_t left = s.size() - pos;
    const uint8_t b0 = p[0];
    if (b0 < 0x80) return {b0, 1, flags(b0)};
    uint32_t cp = 0;
    size_t n = 0;
    uint32_t min = 0;
    if ((b0 & 0xE0) == 0xC0) { cp = b0 & 0x1F; n = 2; min = 0x80; }
    else if ((b0 & 0xF0) == 0xE0) { cp = b0 & 0x0F; n = 3; min = 0x800; }
    else if ((b0 & 0xF8) == 0xF0) { cp = b0 & 0x07; n = 4; min = 0x10000; }
    else return {kInvalid, 1, 0};
    if (left < n) return {kInvalid, 1, 0};
    for (size_t i = 1; i < n; ++i) {
        if ((p[i] & 0xC0) != 0x80) return {kInvalid, 1, 0};
        cp = (cp << 6) | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {kInvalid, 1, 0};
    return {cp, static_cast<uint32_t>(n), flags(cp)};
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out += static_cast<char>(cp);
    } else if (cp < 0x800) {
        out += static_cast<char>(0xC0 | (cp >> 6));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += static_cast<char>(0xE0 | (cp >> 12));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        out += static_cast<char>(0xF0 | (cp >> 18));
        out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        out += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

size_t incomplete_utf8_tail(std::string_view s) {
    // Walk back over at most 3 continuation bytes to the lead byte.
    const size_t n = s.size();
    for (size_t k = 1; k <= 4 && k <= n; ++k) {
        const auto b = static_cast<uint8_t>(s[n - k]);
        if ((b & 0xC0) == 0x80) continue;       // continuation: keep looking
        const size_t need = utf8_len(b);
        if (b < 0x80 || need == 1) return 0;    // ASCII or a stray byte: nothing pending
        return need > k ? k : 0;                // lead byte announces more than is there
    }
    return 0;
}

}  // namespace kinfer::text::unicode
