#include "backend/cpu/decode_tuner.h"

#include "backend/cpu/matmul.h"
#include "quant/matmul.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace kinfer::backend::cpu {

DecodeTuner::DecodeTuner(Knob layout, Knob distance) {
    states_[0].knob = std::move(layout);
    states_[1].knob = std::move(distance);
    for (State& s : states_) s.best.assign(s.knob.candidates.size(), 0.0);
    while (knob_ < 2 && states_[knob_].knob.candidates.empty()) ++knob_;
}

DecodeTuner DecodeTuner::for_this_machine() {
    const quant::Isa isa = quant::active_isa();
    Knob layout{{}, [](int s) { quant::set_decode_streams(s); }, 0.03, "streams"};
    Knob distance{{}, [](int b) { quant::set_decode_prefetch(b); }, 0.02, "prefetch bytes"};
    std::vector<int> layouts = quant::decode_stream_layouts(isa);
    // The scalar kernels have one layout and do not prefetch: nothing to tune.
    if (layouts.empty()) return DecodeTuner(std::move(layout), std::move(distance));
    // The variables put their value in force (as the CPU backend did when it started) and say
    // whether they fixed it; a malformed one throws, naming what it accepts.
    if (apply_decode_streams_env() == 0) {
        const int def = quant::default_decode_streams(isa);
        layout.candidates.push_back(def);
        for (int s : layouts)
            if (s != def) layout.candidates.push_back(s);
    }
    if (apply_decode_prefetch_env() == 0) distance.candidates = quant::decode_prefetch_distances();
    return DecodeTuner(std::move(layout), std::move(distance));
}

void DecodeTuner::before_step() {
    if (!tuning() || warmup_ > 0) return;
    State& s = states_[knob_];
    s.knob.set(s.knob.candidates[size_t(s.steps) % s.knob.candidates.size()]);
}

void DecodeTuner::after_step(double seconds) {
    if (!tuning()) return;
    if (warmup_ > 0) {
        --warmup_;
        return;
    }
    State& s = states_[knob_];
    double& best = s.best[size_t(s.steps) % s.knob.candidates.size()];
    if (best == 0 || seconds < best) best = seconds;
    if (++s.steps < kRounds * int(s.knob.candidates.size())) return;
    decide(s);
    do ++knob_;
    while (knob_ < 2 && states_[knob_].knob.candidates.empty());
}

void DecodeTuner::decide(State& s) {
    // The default (index 0) stays unless another candidate's best step is clearly shorter.
    size_t fastest = 0;
    for (size_t i = 1; i < s.best.size(); ++i)
        if (s.best[i] < s.best[fastest]) fastest = i;
    s.kept = s.best[fastest] * (1 + s.knob.margin) < s.best[0] ? int(fastest) : 0;
    s.knob.set(s.knob.candidates[size_t(s.kept)]);
}

std::string DecodeTuner::summary() const {
    std::string out;
    for (const State& s : states_) {
        if (s.steps == 0) continue;
        std::string tried;
        for (size_t i = 0; i < s.best.size(); ++i)
            if (s.best[i] > 0) tried += fmt::format("{}{}: {:.1f}", tried.empty() ? "" : ", ", s.knob.candidates[i], s.best[i] * 1e3);
        out += fmt::format("{}{} {} (best step ms: {})", out.empty() ? "" : "; ", s.knob.name,
                           s.kept >= 0 ? fmt::format("{}", s.knob.candidates[size_t(s.kept)]) : std::string("undecided"), tried);
    }
    return out;
}

}  // namespace kinfer::backend::cpu
