#include "model/weights.h"

#include "common/error.h"
#include "model/tensor_list.h"
#include "backend/backend.h"
#include "quant/type_facts.h"

#include <fmt/format.h>

namespace kinfer::model {

namespace {

// Element-wise vectors are read as floats: F32 in place, anything else converted once.
const float* as_floats(const gguf::TensorInfo& t, Weights& w) {
    if (t.type == quant::Type::F32) return reinterpret_cast<const float*>(t.data);
    auto& v = w.converted.emplace_back(size_t(t.nelements()));
    backend::to_float_host(t.type, t.data, v.data(), t.nelements(), t.name);
    return v.data();
}

// A matrix must have a CPU dot product; token_embd is only gathered, so its rows need only be
// readable as floats (a type such as F64 or I8 has neither, and embedding a token would call none).
void check_matrix_type(const gguf::TensorInfo& t, bool gathered) {
    const quant::TypeFacts facts = quant::type_facts(t.type);
    if (!facts.name) fail("tensor '{}': unknown ggml type {}", t.name, uint32_t(t.type));
    const quant::Traits* tr = quant::traits_or_null(uint32_t(t.type));
    if (gathered && t.type != quant::Type::F32 && (!tr || !tr->to_float))
        fail("tensor '{}': type {} cannot be read as floats in this build", t.name, facts.name);
    if (!gathered && !backend::cpu_can_matmul(t.type))
        fail("tensor '{}': type {} has no CPU dot product in this build", t.name, facts.name);
}

}  // namespace

backend::Mat mat_of(TensorRef t) {
    backend::Mat m;
    m.type = t->type;
    m.cols = t->ne[0];
    m.rows = t->nrows();
    m.data = t->data;
    m.row_bytes = t->row_bytes();
    m.slice_rows = t->ne[1];
    m.name = t->name.c_str();
    return m;
}

Weights load_weights(const gguf::File& f, const HParams& hp) {
    Weights w;
    w.layers.resize(size_t(hp.n_layer));
    auto has = [&](const std::string& name) { return f.find_tensor(name) != nullptr; };

    for_each_tensor(hp, has, [&](const TensorSpec& s) {
        const gguf::TensorInfo* t = f.find_tensor(s.name);
        if (!t) {
            if (!s.required) return;
            const char* what = s.layer < 0 ? "model" : hp.is_kda(s.layer) ? "KDA layer" : "MLA layer";
            if (s.layer < 0) fail("{}: tensor '{}' missing ({})", f.path(), s.name, what);
            fail("{}: tensor '{}' missing ({} {})", f.path(), s.name, what, s.layer);
        }
        // Expert tensors: say plainly when the expert count disagrees with the metadata.
        const bool per_expert = s.name.find("_exps.") != std::string::npos || s.name.find("ffn_gate_inp.") != std::string::npos ||
                                s.name.find("exp_probs_b.") != std::string::npos;
        if (per_expert) {
            const size_t e = s.shape.size() - 1;   // the expert dimension is the last one
            const int64_t got_e = e == 0 ? t->nelements() : t->ne[e];
            if (got_e != s.shape[e])
                fail("{}: tensor '{}' holds {} experts, expert_count is {}", f.path(), s.name, got_e, s.shape[e]);
        }
        if (!shape_matches(s, t->ne, t->n_dims))
            fail("{}: tensor '{}' has shape {}, expected {}", f.path(), s.name, t->shape_str(), shape_str(s.shape));

        if (s.is_vector()) {
            const float* p = as_floats(*t, w);
            if (s.layer_vec) w.layers[size_t(s.layer)].*(s.layer_vec) = p;
            else w.*(s.global_vec) = p;
        } else {
            // token_embd is only gathered (dequantized rows), never multiplied.
            check_matrix_type(*t, s.global_mat == &Weights::token_embd);
            if (s.layer_mat) w.layers[size_t(s.layer)].*(s.layer_mat) = t;
            else w.*(s.global_mat) = t;
        }
        w.n_params += size_t(t->nelements());
        w.n_bytes += t->nbytes;
    });
    return w;
}

}  // namespace kinfer::model
