// Eviction policies on synthetic routing traces (Zipf popularity + temporal locality, fixed
// seed). Expected hit counts come from deliberately naive models written here: they keep the
// whole access history and rescan it on every eviction, sharing no code with the policies.
#include "test_util.h"

#include "runtime/expert_policy.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

using namespace kinfer::runtime;

namespace {

// tokens x k distinct expert ids. Each slot repeats one of the previous token's experts with
// probability `locality`, else draws from a Zipf(s) popularity over a shuffled id order (the
// same order for every seed, so traces of one model share their hot experts).
std::vector<std::vector<int>> make_trace(int tokens, int n_expert, int k, double s, double locality, uint32_t seed) {
    std::vector<int> order(static_cast<size_t>(n_expert));
    for (int i = 0; i < n_expert; ++i) order[size_t(i)] = i;
    std::mt19937 shuffle_rng(2026);
    std::shuffle(order.begin(), order.end(), shuffle_rng);
    std::mt19937 rng(seed);
    std::vector<double> w(static_cast<size_t>(n_expert));
    for (int r = 0; r < n_expert; ++r) w[size_t(r)] = 1.0 / std::pow(double(r + 1), s);
    std::discrete_distribution<int> zipf(w.begin(), w.end());
    std::uniform_real_distribution<double> u(0, 1);
    std::vector<std::vector<int>> trace;
    std::vector<int> prev;
    for (int t = 0; t < tokens; ++t) {
        std::vector<int> cur;
        while (int(cur.size()) < k) {
            int e = (!prev.empty() && u(rng) < locality) ? prev[size_t(rng() % prev.size())] : order[size_t(zipf(rng))];
            if (std::find(cur.begin(), cur.end(), e) == cur.end()) cur.push_back(e);
        }
        prev = cur;
        trace.push_back(cur);
    }
    return trace;
}

// Drives a policy the way the store does: per token, time advances by 1; each selected expert
// is an access; a miss evicts the policy's victim when the cache is full, then is inserted.
uint64_t run_policy(EvictionPolicy& p, const std::vector<std::vector<int>>& trace, size_t capacity,
                    const std::set<int>& pinned = {}) {
    std::set<int> resident(pinned.begin(), pinned.end());
    for (int k : pinned) p.insert(uint32_t(k));
    uint64_t hits = 0;
    for (const auto& tok : trace) {
        p.advance(1.0);
        for (int e : tok) {
            p.access(uint32_t(e));
            if (resident.count(e)) {
                ++hits;
                continue;
            }
            if (resident.size() >= capacity) {
                const int64_t v = p.victim([&](uint32_t k) { return !pinned.count(int(k)); });
                REQUIRE(v >= 0);
                p.erase(uint32_t(v));
                resident.erase(int(v));
            }
            p.insert(uint32_t(e));
            resident.insert(e);
        }
    }
    return hits;
}

// Naive LRU: remembers the time of every access; evicts the resident key whose newest access is
// oldest.
uint64_t naive_lru(const std::vector<std::vector<int>>& trace, size_t capacity) {
    std::map<int, long> last;   // resident -> sequence number of last access
    long seq = 0;
    uint64_t hits = 0;
    for (const auto& tok : trace)
        for (int e : tok) {
            ++seq;
            if (last.count(e)) {
                ++hits;
                last[e] = seq;
                continue;
            }
            if (last.size() >= capacity) {
                auto victim = last.begin();
                for (auto it = last.begin(); it != last.end(); ++it)
                    if (it->second < victim->second) victim = it;
                last.erase(victim);
            }
            last[e] = seq;
        }
    return hits;
}

// Naive LFU with decay: every access at time t adds 2^(-(now - t) / h) to the key's score, the
// whole history counts (evicted keys keep theirs), the lowest score is evicted, ties to the
// lower key.
uint64_t naive_lfu(const std::vector<std::vector<int>>& trace, size_t capacity, double h,
                   const std::set<int>& pinned = {}) {
    std::map<int, std::vector<double>> hist;
    std::set<int> resident(pinned.begin(), pinned.end());
    double now = 0;
    uint64_t hits = 0;
    for (const auto& tok : trace) {
        now += 1;
        for (int e : tok) {
            hist[e].push_back(now);
            if (resident.count(e)) {
                ++hits;
                continue;
            }
            if (resident.size() >= capacity) {
                int best = -1;
                double best_s = 0;
                for (int k : resident) {
                    if (pinned.count(k)) continue;
                    double s = 0;
                    for (double t : hist[k]) s += std::exp2(-(now - t) / h);
                    if (best < 0 || s < best_s) best = k, best_s = s;   // keys ascend: ties keep the lower
                }
                resident.erase(best);
            }
            resident.insert(e);
        }
    }
    return hits;
}

}  // namespace

TEST_CASE("policy: LRU matches the naive model on Zipf + locality traces") {
    for (double loc : {0.0, 0.3, 0.7}) {
        const auto trace = make_trace(3000, 64, 4, 1.1, loc, 1234);
        for (size_t cap : {4u, 8u, 16u, 32u}) {
            LruPolicy p;
            const uint64_t got = run_policy(p, trace, cap);
            CHECK_MESSAGE(got == naive_lru(trace, cap), "locality " << loc << " capacity " << cap);
        }
    }
}

TEST_CASE("policy: LFU-decay matches the naive model on Zipf + locality traces") {
    for (double h : {4.0, 32.0}) {
        for (double loc : {0.0, 0.5}) {
            const auto trace = make_trace(1500, 64, 4, 1.1, loc, 99);
            for (size_t cap : {4u, 16u}) {
                LfuDecayPolicy p(h);
                const uint64_t got = run_policy(p, trace, cap);
                CHECK_MESSAGE(got == naive_lfu(trace, cap, h), "half-life " << h << " locality " << loc << " cap " << cap);
            }
        }
    }
}

TEST_CASE("policy: LFU-decay survives rescaling over long runs") {
    // 400 half-lives is where the stored scale is renormalised; run well past it.
    const auto trace = make_trace(2500, 32, 2, 1.0, 0.2, 7);
    LfuDecayPolicy p(2.0);
    const uint64_t got = run_policy(p, trace, 8);
    CHECK(got == naive_lfu(trace, 8, 2.0));
    CHECK(std::isfinite(p.score(0)));
}

TEST_CASE("policy: profile seeding pins the hottest experts, LFU handles the rest") {
    const auto train = make_trace(2000, 64, 4, 1.2, 0.0, 5);
    const auto test = make_trace(2000, 64, 4, 1.2, 0.3, 6);   // same popularity, new draws
    std::vector<uint64_t> counts(64, 0);
    for (const auto& tok : train)
        for (int e : tok) ++counts[size_t(e)];
    // 100 bytes per expert, 800 bytes of seed room: the 8 hottest.
    const auto seeded = seed_from_profile(counts, 800, [](uint32_t) { return size_t(100); });
    REQUIRE(seeded.size() == 8);
    for (size_t i = 1; i < seeded.size(); ++i) CHECK(counts[seeded[i - 1]] >= counts[seeded[i]]);
    const std::set<int> pinned(seeded.begin(), seeded.end());
    LfuDecayPolicy p(32);
    const uint64_t got = run_policy(p, test, 16, pinned);
    CHECK(got == naive_lfu(test, 16, 32, pinned));
    LruPolicy lru;
    LfuDecayPolicy lfu(32);
    MESSAGE("hits of 8000 at 16 slots: seeded LFU ", got, ", LFU ", run_policy(lfu, test, 16), ", LRU ",
            run_policy(lru, test, 16));
}

TEST_CASE("policy: names and victims") {
    CHECK(parse_policy("lru") == PolicyKind::lru);
    CHECK(parse_policy("lfu-decay") == PolicyKind::lfu_decay);
    CHECK_THROWS_WITH(parse_policy("fifo"), doctest::Contains("fifo"));
    LruPolicy p;
    CHECK(p.victim([](uint32_t) { return true; }) == -1);
    p.insert(3);
    p.insert(1);
    p.access(3);
    CHECK(p.victim([](uint32_t) { return true; }) == 1);
    CHECK(p.victim([](uint32_t k) { return k != 1; }) == 3);
}
