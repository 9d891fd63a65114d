// The one translation unit that compiles stb_image (Debian's libstb-dev header) into kinfer, so
// the decoder is built with our sanitizer / fuzzing flags and with our own dimension limit.
// Files are read by image_decode.cpp, so stb's stdio entry points are left out.
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_STDIO
#define STBI_FAILURE_USERMSG
// stb's own side limit (2^24) stays: stbi_info then reports a forged 100000 x 100000 header as
// such, and image_decode.cpp refuses it by its pixel count before anything is allocated.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wall"
#pragma GCC diagnostic ignored "-Wextra"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#include <stb/stb_image.h>
#pragma GCC diagnostic pop
