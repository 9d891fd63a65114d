#include "model/layer_stats.h"

#include <cmath>

namespace kinfer::model {

Stats stats(const float* x, int64_t n) {
    Stats st;
    double s = 0, s2 = 0, m = 0;
    for (int64_t i = 0; i < n; ++i) {
        s += x[i];
        s2 += double(x[i]) * x[i];
        m = std::fmax(m, std::fabs(double(x[i])));
    }
    st.mean = s / double(n);
    st.rms = std::sqrt(s2 / double(n));
    st.max_abs = m;
    return st;
}

}  // namespace kinfer::model
