// The K-quant scale searches (see kquant_search.h). Reimplemented from ggml's description of
// the algorithm; operation order is part of the contract, so keep expressions as they are.
#include "quant/kquant_search.h"

#include <algorithm>
#include <cmath>

namespace kinfer::quant::detail {

namespace {
int clampi(int v, int lo, int hi) { return std::max(lo, std::min(hi, v)); }

// Signed value of largest magnitude, first on ties.
float signed_absmax(const float* x, int n, float& amax) {
    float max = 0;
    amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    return max;
}
}  // namespace

float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
    float amax;
    const float max = signed_absmax(x, n, amax);
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, int8_t(0));
        return 0.0f;
    }
    // Weighted fit with w = x^2 (ggml's rmse_type 1, no importance weights).
    auto fit = [&](float iscale, float& sumlx, float& suml2) {
        sumlx = 0; suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
    };
    auto assign = [&](float iscale) {
        for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1));
    };
    float iscale = -nmax / max;
    float sumlx, suml2;
    fit(iscale, sumlx, suml2);
    assign(iscale);
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        fit(iscale, sumlx, suml2);
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            assign(iscale);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
    float amax;
    const float max = signed_absmax(x, n, amax);
    if (amax < kGroupMaxEps) {
        std::fill(L, L + n, int8_t(0));
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clampi(nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = int8_t(l);
        const float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int pass = 0; pass < 5; ++pass) {
        int changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int new_l = clampi(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    // Accept when the fitted error sumlx^2/suml2 grows (cross-multiplied).
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = int8_t(new_l); sumlx = slx; suml2 = sl2;
                        ++changed;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                       float* neg_min, uint8_t* Laux, float rmin, float rdelta, int nstep,
                       bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;  // the offset only ever shifts down
    if (max == min) {
        std::fill(L, L + n, uint8_t(0));
        *neg_min = -min;
        return 0.0f;
    }
    auto err_of = [&](float d) { return use_mad ? std::fabs(d) : d * d; };
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        L[i] = uint8_t(clampi(nearest_int(iscale * (x[i] - min)), 0, nmax));
        const float diff = scale * L[i] + min - x[i];
        best_error += weights[i] * err_of(diff);
    }
    if (nstep < 1) {
        *neg_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clampi(nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = uint8_t(l);
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        // Closed-form weighted least squares for x ~ scale * l + min.
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                const float diff = this_scale * Laux[i] + this_min - x[i];
                cur_error += weights[i] * err_of(diff);
            }
            if (cur_error < best_error) {
                std::copy(Laux, Laux + n, L);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

}  // namespace kinfer::quant::detail
