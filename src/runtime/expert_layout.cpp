#include "runtime/expert_layout.h"

#include "common/error.h"

#include <algorithm>

namespace kinfer::runtime {

ExpertLayout ExpertLayout::from_file(const gguf::File& f, const ExpertTensorNames& names) {
    ExpertLayout lay;
    const int n_layer = int(names.size());
    lay.n_layer = n_layer;
    lay.layers.resize(size_t(n_layer));
    for (int l = 0; l < n_layer; ++l) {
        ExpertLayer& L = lay.layers[size_t(l)];
        int found = 0;
        for (int p = 0; p < 3; ++p) {
            const std::string& name = names[size_t(l)][size_t(p)];
            L.t[p] = name.empty() ? nullptr : f.find_tensor(name);
            found += L.t[p] != nullptr;
        }
        if (found == 0) continue;
        for (int p = 0; p < 3; ++p) {
            const std::string& name = names[size_t(l)][size_t(p)];
            const auto* t = L.t[p];
            if (!t) fail("{}: tensor '{}' missing (the layer has other expert tensors)", f.path(), name);
            if (t->n_dims != 3 || t->ne[2] <= 0)
                fail("{}: tensor '{}' has shape {}, expected 3-D [in, out, n_expert]", f.path(), name, t->shape_str());
            if (lay.n_expert == 0) lay.n_expert = int(t->ne[2]);
            if (t->ne[2] != lay.n_expert)
                fail("{}: tensor '{}' has {} experts, other layers have {}", f.path(), name, t->ne[2], lay.n_expert);
            L.slice[p] = size_t(t->ne[1]) * t->row_bytes();
            if (L.slice[p] * size_t(t->ne[2]) != t->nbytes)
                fail("{}: tensor '{}': {} bytes is not {} experts of {} bytes", f.path(), name, t->nbytes, t->ne[2], L.slice[p]);
        }
        size_t off = 0;
        for (int p = 0; p < 3; ++p) {
            L.buf_off[p] = off;
            off += (L.slice[p] + 63) & ~size_t(63);
        }
        L.bytes = off;
    }
    return lay;
}

size_t ExpertLayout::max_expert_bytes() const {
    size_t m = 0;
    for (const auto& L : layers) m = std::max(m, L.bytes);
    return m;
}

size_t ExpertLayout::total_bytes() const {
    size_t s = 0;
    for (const auto& L : layers) s += L.bytes * size_t(n_expert);
    return s;
}

int ExpertLayout::n_moe_layers() const {
    int n = 0;
    for (const auto& L : layers) n += L.present();
    return n;
}

}  // namespace kinfer::runtime
