// Routing frequency profile: how often each (layer, expert) was selected, counted per token.
// `--expert-profile FILE` adds a run's counts to FILE (creating it), and a run that finds FILE
// seeds the expert caches from it. `kinfer experts FILE` prints summarize()'s report.
//
// File format (text, so it diffs and greps):
//   kinfer-expert-profile 1
//   layers <L> experts <E>
//   <layer> <count_0> ... <count_{E-1}>        one line per layer that has any routing
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kinfer::runtime {

struct ExpertProfile {
    int n_layer = 0;
    int n_expert = 0;
    std::vector<uint64_t> counts;   // [layer][expert]

    ExpertProfile() = default;
    ExpertProfile(int layers, int experts)
        : n_layer(layers), n_expert(experts), counts(size_t(layers) * size_t(experts), 0) {}
    uint64_t get(int l, int e) const { return counts[size_t(l) * size_t(n_expert) + size_t(e)]; }
    void add(int l, int e, uint64_t n = 1) { counts[size_t(l) * size_t(n_expert) + size_t(e)] += n; }
    uint64_t total() const;

    // Adds other's counts (shapes must match; throws kinfer::Error otherwise).
    void merge(const ExpertProfile& other);
    void save(const std::string& path) const;                 // throws on I/O failure
    static ExpertProfile load(const std::string& path);       // throws naming the file and line
};

struct ProfileSummary {
    struct Layer {
        int layer = 0;
        uint64_t total = 0;
        double top10_share = 0;    // traffic share of the layer's top 10 % experts
        double eff_experts = 0;    // exp(entropy): how many experts the traffic "really" uses
        int unused = 0;            // experts never routed
    };
    struct Hot {
        int layer, expert;
        uint64_t count;
    };
    uint64_t total = 0;
    int n_routed_layers = 0;
    double top10_share = 0;        // over all (layer, expert) units
    double gini = 0;               // 0 = uniform, -> 1 = all traffic on one expert
    double max_over_mean = 0;      // hottest unit's count over the mean count
    std::vector<Layer> layers;
    std::vector<Hot> hottest;      // descending
};

ProfileSummary summarize(const ExpertProfile& p, int top_n = 10);
std::string format_summary(const ProfileSummary& s);
// "<label> l:e(count) ...\n" for the hottest units; empty when there are none.
std::string format_hottest(const ProfileSummary& s, const char* label = "hottest:");

}  // namespace kinfer::runtime
