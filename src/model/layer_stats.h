// Statistics of a residual row (host memory), for --dump-layer and bisecting.
#pragma once
#include <cstdint>

namespace kinfer::model {

struct Stats {
    double mean = 0, rms = 0, max_abs = 0;
};
Stats stats(const float* x, int64_t n);

}  // namespace kinfer::model
