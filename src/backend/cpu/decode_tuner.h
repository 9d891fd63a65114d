// Decode's stream layout and prefetch distance tuned on a run's own decode steps (kinfer run /
// chat). calibrate_decode_streams (matmul.h) measures them on synthetic weights in about a second,
// too long to add to every start, so `run` and `chat` used the defaults, which can be far from a
// machine's best (a 2-core EPYC read 44 GB/s from one stream per thread and 32 from four, the
// AVX-512 default). The tuner instead spends the first decode steps of the run: after a short
// warm-up, each layout in turn for one step, three rounds, and the fastest (by each candidate's
// best step, which shrugs off a step slowed by the neighbours or a first touch of an expert's
// pages) is kept if it beats the default by the calibration's margin; then the prefetch distances
// the same way. 20 steps on AVX-512 (three layouts), 23 on AVX2 (four), all of them producing
// tokens; the bits are the same in every layout (tests/quant), so tuning changes only speed. KINFER_DECODE_STREAMS /
// KINFER_DECODE_PREFETCH fix their knob and it is not tuned. Both knobs reach every quantized
// decode kernel (K-quants, IQ4_XS, the Q8_0 family and MXFP4, at both ISA levels). A model none of whose
// decode runs on the CPU (all layers on a GPU) only times noise: the default then stays unless
// noise beats the margin, which changes nothing either way.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace kinfer::backend::cpu {

class DecodeTuner {
public:
    struct Knob {
        std::vector<int> candidates;   // the default first; empty: not tuned
        std::function<void(int)> set;  // puts a candidate in force (only between steps)
        double margin = 0;             // a non-default value must be this much faster (0.03 = 3 %)
        const char* name = "";         // for summary(): "streams", "prefetch bytes"
    };
    // Layout first, then distance. Knobs with no candidates are skipped.
    DecodeTuner(Knob layout, Knob distance);
    // This machine's: quant's layouts for the active ISA and its distances, setting them through
    // quant::set_decode_streams / set_decode_prefetch; a knob fixed by its environment variable
    // (or an ISA without layouts) has no candidates.
    static DecodeTuner for_this_machine();

    // Around each decode step: before it the candidate to try is put in force, after it the
    // step's wall time is recorded. Once every knob is decided both do nothing.
    void before_step();
    void after_step(double seconds);
    bool tuning() const { return knob_ < 2; }
    // "streams 4 (best step ms: 1: 41.2, 4: 38.0, 8: 38.3); prefetch bytes 768 (...)": what was
    // tried so far and kept; empty before the first candidate was timed.
    std::string summary() const;

    static constexpr int kWarmupSteps = 2;   // the first steps fault in pages and warm caches
    static constexpr int kRounds = 3;

private:
    struct State {
        Knob knob;
        std::vector<double> best;   // per candidate, its fastest step (0: not timed yet)
        int steps = 0;              // steps timed for this knob
        int kept = -1;              // index of the candidate kept, once decided
    };
    void decide(State& s);
    State states_[2];
    int knob_ = 0;        // the knob being tuned; 2 when done
    int warmup_ = kWarmupSteps;
};

}  // namespace kinfer::backend::cpu
