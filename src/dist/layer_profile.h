// Measured time per token of every layer on one machine (`kinfer bench --layer-times FILE`,
// dist/layer_timing.h), so the pipeline stages can be balanced by time instead of bytes
// (`--layer-profile FILE`, plan.h): KDA, MLA, dense and MoE layers cost different time per
// byte, and prefill is bound by compute rather than by the bytes read.
//
// File format (text, so it diffs and greps; every value an integer, so every rank that reads
// it balances by the same numbers):
//   kinfer-layer-profile 1
//   layers <L> fingerprint <16 hex digits> model <file name>
//   measured threads <T> prompt <P> batch <B> decode <D>
//   <layer> <decode ns per token> <prefill ns per token>     one line per layer, 0 to L-1 in order
//   head <decode ns per token> <prefill ns per token>        final stream, output norm, logits
// Lines starting with '#' and empty lines are skipped. Layer 0 also carries the embedding (it
// always runs on the stage that embeds).
#pragma once
#include "dist/plan.h"
#include "model/model.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kinfer::dist {

struct LayerProfile {
    int n_layer = 0;
    uint64_t fingerprint = 0;       // model::Model::fingerprint of the model it was measured on
    std::string model_name;         // its file name, for the messages
    int threads = 0;                // how it was measured (informative)
    int64_t prompt = 0, batch = 0, decode = 0;
    std::vector<uint64_t> decode_ns, prefill_ns;   // [n_layer + 1]: every layer, then the head

    // Throws kinfer::Error "layer profile 'PATH' line N: why" for a file that cannot be read,
    // is malformed or out of range (each value at most kMaxNs).
    static LayerProfile load(const std::string& path);
    void save(const std::string& path) const;
    std::string text() const;       // what save() writes
    // Throws kinfer::Error naming the mismatch when the profile was measured on another model.
    void check(const model::Model& m, const std::string& path) const;
    // The costs Plan::make balances by: decode or prefill (by must not be bytes).
    StageCosts costs(Balance by) const;

    static constexpr uint64_t kMaxNs = 1000000000000ull;   // 1000 s per token per layer
    static constexpr int kMaxLayers = 100000;
};

// --balance / --layer-profile as given (either may be empty) to what Plan::make takes: nullopt
// (bytes) without a profile, else the profile's prefill times unless --balance says otherwise.
// Prefill is the default because it is where the balance shows: its micro-batches keep every
// stage busy at once, so the slowest stage sets the pace, while one decoded token visits the
// stages one after another and takes their sum however they are cut.
// Loads and checks the profile against m; throws UsageError for --balance decode|prefill
// without a profile, kinfer::Error for a bad profile.
std::optional<StageCosts> costs_from_flags(const model::Model& m, const std::string& balance, const std::string& profile_path,
                                           LayerProfile* loaded = nullptr);

}  // namespace kinfer::dist
