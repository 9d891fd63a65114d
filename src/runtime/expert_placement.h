// Static placement of routed experts, as llama.cpp offers it: --cpu-moe (every layer's experts
// stay on the CPU), --n-cpu-moe N (those of the first N layers do), --ot REGEX=DEVICE (llama.cpp's -ot; layers whose
// ffn_{gate,up,down}_exps.weight tensor names match REGEX go to DEVICE, "CPU" included). A layer placed
// on a device keeps all its experts resident there (loaded once, never evicted); a CPU layer is
// never copied to a device; the rest use the adaptive device cache.
#pragma once
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/expert_layout.h"

namespace kinfer::runtime {

enum class Placement { cached, cpu, device };

struct PlacementRules {
    bool cpu_moe = false;
    int n_cpu_moe = 0;
    std::vector<std::pair<std::string, std::string>> overrides;   // (regex, device), first match wins

    bool empty() const { return !cpu_moe && n_cpu_moe == 0 && overrides.empty(); }
    // Adds "REGEX=DEVICE" (one -ot value; several may be joined with commas). Throws on bad syntax.
    void add_override(const std::string& spec);
};

// Whether an -ot rule's expression names a routed-expert tensor of a layer (one of its gate, up
// and down stacks, model::expert_tensor_names): the one test of "this rule places experts", used
// by the store's placement below and by the CLI when it decides whether -ot asks for a store.
bool names_experts(const std::regex& re, const std::array<std::string, 3>& layer_names);

// Placement of each layer (names.size() entries; a layer without routed experts has empty
// names). A device name that is neither "CPU" nor device_name throws kinfer::Error.
std::vector<Placement> resolve_placement(const PlacementRules& r, const ExpertTensorNames& names,
                                         const std::string& device_name);

}  // namespace kinfer::runtime
