// src/quant/scale_search.cpp — the scale searches that the quantizers share (symmetric and min/scale fits).
#include <algorithm>
#include <cmath>

#include "quant/kernels.h"

namespace weft::quant {

// Symmetric quantization of n values to integers in [-nmax, nmax - 1] (stored as L = l + nmax).
// Starts from the scale that maps the largest-magnitude value to -nmax, then tries 18 nearby
// scales and keeps the one that minimizes sum w (x - scale l)^2, where the weight is x^2 when
// `weights` is null. Returns the scale.
float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *weights) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < k_group_max_eps) {
        std::fill(L, L + n, int8_t(0));
        return 0.f;
    }
    auto weight = [&](int i) { return weights ? weights[i] : x[i] * x[i]; };
    auto clamp_level = [&](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };

    float iscale = -float(nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_level(nearest_int(iscale * x[i]));
        L[i] = int8_t(l + nmax);
        const float w = weight(i);
        sumlx += w * x[i] * float(l);
        suml2 += w * float(l) * float(l);
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    // Minimizing the error for a fixed set of levels is maximizing sumlx^2 / suml2.
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(float(nmax) + 0.1f * float(is)) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            const int l = clamp_level(nearest_int(iscale * x[i]));
            const float w = weight(i);
            sumlx += w * x[i] * float(l);
            suml2 += w * float(l) * float(l);
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) L[i] = int8_t(nmax + clamp_level(nearest_int(iscale * x[i])));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

// Symmetric quantization for q3_K ([-nmax, nmax - 1], stored as l + nmax): start from the
// max-magnitude scale, then move single values to the level that the current best-fit scale
// prefers while that lowers sum w (x - scale l)^2 (weights x^2 when null). Returns the scale.
float make_q3_quants(int n, int nmax, const float *x, int8_t *L, const float *weights) {
    const float max = signed_absmax(x, n);
    if (std::fabs(max) < k_group_max_eps) {
        std::fill(L, L + n, int8_t(0));
        return 0.f;
    }
    auto weight = [&](int i) { return weights ? weights[i] : x[i] * x[i]; };
    auto clamp_level = [&](int l) { return std::max(-nmax, std::min(nmax - 1, l)); };

    const float iscale = -float(nmax) / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = clamp_level(nearest_int(iscale * x[i]));
        L[i] = int8_t(l);
        const float w = weight(i);
        sumlx += w * x[i] * float(l);
        suml2 += w * float(l) * float(l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = weight(i);
            float slx = sumlx - w * x[i] * float(L[i]);
            if (slx > 0) {
                float sl2 = suml2 - w * float(L[i]) * float(L[i]);
                const int new_l = clamp_level(nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * float(new_l);
                    sl2 += w * float(new_l) * float(new_l);
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = int8_t(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; ++i) L[i] = int8_t(L[i] + nmax);
    return suml2 > 0 ? sumlx / suml2 : 0.0f;
}

// Asymmetric quantization x ≈ scale * L - the_min with L in [0, nmax]: start from the min..max
// grid, then try nstep + 1 grids of slightly different step (rmin + rdelta * is extra levels),
// each followed by the weighted least-squares fit of scale and min, and keep the one with the
// smallest weighted error (absolute error when use_mad). The min is clamped to <= 0 (a min
// above zero would waste levels). Returns the scale; *the_min receives -min (>= 0).
float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                       uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
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
    if (min > 0) min = 0;
    if (max == min) {
        std::fill(L, L + n, uint8_t(0));
        *the_min = -min;
        return 0.f;
    }
    auto error_of = [&](float diff) { return use_mad ? std::fabs(diff) : diff * diff; };

    float iscale = float(nmax) / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = uint8_t(std::max(0, std::min(nmax, l)));
        const float diff = scale * float(L[i]) + min - x[i];
        best_error += weights[i] * error_of(diff);
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            // min is the best fit so far and may lie at or near max, so the product can be huge
            // (or not finite): clamp before rounding, which is the same for every ordinary value.
            const float v = iscale * (x[i] - min);
            const int l = v > 0 ? nearest_int(std::min(v, float(nmax))) : 0;
            Laux[i] = uint8_t(l);
            const float w = weights[i];
            sum_l += w * float(l);
            sum_l2 += w * float(l) * float(l);
            sum_xl += w * float(l) * x[i];
        }
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
                const float diff = this_scale * float(Laux[i]) + this_min - x[i];
                cur_error += weights[i] * error_of(diff);
            }
            if (cur_error < best_error) {
                std::copy(Laux, Laux + n, L);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

// Unsigned quantization of n values (meant to be >= 0) to integers in [0, nmax]: start from the
// scale that maps the largest value to nmax, try 8 nearby scales, keep the one with the smallest
// sum w (x - scale l)^2, then move single values to the level the best-fit scale prefers while
// that helps (up to 5 rounds). Returns the least-squares scale of the final levels.
//
// The established search keeps its levels in bytes and reads them back as bytes, so a value
// below zero (which rounds to a negative level) wraps; that is kept here, since q2_K's and
// iq2_xxs's scales go through it and the files must come out the same.
float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *weights) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    if (max < k_group_max_eps) {
        std::fill(L, L + n, uint8_t(0));
        return 0.f;
    }
    float iscale = float(nmax) / max;
    for (int i = 0; i < n; ++i) L[i] = uint8_t(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * float(L[i]);
        best_mse += weights[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * float(is) + float(nmax)) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * float(l);
            mse += weights[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = uint8_t(l);
        const float w = weights[i];
        sumlx += w * x[i] * float(l);
        suml2 += w * float(l) * float(l);
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = weights[i];
            float slx = sumlx - w * x[i] * float(L[i]);
            float sl2 = suml2 - w * float(L[i]) * float(L[i]);
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * float(new_l);
                    sl2 += w * float(new_l) * float(new_l);
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = uint8_t(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

}  // namespace weft::quant
