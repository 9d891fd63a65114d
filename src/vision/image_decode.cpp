#include "vision/image_decode.h"

#include "common/error.h"
#include "vision/stb_alloc.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <sys/stat.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#define STBI_NO_STDIO
#include <stb/stb_image.h>
#pragma GCC diagnostic pop

namespace kinfer::vision {

namespace {

constexpr size_t kMaxFileBytes = size_t(256) << 20;

struct StbFree {
    void operator()(unsigned char* p) const { stbi_image_free(p); }
};

// The size a PNG, GIF, BMP or JPEG header claims, read without stb: stb's probe refuses an
// absurd size without saying so (later format probes overwrite its reason), and the message
// should name the size.
bool header_size(std::span<const uint8_t> b, int64_t& w, int64_t& h) {
    auto be32 = [&](size_t i) { return int64_t(b[i]) << 24 | int64_t(b[i + 1]) << 16 | int64_t(b[i + 2]) << 8 | b[i + 3]; };
    auto le32 = [&](size_t i) { return int64_t(int32_t(uint32_t(b[i]) | uint32_t(b[i + 1]) << 8 | uint32_t(b[i + 2]) << 16 | uint32_t(b[i + 3]) << 24)); };
    if (b.size() >= 24 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0 && std::memcmp(b.data() + 12, "IHDR", 4) == 0) {
        w = be32(16), h = be32(20);
        return true;
    }
    if (b.size() >= 10 && std::memcmp(b.data(), "GIF8", 4) == 0) {
        w = b[6] | b[7] << 8, h = b[8] | b[9] << 8;
        return true;
    }
    if (b.size() >= 26 && b[0] == 'B' && b[1] == 'M') {
        w = le32(18), h = le32(22);
        if (h < 0) h = -h;   // top-down rows
        return true;
    }
    if (b.size() >= 4 && b[0] == 0xFF && b[1] == 0xD8) {   // JPEG: walk the segments to a SOFn
        size_t i = 2;
        while (i + 9 < b.size() && b[i] == 0xFF) {
            const uint8_t m = b[i + 1];
            const size_t len = size_t(b[i + 2]) << 8 | b[i + 3];
            if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
                h = int64_t(b[i + 5]) << 8 | b[i + 6], w = int64_t(b[i + 7]) << 8 | b[i + 8];
                return true;
            }
            i += 2 + len;
        }
    }
    return false;
}

// stb_image 2.27 (Debian's) writes past its Huffman size table when a JPEG DHT segment declares
// more than 256 codes (newer stb refuses it as "bad DHT header"); refuse those files first.
bool jpeg_huffman_ok(std::span<const uint8_t> b) {
    // stb takes any run of 0xFF fill bytes before a marker, the first one (SOI) included.
    size_t i = 0;
    while (i < b.size() && b[i] == 0xFF) ++i;
    if (i == 0 || i >= b.size() || b[i] != 0xD8) return true;   // not a JPEG
    ++i;
    while (i + 4 <= b.size()) {
        if (b[i] != 0xFF) {   // entropy-coded data (after SOS): on to the next marker
            ++i;
            continue;
        }
        const uint8_t m = b[i + 1];
        if (m == 0x00 || m == 0xFF || m == 0x01 || m == 0xD8 || (m >= 0xD0 && m <= 0xD7)) {   // no length
            i += m == 0xFF ? 1 : 2;
            continue;
        }
        if (m == 0xD9) break;
        const size_t len = size_t(b[i + 2]) << 8 | b[i + 3];
        if (m == 0xC4) {
            // As stb reads it: tables until the segment length is used up, each 1 + 16 count
            // bytes and then that many values (a short segment reads on past its end).
            size_t at = i + 4;
            const size_t end = i + 2 + len;
            while (at < end && at < b.size()) {
                size_t n = 0;   // bytes past the end of the file read as 0, as stb's get8 does
                for (size_t k = 1; k <= 16 && at + k < b.size(); ++k) n += b[at + k];
                if (n > 256) return false;
                at += 17 + n;
            }
        }
        i += 2 + std::max<size_t>(len, 2);
    }
    return true;
}

// stb_image grows its buffer for the compressed pixels to the length an IDAT chunk declares
// before it reads the chunk: a 483-byte file declaring a 1 GiB chunk had it allocate 2 GiB
// (found by fuzz_image). So every chunk up to IEND must fit in the file. Returns what is wrong,
// or an empty string (also for a file that is not a PNG).
std::string png_chunk_problem(std::span<const uint8_t> b) {
    if (b.size() < 8 || std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) != 0) return {};
    size_t i = 8;
    while (b.size() - i >= 8) {
        const uint64_t len = uint64_t(b[i]) << 24 | uint64_t(b[i + 1]) << 16 | uint64_t(b[i + 2]) << 8 | b[i + 3];
        const uint8_t* t = b.data() + i + 4;
        if (std::memcmp(t, "IEND", 4) == 0) break;   // stb stops here without reading its length
        if (len > b.size() - i - 8) {
            const bool letters = std::all_of(t, t + 4, [](uint8_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; });
            const std::string type = letters ? std::string(reinterpret_cast<const char*>(t), 4)
                                             : fmt::format("{:02x} {:02x} {:02x} {:02x}", t[0], t[1], t[2], t[3]);
            return fmt::format("chunk '{}' at offset {} declares {} bytes, {} remain in the file", type, i, len, b.size() - i - 8);
        }
        i += 12 + size_t(len);
        if (i > b.size()) break;   // the last chunk's CRC is cut short: stb says so
    }
    return {};
}

}  // namespace

Image decode_image(std::span<const uint8_t> bytes, const std::string& name, bool keep_alpha, int64_t max_pixels) {
    if (bytes.empty()) fail("{}: empty file, not an image", name);
    if (bytes.size() > size_t(INT32_MAX)) fail("{}: {} bytes is too large for an image file", name, bytes.size());
    const auto* data = reinterpret_cast<const stbi_uc*>(bytes.data());
    const int len = int(bytes.size());
    // Read the header first: the size is checked before stb allocates the pixels.
    int w = 0, h = 0, comp = 0;
    if (!jpeg_huffman_ok(bytes)) fail("{}: corrupt JPEG: a Huffman table declares more than 256 codes", name);
    if (const std::string why = png_chunk_problem(bytes); !why.empty()) fail("{}: corrupt PNG: {}", name, why);
    if (!stbi_info_from_memory(data, len, &w, &h, &comp)) {
        int64_t hw = 0, hh = 0;
        if (header_size(bytes, hw, hh)) {
            if (hw <= 0 || hh <= 0) fail("{}: the header says the image is {} x {} pixels", name, hw, hh);
            if (hw > max_pixels || hh > max_pixels || hw * hh > max_pixels)   // each < 2^32: no overflow
                fail("{}: {} x {} pixels is larger than the {} pixels kinfer accepts", name, hw, hh, max_pixels);
        }
        fail("{}: not an image kinfer can read (PNG, JPEG, BMP, GIF, ...): {}", name, stbi_failure_reason());
    }
    if (w <= 0 || h <= 0) fail("{}: the image is {} x {} pixels", name, w, h);
    if (int64_t(w) * int64_t(h) > max_pixels)
        fail("{}: {} x {} pixels is larger than the {} pixels kinfer accepts", name, w, h, max_pixels);
    const int want = keep_alpha ? 4 : 3;
    int dw = 0, dh = 0, dc = 0;
    // No stb buffer needs more than 16 bytes a pixel (an HDR file's floats; 16-bit RGBA PNG: 8),
    // with room for a JPEG's MCU padding, or twice the file (a PNG's compressed stream, grown by
    // doubling): past that stb fails ("out of memory") rather than inflate without end.
    const StbAllocCap cap(16 * (size_t(w) + 64) * (size_t(h) + 64) + 2 * bytes.size() + (size_t(1) << 20));
    std::unique_ptr<unsigned char, StbFree> px(stbi_load_from_memory(data, len, &dw, &dh, &dc, want));
    if (!px) fail("{}: cannot decode the image ({} x {}): {}", name, w, h, stbi_failure_reason());
    if (dw != w || dh != h) fail("{}: the header says {} x {} but {} x {} pixels decoded", name, w, h, dw, dh);
    Image img;
    img.w = w, img.h = h, img.channels = want;
    img.px.assign(px.get(), px.get() + size_t(w) * size_t(h) * size_t(want));
    return img;
}

Image load_image_file(const std::string& path, bool keep_alpha) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail("{}: cannot open image: {}", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("{}: not a regular file", path);
    if (size_t(st.st_size) > kMaxFileBytes) fail("{}: {} bytes is larger than an image file kinfer reads", path, st.st_size);
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
    if (!f) fail("{}: cannot open image: {}", path, std::strerror(errno));
    std::vector<uint8_t> bytes(size_t(st.st_size));
    if (!bytes.empty() && std::fread(bytes.data(), 1, bytes.size(), f.get()) != bytes.size())
        fail("{}: reading the image failed", path);
    return decode_image(bytes, path, keep_alpha);
}

}  // namespace kinfer::vision
