#include "model/placement.h"

#include "common/error.h"
#include "model/tensor_list.h"
#include "runtime/expert_placement.h"

#include <algorithm>
#include <cstdint>
#include <regex>

namespace kinfer::model {

Placement::Sites Placement::sites(const Model& m, backend::Backends& bk, const PlacementOptions& o) {
    const int L = m.hparams().n_layer;
    if (o.n_gpu_layers < 0) fail("-ngl {}: the number of layers must be >= 0", o.n_gpu_layers);
    backend::Backend* dev = bk.device(0);
    if (o.n_gpu_layers > 0 && !dev)
        fail("-ngl {}: no device to put layers on (give one with --device; --list-devices shows them)", o.n_gpu_layers);
    const int ngl = std::min(o.n_gpu_layers, L);
    Sites w;
    w.embed = &bk.cpu();
    w.output = o.n_gpu_layers >= L && dev ? dev : &bk.cpu();
    w.layer.assign(size_t(L), &bk.cpu());
    // With several devices the -ngl layers go to them in contiguous runs, as even as whole
    // layers allow (the earlier devices take one more), the output head with the last layer.
    // Under shard_experts the dense part stays on the first device (the experts are spread below).
    const int n_dev = o.shard_experts ? 1 : int(bk.n_devices());
    for (int il = L - ngl, k = 0; il < L; ++il, ++k) {
        const int d = n_dev > 1 ? std::min(n_dev - 1, int(int64_t(k) * n_dev / std::max(ngl, 1))) : 0;
        w.layer[size_t(il)] = bk.device(size_t(d));
    }
    if (w.output != &bk.cpu() && ngl > 0) w.output = w.layer[size_t(L - 1)];
    apply_overrides(m, bk, o.overrides, w);
    // What another rank runs stays on the CPU's views: this process never runs it.
    const Share& sh = o.share;
    for (int il = 0; il < L; ++il)
        if (il < sh.first_layer || il >= sh.last_layer) w.layer[size_t(il)] = &bk.cpu();
    if (!sh.head) w.output = &bk.cpu();
    if (sh.first_layer > 0) w.embed = &bk.cpu();   // a later pipeline stage never embeds: no table copy
    return w;
}

backend::Backend* Placement::Sites::of(const TensorSpec& s) const {
    return s.layer >= 0 ? layer[size_t(s.layer)] : s.global_mat == &Weights::token_embd ? embed : output;
}

Placement::Placement(const Model& m, backend::Backends& bk, const PlacementOptions& o) : w_(m.weights()) {
    w_.converted.clear();   // the views keep pointing at the model's converted vectors
    const HParams& hp = m.hparams();
    const int L = hp.n_layer;
    const Sites where = sites(m, bk, o);   // checks -ngl and -ot
    backend::Backend* dev = nullptr;        // the device the tensor being placed goes to
    layer_ = where.layer;
    output_ = where.output;
    embed_ = where.embed;
    experts_with_layer_.assign(size_t(L), true);
    shards_.assign(size_t(L), {});
    const gguf::File& f = m.file();
    auto has = [&](const std::string& name) { return f.find_tensor(name) != nullptr; };
    const Share& sh = o.share;
    const int64_t E = hp.n_expert;
    const int64_t e0 = std::clamp<int64_t>(sh.first_expert, 0, E), e1 = std::clamp<int64_t>(sh.last_expert, e0, E);
    n_device_layers_ = 0;
    for (int il = 0; il < L; ++il) {
        const bool on_dev = layer_[size_t(il)] != &bk.cpu();
        n_device_layers_ += on_dev;
        const bool experts_on_cpu = o.cpu_moe || il < o.n_cpu_moe;
        // The store's tiers decide, whatever the layer's backend.
        experts_with_layer_[size_t(il)] = !o.expert_store && !(on_dev && experts_on_cpu);
    }
    if (n_device_layers_ == 0 && output_ == &bk.cpu() && embed_ == &bk.cpu()) return;

    // shard_experts: device d of D takes experts [e0 + (e1 - e0) d / D, e0 + (e1 - e0)(d + 1) / D)
    // of every device layer whose experts are with it (e0, e1: this process's share).
    const int64_t n_shard = o.shard_experts && E > 0 ? std::min<int64_t>(int64_t(bk.n_devices()), e1 - e0) : 0;
    for (int il = 0; il < L && n_shard > 1; ++il) {
        if (layer_[size_t(il)] == &bk.cpu() || !experts_with_layer_[size_t(il)] || !m.weights().layers[size_t(il)].ffn_gate_exps)
            continue;
        for (int64_t d = 0; d < n_shard; ++d)
            shards_[size_t(il)].push_back(ExpertShard{bk.device(size_t(d)), e0 + (e1 - e0) * d / n_shard,
                                                      e0 + (e1 - e0) * (d + 1) / n_shard});
    }

    // Copies bytes to dev and returns where they went.
    auto to_device = [&](const void* src, size_t bytes, const std::string& what) {
        backend::Buffer b = dev->alloc(bytes, what);
        bufs_.emplace_back(dev, b);
        dev->upload(b.ptr, src, bytes);
        device_bytes_ += bytes;
        return b.ptr;
    };
    // A view of expert tensor t whose experts [a, b) are copied to dev: the shape stays the whole
    // tensor's, the data moves so that slice(e) of an e in [a, b) lands in the copy.
    auto expert_slices = [&](const gguf::TensorInfo& t, int64_t a, int64_t b, const std::string& what) {
        const size_t per_expert = t.nbytes / size_t(E);
        gguf::TensorInfo& c = moved_.emplace_back(t);
        const auto base = reinterpret_cast<uintptr_t>(to_device(t.data + size_t(a) * per_expert, size_t(b - a) * per_expert, what));
        c.data = reinterpret_cast<const uint8_t*>(base - size_t(a) * per_expert);
        return &c;
    };
    for_each_tensor(hp, has, [&](const TensorSpec& s) {
        dev = where.of(s);
        if (dev == &bk.cpu()) return;
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
        } else if (expert_tensor && s.layer >= 0 && !shards_[size_t(s.layer)].empty()) {
            // Each device copies its experts' slices; the layer's own view stays the mapping's
            // (the MoE layer reads the shards' views, model/moe.cpp).
            for (ExpertShard& sh : shards_[size_t(s.layer)]) {
                dev = sh.be;
                const gguf::TensorInfo* v = expert_slices(*t, sh.first, sh.last, s.name);
                (s.layer_mat == &LayerWeights::ffn_gate_exps ? sh.gate : s.layer_mat == &LayerWeights::ffn_up_exps ? sh.up : sh.down) = v;
            }
        } else if (expert_tensor && s.layer >= 0 && E > 0 && (e0 > 0 || e1 < E)) {
            // An expert shard copies its experts' slices only (the MoE layer never takes the
            // slice of an expert it does not own).
            if (s.layer_mat) w_.layers[size_t(s.layer)].*(s.layer_mat) = expert_slices(*t, e0, e1, s.name);
        } else {
            gguf::TensorInfo& c = moved_.emplace_back(*t);
            c.data = to_device(t->data, t->nbytes, s.name);
            if (s.layer_mat) w_.layers[size_t(s.layer)].*(s.layer_mat) = &c;
            else w_.*(s.global_mat) = &c;
        }
    });
}

void Placement::apply_overrides(const Model& m, backend::Backends& bk, const std::vector<std::string>& specs, Sites& w) {
    if (specs.empty()) return;
    runtime::PlacementRules rules;
    for (const std::string& s : specs) rules.add_override(s);   // checks the form and each regex
    std::vector<std::pair<std::regex, backend::Backend*>> res;
    for (const auto& [re, name] : rules.overrides) {
        backend::Backend* b = bk.find(name);
        if (!b) fail("-ot {}={}: no backend called '{}' (--list-devices shows them)", re, name, name);
        res.emplace_back(std::regex(re), b);
    }
    const gguf::File& f = m.file();
    auto has = [&](const std::string& name) { return f.find_tensor(name) != nullptr; };
    // Per layer (and for the output head): the backend the matched tensors name, and one
    // matched and one unmatched tensor name for the error when a layer would be split.
    struct Seen {
        backend::Backend* to = nullptr;
        std::string matched, unmatched;
    };
    std::vector<Seen> seen(w.layer.size() + 1);   // the last one: the output head
    for_each_tensor(m.hparams(), has, [&](const TensorSpec& s) {
        if (!f.find_tensor(s.name) || s.role == TensorRole::routed_experts) return;   // experts: the store's rules
        backend::Backend* to = nullptr;
        for (const auto& [re, b] : res)
            if (std::regex_search(s.name, re)) {
                to = b;
                break;
            }
        if (s.layer < 0 && s.global_mat == &Weights::token_embd) {
            if (to) w.embed = to;   // the table and the gather go there (a device's embed op)
            return;
        }
        Seen& e = seen[s.layer >= 0 ? size_t(s.layer) : w.layer.size()];
        if (!to) {
            if (e.unmatched.empty()) e.unmatched = s.name;
        } else {
            if (e.to && e.to != to)
                fail("-ot: {} and {} name different backends; kinfer runs a layer on one backend", e.matched, s.name);
            e.to = to;
            if (e.matched.empty()) e.matched = s.name;
        }
    });
    for (size_t i = 0; i < seen.size(); ++i) {
        const Seen& e = seen[i];
        if (!e.to) continue;
        if (!e.unmatched.empty())
            fail("-ot: {} matches but {} does not; kinfer runs a layer on one backend, so match all of its "
                 "non-expert tensors (e.g. 'blk\\.{}\\.={}') or none", e.matched, e.unmatched,
                 i < w.layer.size() ? std::to_string(i) : std::string("output"), e.to->name());
        if (i < w.layer.size()) w.layer[i] = e.to;
        else w.output = e.to;
    }
}

Placement::~Placement() {
    for (auto& [be, b] : bufs_) be->free(b);
}

}  // namespace kinfer::model
