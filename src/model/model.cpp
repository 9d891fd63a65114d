#include "model/model.h"
#include "common/fnv1a.h"
#include "quant/type_facts.h"

#include <fmt/format.h>
#include <map>

namespace kinfer::model {

std::unique_ptr<Model> Model::load(const std::string& path) {
    auto m = std::unique_ptr<Model>(new Model());
    m->file_ = gguf::File::open(path);
    m->hp_ = load_hparams(*m->file_);
    m->w_ = load_weights(*m->file_, m->hp_);
    return m;
}

std::string Model::describe() const {
    return fmt::format("{} {}L ({} KDA / {} MLA) d={} vocab={}", hp_.arch_name, hp_.n_layer, hp_.n_kda_layers(),
                       hp_.n_mla_layers(), hp_.n_embd, hp_.n_vocab);
}

std::string Model::type_summary() const {
    // The type holding most bytes among multi-dim tensors, as llama-bench's "type" hint.
    std::map<std::string, size_t> bytes;
    for (const auto& t : file_->tensors())
        if (t.n_dims >= 2) bytes[quant::type_facts(t.type).name] += t.nbytes;
    std::string best;
    size_t most = 0;
    for (auto& [name, b] : bytes)
        if (b > most) most = b, best = name;
    return best;
}

uint64_t Model::fingerprint() const {
    const HParams& hp = hp_;   // the same arithmetic as when it lived in session_state.cpp: saved states stay valid
    uint64_t h = fnv1a(reinterpret_cast<const uint8_t*>(hp.arch_name.data()), hp.arch_name.size());
    const int64_t dims[] = {hp.n_layer, hp.n_embd, hp.n_vocab, hp.n_head, hp.kda_head_dim, hp.conv_kernel, hp.kv_lora_rank,
                            hp.rope_dim, hp.n_expert, hp.n_expert_used, int64_t(file().file_size())};
    h = fnv1a(reinterpret_cast<const uint8_t*>(dims), sizeof dims, h);
    for (const gguf::TensorInfo& t : file().tensors()) {
        h = fnv1a(reinterpret_cast<const uint8_t*>(t.name.data()), t.name.size(), h);
        const uint64_t f[5] = {uint64_t(t.type), uint64_t(t.ne[0]), uint64_t(t.ne[1]), uint64_t(t.ne[2]), t.offset};
        h = fnv1a(reinterpret_cast<const uint8_t*>(f), sizeof f, h);
    }
    return h;
}

}  // namespace kinfer::model
