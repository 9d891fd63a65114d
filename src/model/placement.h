// Where each part of the model lives and runs, decided at load by one walk of the tensor list
// (for_each_tensor), llama.cpp's rules:
//   -ngl N        the last N layers' weights (and output / output_norm when N >= n_layer) are
//                 copied to the device and their ops run there; token_embd stays on the CPU
//                 (as in llama.cpp: a decode step reads one row of it);
//                 with several devices (--device cuda0,cuda1) the N layers are shared among
//                 them in contiguous runs, the residual moving between them;
//   --cpu-moe     routed experts of every device layer stay in the mapping and run on the CPU;
//   --n-cpu-moe N those of the first N layers do;
//   -ot RE=DEV    a layer whose non-expert tensors match RE runs on DEV (CPU or a device name),
//                 whatever -ngl says; output / output_norm likewise. A layer runs on one backend,
//                 so RE must match all of a layer's dense tensors or none (else: an error that
//                 says so). Routed-expert tensors matched by -ot are the expert store's business.
//                 token_embd=DEV copies the table there and the gather runs there (the prompt's
//                 rows then never cross from the host).
//   share         a rank of a --split runs part of the model (model::Share): the layers, the
//                 head and the routed experts outside its part are never copied to a device
//                 (their layers run nowhere in this process; they are left on the CPU's views);
//                 an expert shard's slice of each expert tensor is copied alone.
//   shard_experts --split-mode experts, with several devices: every -ngl layer's dense tensors
//                 (and the head) go to the first device, and its routed experts are shared among
//                 all the devices in contiguous ranges of expert ids (each device holds the
//                 slices of its experts only); the MoE layer sends the latent rows to each
//                 device and takes back the weighted rows of its experts (model/moe.cpp).
//   expert store  when one is used, it owns every routed expert's bytes (its tiers decide where
//                 each expert runs), so no ffn_*_exps tensor is copied here.
// The weights handed to the forward pass are a copy of the model's views whose device-layer
// tensors point into device memory.
#pragma once
#include "backend/registry.h"
#include "model/model.h"
#include "model/split.h"
#include "model/tensor_list.h"

#include <deque>
#include <string>
#include <vector>

namespace kinfer::model {

struct PlacementOptions {
    int n_gpu_layers = 0;
    bool cpu_moe = false;
    int n_cpu_moe = 0;
    bool expert_store = false;     // routed experts come through the expert store
    std::vector<std::string> overrides;   // -ot values: "REGEX=DEV[,REGEX=DEV...]", first match wins
    Share share;                   // the part this process runs (a --split rank's; all by default)
    bool shard_experts = false;    // --split-mode experts: see above
};

// One device's share of a layer's routed experts under shard_experts: experts [first, last)
// of the layer, whose slices are on be; gate / up / down are views of the whole tensors with
// the data moved so that slice(e) of an e in the range lands in be's copy.
struct ExpertShard {
    backend::Backend* be = nullptr;
    int64_t first = 0, last = 0;
    const gguf::TensorInfo* gate = nullptr;
    const gguf::TensorInfo* up = nullptr;
    const gguf::TensorInfo* down = nullptr;
};

class Placement {
public:
    // Where each layer, the output head and the token table run (-ngl's runs, -ot, the share),
    // without copying anything; what the constructor places, and what a caller may check first
    // (cli's device_layers_fit). Throws on a bad -ngl or -ot as the constructor would.
    struct Sites {
        std::vector<backend::Backend*> layer;
        backend::Backend* output = nullptr;
        backend::Backend* embed = nullptr;
        // Where tensor s goes: its layer's site, else the table's or the head's.
        backend::Backend* of(const TensorSpec& s) const;
    };
    static Sites sites(const Model& m, backend::Backends& bk, const PlacementOptions& o);

    Placement(const Model& m, backend::Backends& bk, const PlacementOptions& o);
    ~Placement();
    Placement(const Placement&) = delete;
    Placement& operator=(const Placement&) = delete;

    const Weights& weights() const { return w_; }
    backend::Backend& layer(int il) const { return *layer_[size_t(il)]; }
    backend::Backend& output() const { return *output_; }
    backend::Backend& embed() const { return *embed_; }
    // True when layer il's routed experts live on the layer's backend (else: in the mapping, run
    // on the CPU, or through the expert store).
    bool experts_with_layer(int il) const { return experts_with_layer_[size_t(il)]; }
    // Layer il's experts shared among devices (shard_experts), one entry per device holding
    // some; empty when the layer's experts are not sharded.
    const std::vector<ExpertShard>& expert_shards(int il) const { return shards_[size_t(il)]; }
    size_t device_bytes() const { return device_bytes_; }   // weights copied to devices
    int n_device_layers() const { return n_device_layers_; }

private:
    // -ot for the dense tensors: moves whole layers (and the output head) to the named backend.
    static void apply_overrides(const Model& m, backend::Backends& bk, const std::vector<std::string>& specs, Sites& w);

    Weights w_;
    std::vector<backend::Backend*> layer_;
    std::vector<bool> experts_with_layer_;
    std::vector<std::vector<ExpertShard>> shards_;
    backend::Backend* output_ = nullptr;
    backend::Backend* embed_ = nullptr;
    std::deque<gguf::TensorInfo> moved_;                      // redirected tensor views
    std::vector<std::pair<backend::Backend*, backend::Buffer>> bufs_;
    size_t device_bytes_ = 0;
    int n_device_layers_ = 0;
};

}  // namespace kinfer::model
