// One image file to the rows the text model reads: decode -> canvas -> planar floats -> tower
// -> merge + projector, on the mmproj's backend. The result is on the host.
//
//   vision::ImageEncoder enc(*mmproj);
//   auto img = enc.encode_file("cat.jpg");      // img.embd: [img.n_tokens x proj_dim]
#pragma once
#include "vision/mmproj.h"
#include "vision/preprocess.h"
#include "vision/tower.h"

#include <memory>
#include <string>
#include <vector>

namespace kinfer::vision {

struct EncodedImage {
    std::string name;
    int src_w = 0, src_h = 0;     // as decoded
    Canvas canvas;                // the tower's input, and where the image lies in it
    int gw = 0, gh = 0;           // patch grid
    int64_t n_tokens = 0;
    std::vector<float> embd;      // [n_tokens x proj_dim]
    double seconds = 0;           // preprocessing + tower + projector
    double preprocess_seconds = 0;   // the canvas and normalisation alone (mtmd times them apart)
};

// The fewest patches an image may give (image_min_pixels is 8 patches in Kimi K3's files).
constexpr int kMinPatches = 8;

class ImageEncoder {
public:
    explicit ImageEncoder(const Mmproj& mm, TowerOptions opt = {});
    ~ImageEncoder();
    // Throws kinfer::Error naming the file for an unreadable or unusable image.
    EncodedImage encode_file(const std::string& path, const StageHook& hook = {});
    EncodedImage encode(const Image& rgb, const std::string& name, const StageHook& hook = {});
    const Mmproj& mmproj() const { return mm_; }

private:
    const Mmproj& mm_;
    TowerOptions opt_;
    std::unique_ptr<backend::Workspace> ws_;
};

}  // namespace kinfer::vision
