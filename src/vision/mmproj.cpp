#include "vision/mmproj.h"

#include "common/error.h"
#include "quant/fp16.h"
#include "quant/types.h"

#include <cstring>

namespace kinfer::vision {

namespace {

// The tensor's values as floats (any type with a dequantizer).
std::vector<float> to_floats(const gguf::TensorInfo& t, const std::string& file) {
    const auto& tr = quant::traits(t.type);
    if (!tr.to_float) fail("{}: tensor {} has type {}, which has no float conversion", file, t.name, tr.name);
    std::vector<float> v(size_t(t.nelements()));
    tr.to_float(t.data, v.data(), t.nelements());
    return v;
}

int key_int(const gguf::File& f, const char* key) {
    const int64_t v = f.get_int(key);
    if (v <= 0 || v > (1 << 20)) fail("{}: metadata {} = {} is out of range", f.path(), key, v);
    return int(v);
}

}  // namespace

bool is_mmproj_file(const gguf::File& f) { return f.architecture() == "clip"; }

Mmproj::~Mmproj() {
    for (auto& b : bufs_) be_.free(b);
}

backend::Mat Mmproj::place_mat(const gguf::TensorInfo& t, std::initializer_list<int64_t> ne, bool as_f16) {
    int i = 0;
    for (int64_t want : ne) {
        if (t.ne[i] != want)
            fail("{}: tensor {} has shape {}, expected ne[{}] = {}", path_, t.name, t.shape_str(), i, want);
        ++i;
    }
    for (; i < 4; ++i)
        if (t.ne[i] != 1) fail("{}: tensor {} has shape {}, expected {} dimensions", path_, t.name, t.shape_str(), ne.size());
    backend::Mat m;
    m.cols = t.ne[0];
    m.rows = t.nrows();
    m.name = t.name.c_str();
    std::vector<uint8_t> host;
    const uint8_t* src = t.data;
    size_t bytes = t.nbytes;
    if (as_f16 && (t.type == quant::Type::F32 || t.type == quant::Type::F16)) {
        const auto v = to_floats(t, path_);
        host.resize(v.size() * 2);
        auto* h = reinterpret_cast<quant::fp16_t*>(host.data());
        for (size_t k = 0; k < v.size(); ++k) h[k] = quant::fp32_to_fp16(v[k]);
        m.type = quant::Type::F16;
        src = host.data(), bytes = host.size();
    } else {
        m.type = t.type;
    }
    m.row_bytes = bytes / size_t(m.rows);
    backend::Buffer b = be_.alloc(bytes, t.name);
    bufs_.push_back(b);
    be_.upload(b.ptr, src, bytes);
    m.data = b.ptr;
    return m;
}

const float* Mmproj::place_vec(const gguf::TensorInfo& t, int64_t n) {
    if (t.nelements() != n || t.ne[0] != n) fail("{}: tensor {} has shape {}, expected {{{}}}", path_, t.name, t.shape_str(), n);
    const auto v = to_floats(t, path_);
    backend::Buffer b = be_.alloc(v.size() * sizeof(float), t.name);
    bufs_.push_back(b);
    be_.upload(b.ptr, v.data(), v.size() * sizeof(float));
    return reinterpret_cast<const float*>(b.ptr);
}

std::unique_ptr<Mmproj> Mmproj::load(const std::string& path, backend::Backend& be) {
    std::unique_ptr<gguf::File> f = gguf::File::open(path);
    if (!is_mmproj_file(*f))
        fail("{}: not a vision projector (mmproj) file: general.architecture is '{}', expected 'clip'", path,
             f->architecture());
    const std::string proj(f->get_string_or("clip.projector_type", ""));
    if (proj != "kimik3")
        fail("{}: projector type '{}' is not supported (kinfer runs kimik3, Kimi K3's MoonViT)", path, proj);
    std::unique_ptr<Mmproj> m(new Mmproj(path, be));
    const gguf::File* fp = f.get();
    m->file_ = std::move(f);
    VisionHParams& hp = m->hp_;
    hp.projector = proj;
    hp.n_embd = key_int(*fp, "clip.vision.embedding_length");
    hp.n_ff = key_int(*fp, "clip.vision.feed_forward_length");
    hp.n_layer = key_int(*fp, "clip.vision.block_count");
    hp.n_head = key_int(*fp, "clip.vision.attention.head_count");
    hp.head_dim = int(fp->get_int_or("clip.vision.attention.head_dim", hp.n_embd / hp.n_head));
    if (hp.head_dim <= 0 || hp.head_dim % 4 != 0)
        fail("{}: attention.head_dim {} must be a positive multiple of 4 (2-D RoPE pairs per axis)", path, hp.head_dim);
    hp.proj_dim = key_int(*fp, "clip.vision.projection_dim");
    hp.eps = float(fp->get_float_or("clip.vision.attention.layer_norm_epsilon", 1e-5));
    hp.pre.patch = key_int(*fp, "clip.vision.patch_size");
    hp.pre.merge = int(fp->get_int_or("clip.vision.projector.scale_factor", 2));
    if (hp.pre.merge < 1 || hp.pre.merge > 8) fail("{}: projector.scale_factor {} is out of range", path, hp.pre.merge);
    hp.pre.min_pixels = fp->get_int_or("clip.vision.image_min_pixels", 0);
    hp.pre.max_pixels = fp->get_int_or("clip.vision.image_max_pixels", 0);
    for (const char* key : {"clip.vision.image_mean", "clip.vision.image_std"}) {
        if (const gguf::Value* v = fp->find(key)) {
            const auto fl = v->floats();
            if (fl.size() != 3) fail("{}: {} has {} values, expected 3", path, key, fl.size());
            float* dst = std::strcmp(key, "clip.vision.image_mean") == 0 ? hp.pre.mean : hp.pre.std;
            for (int c = 0; c < 3; ++c) dst[c] = fl[size_t(c)];
        }
    }
    for (float s : hp.pre.std)
        if (!(s > 0)) fail("{}: image_std must be positive", path);

    const int C = hp.n_embd, P = hp.pre.patch, Q = hp.q_dim(), F = hp.n_ff, M = hp.merged_dim();
    m->patch_ = m->place_mat(fp->tensor("v.patch_embd.weight"), {P, P, 3, C}, /*as_f16=*/true);
    const size_t patch_bytes = m->patch_.bytes();   // viewed as C rows of (c, ky, kx)
    m->patch_.cols = int64_t(3) * P * P, m->patch_.rows = C;
    m->patch_.row_bytes = patch_bytes / size_t(C);
    const auto& pe = fp->tensor("v.position_embd.weight");
    if (pe.ne[0] != C || pe.n_dims != 3) fail("{}: v.position_embd.weight has shape {}, expected {{{}, W, H}}", path, pe.shape_str(), C);
    hp.pos_w = int(pe.ne[1]), hp.pos_h = int(pe.ne[2]);
    m->pos_ = to_floats(pe, path);
    for (int b = 0; b < hp.n_layer; ++b) {
        auto name = [&](const char* s) { return fmt::format("v.blk.{}.{}.weight", b, s); };
        VisionBlock blk;
        blk.ln1 = m->place_vec(fp->tensor(name("ln1")), C);
        blk.qkv = m->place_mat(fp->tensor(name("attn_qkv")), {C, 3 * Q});
        blk.out = m->place_mat(fp->tensor(name("attn_out")), {Q, C});
        blk.ln2 = m->place_vec(fp->tensor(name("ln2")), C);
        blk.up = m->place_mat(fp->tensor(name("ffn_up")), {C, F});
        blk.down = m->place_mat(fp->tensor(name("ffn_down")), {F, C});
        m->blocks_.push_back(blk);
    }
    m->post_ln_ = m->place_vec(fp->tensor("v.post_ln.weight"), C);
    m->mm1_ = m->place_mat(fp->tensor("mm.1.weight"), {M, M});
    m->mm2_ = m->place_mat(fp->tensor("mm.2.weight"), {M, hp.proj_dim});
    m->mm_norm_ = m->place_vec(fp->tensor("mm.post_norm.weight"), hp.proj_dim);
    return m;
}

}  // namespace kinfer::vision
