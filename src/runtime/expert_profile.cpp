#include "runtime/expert_profile.h"

#include "common/error.h"
#include "common/text_file.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

namespace kinfer::runtime {

uint64_t ExpertProfile::total() const { return std::accumulate(counts.begin(), counts.end(), uint64_t(0)); }

void ExpertProfile::merge(const ExpertProfile& o) {
    if (o.n_layer != n_layer || o.n_expert != n_expert)
        fail("expert profile: shape {} layers x {} experts does not match the model's {} x {}", o.n_layer, o.n_expert,
             n_layer, n_expert);
    for (size_t i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
}

void ExpertProfile::save(const std::string& path) const {
    write_text_file(path, "expert profile", [&](std::ostream& f) {
        f << "kinfer-expert-profile 1\nlayers " << n_layer << " experts " << n_expert << "\n";
        for (int l = 0; l < n_layer; ++l) {
            bool any = false;   // not a sum: counts may add up past 2^64
            for (int e = 0; e < n_expert; ++e) any = any || get(l, e) != 0;
            if (!any) continue;
            f << l;
            for (int e = 0; e < n_expert; ++e) f << ' ' << get(l, e);
            f << '\n';
        }
    });
}

ExpertProfile ExpertProfile::load(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail("expert profile '{}': cannot open", path);
    std::string line;
    int lineno = 0;
    auto next = [&]() -> bool { return ++lineno, bool(std::getline(f, line)); };
    if (!next() || line != "kinfer-expert-profile 1") fail("expert profile '{}': line 1 is not 'kinfer-expert-profile 1'", path);
    std::string w1, w2;
    int L = 0, E = 0;
    if (!next()) fail("expert profile '{}': missing the 'layers L experts E' line", path);
    {
        std::istringstream is(line);
        if (!(is >> w1 >> L >> w2 >> E) || w1 != "layers" || w2 != "experts" || L <= 0 || E <= 0 || L > 100000 ||
            E > 1000000)
            fail("expert profile '{}' line 2: expected 'layers L experts E', got '{}'", path, line);
        // The counts are a dense L x E table sized from this line alone: bound it (2^24 units,
        // 128 MiB; the largest Kimi models have under 10^5), not 8 * 10^11 bytes.
        if (int64_t(L) * E > (int64_t(1) << 24))
            fail("expert profile '{}' line 2: {} layers x {} experts is more than 2^24 counts", path, L, E);
    }
    ExpertProfile p(L, E);
    uint64_t total = 0;
    while (next()) {
        if (line.empty()) continue;
        std::istringstream is(line);
        int l = -1;
        if (!(is >> l) || l < 0 || l >= L) fail("expert profile '{}' line {}: bad layer index", path, lineno);
        for (int e = 0; e < E; ++e) {
            uint64_t c = 0;
            if (!(is >> c)) fail("expert profile '{}' line {}: expected {} counts", path, lineno, E);
            if (c > UINT64_MAX - total) fail("expert profile '{}' line {}: the counts add up past 2^64", path, lineno);
            total += c;
            p.add(l, e, c);
        }
        std::string extra;
        if (is >> extra) fail("expert profile '{}' line {}: more than {} counts", path, lineno, E);
    }
    return p;
}

namespace {

// Share of the total held by the largest ceil(10 %) of the values.
double top10(std::vector<uint64_t> v) {
    if (v.empty()) return 0;
    const uint64_t tot = std::accumulate(v.begin(), v.end(), uint64_t(0));
    if (tot == 0) return 0;
    const size_t k = std::max<size_t>(1, (v.size() + 9) / 10);
    std::partial_sort(v.begin(), v.begin() + std::ptrdiff_t(k), v.end(), std::greater<>());
    return double(std::accumulate(v.begin(), v.begin() + std::ptrdiff_t(k), uint64_t(0))) / double(tot);
}

}  // namespace

ProfileSummary summarize(const ExpertProfile& p, int top_n) {
    ProfileSummary s;
    std::vector<uint64_t> all;
    for (int l = 0; l < p.n_layer; ++l) {
        std::vector<uint64_t> v(size_t(p.n_expert));
        for (int e = 0; e < p.n_expert; ++e) v[size_t(e)] = p.get(l, e);
        const uint64_t tot = std::accumulate(v.begin(), v.end(), uint64_t(0));
        if (tot == 0) continue;   // dense layer or never reached
        ProfileSummary::Layer L;
        L.layer = l;
        L.total = tot;
        L.top10_share = top10(v);
        double h = 0;
        for (uint64_t c : v) {
            if (c == 0) {
                ++L.unused;
                continue;
            }
            const double q = double(c) / double(tot);
            h -= q * std::log(q);
        }
        L.eff_experts = std::exp(h);
        s.layers.push_back(L);
        all.insert(all.end(), v.begin(), v.end());
        for (int e = 0; e < p.n_expert; ++e) s.hottest.push_back({l, e, v[size_t(e)]});
    }
    s.n_routed_layers = int(s.layers.size());
    s.total = std::accumulate(all.begin(), all.end(), uint64_t(0));
    if (s.total > 0) {
        s.top10_share = top10(all);
        std::sort(all.begin(), all.end());
        // Gini from the sorted values: sum_i (2i - n - 1) x_i / (n sum x).
        const double n = double(all.size());
        double acc = 0;
        for (size_t i = 0; i < all.size(); ++i) acc += (2.0 * double(i + 1) - n - 1.0) * double(all[i]);
        s.gini = acc / (n * double(s.total));
        s.max_over_mean = double(all.back()) / (double(s.total) / n);
    }
    std::sort(s.hottest.begin(), s.hottest.end(), [](const auto& a, const auto& b) {
        return a.count != b.count ? a.count > b.count : (a.layer != b.layer ? a.layer < b.layer : a.expert < b.expert);
    });
    if (s.hottest.size() > size_t(std::max(top_n, 0))) s.hottest.resize(size_t(std::max(top_n, 0)));
    return s;
}

std::string format_summary(const ProfileSummary& s) {
    std::string out;
    out += fmt::format("routed selections {}  layers {}  top-10% share {:.1f}%  gini {:.3f}  max/mean {:.2f}\n", s.total,
                       s.n_routed_layers, 100 * s.top10_share, s.gini, s.max_over_mean);
    out += fmt::format("{:>6} {:>12} {:>10} {:>10} {:>7}\n", "layer", "selections", "top-10%", "eff.exp", "unused");
    for (const auto& L : s.layers)
        out += fmt::format("{:>6} {:>12} {:>9.1f}% {:>10.1f} {:>7}\n", L.layer, L.total, 100 * L.top10_share,
                           L.eff_experts, L.unused);
    return out + format_hottest(s);
}

std::string format_hottest(const ProfileSummary& s, const char* label) {
    if (s.hottest.empty()) return {};
    std::string out = label;
    for (const auto& h : s.hottest) out += fmt::format(" {}:{}({})", h.layer, h.expert, h.count);
    return out + "\n";
}

}  // namespace kinfer::runtime
