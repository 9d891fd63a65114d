#include "runtime/expert_placement.h"

#include "common/error.h"

#include <cctype>
#include <regex>

namespace kinfer::runtime {

void PlacementRules::add_override(const std::string& spec) {
    size_t start = 0;
    while (start <= spec.size()) {
        size_t end = spec.find(',', start);
        if (end == std::string::npos) end = spec.size();
        const std::string one = spec.substr(start, end - start);
        const auto eq = one.rfind('=');
        if (eq == std::string::npos || eq == 0 || eq + 1 == one.size())
            fail("-ot '{}': expected REGEX=DEVICE (e.g. 'blk\\.[0-9]+\\.ffn_.*_exps=CPU')", one);
        try {
            std::regex check(one.substr(0, eq));
        } catch (const std::regex_error& e) {
            fail("-ot '{}': bad regular expression: {}", one, e.what());
        }
        overrides.push_back({one.substr(0, eq), one.substr(eq + 1)});
        start = end + 1;
    }
}

namespace {
bool is_cpu(const std::string& dev) {
    std::string u;
    for (char c : dev) u += char(std::toupper(static_cast<unsigned char>(c)));
    return u == "CPU";
}
}  // namespace

bool names_experts(const std::regex& re, const std::array<std::string, 3>& layer_names) {
    for (const std::string& n : layer_names)
        if (!n.empty() && std::regex_search(n, re)) return true;
    return false;
}

std::vector<Placement> resolve_placement(const PlacementRules& r, const ExpertTensorNames& names,
                                         const std::string& device_name) {
    std::vector<Placement> out(names.size(), Placement::cached);
    std::vector<std::regex> res;
    for (const auto& [re, dev] : r.overrides) {
        if (!is_cpu(dev) && dev != device_name)
            fail("-ot ...={}: no such device (have CPU{}{})", dev, device_name.empty() ? "" : " and ", device_name);
        res.emplace_back(re);
    }
    for (size_t l = 0; l < names.size(); ++l) {
        if (names[l][0].empty()) continue;   // no routed experts
        // llama.cpp semantics: with static flags the remaining layers live on the device in full.
        if (r.cpu_moe || int(l) < r.n_cpu_moe) out[l] = Placement::cpu;
        else if (r.n_cpu_moe > 0) out[l] = Placement::device;
        for (size_t i = 0; i < res.size(); ++i)
            if (names_experts(res[i], names[l])) {
                out[l] = is_cpu(r.overrides[i].second) ? Placement::cpu : Placement::device;
                break;
            }
    }
    return out;
}

}  // namespace kinfer::runtime
