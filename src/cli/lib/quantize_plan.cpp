// The per-tensor rules of llama-quantize (llama.cpp src/llama-quant.cpp), restated for the
// file types kinfer offers. Each rule below names the llama.cpp behaviour it reproduces; the
// golden llama-quantize logs in shared/golden/llama.cpp/models are the ground truth.
#include "cli/lib/quantize_plan.h"

#include "common/error.h"
#include "gguf/reader.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace kinfer::cli {

using quant::Type;

namespace {

struct FtypeName {
    const char* name;
    Ftype ftype;
};

// Canonical names first (ftype_name returns the first match), then llama-quantize's aliases.
const FtypeName kFtypeNames[] = {
    {"F32", Ftype::ALL_F32}, {"F16", Ftype::F16}, {"BF16", Ftype::BF16},
    {"Q8_0", Ftype::Q8_0}, {"Q4_0", Ftype::Q4_0}, {"Q4_1", Ftype::Q4_1},
    {"Q5_0", Ftype::Q5_0}, {"Q5_1", Ftype::Q5_1},
    {"Q2_K", Ftype::Q2_K}, {"Q3_K_S", Ftype::Q3_K_S}, {"Q3_K_M", Ftype::Q3_K_M},
    {"Q3_K_L", Ftype::Q3_K_L}, {"Q4_K_S", Ftype::Q4_K_S}, {"Q4_K_M", Ftype::Q4_K_M},
    {"Q5_K_S", Ftype::Q5_K_S}, {"Q5_K_M", Ftype::Q5_K_M}, {"Q6_K", Ftype::Q6_K},
    {"IQ4_NL", Ftype::IQ4_NL}, {"IQ4_XS", Ftype::IQ4_XS}, {"MXFP4_MOE", Ftype::MXFP4_MOE},
    // aliases
    {"Q3_K", Ftype::Q3_K_M}, {"Q4_K", Ftype::Q4_K_M}, {"Q5_K", Ftype::Q5_K_M},
    {"MXFP4", Ftype::MXFP4_MOE},
};

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (std::toupper(uint8_t(a[i])) != std::toupper(uint8_t(b[i]))) return false;
    return true;
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }
bool ends_with(const std::string& s, std::string_view suf) {
    return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0;
}

// "blk.N." -> N, or -1 (llama.cpp reads it with sscanf("blk.%d.")).
int layer_of(const std::string& name) {
    if (name.rfind("blk.", 0) != 0) return -1;
    size_t i = 4;
    bool neg = false;
    if (i < name.size() && (name[i] == '-' || name[i] == '+')) neg = name[i++] == '-';
    if (i >= name.size() || !std::isdigit(uint8_t(name[i]))) return -1;
    long v = 0;
    while (i < name.size() && std::isdigit(uint8_t(name[i])) && v < (1L << 30)) v = v * 10 + (name[i++] - '0');
    return int(neg ? -v : v);
}

int64_t block_size(Type t) { return quant::traits(t).block_size; }
const char* tname(Type t) { return quant::traits(t).name; }

// llama.cpp's broad tensor categories (tensor_get_category): substring matches on the name.
enum class Category { TOKEN_EMBD, OUTPUT, ATTN_QKV, ATTN_KV_B, ATTN_V, ATTN_K, ATTN_Q, ATTN_OUTPUT, FFN_UP, FFN_GATE, FFN_DOWN, OTHER };

Category category_of(const std::string& n) {
    if (n == "output.weight") return Category::OUTPUT;
    if (n == "token_embd.weight" || n == "per_layer_token_embd.weight") return Category::TOKEN_EMBD;
    if (contains(n, "attn_qkv.weight")) return Category::ATTN_QKV;
    if (contains(n, "attn_kv_b.weight")) return Category::ATTN_KV_B;
    if (contains(n, "attn_v.weight")) return Category::ATTN_V;
    if (contains(n, "attn_k.weight")) return Category::ATTN_K;
    if (contains(n, "attn_q.weight")) return Category::ATTN_Q;
    if (contains(n, "attn_output.weight")) return Category::ATTN_OUTPUT;
    // Note: ffn_routed_{up,down} and ffn_gate_inp do not match these ("ffn_gate" does match
    // ffn_gate_inp, which is never quantized anyway).
    if (contains(n, "ffn_up")) return Category::FFN_UP;
    if (contains(n, "ffn_gate")) return Category::FFN_GATE;
    if (contains(n, "ffn_down")) return Category::FFN_DOWN;
    return Category::OTHER;
}

bool is_attn_v_like(Category c) { return c == Category::ATTN_V || c == Category::ATTN_QKV || c == Category::ATTN_KV_B; }

int ggml_n_dims(const int64_t ne[4]) {
    for (int i = 3; i >= 1; --i)
        if (ne[i] > 1) return i + 1;
    return 1;
}

// tensor_allows_quantization: only 2-D+ "...weight" tensors, minus norms, the router, conv
// weights and a list of small or special tensors of other architectures.
bool allows_quantization(const TensorDesc& t, const QuantizeOptions& opt) {
    if (ggml_n_dims(t.ne) < 2) return false;
    const std::string& n = t.name;
    if (!ends_with(n, "weight")) return false;
    if (contains(n, "_norm.weight")) return false;
    if (!opt.quantize_output_tensor && n == "output.weight") return false;
    static const char* const kNever[] = {
        "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight",
        "time_mix_first.weight", "time_mix_w0.weight", "time_mix_w1.weight", "time_mix_w2.weight",
        "time_mix_v0.weight", "time_mix_v1.weight", "time_mix_v2.weight", "time_mix_a0.weight",
        "time_mix_a1.weight", "time_mix_a2.weight", "time_mix_g1.weight", "time_mix_g2.weight",
        "time_mix_decay_w1.weight", "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight",
        "attn_rel_b.weight", ".position_embd", "sam.pos_embd", "sam.neck.", "sam.net_", ".rel_pos",
        ".patch_embd", ".patch_merger", "a.rvq.codebook", "mm.a.code_embd",
    };
    for (const char* s : kNever)
        if (contains(n, s)) return false;
    if (n == "position_embd.weight" || n == "token_types.weight") return false;
    return true;
}

// Running state of one planning pass (llama.cpp's quantize_state_impl).
struct State {
    const ModelDesc& m;
    const QuantizeOptions& opt;
    bool tied_embeddings = true;   // no output.weight: token_embd doubles as the output
    int n_attention_wv = 0, i_attention_wv = 0;
    int i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
    int n_fallback = 0;
};

// More bits for the first and last eighth of the layers and every third one in between.
bool use_more_bits(int i_layer, int n_layers) {
    return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// With more than one expert llama.cpp takes the layer from the name (expert tensors need not
// be consecutive); otherwise it counts tensors of the category.
int layer_index(const State& s, int counter, const std::string& name) {
    if (s.m.n_expert <= 1) return counter;
    const int il = layer_of(name);
    if (name.rfind("blk.", 0) != 0 || il == -1) fail("quantize: cannot determine the layer of tensor {}", name);
    if (il < 0 || il >= s.m.n_layer) fail("quantize: bad layer {} for tensor {}, must be in [0, {})", il, name, s.m.n_layer);
    return il;
}

// llama_tensor_get_type_impl, for the file types of kinfer's table (the IQ1/IQ2/IQ3/TQ branches
// of llama.cpp are omitted because kinfer does not offer those file types; the Falcon and
// LLaMA-70B special cases do not apply to Kimi models).
Type mixture_type(State& s, Type t, const TensorDesc& td, Category cat) {
    const Ftype ft = s.opt.ftype;
    const std::string& name = td.name;
    const int n_expert = s.m.n_expert;

    if (cat == Category::OUTPUT || (s.tied_embeddings && cat == Category::TOKEN_EMBD)) {
        if (s.opt.output_tensor_type) return *s.opt.output_tensor_type;
        if (ft == Ftype::MXFP4_MOE) return Type::Q8_0;
        if (td.ne[0] % block_size(t) != 0) return Type::Q8_0;
        if (t != Type::Q8_0) return Type::Q6_K;
        return t;
    }
    if (ft == Ftype::MXFP4_MOE) {
        // "ne[2] > 1 -> MXFP4": routed experts, and (a llama.cpp quirk, README section 7) the
        // 3-D MLA attn_k_b / attn_v_b too. Only BailingMoE3 restricts it to the FFN experts.
        const bool ffn = cat == Category::FFN_UP || cat == Category::FFN_GATE || cat == Category::FFN_DOWN;
        if (td.ne[2] > 1 && (s.m.arch != "bailingmoe3" || ffn)) return Type::MXFP4;
        return Type::Q8_0;
    }
    if (cat == Category::TOKEN_EMBD) return t;   // only IQ/TQ file types change it

    if (is_attn_v_like(cat)) {
        const int gqa = s.m.n_gqa;
        if (ft == Ftype::Q2_K) t = gqa >= 4 ? Type::Q4_K : Type::Q3_K;
        else if (ft == Ftype::Q3_K_M) t = s.i_attention_wv < 2 ? Type::Q5_K : Type::Q4_K;
        else if (ft == Ftype::Q3_K_L) t = Type::Q5_K;
        else if ((ft == Ftype::IQ4_NL || ft == Ftype::IQ4_XS) && gqa >= 4) t = Type::Q5_K;
        else if ((ft == Ftype::Q4_K_M || ft == Ftype::Q5_K_M) && use_more_bits(s.i_attention_wv, s.n_attention_wv)) t = Type::Q6_K;
        else if (ft == Ftype::Q4_K_S && s.i_attention_wv < 4) t = Type::Q5_K;
        if (n_expert == 8) t = Type::Q8_0;   // llama.cpp: cheap win for 8-expert models
        ++s.i_attention_wv;
        return t;
    }
    if (cat == Category::ATTN_K) return n_expert == 8 ? Type::Q8_0 : t;
    if (cat == Category::ATTN_Q) return t;
    if (cat == Category::FFN_DOWN) {
        const int il = layer_index(s, s.i_ffn_down, name);
        const int nl = s.m.n_layer;
        if (ft == Ftype::Q2_K) t = Type::Q3_K;
        else if (ft == Ftype::Q3_K_M) t = il < nl / 16 ? Type::Q5_K : Type::Q4_K;   // non-Falcon
        else if (ft == Ftype::Q3_K_L) t = Type::Q5_K;
        else if (ft == Ftype::Q4_K_M) { if (use_more_bits(il, nl)) t = Type::Q6_K; }
        else if (il < nl / 8 && (ft == Ftype::IQ4_NL || ft == Ftype::IQ4_XS)) t = Type::Q5_K;   // no imatrix
        else if (ft == Ftype::Q5_K_M && use_more_bits(il, nl)) t = Type::Q6_K;
        else if (ft == Ftype::Q4_K_S && il < nl / 8) t = Type::Q5_K;
        ++s.i_ffn_down;
        return t;
    }
    if (cat == Category::ATTN_OUTPUT) {
        if (n_expert == 8) {
            if (ft == Ftype::Q2_K || ft == Ftype::Q3_K_S || ft == Ftype::Q3_K_M || ft == Ftype::IQ4_NL ||
                ft == Ftype::Q4_K_S || ft == Ftype::Q4_K_M || ft == Ftype::IQ4_XS)
                t = Type::Q5_K;
        } else {
            if (ft == Ftype::Q2_K) t = Type::Q3_K;
            else if (ft == Ftype::Q3_K_M) t = Type::Q4_K;
            else if (ft == Ftype::Q3_K_L) t = Type::Q5_K;
        }
        return t;
    }
    if (cat == Category::ATTN_QKV) {
        if (ft == Ftype::Q3_K_M || ft == Ftype::Q3_K_L) t = Type::Q4_K;
        else if (ft == Ftype::Q4_K_M) t = Type::Q5_K;
        else if (ft == Ftype::Q5_K_M) t = Type::Q6_K;
        return t;
    }
    // FFN_GATE / FFN_UP only change for IQ3_XS, but llama.cpp still validates the layer number.
    if (cat == Category::FFN_GATE) { layer_index(s, s.i_ffn_gate++, name); return t; }
    if (cat == Category::FFN_UP) { layer_index(s, s.i_ffn_up++, name); return t; }
    return t;
}

// tensor_type_fallback: block-256 types cannot hold rows whose length is not a multiple of 256.
Type fallback_type(State& s, const TensorDesc& td, Type t, std::string& warning) {
    const int64_t ncols = td.ne[0];
    const int64_t qk = block_size(t);
    if (ncols % qk == 0) return t;
    ++s.n_fallback;
    Type r;
    switch (t) {
        case Type::IQ4_XS: r = Type::IQ4_NL; break;
        case Type::Q2_K: case Type::Q3_K: r = Type::Q4_0; break;
        case Type::Q4_K: r = Type::Q5_0; break;
        case Type::Q5_K: r = Type::Q5_1; break;
        case Type::Q6_K: r = Type::Q8_0; break;
        default: fail("quantize: tensor {}: ne[0] = {} is not a multiple of {} (block size of {}) and no fallback type is defined",
                      td.name, ncols, qk, tname(t));
    }
    char buf[256];
    int len = std::snprintf(buf, sizeof buf, "warning: %-36s - ncols %6lld not divisible by %3lld (required for type %7s) ",
                            td.name.c_str(), (long long)ncols, (long long)qk, tname(t));
    std::string w(buf, size_t(std::max(0, len)));
    if (ncols % block_size(r) != 0) {
        w += "(WARNING: must use F16 due to unusual shape) ";
        r = Type::F16;
    }
    std::snprintf(buf, sizeof buf, "-> falling back to %7s", tname(r));
    warning = w + buf;
    return r;
}

}  // namespace

bool is_block_quantized(Type t) {
    switch (t) {
        case Type::F32: case Type::F16: case Type::BF16: case Type::F64:
        case Type::I8: case Type::I16: case Type::I32: case Type::I64:
            return false;
        default:
            return true;
    }
}

std::optional<Ftype> ftype_from_name(std::string_view name) {
    for (const auto& f : kFtypeNames)
        if (iequals(name, f.name)) return f.ftype;
    return std::nullopt;
}

const char* ftype_name(Ftype f) {
    for (const auto& n : kFtypeNames)
        if (n.ftype == f) return n.name;
    return "?";
}

std::string ftype_list() {
    std::string s;
    for (const auto& f : kFtypeNames) {
        if (!s.empty()) s += ", ";
        s += f.name;
    }
    return s;
}

Type ftype_default_type(Ftype f) {
    switch (f) {
        case Ftype::ALL_F32: return Type::F32;
        case Ftype::F16: return Type::F16;
        case Ftype::BF16: return Type::BF16;
        case Ftype::Q4_0: return Type::Q4_0;
        case Ftype::Q4_1: return Type::Q4_1;
        case Ftype::Q5_0: return Type::Q5_0;
        case Ftype::Q5_1: return Type::Q5_1;
        case Ftype::Q8_0: return Type::Q8_0;
        case Ftype::Q2_K: return Type::Q2_K;
        case Ftype::Q3_K_S: case Ftype::Q3_K_M: case Ftype::Q3_K_L: return Type::Q3_K;
        case Ftype::Q4_K_S: case Ftype::Q4_K_M: return Type::Q4_K;
        case Ftype::Q5_K_S: case Ftype::Q5_K_M: return Type::Q5_K;
        case Ftype::Q6_K: return Type::Q6_K;
        case Ftype::IQ4_NL: return Type::IQ4_NL;
        case Ftype::IQ4_XS: return Type::IQ4_XS;
        case Ftype::MXFP4_MOE: return Type::MXFP4;
    }
    fail("quantize: unknown file type {}", uint32_t(f));
}

bool tensor_order_less(const std::string& a, const std::string& b) {
    const int la = layer_of(a), lb = layer_of(b);
    if (la != lb) return la < lb;
    return a < b;
}

ModelDesc describe(const gguf::File& f) {
    ModelDesc m;
    m.arch = f.architecture();
    const std::string p = m.arch + ".";
    m.n_layer = int(f.get_int_or(p + "block_count", 0));
    m.n_expert = int(f.get_int_or(p + "expert_count", 0));
    // Head counts may be scalars or per-layer arrays; llama.cpp's n_gqa() looks at layer 0.
    auto at_layer0 = [&](const std::string& key, int64_t def) -> int64_t {
        const gguf::Value* v = f.find(key);
        if (!v) return def;
        if (v->is_array()) return v->size() ? v->int_at(0) : def;
        return v->as_int();
    };
    const int64_t n_head = at_layer0(p + "attention.head_count", 0);
    const int64_t n_head_kv = at_layer0(p + "attention.head_count_kv", n_head);
    m.n_gqa = n_head_kv == 0 ? 0 : int(n_head / n_head_kv);
    for (const auto& t : f.tensors()) {
        TensorDesc d;
        d.name = t.name;
        d.type = t.type;
        for (int i = 0; i < 4; ++i) d.ne[i] = t.ne[i];
        d.nbytes = t.nbytes;
        m.tensors.push_back(std::move(d));
    }
    return m;
}

QuantizePlan make_quantize_plan(const ModelDesc& m, const QuantizeOptions& opt) {
    State s{m, opt};
    const Type base = ftype_default_type(opt.ftype);

    std::vector<size_t> order(m.tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return tensor_order_less(m.tensors[a].name, m.tensors[b].name); });

    for (const auto& t : m.tensors) {
        const Category c = category_of(t.name);
        if (is_attn_v_like(c)) ++s.n_attention_wv;
        if (c == Category::OUTPUT) s.tied_embeddings = false;
    }

    QuantizePlan plan;
    for (size_t idx : order) {
        const TensorDesc& td = m.tensors[idx];
        PlannedTensor p;
        p.src = idx;
        p.name = td.name;
        p.from = td.type;
        p.n_dims = ggml_n_dims(td.ne);
        for (int i = 0; i < 4; ++i) p.ne[i] = td.ne[i];
        p.from_bytes = td.nbytes;

        // llama_tensor_get_type: explicit overrides win (no fallback applied to them), then the
        // mixture rules unless --pure, then the block-size fallback.
        const Category cat = category_of(td.name);
        Type t = td.type;
        if (allows_quantization(td, opt)) {
            if (opt.token_embedding_type && cat == Category::TOKEN_EMBD) t = *opt.token_embedding_type;
            else if (opt.output_tensor_type && cat == Category::OUTPUT) t = *opt.output_tensor_type;
            else {
                t = base;
                if (is_block_quantized(base)) {
                    if (!opt.pure) t = mixture_type(s, t, td, cat);
                    const Type before = t;
                    t = fallback_type(s, td, t, p.warning);
                    p.fallback = t != before;
                }
            }
        }
        p.to = t;
        if (td.ne[0] % block_size(t) != 0)
            fail("quantize: tensor {}: ne[0] = {} is not a multiple of the block size {} of {}", td.name, td.ne[0], block_size(t), tname(t));
        const int64_t rows = td.ne[1] * td.ne[2] * td.ne[3];
        p.to_bytes = t == td.type ? td.nbytes : quant::row_size(quant::traits(t), td.ne[0]) * size_t(rows);
        plan.total_from += p.from_bytes;
        plan.total_to += p.to_bytes;
        plan.n_elements += td.ne[0] * rows;
        plan.tensors.push_back(std::move(p));
    }
    plan.n_fallback = s.n_fallback;
    return plan;
}

}  // namespace kinfer::cli
