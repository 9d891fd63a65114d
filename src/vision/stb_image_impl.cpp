// The one translation unit that compiles stb_image (Debian's libstb-dev header) into kinfer, so
// the decoder is built with our sanitizer / fuzzing flags and with our own dimension limit.
// Files are read by image_decode.cpp, so stb's stdio entry points are left out.
#include "vision/stb_alloc.h"

#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
// Every allocation through stb_alloc.h's cap (decode_image sets it per image).
#define STBI_MALLOC(sz) kinfer::vision::stb_malloc(sz)
#define STBI_REALLOC(p, sz) kinfer::vision::stb_realloc(p, sz)
#define STBI_FREE(p) kinfer::vision::stb_free(p)
#define STBI_FAILURE_USERMSG
// stb's own side limit (2^24) stays: stbi_info then reports a forged 100000 x 100000 header as
// such, and image_decode.cpp refuses it by its pixel count before anything is allocated.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
// stb 2.27's JPEG bit reader shifts a byte by 24 - code_bits, and code_bits goes negative on a
// corrupt stream: a shift by 32 or more (UBSan "shift exponent"). On x86 that only gives garbage
// bits for data that is garbage already, and the header is Debian's, not ours to patch, so the
// shift check is switched off for stb's functions; ASan and every other UBSan check stay on
// (fuzz_image found this; see docs/vision.md for the Huffman-table check kinfer adds). Likewise
// "nonnull-attribute": stbi__getn calls memcpy(NULL, src, 0) on some truncated streams (a
// zero-byte copy, harmless, but UB by the letter; found by a CI fuzz_image run).
#if defined(__clang__)
#pragma clang attribute push(__attribute__((no_sanitize("shift", "nonnull-attribute"))), apply_to = function)
#endif
#include <stb/stb_image.h>
#if defined(__clang__)
#pragma clang attribute pop
#endif
#pragma GCC diagnostic pop
