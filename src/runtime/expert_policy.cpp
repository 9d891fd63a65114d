#include "runtime/expert_policy.h"

#include "common/error.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kinfer::runtime {

PolicyKind parse_policy(const std::string& name) {
    if (name == "lru") return PolicyKind::lru;
    if (name == "lfu" || name == "lfu-decay") return PolicyKind::lfu_decay;
    fail("unknown expert cache policy '{}' (use lru or lfu-decay)", name);
}

const char* policy_name(PolicyKind k) { return k == PolicyKind::lru ? "lru" : "lfu-decay"; }

void LruPolicy::access(uint32_t key) {
    auto it = pos_.find(key);
    if (it == pos_.end()) return;   // not resident: insert() will place it
    order_.splice(order_.end(), order_, it->second);
}

void LruPolicy::insert(uint32_t key) {
    if (pos_.count(key)) return access(key);
    order_.push_back(key);
    pos_[key] = std::prev(order_.end());
}

void LruPolicy::erase(uint32_t key) {
    auto it = pos_.find(key);
    if (it == pos_.end()) return;
    order_.erase(it->second);
    pos_.erase(it);
}

int64_t LruPolicy::victim(const std::function<bool(uint32_t)>& can_evict) const {
    for (uint32_t k : order_)
        if (can_evict(k)) return k;
    return -1;
}

LfuDecayPolicy::LfuDecayPolicy(double half_life) : half_life_(half_life > 0 ? half_life : 1.0) {}

void LfuDecayPolicy::advance(double dt) {
    now_ += dt;
    // 2^((now - base) / h) stays below 2^400 (doubles reach 2^1023).
    if ((now_ - base_) / half_life_ > 400) rescale();
}

void LfuDecayPolicy::rescale() {
    const double f = std::exp2(-(now_ - base_) / half_life_);
    base_ = now_;
    std::set<std::pair<double, uint32_t>> r;
    for (auto& [k, s] : scaled_) {
        const bool res = is_resident_.count(k) && is_resident_[k];
        s *= f;
        if (res) r.insert({s, k});
    }
    resident_.swap(r);
}

void LfuDecayPolicy::access(uint32_t key) {
    double& s = scaled_[key];
    auto r = is_resident_.find(key);
    const bool res = r != is_resident_.end() && r->second;
    if (res) resident_.erase({s, key});
    s += std::exp2((now_ - base_) / half_life_);
    if (res) resident_.insert({s, key});
}

void LfuDecayPolicy::insert(uint32_t key) {
    bool& res = is_resident_[key];
    if (res) return;
    res = true;
    resident_.insert({scaled_[key], key});
}

void LfuDecayPolicy::erase(uint32_t key) {
    auto r = is_resident_.find(key);
    if (r == is_resident_.end() || !r->second) return;
    r->second = false;
    resident_.erase({scaled_[key], key});
}

int64_t LfuDecayPolicy::victim(const std::function<bool(uint32_t)>& can_evict) const {
    for (const auto& [s, k] : resident_)
        if (can_evict(k)) return k;
    return -1;
}

double LfuDecayPolicy::score(uint32_t key) const {
    auto it = scaled_.find(key);
    return it == scaled_.end() ? 0.0 : it->second * std::exp2(-(now_ - base_) / half_life_);
}

std::unique_ptr<EvictionPolicy> make_policy(PolicyKind k, double half_life) {
    if (k == PolicyKind::lru) return std::make_unique<LruPolicy>();
    return std::make_unique<LfuDecayPolicy>(half_life);
}

std::vector<uint32_t> seed_from_profile(const std::vector<uint64_t>& counts, size_t bytes,
                                        const std::function<size_t(uint32_t)>& bytes_of) {
    std::vector<uint32_t> keys(counts.size());
    std::iota(keys.begin(), keys.end(), 0u);
    std::stable_sort(keys.begin(), keys.end(), [&](uint32_t a, uint32_t b) { return counts[a] > counts[b]; });
    std::vector<uint32_t> out;
    size_t used = 0;
    for (uint32_t k : keys) {
        if (counts[k] == 0) break;
        const size_t b = bytes_of(k);
        if (b == 0) continue;   // a layer without experts
        if (used + b > bytes) continue;   // a smaller expert of another layer may still fit
        used += b;
        out.push_back(k);
    }
    return out;
}

}  // namespace kinfer::runtime
