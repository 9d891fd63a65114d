// Building the conversion plan; see tensor_plan.h for the order rules.
#include "convert/tensor_plan.h"

#include "common/error.h"
#include "convert/hf_names.h"
#include "convert/mxfp4_repack.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

namespace kinfer::convert {

namespace {

bool ends_with(const std::string& s, std::string_view suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
    for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
    return s;
}

std::string shape_of(const std::vector<int64_t>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
}

// An optional config value: the default when absent, null or of another type.
bool cfg_bool(const HfConfig& c, const char* k, bool def) {
    return c.hp.contains(k) && c.hp[k].is_boolean() ? c.hp[k].get<bool>() : def;
}

const char* kExpertWids[3] = {"w1", "w2", "w3"};
const char* kExpertGguf[3] = {"ffn_gate_exps", "ffn_down_exps", "ffn_up_exps"};

class Planner {
public:
    Planner(const Checkpoint& ck, const HfConfig& cfg, OutType ot) : ck_(ck), cfg_(cfg), ot_(ot) {
        const auto idx = std::filesystem::path(ck.dir()) / "model.safetensors.index.json";
        where_ = std::filesystem::exists(idx) ? idx.string() : ck.dir();
    }

    Plan run();

private:
    // The name llama.cpp works with: "language_model." removed, e_score_correction_bias renamed.
    static std::string stripped(const std::string& raw) {
        std::string n = replace_all(raw, "language_model.", "");
        if (ends_with(n, "e_score_correction_bias"))
            n = n.substr(0, n.size() - 23) + "e_score_correction.bias";
        return n;
    }
    void resolve_outtype();
    void plan_mxfp4_experts();
    void visit(const StTensor& t);
    void visit_k3(const StTensor& t, const std::string& name, int bid);
    void visit_kl(const StTensor& t, const std::string& name, int bid);
    void add_expert(const StTensor& t, const std::string& name, int bid);
    void split_kvb(const StTensor& t, const std::string& name);
    void emit(const StTensor& t, const std::string& hf_name, std::vector<int64_t> numpy_shape, Xform xf = Xform::Convert);
    void push(PlanTensor p);
    quant::Type choose_type(const std::string& gguf, int n_dims, int64_t ne0, int bid) const;
    void check_shape(const StTensor& t, const std::string& name) const;
    void finish_checks();

    const Checkpoint& ck_;
    const HfConfig& cfg_;
    OutType ot_;
    std::string where_;
    Plan plan_;
    std::set<const StTensor*> consumed_;
    std::map<int, std::map<std::string, const StTensor*>> experts_;   // bid -> stripped name -> tensor
    std::map<std::string, std::pair<bool, const StTensor*>> res_parts_;   // key -> (is_proj, tensor)
};

void Planner::resolve_outtype() {
    plan_.outtype = ot_;
    if (ot_ != OutType::Auto) return;
    // llama.cpp's "auto": the first tensor with 2+ dimensions that is BF16 or F16 decides.
    plan_.outtype = OutType::F16;
    for (const StTensor* t : ck_.tensors()) {
        if (is_multimodal_tensor(t->name) || t->shape.size() < 2) continue;
        if (t->dtype == DType::BF16) { plan_.outtype = OutType::BF16; return; }
        if (t->dtype == DType::F16) { plan_.outtype = OutType::F16; return; }
    }
}

quant::Type Planner::choose_type(const std::string& g, int n_dims, int64_t ne0, int bid) const {
    using quant::Type;
    if (n_dims <= 1 || ends_with(g, "_norm.weight")) return Type::F32;
    const std::string blk = "blk." + std::to_string(bid) + ".";
    for (const char* k : {"ffn_gate_inp", "ssm_conv1d_q", "ssm_conv1d_k", "ssm_conv1d_v"})
        if (bid >= 0 && g == blk + k + ".weight") return Type::F32;
    if (!ends_with(g, ".weight")) return Type::F32;
    switch (plan_.outtype) {
        case OutType::F32: return Type::F32;
        case OutType::F16: return Type::F16;
        case OutType::BF16: return Type::BF16;
        case OutType::Q8_0: return ne0 % 32 == 0 ? Type::Q8_0 : Type::F16;   // gguf-py's fallback
        case OutType::Auto: break;
    }
    return Type::F16;
}

void Planner::check_shape(const StTensor& t, const std::string& name) const {
    const auto want = expected_shape(name, cfg_);
    if (want && *want != t.shape)
        fail("{}: tensor '{}': shape {} but {} implies {}", t.path(), t.name, t.shape_str(), cfg_.path, shape_of(*want));
}

void Planner::push(PlanTensor p) {
    plan_.out_bytes += p.nbytes();
    plan_.tensors.push_back(std::move(p));
}

// A tensor whose data is its source's, converted: numpy_shape is the (reshaped) torch shape.
void Planner::emit(const StTensor& t, const std::string& gguf, std::vector<int64_t> np, Xform xf) {
    PlanTensor p;
    p.name = gguf;
    p.xf = xf;
    p.src = {&t};
    if (np.empty()) np = {1};   // 0-d: stored as one element
    if (np.size() > 4) fail("{}: tensor '{}': {} dimensions, GGUF holds at most 4", t.path(), t.name, np.size());
    p.n_dims = int(np.size());
    for (size_t i = 0; i < np.size(); ++i) p.ne[i] = np[np.size() - 1 - i];
    const int bid = first_number(gguf);
    p.type = choose_type(gguf, p.n_dims, p.ne[0], bid);
    if (!dtype_is_float(t.dtype) && t.dtype != DType::U8 && t.dtype != DType::I8 && t.dtype != DType::I16 &&
        t.dtype != DType::I32 && t.dtype != DType::I64 && t.dtype != DType::U16 && t.dtype != DType::U32 &&
        t.dtype != DType::U64 && t.dtype != DType::BOOL)
        fail("{}: tensor '{}': dtype {} cannot be converted", t.path(), t.name, dtype_name(t.dtype));
    push(std::move(p));
}

void Planner::plan_mxfp4_experts() {
    // (bid, wid) -> expert id -> packed tensor; the scale is found by name.
    std::map<std::pair<int, int>, std::map<int, const StTensor*>> groups;
    for (const StTensor* t : ck_.tensors()) {
        const std::string n = stripped(t->name);
        if (!ends_with(n, ".weight_packed") || is_multimodal_tensor(t->name)) continue;
        // ^model.layers.(\d+).block_sparse_moe.experts.(\d+).(w[123]).weight_packed$
        int bid = -1, eid = -1, wid = -1;
        const std::string pre = "model.layers.";
        bool ok = n.compare(0, pre.size(), pre) == 0;
        if (ok) {
            bid = first_number(n);
            const std::string mid = pre + std::to_string(bid) + ".block_sparse_moe.experts.";
            ok = bid >= 0 && n.compare(0, mid.size(), mid) == 0;
            if (ok) {
                const std::string rest = n.substr(mid.size());   // "E.wK.weight_packed"
                const size_t dot = rest.find('.');
                ok = dot != std::string::npos && dot > 0 && dot < 9 &&
                     std::all_of(rest.begin(), rest.begin() + long(dot), ::isdigit);
                if (ok) {
                    eid = std::stoi(rest.substr(0, dot));
                    const std::string w = rest.substr(dot + 1);
                    for (int k = 0; k < 3; ++k)
                        if (w == std::string(kExpertWids[k]) + ".weight_packed") wid = k;
                    ok = wid >= 0;
                }
            }
        }
        if (!ok)
            fail("{}: tensor '{}': MXFP4 tensor outside the routed experts; only routed experts can be repacked",
                 t->path(), t->name);
        groups[{bid, wid}][eid] = t;
    }
    const int64_t n_exp = cfg_.n_expert;
    for (const auto& [key, experts] : groups) {
        const auto [bid, wid] = key;
        if (bid >= cfg_.n_layer)
            fail("{}: tensor '{}': layer {} but the model has {} layers", experts.begin()->second->path(),
                 experts.begin()->second->name, bid, cfg_.n_layer);
        const std::string prefix = ck_.tensors()[0]->name.rfind("language_model.", 0) == 0 ? "language_model." : "";
        for (int64_t e = 0; e < n_exp; ++e)
            if (!experts.count(int(e)))
                fail("{}: tensor '{}model.layers.{}.block_sparse_moe.experts.{}.{}.weight_packed' is missing "
                     "(layer {} {}: {} of {} experts present)", where_, prefix, bid, e, kExpertWids[wid], bid,
                     kExpertWids[wid], experts.size(), n_exp);
        if (int64_t(experts.size()) != n_exp) {
            const StTensor* extra = experts.rbegin()->second;
            fail("{}: tensor '{}': expert id {} but config.json has num_experts = {}", extra->path(), extra->name,
                 experts.rbegin()->first, n_exp);
        }
        PlanTensor p;
        int64_t rows = 0, cols = 0;
        for (const auto& [eid, packed] : experts) {
            const std::string scale_name = packed->name.substr(0, packed->name.size() - 7) + "_scale";
            const StTensor* scale = ck_.find(scale_name);
            if (!scale)
                fail("{}: tensor '{}' is missing (the scales of '{}')", where_, scale_name, packed->name);
            for (const StTensor* t : {packed, scale})
                if ((t->dtype != DType::U8 && t->dtype != DType::I8) || t->shape.size() != 2)
                    fail("{}: tensor '{}': expected a 2-D U8 tensor, found {} {}", t->path(), t->name,
                         dtype_name(t->dtype), t->shape_str());
            check_shape(*packed, stripped(packed->name));
            check_shape(*scale, stripped(scale->name));
            if (eid == 0) {
                rows = packed->shape[0];
                cols = packed->shape[1] * 2;
                if (cols % 32)
                    fail("{}: tensor '{}': {} values per row, expected a multiple of 32", packed->path(), packed->name, cols);
            }
            if (packed->shape != std::vector<int64_t>{rows, cols / 2})
                fail("{}: tensor '{}': shape {} differs from expert 0's [{}, {}]", packed->path(), packed->name,
                     packed->shape_str(), rows, cols / 2);
            if (scale->shape != std::vector<int64_t>{rows, cols / 32})
                fail("{}: tensor '{}': shape {} does not match its packed weights, expected [{}, {}]", scale->path(),
                     scale->name, scale->shape_str(), rows, cols / 32);
            p.src.push_back(packed);
            p.src.push_back(scale);
            consumed_.insert(packed);
            consumed_.insert(scale);
        }
        p.name = "blk." + std::to_string(bid) + "." + kExpertGguf[wid] + ".weight";
        p.type = quant::Type::MXFP4;
        p.xf = Xform::Mxfp4Experts;
        p.n_dims = 3;
        p.ne[0] = cols;
        p.ne[1] = rows;
        p.ne[2] = n_exp;
        push(std::move(p));
    }
}

void Planner::add_expert(const StTensor& t, const std::string& name, int bid) {
    // "model.layers.B.block_sparse_moe.experts.E.wK.weight"
    const std::string pre = "model.layers." + std::to_string(bid) + ".block_sparse_moe.experts.";
    bool ok = bid >= 0 && bid < cfg_.n_layer && name.compare(0, pre.size(), pre) == 0;
    int eid = -1;
    if (ok) {
        const std::string rest = name.substr(pre.size());
        const size_t dot = rest.find('.');
        ok = dot != std::string::npos && dot > 0 && dot < 9 && std::all_of(rest.begin(), rest.begin() + long(dot), ::isdigit);
        if (ok) {
            eid = std::stoi(rest.substr(0, dot));
            const std::string w = rest.substr(dot + 1);
            ok = eid < cfg_.n_expert && (w == "w1.weight" || w == "w2.weight" || w == "w3.weight");
        }
    }
    if (!ok)
        fail("{}: tensor '{}': not a routed expert weight of this model (layers 0..{}, experts 0..{}, w1/w2/w3)",
             t.path(), t.name, cfg_.n_layer - 1, cfg_.n_expert - 1);
    check_shape(t, name);
    auto& group = experts_[bid];
    group[name] = &t;
    if (int64_t(group.size()) < cfg_.n_expert * 3) return;
    // The layer is complete: stack w1 (gate), w2 (down), w3 (up).
    for (int k = 0; k < 3; ++k) {
        PlanTensor p;
        p.name = "blk." + std::to_string(bid) + "." + kExpertGguf[k] + ".weight";
        p.xf = Xform::StackExperts;
        for (int64_t e = 0; e < cfg_.n_expert; ++e) {
            const std::string en = pre + std::to_string(e) + "." + kExpertWids[k] + ".weight";
            const StTensor* s = group.at(en);
            if (!p.src.empty() && s->shape != p.src[0]->shape)
                fail("{}: tensor '{}': shape {} differs from expert 0's {}", s->path(), s->name, s->shape_str(),
                     p.src[0]->shape_str());
            p.src.push_back(s);
        }
        const auto& sh = p.src[0]->shape;
        if (sh.size() != 2) fail("{}: tensor '{}': expected 2 dimensions, found {}", p.src[0]->path(), p.src[0]->name, sh.size());
        p.n_dims = 3;
        p.ne[0] = sh[1];
        p.ne[1] = sh[0];
        p.ne[2] = cfg_.n_expert;
        p.type = choose_type(p.name, 3, p.ne[0], bid);
        push(std::move(p));
    }
    experts_.erase(bid);
}

void Planner::split_kvb(const StTensor& t, const std::string& name) {
    check_shape(t, name);
    const int64_t nh = cfg_.n_head_kv, nope = cfg_.qk_nope, v = cfg_.v_head;
    if (t.shape.size() != 2 || t.shape[0] != nh * (nope + v))
        fail("{}: tensor '{}': shape {}, expected [{} * ({} + {}), kv_lora_rank]", t.path(), t.name, t.shape_str(), nh, nope, v);
    const int64_t kv_lora = t.shape[1];
    const int bid = first_number(name);
    for (int k = 0; k < 2; ++k) {
        PlanTensor p;
        p.name = "blk." + std::to_string(bid) + (k == 0 ? ".attn_k_b.weight" : ".attn_v_b.weight");
        p.xf = k == 0 ? Xform::KvbK : Xform::KvbV;
        p.src = {&t};
        p.p0 = nh;
        p.p1 = nope;
        p.p2 = v;
        p.n_dims = 3;
        if (k == 0) { p.ne[0] = nope; p.ne[1] = kv_lora; }
        else { p.ne[0] = kv_lora; p.ne[1] = v; }
        p.ne[2] = nh;
        p.type = choose_type(p.name, 3, p.ne[0], bid);
        push(std::move(p));
    }
}

void Planner::visit(const StTensor& t) {
    if (consumed_.count(&t)) return;
    if (is_multimodal_tensor(t.name)) {
        plan_.skipped.push_back(t.name);
        return;
    }
    const std::string name = stripped(t.name);
    for (const char* suf : {".attention.masked_bias", ".attention.bias", ".rotary_emb.inv_freq"})
        if (ends_with(name, suf)) return;
    const int bid = first_number(name);
    if (name.rfind("model.layers.", 0) == 0 && (bid < 0 || bid >= cfg_.n_layer))
        fail("{}: tensor '{}': layer {} but config.json has num_hidden_layers = {}", t.path(), t.name, bid, cfg_.n_layer);
    if (cfg_.arch == ModelArch::KimiK3) visit_k3(t, name, bid);
    else visit_kl(t, name, bid);
}

// Conv weights [d_inner, 1, W] or [d_inner, W] -> numpy (1, d_inner, 1, W): tap index fastest.
std::vector<int64_t> conv_shape(const StTensor& t, const HfConfig& c) {
    const int64_t di = c.kda_heads * c.kda_head_dim;
    const auto& s = t.shape;
    if (!((s.size() == 3 && s[1] == 1) || s.size() == 2) || s[0] != di || s.back() != c.conv_kernel)
        fail("{}: tensor '{}': shape {}, expected [{}, 1, {}] (d_inner, 1, conv kernel)", t.path(), t.name,
             t.shape_str(), di, c.conv_kernel);
    return {1, s[0], 1, s.back()};
}

void Planner::visit_k3(const StTensor& t, const std::string& name, int bid) {
    // AttnRes: <x>_res_norm * <x>_res_proj -> one f32 score vector, emitted at the second part.
    static const std::pair<const char*, const char*> kRes[] = {
        {"self_attention_res", "attn_res_score"}, {"mlp_res", "ffn_res_score"}, {"output_attn_res", "output_res_score"}};
    for (const auto& [prefix, gguf] : kRes) {
        for (int proj = 0; proj < 2; ++proj) {
            if (!ends_with(name, std::string(prefix) + (proj ? "_proj.weight" : "_norm.weight"))) continue;
            check_shape(t, name);
            const std::string key = std::string(prefix) + "." + std::to_string(bid);
            auto other = res_parts_.find(key);
            if (other == res_parts_.end()) {
                res_parts_[key] = {proj == 1, &t};
                return;
            }
            if (other->second.first == (proj == 1))
                fail("{}: tensor '{}': a second {} part for {}", t.path(), t.name, proj ? "proj" : "norm", key);
            const StTensor* norm = proj ? other->second.second : &t;
            const StTensor* pr = proj ? &t : other->second.second;
            res_parts_.erase(other);
            if (norm->numel() != pr->numel())
                fail("{}: tensor '{}': {} elements but its pair '{}' has {}", t.path(), t.name, t.numel(),
                     (proj ? norm : pr)->name, (proj ? pr : norm)->numel());
            PlanTensor p;
            p.name = std::string(bid >= 0 ? "blk." + std::to_string(bid) + "." : "") + gguf + ".weight";
            p.xf = Xform::FuseRes;
            p.src = {norm, pr};
            p.n_dims = 1;
            p.ne[0] = norm->numel();
            p.type = quant::Type::F32;
            push(std::move(p));
            return;
        }
    }
    if (ends_with(name, ".q_conv1d.weight") || ends_with(name, ".k_conv1d.weight") || ends_with(name, ".v_conv1d.weight")) {
        auto np = conv_shape(t, cfg_);
        const auto g = map_hf_name(name, cfg_.arch);
        return emit(t, *g, np);
    }
    if (ends_with(name, ".A_log")) {
        // -exp(A_log.float()[:n_head]): drops the zero padding of the real 96 -> 128 heads.
        if (t.shape.size() != 1 || t.shape[0] < cfg_.n_head)
            fail("{}: tensor '{}': shape {}, expected 1-D with at least num_attention_heads = {} values", t.path(),
                 t.name, t.shape_str(), cfg_.n_head);
        PlanTensor p;
        p.name = *map_hf_name(name, cfg_.arch);
        p.xf = Xform::NegExpHeads;
        p.src = {&t};
        p.p0 = cfg_.n_head;
        p.n_dims = 1;
        p.ne[0] = cfg_.n_head;
        p.type = quant::Type::F32;
        return push(std::move(p));
    }
    if (ends_with(name, ".self_attn.g_proj.weight")) {
        check_shape(t, name);
        const std::string g = "blk." + std::to_string(bid) + (cfg_.is_mla(bid) ? ".attn_gate.weight" : ".ssm_g.weight");
        return emit(t, g, t.shape);
    }
    if (name.find(".block_sparse_moe.experts.") != std::string::npos) return add_expert(t, name, bid);
    if (ends_with(name, "kv_b_proj.weight")) return split_kvb(t, name);
    std::string n = name;
    if (ends_with(n, ".dt_bias")) n = n.substr(0, n.size() - 8) + ".dt_proj.bias";
    const auto g = map_hf_name(n, cfg_.arch);
    if (!g) fail("{}: tensor '{}': not a tensor of a {} model (no GGUF name for it)", t.path(), t.name, cfg_.gguf_arch);
    check_shape(t, name);
    emit(t, *g, t.shape);
}

void Planner::visit_kl(const StTensor& t, const std::string& name, int bid) {
    std::vector<int64_t> np = t.shape;
    if (ends_with(name, ".q_conv1d.weight") || ends_with(name, ".k_conv1d.weight") || ends_with(name, ".v_conv1d.weight"))
        np = conv_shape(t, cfg_);
    if (ends_with(name, ".A_log")) {
        // -exp(A_log), keeping the checkpoint's [1, 1, H, 1] shape.
        if (t.numel() != cfg_.kda_heads)
            fail("{}: tensor '{}': shape {}, expected {} values (linear_attn_config.num_heads)", t.path(), t.name,
                 t.shape_str(), cfg_.kda_heads);
        return emit(t, *map_hf_name(name, cfg_.arch), np, Xform::NegExp);
    }
    if (name.find("block_sparse_moe.experts") != std::string::npos) return add_expert(t, name, bid);
    if (ends_with(name, "kv_b_proj.weight")) return split_kvb(t, name);
    std::string n = name;
    if (ends_with(n, ".dt_bias")) n = n.substr(0, n.size() - 8) + ".dt_proj.bias";
    const auto g = map_hf_name(n, cfg_.arch);
    if (!g) fail("{}: tensor '{}': not a tensor of a {} model (no GGUF name for it)", t.path(), t.name, cfg_.gguf_arch);
    if (np == t.shape) check_shape(t, name);
    emit(t, *g, np);
}

void Planner::finish_checks() {
    const std::string prefix = cfg_.arch == ModelArch::KimiK3 ? "language_model." : "";
    for (const auto& [bid, group] : experts_) {
        for (int64_t e = 0; e < cfg_.n_expert; ++e)
            for (const char* w : kExpertWids) {
                const std::string n = "model.layers." + std::to_string(bid) + ".block_sparse_moe.experts." +
                                      std::to_string(e) + "." + w + ".weight";
                if (!group.count(n))
                    fail("{}: tensor '{}{}' is missing (layer {} has {} of {} expert tensors)", where_, prefix, n, bid,
                         group.size(), cfg_.n_expert * 3);
            }
    }
    if (!res_parts_.empty()) {
        const StTensor* t = res_parts_.begin()->second.second;
        fail("{}: tensor '{}': its AttnRes {} partner is missing", t->path(), t->name,
             res_parts_.begin()->second.first ? "_norm" : "_proj");
    }
    // Every tensor the model needs is checked against the loader's own list once the metadata
    // exists (plan_check.h). One rule the list cannot know: a checkpoint whose config says its MLA
    // layers have an output gate must give one (the loader treats the gate as optional, since
    // files without one are valid models).
    if (cfg_.arch == ModelArch::KimiK3 && cfg_bool(cfg_, "mla_use_output_gate", false)) {
        std::set<std::string> have;
        for (const auto& p : plan_.tensors) have.insert(p.name);
        for (int64_t il = 0; il < cfg_.n_layer; ++il) {
            const std::string g = "blk." + std::to_string(il) + ".attn_gate.weight";
            if (cfg_.is_mla(il) && !have.count(g))
                fail("{}: tensor '{}' is missing (needed for GGUF tensor '{}')", where_, prefix + hf_source_hint(g), g);
        }
    }
}

Plan Planner::run() {
    // Quantized checkpoints other than K3's MXFP4 experts would need a dequantization step
    // (fp8 block scales, ...) that kinfer does not have: refuse instead of writing garbage.
    if (cfg_.hp.contains("quantization_config") && cfg_.hp["quantization_config"].is_object() &&
        !(cfg_.arch == ModelArch::KimiK3 && cfg_.mxfp4_packed)) {
        const auto& q = cfg_.hp["quantization_config"];
        fail("{}: quantization_config (quant_method {}, format {}) is not supported for {}; kinfer converts "
             "BF16 / F16 / F32 checkpoints and K3's compressed-tensors MXFP4 experts",
             cfg_.path, q.contains("quant_method") ? q["quant_method"].dump() : "none",
             q.contains("format") ? q["format"].dump() : "none", cfg_.gguf_arch);
    }
    plan_.source = where_;
    resolve_outtype();
    if (cfg_.arch == ModelArch::KimiK3 && cfg_.mxfp4_packed) plan_mxfp4_experts();
    for (const StTensor* t : ck_.tensors()) visit(*t);
    finish_checks();
    switch (plan_.outtype) {
        case OutType::F32: plan_.file_type = 0; break;
        case OutType::F16: plan_.file_type = 1; break;
        case OutType::BF16: plan_.file_type = 32; break;
        case OutType::Q8_0: plan_.file_type = 7; break;
        case OutType::Auto: break;
    }
    // K3 labels its file MOSTLY_MXFP4_MOE whenever the experts come as MXFP4.
    if (cfg_.arch == ModelArch::KimiK3 && cfg_.mxfp4_packed) plan_.file_type = 38;
    return std::move(plan_);
}

}  // namespace

size_t PlanTensor::nbytes() const {
    const quant::Traits& t = quant::traits(type);
    return quant::row_size(t, ne[0]) * size_t(ne[1] * ne[2] * ne[3]);
}

std::string PlanTensor::shape_str() const {
    std::string s = "{";
    for (int i = 0; i < n_dims; ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "}";
}

std::string PlanTensor::describe() const {
    const std::string first = src.empty() ? "" : src[0]->name;
    switch (xf) {
        case Xform::Convert: return first;
        case Xform::NegExp: return "-exp(" + first + ")";
        case Xform::NegExpHeads: return "-exp(" + first + "[:" + std::to_string(p0) + "])";
        case Xform::StackExperts: return "stack " + std::to_string(src.size()) + " x " + first;
        case Xform::Mxfp4Experts: return "MXFP4 repack " + std::to_string(src.size() / 2) + " x " + first;
        case Xform::KvbK: return first + " [:, :nope]^T";
        case Xform::KvbV: return first + " [:, nope:]";
        case Xform::FuseRes: return first + " * " + (src.size() > 1 ? src[1]->name : "");
    }
    return first;
}

Plan make_plan(const Checkpoint& ck, const HfConfig& cfg, OutType outtype) { return Planner(ck, cfg, outtype).run(); }

}  // namespace kinfer::convert
