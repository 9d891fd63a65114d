#include "runtime/routing_trace.h"

#include "common/error.h"
#include "common/text_file.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace kinfer::runtime {

void RoutingTrace::record(int64_t token, int layer, const int32_t* experts) {
    const size_t at = (size_t(token) * size_t(n_layer_) + size_t(layer)) * size_t(k_);
    if (sel_.size() < at + size_t(k_)) sel_.resize(at + size_t(k_), -1);
    for (int i = 0; i < k_; ++i) sel_[at + size_t(i)] = experts[i];
}

void RoutingTrace::check_replay(int n_layer, int n_expert, int k) const {
    if (n_tokens() == 0) fail("routing trace: it holds no tokens");
    if (n_layer <= 0) fail("routing trace: the model has no MoE layer");
    const bool same = n_expert == n_expert_ && k == k_;
    const bool scaled = n_expert_ > 0 && n_expert % n_expert_ == 0 && k == k_ * (n_expert / n_expert_);
    if (!same && !scaled)
        fail("routing trace: {} experts / {} used cannot stand for the model's {} / {} (need the same, or r times both)",
             n_expert_, k_, n_expert, k);
}

void RoutingTrace::replay(int64_t token, int layer, int n_expert, int k, int32_t* out) const {
    const int64_t t = token % n_tokens();
    const int l = layer % n_layer_;
    const int r = n_expert / n_expert_;
    const int32_t* src = sel_.data() + (size_t(t) * size_t(n_layer_) + size_t(l)) * size_t(k_);
    for (int i = 0; i < k_; ++i)
        for (int j = 0; j < r; ++j) out[i * r + j] = src[i] * r + j;
    (void)k;
}

void RoutingTrace::save(const std::string& path) const {
    write_text_file(path, "routing trace", [&](std::ostream& f) {
        const int64_t T = n_tokens();
        f << "kinfer-routing-trace 1\nlayers " << n_layer_ << " experts " << n_expert_ << " used " << k_ << " tokens " << T << "\n";
        for (int64_t t = 0; t < T; ++t)
            for (int l = 0; l < n_layer_; ++l) {
                f << t << ' ' << l;
                for (int i = 0; i < k_; ++i) f << ' ' << sel_[(size_t(t) * size_t(n_layer_) + size_t(l)) * size_t(k_) + size_t(i)];
                f << '\n';
            }
    });
}

RoutingTrace RoutingTrace::load(const std::string& path) {
    std::ifstream f(path);
    if (!f) fail("routing trace '{}': cannot open", path);
    std::string line, word;
    int lineno = 0;
    auto next = [&]() -> bool { return ++lineno, bool(std::getline(f, line)); };
    if (!next() || line != "kinfer-routing-trace 1") fail("routing trace '{}': line 1: expected 'kinfer-routing-trace 1'", path);
    RoutingTrace tr;
    int64_t T = 0;
    {
        if (!next()) fail("routing trace '{}': line 2: missing the sizes line", path);
        std::istringstream s(line);
        std::string a, b, c, d;
        if (!(s >> a >> tr.n_layer_ >> b >> tr.n_expert_ >> c >> tr.k_ >> d >> T) || a != "layers" || b != "experts" || c != "used" ||
            d != "tokens" || tr.n_layer_ <= 0 || tr.n_expert_ <= 0 || tr.k_ <= 0 || tr.k_ > tr.n_expert_ || T < 0 || T > (int64_t(1) << 32))
            fail("routing trace '{}': line 2: expected 'layers L experts E used K tokens T' with 0 < K <= E", path);
    }
    // Grown line by line: the header alone must not size the allocation (a three-line file saying
    // "tokens 88888896" would take gigabytes before the first missing line is noticed).
    tr.sel_.reserve(std::min<size_t>(size_t(T) * size_t(tr.n_layer_) * size_t(tr.k_), size_t(1) << 20));
    for (int64_t t = 0; t < T; ++t)
        for (int l = 0; l < tr.n_layer_; ++l) {
            if (!next()) fail("routing trace '{}': ends after line {}, expected token {} layer {}", path, lineno - 1, t, l);
            std::istringstream s(line);
            int64_t tt = -1;
            int ll = -1;
            if (!(s >> tt >> ll) || tt != t || ll != l) fail("routing trace '{}': line {}: expected token {} layer {}", path, lineno, t, l);
            for (int i = 0; i < tr.k_; ++i) {
                int64_t e = -1;
                if (!(s >> e) || e < 0 || e >= tr.n_expert_)
                    fail("routing trace '{}': line {}: expected {} expert ids in 0..{}", path, lineno, tr.k_, tr.n_expert_ - 1);
                tr.sel_.push_back(int32_t(e));   // in [token][layer][k] order
            }
        }
    return tr;
}

}  // namespace kinfer::runtime
