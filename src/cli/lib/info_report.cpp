#include "cli/lib/info_report.h"
#include "model/hparams.h"
#include "model/tensor_list.h"
#include "vision/mmproj_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

namespace kinfer::cli {

using json = nlohmann::ordered_json;
using gguf::Value;
using gguf::ValueType;

namespace {

// The `{arch}.` keys of DESIGN.md section 4, in the order `info` shows them.
const char* const kHparamKeys[] = {
    "block_count", "context_length", "embedding_length", "feed_forward_length",
    "attention.head_count", "attention.head_count_kv", "attention.layer_norm_rms_epsilon",
    "attention.q_lora_rank", "attention.kv_lora_rank", "attention.key_length_mla",
    "attention.value_length_mla", "rope.dimension_count", "ssm.conv_kernel", "kda.head_dim",
    "kda.gate_lower_bound", "expert_count", "expert_used_count", "expert_feed_forward_length",
    "expert_shared_count", "leading_dense_block_count", "expert_weights_scale", "expert_weights_norm",
    "expert_gating_func", "expert_latent_length", "attn_res.block_size", "activation.situ_beta",
    "activation.situ_linear_beta",
};

const char* const kSpecialTokens[][2] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"eot", "tokenizer.ggml.eot_token_id"},     {"unk", "tokenizer.ggml.unknown_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"},
};

// Kinds in display order, with their text labels.
const char* const kKinds[][2] = {
    {"attention_kda", "attention (KDA)"},    {"attention_mla", "attention (MLA)"},
    {"router", "router"},                    {"routed_experts", "routed experts"},
    {"latent_moe", "latent MoE projections"}, {"shared_experts", "shared experts"},
    {"dense_ffn", "dense FFN"},              {"embeddings_output", "embeddings/output"},
    {"norm", "norms"},                       {"attn_res", "AttnRes scores"},
    {"other", "other (not read by the model)"},
};

std::string upper(std::string s) {
    for (auto& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}

// Cuts a string to at most n bytes without splitting a UTF-8 sequence.
std::string_view utf8_prefix(std::string_view s, size_t n) {
    if (s.size() <= n) return s;
    while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
    return s.substr(0, n);
}

// For text output: control characters and invalid bytes escaped, printable UTF-8 kept.
std::string escape(std::string_view s) {
    std::string r;
    for (unsigned char c : s) {
        if (c == '\n') r += "\\n";
        else if (c == '\t') r += "\\t";
        else if (c == '"') r += "\\\"";
        else if (c == '\\') r += "\\\\";
        else if (c < 0x20 || c == 0x7f) r += fmt::format("\\x{:02x}", c);
        else r += char(c);
    }
    return r;
}

bool is_int_type(ValueType t) {
    switch (t) {
        case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
        case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64:
            return true;
        default: return false;
    }
}

json scalar_json(const Value& v) {
    switch (v.type()) {
        case ValueType::BOOL: return v.as_bool();
        case ValueType::FLOAT32: case ValueType::FLOAT64: return v.as_float();
        case ValueType::UINT64: return v.as_uint();
        case ValueType::STRING: return std::string(v.as_string());
        default: return v.as_int();
    }
}

json element_json(const Value& v, size_t i) {
    switch (v.array_type()) {
        case ValueType::STRING: return std::string(v.string_at(i));
        case ValueType::FLOAT32: case ValueType::FLOAT64: return v.float_at(i);
        case ValueType::BOOL: return v.int_at(i) != 0;
        case ValueType::UINT64: {
            uint64_t x;
            std::memcpy(&x, v.raw() + 8 * i, 8);
            return x;
        }
        default: return v.int_at(i);
    }
}

// {"type": "UINT32", "value": 8} / {"type": "ARRAY", "value": {"array_of", "length", "head"}},
// the layout of llama.cpp's gguf-kv.json listings; long strings carry "length" and a prefix.
json metadata_json(const Value& v, const InfoOptions& opt) {
    json j;
    j["type"] = upper(gguf::value_type_name(v.type()));
    if (v.is_array()) {
        json a;
        a["array_of"] = upper(gguf::value_type_name(v.array_type()));
        a["length"] = v.size();
        json head = json::array();
        for (size_t i = 0; i < std::min(v.size(), opt.array_head); ++i) {
            json e = element_json(v, i);
            if (e.is_string() && e.get_ref<const std::string&>().size() > opt.string_max)
                e = fmt::format("{}...", utf8_prefix(e.get_ref<const std::string&>(), opt.string_max));
            head.push_back(std::move(e));
        }
        a["head"] = std::move(head);
        j["value"] = std::move(a);
    } else if (v.type() == ValueType::STRING && v.as_string().size() > opt.string_max) {
        j["value"] = fmt::format("{}...", utf8_prefix(v.as_string(), opt.string_max));
        j["length"] = v.as_string().size();
    } else {
        j["value"] = scalar_json(v);
    }
    return j;
}

// A hyper-parameter's value as plain JSON (arrays in full, they are per-layer lists).
json hparam_json(const Value& v) {
    if (!v.is_array()) return scalar_json(v);
    json a = json::array();
    for (size_t i = 0; i < std::min<size_t>(v.size(), 4096); ++i) a.push_back(element_json(v, i));
    return a;
}

std::optional<uint64_t> uint_key(const gguf::File& f, const std::string& key) {
    const Value* v = f.find(key);
    if (!v || v->is_array() || !is_int_type(v->type())) return std::nullopt;
    if (v->type() == ValueType::UINT64) return v->as_uint();
    int64_t x = v->as_int();
    if (x < 0) return std::nullopt;
    return uint64_t(x);
}

// Saturating product (metadata may hold anything; the estimate must not wrap).
uint64_t mul_sat(std::initializer_list<uint64_t> xs) {
    uint64_t r = 1;
    for (uint64_t x : xs)
        if (__builtin_mul_overflow(r, x, &r)) return UINT64_MAX;
    return r;
}
uint64_t add_sat(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

// What each tensor of the file is, by the model's own tensor list (model/tensor_list.h), and
// what the loader would refuse: required tensors that are absent, shapes that disagree. A file
// kinfer cannot load as a model (an mmproj, a foreign or damaged file) gets no roles ("other")
// and the loader's reason.
struct TensorCheck {
    bool model = false;               // the hyper-parameters load
    std::string why;                  // when they do not
    std::map<std::string, std::string> kind;
    std::vector<std::string> missing, bad_shape, unused;
};

TensorCheck check_tensors(const gguf::File& f) {
    TensorCheck c;
    model::HParams hp;
    try {
        hp = model::load_hparams(f);
    } catch (const Error& e) {
        c.why = e.what();
        return c;
    }
    c.model = true;
    auto has = [&](const std::string& n) { return f.find_tensor(n) != nullptr; };
    model::for_each_tensor(hp, has, [&](const model::TensorSpec& s) {
        const gguf::TensorInfo* t = f.find_tensor(s.name);
        if (!t) {
            if (s.required) c.missing.push_back(s.name);
            return;
        }
        c.kind[s.name] = model::role_name(s.role);
        if (!model::shape_matches(s, t->ne, t->n_dims))
            c.bad_shape.push_back(fmt::format("{} has shape {}, expected {}", s.name, t->shape_str(), model::shape_str(s.shape)));
    });
    for (const auto& t : f.tensors())
        if (!c.kind.count(t.name)) c.unused.push_back(t.name);
    return c;
}

}  // namespace

std::string human_bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double x = double(n);
    int u = 0;
    while (x >= 1024.0 && u < 6) {
        x /= 1024.0;
        ++u;
    }
    return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.2f} {}", x, units[u]);
}

std::vector<std::string> layer_kinds(const gguf::File& f) {
    std::vector<std::string> r;
    const Value* v = f.find(f.architecture() + ".attention.head_count_kv");
    if (!v || !v->is_array() || !is_int_type(v->array_type())) return r;
    for (size_t i = 0; i < v->size(); ++i) r.push_back(v->int_at(i) == 0 ? "KDA" : "MLA");
    return r;
}

std::string chat_template_family(std::string_view tmpl) {
    if (tmpl.find("<|open|>") != std::string_view::npos) return "K3 XTML";
    if (tmpl.find("<|im_user|>") != std::string_view::npos) return "Kimi K2";
    return "other";
}

json info_report(const gguf::File& f, const InfoOptions& opt) {
    json r;
    const std::string arch = f.architecture();
    r["file"] = f.path();
    r["file_size"] = f.file_size();
    r["gguf_version"] = f.version();
    r["alignment"] = f.alignment();
    r["data_offset"] = f.data_offset();
    r["n_kv"] = f.kv().size();
    r["n_tensors"] = f.tensors().size();
    r["architecture"] = arch;
    {
        const Value* n = f.find("general.name");
        r["name"] = n && n->type() == ValueType::STRING ? json(std::string(n->as_string())) : json(nullptr);
    }

    // Hyper-parameters.
    json hp = json::object();
    for (const char* k : kHparamKeys) {  // absent keys are listed as null
        const Value* v = f.find(arch + "." + k);
        hp[k] = v ? hparam_json(*v) : json(nullptr);
    }
    r["hparams"] = hp;
    std::vector<std::string> kinds = layer_kinds(f);
    r["layer_kinds"] = kinds;
    size_t n_kda = size_t(std::count(kinds.begin(), kinds.end(), "KDA"));
    size_t n_mla = kinds.size() - n_kda;
    json notes = json::array();
    if (n_mla > 0 && f.find(arch + ".attention.layer_norm_rms_epsilon"))
        notes.push_back(fmt::format(
            "the file carries one RMS norm epsilon ({:g}); llama.cpp applies it to the MLA q/kv LoRA norms too "
            "(the HF reference uses 1e-6 there) and kinfer does the same for parity",
            f.find(arch + ".attention.layer_norm_rms_epsilon")->as_float()));
    r["notes"] = notes;
    if (arch == "clip") r["vision"] = vision::describe_mmproj(f);   // a vision projector (mmproj)

    // Tokenizer.
    {
        json t;
        const Value* tokens = f.find("tokenizer.ggml.tokens");
        bool str_tokens = tokens && tokens->is_array() && tokens->array_type() == ValueType::STRING;
        const Value* model = f.find("tokenizer.ggml.model");
        const Value* pre = f.find("tokenizer.ggml.pre");
        const Value* merges = f.find("tokenizer.ggml.merges");
        t["model"] = model && model->type() == ValueType::STRING ? json(std::string(model->as_string())) : json(nullptr);
        t["pre"] = pre && pre->type() == ValueType::STRING ? json(std::string(pre->as_string())) : json(nullptr);
        t["vocab_size"] = tokens && tokens->is_array() ? json(tokens->size()) : json(nullptr);
        t["merges"] = merges && merges->is_array() ? json(merges->size()) : json(nullptr);
        json special = json::object();
        for (const auto& [label, key] : kSpecialTokens) {
            auto id = uint_key(f, key);
            if (!id) continue;
            json s;
            s["id"] = *id;
            s["text"] = str_tokens && *id < tokens->size() ? json(std::string(tokens->string_at(size_t(*id)))) : json(nullptr);
            special[label] = s;
        }
        t["special"] = special;
        const Value* tmpl = f.find("tokenizer.chat_template");
        json ct;
        ct["present"] = tmpl && tmpl->type() == ValueType::STRING;
        if (tmpl && tmpl->type() == ValueType::STRING) {
            ct["length"] = tmpl->as_string().size();
            ct["family"] = chat_template_family(tmpl->as_string());
        }
        t["chat_template"] = ct;
        r["tokenizer"] = t;
    }

    // All metadata, abbreviated.
    {
        json md = json::object();
        for (const Value& v : f.kv()) md[std::string(v.key)] = metadata_json(v, opt);
        r["metadata"] = md;
    }

    // Tensors and totals.
    uint64_t weights = 0;
    std::map<std::string, std::pair<uint64_t, uint64_t>> by_type, by_kind;  // count, bytes
    json tl = json::array();
    const TensorCheck check = check_tensors(f);
    {
        json mc;
        mc["loads"] = check.model;
        if (!check.model) mc["why"] = check.why;
        mc["missing"] = check.missing;
        mc["bad_shape"] = check.bad_shape;
        mc["unused"] = check.unused;
        r["tensor_check"] = mc;
    }
    for (const auto& t : f.tensors()) {
        std::string type = quant::traits(t.type).name;
        const auto kit = check.kind.find(t.name);
        const std::string kind = kit == check.kind.end() ? "other" : kit->second;
        weights += t.nbytes;
        by_type[type].first++;
        by_type[type].second += t.nbytes;
        by_kind[kind].first++;
        by_kind[kind].second += t.nbytes;
        if (opt.with_tensors) {
            json e;
            e["name"] = t.name;
            e["type"] = type;
            e["shape"] = std::vector<int64_t>(t.ne, t.ne + t.n_dims);
            e["bytes"] = t.nbytes;
            e["offset"] = t.offset;
            e["kind"] = kind;
            tl.push_back(std::move(e));
        }
    }
    if (opt.with_tensors) r["tensors"] = tl;
    json tot;
    tot["weights_bytes"] = weights;
    json bt = json::object(), bk = json::object();
    for (const auto& [k, v] : by_type) bt[k] = {{"count", v.first}, {"bytes", v.second}};
    for (const auto& [k, v] : by_kind) bk[k] = {{"count", v.first}, {"bytes", v.second}};
    tot["by_type"] = bt;
    tot["by_kind"] = bk;
    r["totals"] = tot;

    // Memory for one sequence.
    {
        json m;
        m["context"] = opt.context;
        m["weights_bytes"] = weights;
        m["n_kda_layers"] = n_kda;
        m["n_mla_layers"] = n_mla;
        uint64_t state = 0;
        auto H = uint_key(f, arch + ".attention.head_count");
        auto D = uint_key(f, arch + ".kda.head_dim");
        auto W = uint_key(f, arch + ".ssm.conv_kernel");
        if (n_kda > 0 && H && D) {
            uint64_t s = mul_sat({n_kda, *H, *D, *D, 4});
            m["kda_state_bytes"] = s;
            state = add_sat(state, s);
            if (W && *W >= 1) {
                uint64_t c = mul_sat({n_kda, *W - 1, *H, *D, 3, 4});
                m["kda_conv_state_bytes"] = c;
                state = add_sat(state, c);
            }
        }
        auto kv_lora = uint_key(f, arch + ".attention.kv_lora_rank");
        auto rope = uint_key(f, arch + ".rope.dimension_count");
        if (n_mla > 0 && kv_lora) {
            uint64_t per_tok = mul_sat({n_mla, add_sat(*kv_lora, rope.value_or(0)), 2});
            m["mla_cache_bytes_per_token"] = per_tok;
            uint64_t c = mul_sat({per_tok, uint64_t(std::max<int64_t>(opt.context, 0))});
            m["mla_cache_bytes"] = c;
            state = add_sat(state, c);
        }
        m["state_bytes"] = state;
        m["total_bytes"] = add_sat(weights, state);
        r["memory"] = m;
    }
    return r;
}

namespace {

std::string json_scalar_text(const json& v) {
    if (v.is_string()) return fmt::format("\"{}\"", escape(v.get<std::string>()));
    if (v.is_number_float()) return fmt::format("{:g}", v.get<double>());
    if (v.is_null()) return "-";
    return v.dump();
}

std::string json_list_text(const json& a, size_t total) {
    std::string s = "[";
    for (size_t i = 0; i < a.size(); ++i) {
        if (i) s += ", ";
        s += json_scalar_text(a[i]);
    }
    if (total > a.size()) s += fmt::format(", ... ({} total)", total);
    return s + "]";
}

}  // namespace

std::string info_text(const json& r) {
    std::string o;
    auto line = [&](std::string s) { o += s + "\n"; };
    auto str_or_dash = [](const json& v) { return v.is_string() ? escape(v.get<std::string>()) : std::string("-"); };
    line(fmt::format("file:          {}", r["file"].get<std::string>()));
    line(fmt::format("file size:     {} bytes ({})", r["file_size"].get<uint64_t>(), human_bytes(r["file_size"].get<uint64_t>())));
    line(fmt::format("GGUF version:  {} (alignment {}, data section at byte {})", r["gguf_version"].get<uint32_t>(),
                     r["alignment"].get<uint64_t>(), r["data_offset"].get<uint64_t>()));
    line(fmt::format("architecture:  {}", str_or_dash(r["architecture"])));
    line(fmt::format("name:          {}", str_or_dash(r["name"])));
    line(fmt::format("contents:      {} metadata keys, {} tensors", r["n_kv"].get<uint64_t>(), r["n_tensors"].get<uint64_t>()));

    line("");
    line(fmt::format("hyper-parameters ({}.*):", r["architecture"].get<std::string>()));
    for (const auto& [k, v] : r["hparams"].items())
        line(fmt::format("  {:<36} {}", k, v.is_array() ? json_list_text(v, v.size()) : json_scalar_text(v)));
    const auto& kinds = r["layer_kinds"];
    if (!kinds.empty()) {
        std::string ks;
        size_t n_kda = 0;
        for (const auto& k : kinds) {
            if (!ks.empty()) ks += ' ';
            ks += k.get<std::string>();
            n_kda += k == "KDA";
        }
        line(fmt::format("  {:<36} {} ({} KDA, {} MLA)", "layer kinds", ks, n_kda, kinds.size() - n_kda));
    }
    for (const auto& n : r["notes"]) line("  note: " + n.get<std::string>());
    if (r.contains("vision")) {
        line("");
        line("vision projector (mmproj):");
        o += vision::describe_mmproj_text(r["vision"]);
    }

    line("");
    const auto& t = r["tokenizer"];
    line("tokenizer:");
    line(fmt::format("  model {}, pre {}, {} tokens, {} merges", str_or_dash(t["model"]), str_or_dash(t["pre"]),
                     json_scalar_text(t["vocab_size"]), json_scalar_text(t["merges"])));
    for (const auto& [label, s] : t["special"].items())
        line(fmt::format("  {:<4} {:>8}  {}", label, s["id"].get<uint64_t>(), json_scalar_text(s["text"])));
    const auto& ct = t["chat_template"];
    if (ct["present"].get<bool>())
        line(fmt::format("  chat template: present ({} bytes), family {}", ct["length"].get<uint64_t>(),
                         ct["family"].get<std::string>()));
    else
        line("  chat template: absent");

    line("");
    line("metadata:");
    for (const auto& [k, v] : r["metadata"].items()) {
        std::string type = v["type"];
        std::string val;
        if (type == "ARRAY") {
            const auto& a = v["value"];
            type = fmt::format("{}[{}]", type, a["array_of"].get<std::string>());
            val = json_list_text(a["head"], a["length"].get<size_t>());
        } else {
            val = json_scalar_text(v["value"]);
            if (v.contains("length")) val += fmt::format(" ({} bytes)", v["length"].get<uint64_t>());
        }
        line(fmt::format("  {:<44} {:<14} {}", escape(k), type, val));
    }

    if (r.contains("tensors")) {
        line("");
        line("tensors:");
        line(fmt::format("  {:<40} {:<8} {:<22} {:>12} {:>12}", "name", "type", "shape", "bytes", "offset"));
        for (const auto& e : r["tensors"]) {
            std::string shape = "{";
            for (size_t i = 0; i < e["shape"].size(); ++i) {
                if (i) shape += ", ";
                shape += e["shape"][i].dump();
            }
            shape += "}";
            line(fmt::format("  {:<40} {:<8} {:<22} {:>12} {:>12}", escape(e["name"].get<std::string>()),
                             e["type"].get<std::string>(), shape, e["bytes"].get<uint64_t>(), e["offset"].get<uint64_t>()));
        }
    }

    line("");
    const auto& tot = r["totals"];
    line("totals by type:");
    for (const auto& [k, v] : tot["by_type"].items())
        line(fmt::format("  {:<32} {:>6} tensors {:>14} bytes ({})", k, v["count"].get<uint64_t>(), v["bytes"].get<uint64_t>(),
                         human_bytes(v["bytes"].get<uint64_t>())));
    line("totals by kind:");
    for (const auto& [key, label] : kKinds) {
        if (!tot["by_kind"].contains(key)) continue;
        const auto& v = tot["by_kind"][key];
        line(fmt::format("  {:<32} {:>6} tensors {:>14} bytes ({})", label, v["count"].get<uint64_t>(), v["bytes"].get<uint64_t>(),
                         human_bytes(v["bytes"].get<uint64_t>())));
    }
    line(fmt::format("  {:<32} {:>6} tensors {:>14} bytes ({})", "all", r["n_tensors"].get<uint64_t>(),
                     tot["weights_bytes"].get<uint64_t>(), human_bytes(tot["weights_bytes"].get<uint64_t>())));
    if (r.contains("tensor_check")) {
        const auto& c = r["tensor_check"];
        if (!c["loads"].get<bool>()) {
            line(fmt::format("tensor check: not a model kinfer loads ({})", c["why"].get<std::string>()));
        } else if (c["missing"].empty() && c["bad_shape"].empty()) {
            line(fmt::format("tensor check: every tensor the model needs is present with its shape{}",
                             c["unused"].empty() ? std::string() : fmt::format(" ({} not read)", c["unused"].size())));
        } else {
            line("tensor check: the loader would refuse this file:");
            for (const auto& n : c["missing"]) line("  missing " + escape(n.get<std::string>()));
            for (const auto& n : c["bad_shape"]) line("  " + escape(n.get<std::string>()));
        }
        for (const auto& n : c["unused"]) line("  not read by the model: " + escape(n.get<std::string>()));
    }

    line("");
    const auto& m = r["memory"];
    line(fmt::format("memory for one sequence at context {}:", m["context"].get<int64_t>()));
    auto mem = [&](const char* label, const char* key) {
        if (m.contains(key))
            line(fmt::format("  {:<32} {:>14} bytes ({})", label, m[key].get<uint64_t>(), human_bytes(m[key].get<uint64_t>())));
    };
    mem("weights (mmap)", "weights_bytes");
    mem(fmt::format("KDA state ({} layers)", m["n_kda_layers"].get<uint64_t>()).c_str(), "kda_state_bytes");
    mem("KDA conv state", "kda_conv_state_bytes");
    mem(fmt::format("MLA latent cache ({} layers, f16)", m["n_mla_layers"].get<uint64_t>()).c_str(), "mla_cache_bytes");
    if (m.contains("mla_cache_bytes_per_token"))
        line(fmt::format("  {:<32} {:>14} bytes per token", "", m["mla_cache_bytes_per_token"].get<uint64_t>()));
    mem("state total", "state_bytes");
    mem("total", "total_bytes");
    return o;
}

}  // namespace kinfer::cli
