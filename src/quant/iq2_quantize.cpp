// src/quant/iq2_quantize.cpp — the quantizers of the 2-bit grid types iq2_xxs, iq2_xs and iq2_s,
// made to give the established quantizer's bytes.
//
// Each group of 8 values is stored as a point of the type's grid (8 magnitudes, each at one of
// three levels l: 0, 1, 2) plus 8 signs. The search works on the magnitudes, modelling level l as
// the odd integer 2 l + 1 (the decoder's magnitudes 8, 25, 43 are close to 1 : 3 : 5):
//   - a sub-block (32 values for iq2_xxs, 16 for the others) tries a range of scales; for each,
//     every group's magnitudes are rounded to levels, and a pattern that is not a grid point is
//     replaced by the nearest grid points' best fit (a precomputed neighbour list, see
//     grid_lookup.h), then the weighted least-squares scale of the result is scored;
//   - the best scale's points are refined once more, and the sub-block scales are stored as
//     4-bit odd multiples of max_scale / 31.
// iq2_xxs and iq2_xs store only 7 signs per group: the eighth makes the number of negatives
// even. Where the real count is odd, the element whose error matters least (smallest
// w x^2) has its sign flipped before the search.
// The weights are importance * sqrt(sigma^2 + x^2) with sigma^2 the mean square of the 256
// values (twice that for iq2_s); iq2_xxs and iq2_xs need an importance, iq2_s falls back to
// sigma^2 / 4 + x^2.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <span>
#include <utility>

#include "quant/grid_lookup.h"
#include "quant/kernels.h"
#include "weft/core/error.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

constexpr int n_levels = 3;  // a level is 0, 1 or 2 (magnitudes 8, 25, 43): grid_lookup's codes

// The magnitude the search models for a level.
float odd_of(int level) {
    return float(2 * level + 1);
}

// The grid point among `candidates` (an off-grid pattern's neighbours) that best fits magnitudes
// xval at `scale` under weights w (sum w (scale q - x)^2; the first of equals). Its levels go to L.
int best_neighbour(const grid_lookup &t, std::span<const uint16_t> candidates, const float *xval,
                   const float *w, float scale, int8_t *L) {
    float best_d2 = FLT_MAX;
    int best = -1;
    for (const uint16_t g : candidates) {
        float d2 = 0;
        for (int i = 0; i < 8; ++i) {
            const float diff = scale * odd_of(t.code(g, i)) - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = g;
        }
    }
    WEFT_ASSERT(best >= 0);
    for (int i = 0; i < 8; ++i) L[i] = int8_t(t.code(best, i));
    return best;
}

// Rounds a group's magnitudes at inverse scale id to levels (in L); a pattern off the grid is
// replaced by its best neighbour at `scale`. Returns whether the rounded pattern was on the grid.
bool place_group(const grid_lookup &t, const float *xval, const float *waux, float id, float scale,
                 int8_t *L) {
    for (int i = 0; i < 8; ++i)
        L[i] = int8_t(std::clamp(nearest_int(0.5f * (id * xval[i] - 1)), 0, n_levels - 1));
    const uint32_t pattern = t.pattern(L);
    if (t.find(pattern) >= 0) return true;
    best_neighbour(t, t.neighbours(pattern), xval, waux, scale, L);
    return false;
}

int grid_index_of(const grid_lookup &t, const int8_t *L) {
    const int g = t.find(t.pattern(L));
    WEFT_ASSERT(g >= 0);  // every placement ends on the grid
    return g;
}

// sum w x q and sum w q^2 of a sub-block's magnitudes against its levels.
std::pair<float, float> fit_sums(const float *xval, const float *w, const int8_t *L, int n) {
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < n; ++i) {
        const float q = odd_of(L[i]);
        sumqx += w[i] * xval[i] * q;
        sumq2 += w[i] * q * q;
    }
    return {sumqx, sumq2};
}

// How a type runs the search.
struct search_kind {
    const grid_lookup &(*table)();
    int sub_block;     // values per scale: 32 (iq2_xxs) or 16
    int n_try;         // scales tried on each side of the start
    bool seven_signs;  // the eighth sign is implied by even parity (iq2_xxs, iq2_xs)
    bool qp_start;     // start from make_qp_quants' scale and refine every group (iq2_xxs)
    float empty_max;   // a sub-block whose largest magnitude is below this is stored as zeros
};

constexpr search_kind iq2xxs_kind{iq2xxs_lookup, 32, 6, true, true, 1e-15f};
constexpr search_kind iq2xs_kind{iq2xs_lookup, 16, 9, true, false, 1e-15f};
constexpr search_kind iq2s_kind{iq2s_lookup, 16, 9, false, false, 1e-8f};

// One sub-block's result: its scale (0: stored as zeros), grid points and sign bits per group.
struct sub_block_fit {
    float scale = 0;
    bool stored = false;
    int grid_index[4] = {};
    uint8_t signs[4] = {};
};

// Splits a group of 8 into magnitudes and sign bits. With seven_signs and an odd number of
// negatives, the element with the smallest w x^2 is flipped (its magnitude negated) so that the
// stored 7 bits and the implied eighth describe the values.
uint8_t split_signs(const float *x, const float *w, bool seven_signs, float *xval) {
    uint8_t s = 0;
    int n_negative = 0;
    for (int i = 0; i < 8; ++i) {
        // >= 0 keeps a negative zero as it is (a magnitude of -0), as the established search does
        if (x[i] >= 0) {
            xval[i] = x[i];
        } else {
            xval[i] = -x[i];
            ++n_negative;
            s = uint8_t(s | (1 << i));
        }
    }
    if (!seven_signs) return s;
    if (n_negative % 2) {
        int imin = 0;
        float min = w[0] * x[0] * x[0];
        for (int i = 1; i < 8; ++i) {
            const float e = w[i] * x[i] * x[i];
            if (e < min) {
                min = e;
                imin = i;
            }
        }
        xval[imin] = -xval[imin];
        s = uint8_t(s ^ (1 << imin));
    }
    return uint8_t(s & 127);
}

sub_block_fit fit_sub_block(const search_kind &kind, const float *x, const float *weight) {
    const grid_lookup &t = kind.table();
    const int n = kind.sub_block, n_group = n / 8;
    float xval[32], waux[32];
    int8_t L[32] = {}, Laux[32];
    sub_block_fit fit;
    for (int i = 0; i < n; ++i) waux[i] = std::sqrt(weight[i]);
    for (int k = 0; k < n_group; ++k)
        fit.signs[k] = split_signs(x + 8 * k, weight + 8 * k, kind.seven_signs, xval + 8 * k);
    float max = xval[0];
    for (int i = 1; i < n; ++i) max = std::max(max, xval[i]);
    if (max < kind.empty_max) return fit;

    float scale, range;  // the start, and the magnitude the tried scales are spread around
    if (kind.qp_start) {
        // (the established search's constants: levels up to n_levels there, a range of 3 scales)
        uint8_t Lqp[32];
        scale = make_qp_quants(n, n_levels + 1, xval, Lqp, weight);
        range = scale * float(n_levels);
        if (range <= 0) return fit;
    } else {
        scale = max / odd_of(n_levels - 1);
        range = max;
    }
    bool on_grid[4] = {true, true, true, true}, on_grid_aux[4];
    float best = 0;
    for (int is = -kind.n_try; is <= kind.n_try; ++is) {
        const float id = (odd_of(n_levels - 1) + float(is) * 0.1f) / range;
        const float this_scale = 1 / id;
        for (int k = 0; k < n_group; ++k)
            on_grid_aux[k] = place_group(t, xval + 8 * k, waux + 8 * k, id, this_scale, Laux + 8 * k);
        const auto [sumqx, sumq2] = fit_sums(xval, weight, Laux, n);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::copy(Laux, Laux + n, L);
            std::copy(on_grid_aux, on_grid_aux + n_group, on_grid);
        }
    }
    // Refine at the chosen scale: every group (iq2_xxs), or the groups that had to take a
    // neighbour during the search.
    bool refine = false;
    for (int k = 0; k < n_group; ++k) refine |= kind.qp_start || !on_grid[k];
    if (refine && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < n_group; ++k)
            if (kind.qp_start || !on_grid[k])
                place_group(t, xval + 8 * k, waux + 8 * k, id, scale, L + 8 * k);
        const auto [sumqx, sumq2] = fit_sums(xval, weight, L, n);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    if (scale < 0) {
        // The scales are stored unsigned: a negative fit flips every sign instead.
        scale = -scale;
        for (int k = 0; k < n_group; ++k)
            fit.signs[k] = uint8_t(kind.seven_signs ? ~fit.signs[k] & 127 : ~fit.signs[k]);
    }
    for (int k = 0; k < n_group; ++k) fit.grid_index[k] = grid_index_of(t, L + 8 * k);
    fit.scale = scale;
    fit.stored = true;
    return fit;
}

// The weights of a sub-block of n values: importance * sqrt(sigma2 + x^2), or (no importance,
// iq2_s only) sigma2 / 4 + x^2.
void sub_block_weights(const float *x, const float *importance, float sigma2, int n, float *w) {
    for (int i = 0; i < n; ++i)
        w[i] = importance ? importance[i] * std::sqrt(sigma2 + x[i] * x[i]) : 0.25f * sigma2 + x[i] * x[i];
}

float sum_of_squares(const float *x, int n) {
    float sum = 0;
    for (int i = 0; i < n; ++i) sum += x[i] * x[i];
    return sum;
}

// Fits the sub-blocks of one 256-value block; returns the largest scale (0: every one empty).
template <int n_sub>
float fit_block(const search_kind &kind, const float *x, const float *importance, float sigma2,
                sub_block_fit (&fits)[n_sub], float (&scales)[n_sub]) {
    const int n = kind.sub_block;
    float max_scale = 0;
    for (int ib = 0; ib < n_sub; ++ib) {
        float weight[32];
        sub_block_weights(x + n * ib, importance ? importance + n * ib : nullptr, sigma2, n, weight);
        fits[ib] = fit_sub_block(kind, x + n * ib, weight);
        scales[ib] = fits[ib].scale;
        max_scale = std::max(max_scale, scales[ib]);
    }
    return max_scale;
}

void quantize_iq2_xxs(const float *x, void *dst, int64_t n, const float *importance) {
    WEFT_ASSERT(importance);
    auto *y = static_cast<block_iq2_xxs *>(dst);
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        const float sigma2 = sum_of_squares(x, qk_k) / float(qk_k);
        sub_block_fit fits[qk_k / 32];
        float scales[qk_k / 32];
        const float max_scale = fit_block(iq2xxs_kind, x, importance + ibl * qk_k, sigma2, fits, scales);
        // Per sub-block of 32: four grid indices (bytes), then 4 x 7 sign bits and the scale code.
        uint32_t words[2 * (qk_k / 32)] = {};
        for (int ib = 0; ib < qk_k / 32; ++ib) {
            if (!fits[ib].stored) continue;
            for (int k = 0; k < 4; ++k) {
                words[2 * ib] |= uint32_t(fits[ib].grid_index[k]) << (8 * k);
                words[2 * ib + 1] |= uint32_t(fits[ib].signs[k]) << (7 * k);
            }
        }
        y[ibl].d = fp32_to_fp16(0.f);
        if (max_scale) {
            const float d = max_scale / 31;
            y[ibl].d = fp32_to_fp16(d);
            const float inv_d = 1 / d;
            for (int ib = 0; ib < qk_k / 32; ++ib)
                words[2 * ib + 1] |= uint32_t(odd_scale_code(inv_d, scales[ib], 15)) << 28;
        } else {
            std::fill(std::begin(words), std::end(words), 0u);
        }
        std::memcpy(y[ibl].qs, words, sizeof words);
    }
}

// The sixteen 4-bit scale codes of iq2_xs / iq2_s: sub-block ib in nibble ib % 2 of byte ib / 2.
void pack_scale_codes(const float (&scales)[qk_k / 16], float inv_d, uint8_t *out) {
    for (int ib = 0; ib < qk_k / 16; ++ib) {
        const int l = odd_scale_code(inv_d, scales[ib], 15);
        out[ib / 2] = uint8_t(ib % 2 ? out[ib / 2] | (l << 4) : l);
    }
}

void quantize_iq2_xs(const float *x, void *dst, int64_t n, const float *importance) {
    WEFT_ASSERT(importance);
    auto *y = static_cast<block_iq2_xs *>(dst);
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        std::memset(&y[ibl], 0, sizeof y[ibl]);
        const float sigma2 = sum_of_squares(x, qk_k) / float(qk_k);
        sub_block_fit fits[qk_k / 16];
        float scales[qk_k / 16];
        const float max_scale = fit_block(iq2xs_kind, x, importance + ibl * qk_k, sigma2, fits, scales);
        if (!max_scale) continue;
        // Group g of 8: grid index in bits 0..8, its 7 sign bits above.
        for (int ib = 0; ib < qk_k / 16; ++ib)
            for (int k = 0; k < 2 && fits[ib].stored; ++k)
                y[ibl].qs[2 * ib + k] = uint16_t(fits[ib].grid_index[k] | (fits[ib].signs[k] << 9));
        const float d = max_scale / 31;
        y[ibl].d = fp32_to_fp16(d);
        pack_scale_codes(scales, 1 / d, y[ibl].scales);
    }
}

void quantize_iq2_s(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_iq2_s *>(dst);
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        std::memset(&y[ibl], 0, sizeof y[ibl]);
        const float sigma2 = 2 * sum_of_squares(x, qk_k) / float(qk_k);
        sub_block_fit fits[qk_k / 16];
        float scales[qk_k / 16];
        const float max_scale =
            fit_block(iq2s_kind, x, importance ? importance + ibl * qk_k : nullptr, sigma2, fits, scales);
        // Group g of 8: the low 8 bits of its grid index in qs[g], the top 2 in qh, 8 signs in qs[32 + g].
        for (int ib = 0; ib < qk_k / 16; ++ib)
            for (int k = 0; k < 2 && fits[ib].stored; ++k) {
                const int g = 2 * ib + k, index = fits[ib].grid_index[k];
                y[ibl].qs[g] = uint8_t(index & 255);
                y[ibl].qh[g / 4] = uint8_t(y[ibl].qh[g / 4] | ((index >> 8) << (2 * (g % 4))));
                y[ibl].qs[qk_k / 8 + g] = fits[ib].signs[k];
            }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        // The established quantizer stores d slightly smaller than the codes assume (its own
        // empirical correction); the codes are computed against the uncorrected d.
        y[ibl].d = fp32_to_fp16(d * 0.9875f);
        pack_scale_codes(scales, 1 / d, y[ibl].scales);
    }
}

}  // namespace

void quantize_row_iq2_xxs_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq2_xxs(src, dst, n, importance);
}
void quantize_row_iq2_xs_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq2_xs(src, dst, n, importance);
}
void quantize_row_iq2_s_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq2_s(src, dst, n, importance);
}
void from_float_iq2_s_ref(const float *src, void *dst, int64_t n) {
    quantize_iq2_s(src, dst, n, nullptr);
}

}  // namespace weft::quant
