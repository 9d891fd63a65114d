// The decode-layout tuner that run / chat drive around every decode step (backend/cpu/decode_tuner.h):
// which candidates it puts in force and when, what it keeps, and that it stops. The steps are
// simulated here, with step times chosen per candidate; that every layout gives the same bits is
// tests/quant's (vec_dot_rows, vec_dot_tile) and test_decode_streams' business.
#include "backend/cpu/decode_tuner.h"
#include "quant/matmul.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <map>
#include <string>
#include <vector>

using kinfer::backend::cpu::DecodeTuner;

namespace {

// Two knobs whose set() calls are recorded, and a "machine" whose step time depends on both.
struct Rig {
    int layout = 4, distance = 768;   // what is in force
    std::vector<std::pair<char, int>> sets;
    DecodeTuner make(std::vector<int> layouts, std::vector<int> distances) {
        return DecodeTuner({layouts, [this](int v) { layout = v; sets.push_back({'L', v}); }, 0.03, "streams"},
                           {distances, [this](int v) { distance = v; sets.push_back({'D', v}); }, 0.02, "prefetch bytes"});
    }
};

// Runs steps until the tuner is done (at most `limit`), each taking ms(layout, distance) plus
// `extra` on the steps listed in it. Returns the steps run.
template <class Ms>
int drive(DecodeTuner& t, Rig& rig, Ms ms, int limit = 100, std::map<int, double> extra = {}) {
    int steps = 0;
    while (t.tuning() && steps < limit) {
        t.before_step();
        const double e = extra.count(steps) ? extra[steps] : 0.0;
        t.after_step((ms(rig.layout, rig.distance) + e) * 1e-3);
        ++steps;
    }
    return steps;
}

// Sets (value) or unsets (nullptr) an environment variable for a scope, restoring it after.
struct EnvSave {
    EnvSave(const char* name, const char* value) : name_(name) {
        if (const char* old = std::getenv(name)) had_ = true, old_ = old;
        if (value) setenv(name, value, 1);
        else unsetenv(name);
    }
    ~EnvSave() {
        if (had_) setenv(name_, old_.c_str(), 1);
        else unsetenv(name_);
    }
    const char* name_;
    bool had_ = false;
    std::string old_;
};

}  // namespace

TEST_CASE("decode tuner: the warm-up, then each layout and each distance three times, the fastest kept") {
    Rig rig;
    DecodeTuner t = rig.make({4, 1, 8}, {768, 1536, 3072});
    CHECK(t.tuning());
    CHECK(t.summary().empty());
    // The warm-up steps run in whatever is in force and put nothing in force.
    for (int i = 0; i < DecodeTuner::kWarmupSteps; ++i) {
        t.before_step();
        t.after_step(1.0);   // slow first steps (page faults) are not counted
    }
    CHECK(rig.sets.empty());
    // One stream is 20 % faster here; the distances differ by under the 2 % margin.
    auto ms = [](int layout, int distance) { return (layout == 1 ? 40.0 : 50.0) * (distance == 3072 ? 0.99 : 1.0); };
    const int steps = drive(t, rig, ms);
    CHECK(steps == 2 * 3 * DecodeTuner::kRounds);
    CHECK_FALSE(t.tuning());
    CHECK(rig.layout == 1);
    CHECK(rig.distance == 768);
    // Round-robin over the candidates, each knob decided (and put in force) at its phase's end.
    const std::vector<std::pair<char, int>> want = {{'L', 4}, {'L', 1}, {'L', 8}, {'L', 4}, {'L', 1}, {'L', 8}, {'L', 4}, {'L', 1},
                                                    {'L', 8}, {'L', 1}, {'D', 768}, {'D', 1536}, {'D', 3072}, {'D', 768},
                                                    {'D', 1536}, {'D', 3072}, {'D', 768}, {'D', 1536}, {'D', 3072}, {'D', 768}};
    CHECK(rig.sets == want);
    const std::string s = t.summary();
    INFO(s);
    CHECK(s.find("streams 1 (best step ms: 4: 50.0, 1: 40.0, 8: 50.0)") != std::string::npos);
    CHECK(s.find("prefetch bytes 768 (") != std::string::npos);
    // Done: nothing changes any more.
    const size_t n_sets = rig.sets.size();
    t.before_step();
    t.after_step(0.001);
    CHECK(rig.sets.size() == n_sets);
}

TEST_CASE("decode tuner: a slow step does not decide, the default needs the margin beaten") {
    Rig rig;
    DecodeTuner t = rig.make({4, 1, 8}, {});
    // The default's step in the last round is slowed by a neighbour; each candidate's best step
    // counts, so it does not lose for that (by the mean or the last step it would). Layout 8 is 2 %
    // faster, under the 3 % margin: the default 4 stays.
    auto ms = [](int layout, int) { return layout == 8 ? 49.0 : 50.0; };
    const int steps = drive(t, rig, ms, 100, {{DecodeTuner::kWarmupSteps + 3 * (DecodeTuner::kRounds - 1), 30.0}});
    CHECK(steps == DecodeTuner::kWarmupSteps + 3 * DecodeTuner::kRounds);
    CHECK(rig.layout == 4);
    CHECK(t.summary().find("streams 4 (") != std::string::npos);
    // The distance knob had no candidates: never set, not in the summary.
    for (auto [k, v] : rig.sets) CHECK(k == 'L');
    CHECK(t.summary().find("prefetch") == std::string::npos);

    // 4 % faster clears the margin.
    Rig rig2;
    DecodeTuner t2 = rig2.make({4, 1, 8}, {});
    drive(t2, rig2, [](int layout, int) { return layout == 8 ? 48.0 : 50.0; });
    CHECK(rig2.layout == 8);
}

TEST_CASE("decode tuner: nothing to tune, a run that ends mid-way, and this machine's knobs") {
    Rig rig;
    DecodeTuner none = rig.make({}, {});
    CHECK_FALSE(none.tuning());
    none.before_step();
    none.after_step(0.05);
    CHECK(rig.sets.empty());
    CHECK(none.summary().empty());

    // Generation that stops after a few steps leaves the knob undecided; the summary says so.
    DecodeTuner partial = rig.make({4, 1, 8}, {768, 1536});
    drive(partial, rig, [](int, int) { return 50.0; }, DecodeTuner::kWarmupSteps + 2);
    CHECK(partial.tuning());
    CHECK(partial.summary() == "streams undecided (best step ms: 4: 50.0, 1: 50.0)");

    // KINFER_DECODE_STREAMS fixes the layout: only the distance is tuned (and the layout left alone).
    // Both variables as this test needs them, and as they were afterwards.
    const EnvSave streams("KINFER_DECODE_STREAMS", "8"), prefetch("KINFER_DECODE_PREFETCH", nullptr);
    const bool has_layouts = !kinfer::quant::decode_stream_layouts(kinfer::quant::active_isa()).empty();
    DecodeTuner env = DecodeTuner::for_this_machine();
    if (has_layouts) CHECK(kinfer::quant::decode_streams() == 8);   // the variable's value in force
    int steps = 0;
    for (; env.tuning() && steps < 100; ++steps) {
        env.before_step();
        env.after_step(0.01);
    }
    if (has_layouts) CHECK(kinfer::quant::decode_streams() == 8);   // and left alone by the tuning
    kinfer::quant::set_decode_prefetch(0);
    kinfer::quant::set_decode_streams(0);
    if (has_layouts) {
        CHECK(steps == DecodeTuner::kWarmupSteps + int(kinfer::quant::decode_prefetch_distances().size()) * DecodeTuner::kRounds);
        CHECK(env.summary().rfind("prefetch bytes 768 (", 0) == 0);   // equal steps: the default stays
    } else {
        CHECK(steps == 0);   // the scalar kernels: nothing to tune
    }
}
