// libFuzzer target for expert profiles (`--expert-profile FILE`, `kinfer experts FILE`): any
// file must either load, after which the summary, its text, a merge with itself and a save +
// load round trip work and agree; or throw kinfer::Error. Crashes, hangs, sanitizer reports,
// other exceptions and broken round trips are bugs.
#include "runtime/expert_profile.h"

#include "fuzz_util.h"

#include <cmath>

using namespace kinfer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string in = fuzz::scratch_path("profile.in"), out = fuzz::scratch_path("profile.out");
    fuzz::write_file(in, data, size);
    runtime::ExpertProfile p;
    if (!fuzz::tolerate([&] { p = runtime::ExpertProfile::load(in); })) return 0;
    if (p.counts.size() != size_t(p.n_layer) * size_t(p.n_expert)) __builtin_trap();
    const auto s = runtime::summarize(p, 10);
    if (s.total != p.total()) __builtin_trap();
    if (std::isnan(s.gini) || std::isnan(s.top10_share) || std::isnan(s.max_over_mean)) __builtin_trap();
    fuzz::sink(runtime::format_summary(s));
    fuzz::sink(runtime::format_hottest(s));
    p.save(out);
    const auto q = runtime::ExpertProfile::load(out);
    if (q.n_layer != p.n_layer || q.n_expert != p.n_expert || q.counts != p.counts) __builtin_trap();
    auto twice = p;
    fuzz::tolerate([&] { twice.merge(q); });   // may refuse a count that would overflow
    return 0;
}
