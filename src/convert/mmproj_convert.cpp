// See mmproj_convert.h.
#include "convert/mmproj_convert.h"

#include "common/error.h"
#include "convert/model_name.h"
#include "convert/numerics.h"
#include "convert/safetensors.h"
#include "gguf/writer.h"

#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

namespace kinfer::convert {

namespace fs = std::filesystem;

namespace {

nlohmann::json read_json(const fs::path& p) {
    std::ifstream f(p);
    if (!f) fail("{}: cannot open", p.string());
    try {
        return nlohmann::json::parse(f);
    } catch (const std::exception& e) {
        fail("{}: not valid JSON: {}", p.string(), e.what());
    }
}

int64_t vint(const nlohmann::json& vc, const char* key, const std::string& file) {
    if (!vc.contains(key) || !vc[key].is_number_integer() || vc[key].get<int64_t>() <= 0)
        fail("{}: vision_config.{} is missing or not a positive integer", file, key);
    return vc[key].get<int64_t>();
}

struct OutTensor {
    std::string name;
    const StTensor* src = nullptr;
    int n_dims = 1;
    int64_t ne[4] = {1, 1, 1, 1};
    bool deinterleave = false;
    quant::Type type = quant::Type::F32;
};

// HF name -> GGUF name (llama.cpp's tensor map for the kimik3 projector), or "" for none.
std::string gguf_name(const std::string& hf) {
    static const std::regex blk(R"(vision_tower\.encoder\.blocks\.(\d+)\.(norm0|norm1|wqkv|wo|mlp\.fc0|mlp\.fc1)\.weight)");
    std::smatch m;
    if (std::regex_match(hf, m, blk)) {
        const std::string part = m[2];
        const char* g = part == "norm0" ? "ln1" : part == "norm1" ? "ln2" : part == "wqkv" ? "attn_qkv"
                      : part == "wo" ? "attn_out" : part == "mlp.fc0" ? "ffn_up" : "ffn_down";
        return fmt::format("v.blk.{}.{}.weight", m[1].str(), g);
    }
    if (hf == "vision_tower.encoder.final_layernorm.weight") return "v.post_ln.weight";
    if (hf == "vision_tower.patch_embed.proj.weight") return "v.patch_embd.weight";
    if (hf == "vision_tower.patch_embed.pos_emb.weight") return "v.position_embd.weight";
    if (hf == "mm_projector.proj.0.weight") return "mm.1.weight";
    if (hf == "mm_projector.proj.2.weight") return "mm.2.weight";
    if (hf == "mm_projector.post_norm.weight") return "mm.post_norm.weight";
    return "";
}

}  // namespace

std::vector<int64_t> qkv_deinterleave_rows(int64_t n_head, int64_t head_dim) {
    const int64_t q = n_head * head_dim, d = head_dim;
    std::vector<int64_t> from(size_t(3 * q));
    for (int64_t r = 0; r < 3 * q; ++r) from[size_t(r)] = r;
    for (int64_t blk = 0; blk < 2; ++blk)          // Q, K
        for (int64_t h = 0; h < n_head; ++h)
            for (int64_t a = 0; a < d / 4; ++a)
                for (int64_t b = 0; b < 2; ++b)
                    for (int64_t c = 0; c < 2; ++c)
                        from[size_t(blk * q + h * d + b * (d / 2) + a * 2 + c)] = blk * q + h * d + a * 4 + b * 2 + c;
    return from;
}

void convert_mmproj(const std::string& dir, const std::string& output, OutType outtype, std::FILE* log) {
    const fs::path cfg_path = fs::path(dir) / "config.json";
    const nlohmann::json cfg = read_json(cfg_path);
    if (!cfg.contains("vision_config") || !cfg["vision_config"].is_object())
        fail("{}: no vision_config: this checkpoint has no vision tower for --mmproj", cfg_path.string());
    const nlohmann::json& vc = cfg["vision_config"];
    const std::string cf = cfg_path.string();
    const int64_t C = vint(vc, "vt_hidden_size", cf), F = vint(vc, "vt_intermediate_size", cf);
    const int64_t L = vint(vc, "vt_num_hidden_layers", cf), H = vint(vc, "vt_num_attention_heads", cf);
    const int64_t P = vint(vc, "patch_size", cf), text = vint(vc, "text_hidden_size", cf);
    const int64_t pos_h = vint(vc, "init_pos_emb_height", cf);
    const int64_t qkv = vc.contains("qkv_hidden_size") ? vint(vc, "qkv_hidden_size", cf) : C;
    if (qkv % H) fail("{}: qkv_hidden_size {} is not a multiple of {} heads", cf, qkv, H);
    const int64_t hd = qkv / H;
    if (hd % 4) fail("{}: head dim {} is not a multiple of 4 (2-D RoPE pairs per axis)", cf, hd);
    int64_t merge = 2;
    if (vc.contains("merge_kernel_size") && vc["merge_kernel_size"].is_array() && !vc["merge_kernel_size"].empty())
        merge = vc["merge_kernel_size"][0].get<int64_t>();
    const float eps = vc.value("projector_ln_eps", 1e-5f);

    // preprocessor_config.json: only the mean, std and patch budget matter (as llama.cpp's converter).
    std::vector<float> mean{0.5f, 0.5f, 0.5f}, stdv{0.5f, 0.5f, 0.5f};
    int64_t in_patch_limit = 16384;
    if (fs::exists(fs::path(dir) / "preprocessor_config.json")) {
        const nlohmann::json pc = read_json(fs::path(dir) / "preprocessor_config.json");
        const nlohmann::json& m = pc.contains("media_proc_cfg") ? pc["media_proc_cfg"] : pc;
        if (m.contains("image_mean")) mean = m["image_mean"].get<std::vector<float>>();
        if (m.contains("image_std")) stdv = m["image_std"].get<std::vector<float>>();
        if (m.contains("in_patch_limit")) in_patch_limit = m["in_patch_limit"].get<int64_t>();
        if (mean.size() != 3 || stdv.size() != 3) fail("{}/preprocessor_config.json: image_mean / image_std need 3 values", dir);
    }

    const Checkpoint ck = Checkpoint::open(dir);
    std::vector<OutTensor> plan;
    int64_t params = 0;
    for (const StTensor* t : ck.tensors()) {
        if (t->name.rfind("vision_tower.", 0) != 0 && t->name.rfind("mm_projector.", 0) != 0) continue;
        if (t->name.find("time_weight") != std::string::npos) continue;   // a buffer, unused for images
        OutTensor o;
        o.name = gguf_name(t->name);
        if (o.name.empty()) fail("{}: vision tensor '{}' has no GGUF name in the kimik3 projector", dir, t->name);
        if (!dtype_is_float(t->dtype)) fail("{}: vision tensor '{}' has dtype {}", dir, t->name, dtype_name(t->dtype));
        o.src = t;
        o.n_dims = int(t->shape.size());
        if (o.n_dims < 1 || o.n_dims > 4) fail("{}: vision tensor '{}' has {} dimensions", dir, t->name, o.n_dims);
        for (int i = 0; i < o.n_dims; ++i) o.ne[i] = t->shape[size_t(o.n_dims - 1 - i)];
        o.deinterleave = o.name.find("attn_qkv") != std::string::npos;
        if (o.deinterleave && (o.ne[1] != 3 * qkv || o.ne[0] != C))
            fail("{}: '{}' has shape [{}, {}], expected [{}, {}]", dir, t->name, o.ne[1], o.ne[0], 3 * qkv, C);
        if (o.n_dims >= 2 && outtype == OutType::F16) o.type = quant::Type::F16;
        else if (o.n_dims >= 2 && outtype == OutType::BF16) o.type = quant::Type::BF16;
        else if (outtype != OutType::F32 && outtype != OutType::F16 && outtype != OutType::BF16)
            fail("convert --mmproj: outtype {} is not supported for the projector (f32, f16, bf16)", int(outtype));
        params += o.ne[0] * o.ne[1] * o.ne[2] * o.ne[3];
        plan.push_back(o);
    }
    if (plan.empty()) fail("{}: no vision_tower.* / mm_projector.* tensors for --mmproj", dir);
    for (const char* need : {"v.patch_embd.weight", "v.position_embd.weight", "v.post_ln.weight", "mm.1.weight",
                             "mm.2.weight", "mm.post_norm.weight"})
        if (std::none_of(plan.begin(), plan.end(), [&](const OutTensor& o) { return o.name == need; }))
            fail("{}: the vision checkpoint lacks the tensor that becomes {}", dir, need);

    fs::path p = fs::absolute(fs::path(dir)).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    const ModelName mn = model_name_from_dir(p.filename().string(), params);
    gguf::Writer w(output);
    w.add_string("general.architecture", "clip");
    w.add_string("general.type", "mmproj");
    w.add_string("general.name", mn.name);
    if (mn.version) w.add_string("general.version", *mn.version);
    if (mn.finetune) w.add_string("general.finetune", *mn.finetune);
    if (mn.basename) w.add_string("general.basename", *mn.basename);
    w.add_string("general.size_label", mn.size_label ? *mn.size_label : size_label(params, params, 0, 0));
    w.add_u32("general.file_type", outtype == OutType::F32 ? 0 : outtype == OutType::F16 ? 1 : 32);
    w.add_bool("clip.has_vision_encoder", true);
    w.add_u32("clip.vision.projection_dim", uint32_t(text));
    w.add_u32("clip.vision.image_size", uint32_t(pos_h * P));
    w.add_u32("clip.vision.patch_size", uint32_t(P));
    w.add_u32("clip.vision.embedding_length", uint32_t(C));
    w.add_u32("clip.vision.feed_forward_length", uint32_t(F));
    w.add_u32("clip.vision.block_count", uint32_t(L));
    w.add_u32("clip.vision.attention.head_count", uint32_t(H));
    w.add_array_f32("clip.vision.image_mean", mean);
    w.add_array_f32("clip.vision.image_std", stdv);
    w.add_string("clip.projector_type", "kimik3");
    w.add_u32("clip.vision.attention.head_dim", uint32_t(hd));
    w.add_bool("clip.use_gelu", true);
    w.add_f32("clip.vision.attention.layer_norm_epsilon", eps);
    w.add_u32("clip.vision.projector.scale_factor", uint32_t(merge));
    w.add_u32("clip.vision.image_min_pixels", uint32_t(8 * P * P));
    w.add_u32("clip.vision.image_max_pixels", uint32_t(in_patch_limit * P * P));
    w.add_u32("general.quantization_version", 2);
    for (const auto& o : plan) w.add_tensor(o.name, o.type, o.ne, o.n_dims);
    fmt::print(log, "kinfer convert: {} vision tower -> {}: {} tensors, projector kimik3\n", dir, output, plan.size());

    std::vector<float> f, g;
    std::vector<uint8_t> out;
    for (const auto& o : plan) {
        const int64_t n = o.ne[0] * o.ne[1] * o.ne[2] * o.ne[3];
        f.resize(size_t(n));
        to_f32(o.src->dtype, o.src->data, f.data(), size_t(n));
        if (o.deinterleave) {
            const auto from = qkv_deinterleave_rows(H, hd);
            g.resize(f.size());
            for (size_t r = 0; r < from.size(); ++r)
                std::copy_n(&f[size_t(from[r]) * size_t(C)], size_t(C), &g[r * size_t(C)]);
            f.swap(g);
        }
        out.resize(size_t(n) * 4 + 64);
        const size_t bytes = encode_f32(o.type, f.data(), n, out.data());
        w.write(out.data(), bytes);
    }
    w.finish();
}

}  // namespace kinfer::convert
