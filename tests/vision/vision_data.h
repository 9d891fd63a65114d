// Where the vision tests find their inputs: the small copies in tests/data/vision first, then
// ../shared/golden/vision (the per-stage dumps and the text model live only there).
#pragma once
#include "test_util.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace kinfer::test {

inline const char* const kVisionCases[] = {"photo", "tall", "gray", "rgba", "wide"};

// The path of vision/<rel>, or "" (and the case is marked skipped) when neither copy exists.
inline std::string vision_file(const std::string& rel) {
    const std::string local = data("vision/" + rel);
    if (std::filesystem::exists(local)) return local;
    if (have_golden("vision/" + rel)) return golden("vision/" + rel);
    return "";
}

inline std::vector<uint8_t> read_bytes(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    REQUIRE_MESSAGE(f.good(), "cannot open " << path);
    return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline std::vector<float> read_f32(const std::string& path) {
    const auto b = read_bytes(path);
    REQUIRE(b.size() % 4 == 0);
    std::vector<float> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
}

// The image file of each single-image case.
inline std::string case_image(const std::string& c) {
    if (c == "photo") return "photo_150x97.png";
    if (c == "tall") return "tall_61x203.jpg";
    if (c == "gray") return "gray_110x115.png";
    if (c == "rgba") return "rgba_24x20.png";
    return "wide_560x380.png";
}

}  // namespace kinfer::test
