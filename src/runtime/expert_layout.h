// Where each routed expert's bytes are: per layer, the three 3-D tensors ffn_{gate,up,down}_exps
// [in, out, n_expert], whose slice e (contiguous) belongs to expert e (DESIGN.md 3.4). The store
// moves one expert as one buffer holding the three slices, each at a 64-byte aligned offset.
// Which tensors those are is the model's tensor list's business (model::expert_tensor_names, from
// model/tensor_list.h): the layout is handed their names and keeps no naming rule of its own.
#pragma once
#include "gguf/reader.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::runtime {

// Per layer, the GGUF names of its routed experts' gate, up and down stacks; empty strings for
// a layer without routed experts (a dense one).
using ExpertTensorNames = std::vector<std::array<std::string, 3>>;

struct ExpertLayer {
    const gguf::TensorInfo* t[3] = {nullptr, nullptr, nullptr};   // gate, up, down
    size_t slice[3] = {0, 0, 0};     // bytes of one expert's slice of each tensor
    size_t buf_off[3] = {0, 0, 0};   // where each slice sits in the expert's buffer
    size_t bytes = 0;                // buffer size of one expert (aligned slices)
    size_t payload() const { return slice[0] + slice[1] + slice[2]; }
    bool present() const { return t[0] != nullptr; }
};

struct ExpertLayout {
    int n_layer = 0;
    int n_expert = 0;
    std::vector<ExpertLayer> layers;   // [n_layer]; !present() for layers without routed experts

    // Finds the named tensors of every layer (n_layer = names.size()); checks they are 3-D with
    // the same expert count. Throws kinfer::Error naming the tensor otherwise.
    static ExpertLayout from_file(const gguf::File& f, const ExpertTensorNames& names);

    // Byte offset in the file of expert e's slice of part p (0 gate, 1 up, 2 down).
    uint64_t file_offset(const gguf::File& f, int layer, int part, int e) const {
        const auto& L = layers[size_t(layer)];
        return uint64_t(f.data_offset()) + L.t[part]->offset + uint64_t(e) * L.slice[part];
    }
    // The slice in the mapping (zero-copy view).
    const uint8_t* mapped(int layer, int part, int e) const {
        const auto& L = layers[size_t(layer)];
        return L.t[part]->data + size_t(e) * L.slice[part];
    }
    size_t max_expert_bytes() const;
    size_t total_bytes() const;        // all experts of all layers (buffer sizes)
    int n_moe_layers() const;
};

}  // namespace kinfer::runtime
