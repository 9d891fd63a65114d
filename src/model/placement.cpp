#include "model/placement.h"

#include "common/error.h"
#include "model/tensor_list.h"

namespace kinfer::model {

Placement::Placement(const Model& m, backend::Backends& bk, const PlacementOptions& o) : w_(m.weights()) {
    w_.converted.clear();   // the views keep pointing at the model's converted vectors
    const HParams& hp = m.hparams();
    const int L = hp.n_layer;
    if (o.n_gpu_layers < 0) fail("-ngl {}: the number of layers must be >= 0", o.n_gpu_layers);
    backend::Backend* dev = bk.device(0);
    if (o.n_gpu_layers > 0 && !dev)
        fail("-ngl {}: no device to put layers on (give one with --device; --list-devices shows them)", o.n_gpu_layers);
    const int ngl = std::min(o.n_gpu_layers, L);
    n_device_layers_ = ngl;
    embed_ = &bk.cpu();
    output_ = o.n_gpu_layers >= L && dev ? dev : &bk.cpu();
    layer_.assign(size_t(L), &bk.cpu());
    experts_with_layer_.assign(size_t(L), true);
    for (int il = L - ngl; il < L; ++il) {
        layer_[size_t(il)] = dev;
        const bool experts_on_cpu = o.cpu_moe || il < o.n_cpu_moe;
        experts_with_layer_[size_t(il)] = !o.expert_store && !experts_on_cpu;
    }
    if (o.expert_store)   // the store's tiers decide, whatever the layer's backend
        for (int il = 0; il < L; ++il) experts_with_layer_[size_t(il)] = false;
    if (ngl == 0) return;

    // Copies bytes to dev and returns where they went.
    auto to_device = [&](const void* src, size_t bytes, const std::string& what) {
        backend::Buffer b = dev->alloc(bytes, what);
        bufs_.emplace_back(dev, b);
        dev->upload(b.ptr, src, bytes);
        device_bytes_ += bytes;
        return b.ptr;
    };
    const gguf::File& f = m.file();
    auto has = [&](const std::string& name) { return f.find_tensor(name) != nullptr; };
    for_each_tensor(hp, has, [&](const TensorSpec& s) {
        const bool on_dev = s.layer >= 0 ? layer_[size_t(s.layer)] == dev : output_ == dev && s.global_mat != &Weights::token_embd;
        if (!on_dev) return;
        const gguf::TensorInfo* t = f.find_tensor(s.name);
        if (!t) return;   // optional and absent: the weights say so already (nullptr)
        const bool expert_tensor = s.name.find("_exps.") != std::string::npos;
        if (expert_tensor && s.layer >= 0 && !experts_with_layer_[size_t(s.layer)]) return;
        if (s.is_vector()) {
            // Element-wise vectors are floats already (the model converted them once at load).
            const float* host = s.layer_vec ? m.weights().layers[size_t(s.layer)].*(s.layer_vec) : m.weights().*(s.global_vec);
            auto* p = reinterpret_cast<const float*>(to_device(host, size_t(t->nelements()) * sizeof(float), s.name));
            if (s.layer_vec) w_.layers[size_t(s.layer)].*(s.layer_vec) = p;
            else w_.*(s.global_vec) = p;
        } else {
            gguf::TensorInfo& c = moved_.emplace_back(*t);
            c.data = to_device(t->data, t->nbytes, s.name);
            if (s.layer_mat) w_.layers[size_t(s.layer)].*(s.layer_mat) = &c;
            else w_.*(s.global_mat) = &c;
        }
    });
}

Placement::~Placement() {
    for (auto& [be, b] : bufs_) be->free(b);
}

}  // namespace kinfer::model
