#include "vision/mmproj_info.h"

#include <fmt/format.h>

namespace kinfer::vision {

using json = nlohmann::ordered_json;

json describe_mmproj(const gguf::File& f) {
    json d;
    auto num = [&](const char* key) -> json {
        const gguf::Value* v = f.find(key);
        if (!v || v->is_array()) return nullptr;
        try {
            if (v->type() == gguf::ValueType::FLOAT32 || v->type() == gguf::ValueType::FLOAT64) return v->as_float();
            return v->as_int();
        } catch (...) {
            return nullptr;
        }
    };
    const std::string proj(f.get_string_or("clip.projector_type", ""));
    d["projector"] = proj.empty() ? json(nullptr) : json(proj);
    d["supported"] = proj == "kimik3";
    d["tower_width"] = num("clip.vision.embedding_length");
    d["tower_blocks"] = num("clip.vision.block_count");
    d["heads"] = num("clip.vision.attention.head_count");
    d["head_dim"] = num("clip.vision.attention.head_dim");
    d["ffn"] = num("clip.vision.feed_forward_length");
    d["output_width"] = num("clip.vision.projection_dim");
    d["patch"] = num("clip.vision.patch_size");
    d["merge"] = num("clip.vision.projector.scale_factor");
    d["norm_eps"] = num("clip.vision.attention.layer_norm_epsilon");
    d["min_pixels"] = num("clip.vision.image_min_pixels");
    d["max_pixels"] = num("clip.vision.image_max_pixels");
    if (const auto* pe = f.find_tensor("v.position_embd.weight"); pe && pe->n_dims == 3)
        d["position_grid"] = fmt::format("{} x {}", pe->ne[1], pe->ne[2]);
    if (d["patch"].is_number_integer() && d["merge"].is_number_integer() && d["max_pixels"].is_number_integer()) {
        const int64_t p = d["patch"].get<int64_t>(), m = d["merge"].get<int64_t>();
        if (p > 0 && m > 0) d["max_tokens_per_image"] = d["max_pixels"].get<int64_t>() / (p * p * m * m);
    }
    return d;
}

std::string describe_mmproj_text(const json& d) {
    auto s = [](const json& v) -> std::string {
        if (v.is_null()) return "-";
        if (v.is_string()) return v.get<std::string>();
        if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
        return v.dump();
    };
    std::string o;
    o += fmt::format("  projector {}{}\n", s(d["projector"]), d["supported"].get<bool>() ? " (Kimi K3 MoonViT: kinfer runs it)" : " (not supported by kinfer)");
    o += fmt::format("  tower: {} blocks, width {}, {} heads x {}, ffn {}, norm eps {}\n", s(d["tower_blocks"]),
                     s(d["tower_width"]), s(d["heads"]), s(d["head_dim"]), s(d["ffn"]), s(d["norm_eps"]));
    o += fmt::format("  patches {} px, merged {} x {} into one token of width {} (the text model's n_embd)\n",
                     s(d["patch"]), s(d["merge"]), s(d["merge"]), s(d["output_width"]));
    if (d.contains("position_grid")) o += fmt::format("  learned position grid {}, resampled to each image's patch grid\n", s(d["position_grid"]));
    o += fmt::format("  image pixels {} .. {}", s(d["min_pixels"]), s(d["max_pixels"]));
    if (d.contains("max_tokens_per_image")) o += fmt::format(" (at most {} tokens per image)", s(d["max_tokens_per_image"]));
    o += "\n";
    return o;
}

}  // namespace kinfer::vision
