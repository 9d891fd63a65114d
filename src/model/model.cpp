#include "model/model.h"
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

}  // namespace kinfer::model
