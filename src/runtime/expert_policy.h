// Eviction policies of the expert caches (DESIGN.md section 5). A policy only orders the
// resident keys (key = layer * n_expert + expert); the cache decides residency, pinning and
// what may be evicted right now. Time is explicit (advance()), in tokens, so a policy behaves
// the same in a unit test driven by a synthetic trace as inside a run.
#pragma once
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace kinfer::runtime {

enum class PolicyKind { lru, lfu_decay };
PolicyKind parse_policy(const std::string& name);   // "lru" | "lfu" | "lfu-decay"; throws otherwise
const char* policy_name(PolicyKind k);

class EvictionPolicy {
public:
    virtual ~EvictionPolicy() = default;
    virtual void advance(double dt) = 0;          // time passes (tokens)
    virtual void access(uint32_t key) = 0;        // a use of key (resident or about to be)
    virtual void insert(uint32_t key) = 0;        // key became resident
    virtual void erase(uint32_t key) = 0;         // key left the cache
    // The resident key to evict first among those can_evict accepts; -1 when none is.
    virtual int64_t victim(const std::function<bool(uint32_t)>& can_evict) const = 0;
};

// Least recently used: evicts the resident key whose last access is oldest.
class LruPolicy final : public EvictionPolicy {
public:
    void advance(double) override {}
    void access(uint32_t key) override;
    void insert(uint32_t key) override;
    void erase(uint32_t key) override;
    int64_t victim(const std::function<bool(uint32_t)>& can_evict) const override;

private:
    std::list<uint32_t> order_;   // front = least recent
    std::unordered_map<uint32_t, std::list<uint32_t>::iterator> pos_;
};

// LFU with exponential decay: score(key) = sum over its accesses of 2^(-(now - t) / half_life).
// The history is kept for keys that were evicted too, so an expert that comes back is judged by
// its whole (decayed) record. Evicts the lowest score; ties go to the lower key.
// Scores are stored multiplied by 2^(now / half_life), which keeps the order fixed as time
// passes (no re-sorting per token); the scale is renormalised before it can overflow.
class LfuDecayPolicy final : public EvictionPolicy {
public:
    explicit LfuDecayPolicy(double half_life_tokens);
    void advance(double dt) override;
    void access(uint32_t key) override;
    void insert(uint32_t key) override;
    void erase(uint32_t key) override;
    int64_t victim(const std::function<bool(uint32_t)>& can_evict) const override;
    double score(uint32_t key) const;   // decayed to the current time

private:
    void rescale();
    double half_life_;
    double now_ = 0;
    double base_ = 0;                 // stored scores are relative to 2^(base_ / half_life_)
    std::unordered_map<uint32_t, double> scaled_;     // every key ever accessed
    std::set<std::pair<double, uint32_t>> resident_;  // (scaled score, key)
    std::unordered_map<uint32_t, bool> is_resident_;
};

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind k, double half_life_tokens);

// The keys a frequency profile says to keep resident: the hottest first, as many as fit in
// `bytes` (bytes_of(key) per key), skipping keys that never occurred.
std::vector<uint32_t> seed_from_profile(const std::vector<uint64_t>& counts, size_t bytes,
                                        const std::function<size_t(uint32_t)>& bytes_of);

}  // namespace kinfer::runtime
