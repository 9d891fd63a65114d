#include "vision/encoder.h"

#include "common/error.h"
#include "vision/moonshot_rules.h"
#include "vision/projector.h"

#include <chrono>

namespace kinfer::vision {

ImageEncoder::ImageEncoder(const Mmproj& mm, TowerOptions opt)
    : mm_(mm), opt_(opt), ws_(std::make_unique<backend::Workspace>(mm.backend())) {
    if (opt_.moonshot_rules) {
        opt_.tower_eps = kMoonshotTowerEps;
        opt_.erf_gelu_projector = true;
    }
}

ImageEncoder::~ImageEncoder() = default;

EncodedImage ImageEncoder::encode_file(const std::string& path, const StageHook& hook) {
    const Image img = load_image_file(path, /*keep_alpha=*/opt_.moonshot_rules);
    return encode(img, path, hook);
}

EncodedImage ImageEncoder::encode(const Image& rgb, const std::string& name, const StageHook& hook) {
    const auto t0 = std::chrono::steady_clock::now();
    const VisionHParams& hp = mm_.hparams();
    EncodedImage out;
    out.name = name;
    out.src_w = rgb.w, out.src_h = rgb.h;
    out.canvas = opt_.moonshot_rules ? make_canvas_moonshot(rgb, hp.pre, name) : make_canvas(rgb, hp.pre, name);
    const Image& cv = out.canvas.img;
    out.gw = cv.w / hp.pre.patch, out.gh = cv.h / hp.pre.patch;
    if (int64_t(out.gw) * out.gh < kMinPatches)
        fail("{}: {} x {} pixels gives {} patches, fewer than the {} the vision tower needs", name, rgb.w, rgb.h,
             out.gw * out.gh, kMinPatches);
    const auto planar = normalize_planar(cv, hp.pre);
    out.preprocess_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ws_->reset();
    const float* vit = tower_forward(mm_, *ws_, planar.data(), cv.w, cv.h, opt_, hook);
    const float* y = project_tokens(mm_, *ws_, vit, out.gw, out.gh, opt_, hook);
    out.n_tokens = int64_t(out.gw / hp.pre.merge) * (out.gh / hp.pre.merge);
    out.embd.resize(size_t(out.n_tokens * hp.proj_dim));
    mm_.backend().download(out.embd.data(), y, out.embd.size() * sizeof(float));
    ws_->reset();
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
}

}  // namespace kinfer::vision
