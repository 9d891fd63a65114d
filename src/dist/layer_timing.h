// The timing pass behind `kinfer bench --layer-times FILE`: every layer's forward timed in one
// process on this machine, decode and prefill apart, as a layer profile (dist/layer_profile.h)
// that --layer-profile balances the pipeline stages by.
#pragma once
#include "backend/backend.h"
#include "dist/layer_profile.h"
#include "model/model.h"

namespace kinfer::dist {

struct TimingOptions {
    int threads = 0;                                  // 0: the machine's default
    int64_t prompt = 128;                             // tokens of the timed prefill
    // Its chunk (0: the whole prompt). A pipeline prefill's micro-batches are such chunks, and
    // an MLA layer's time per token grows with the keys before it: time a prompt as long as the
    // real ones in chunks of --micro-batch.
    int64_t batch = 0;
    int decode = 32;                                  // single-token decodes timed after it
    int reps = 3;                                     // timed repetitions (after one warm-up); the median is kept
    backend::CacheType cache_type = backend::CacheType::f16;
};

// Times the layers through Session::on_layer, which fires after every layer: a layer's time is
// the time since the hook before it (layer 0 also embeds; the head is the rest of the pass up
// to its logits). The CPU backend runs each layer to completion before the hook returns; on a
// device the hook's download waits for the layer, so the times hold there too, a little high.
LayerProfile time_layers(const model::Model& m, const TimingOptions& o);

// The per-layer table bench prints beside the file: kind, MiB, decode and prefill us per token.
std::string format_layer_times(const LayerProfile& p, const model::Model& m);

}  // namespace kinfer::dist
