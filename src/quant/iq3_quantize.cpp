// src/quant/iq3_quantize.cpp — the quantizers of iq3_xxs and iq3_s, reproducing the established
// quantizer's bytes.
//
// Both split a super-block of 256 into sub-blocks of 32 and each sub-block into 8 grid points of 4
// magnitudes, with the signs stored apart. Per sub-block: the magnitudes are fitted as scale *
// (2 code + 1), codes 0..7, for candidate scales (15 + 0.2 k) / max|x| (|k| <= 15 for iq3_xxs, 9 for
// iq3_s); each group of 4 codes that is not a grid point is replaced by the neighbour nearest to
// the values at that scale; the candidate with the best weighted least-squares fit wins, and when
// it left groups off the grid they are fitted once more at its own scale. Weights are
// importance * sqrt(sigma^2 + x^2) (sigma^2: twice the mean square of the super-block), or x^2
// without importance. The sub-block scales become 4-bit multiples (1 + 2 l) of one fp16 d.
//
// iq3_xxs stores 7 signs of each group of 8, the eighth making the count of negatives even: an odd
// group flips the sign of its least important value (smallest weight * x^2) first.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/grid_lookup.h"
#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

constexpr int sub = 32;  // values per sub-block
constexpr int n_sub = qk_k / sub;
constexpr int n_points = sub / 4;  // grid points per sub-block
constexpr int max_code = 7;

// How the two types' searches differ.
struct iq3_search {
    const grid_lookup &grid;
    int n_steps;         // candidate scales (15 + 0.2 k) / max for |k| <= n_steps
    bool refit_all;      // the second pass re-fits every group (iq3_s), or only the off-grid ones
    bool start_on_grid;  // what counts as on the grid when no candidate fits (all weights zero)
};

float level(int code) {
    return float(2 * code + 1);
}

int code_of(float inv_scale, float x) {
    return std::max(0, std::min(max_code, nearest_int(0.5f * (inv_scale * x - 1))));
}

// The neighbour of an off-grid pattern nearest to xval at `scale` (weights w), its codes to L.
int nearest_neighbour(const grid_lookup &grid, uint32_t pattern, const float *xval, const float *w,
                      float scale, int8_t *L) {
    float best_d2 = std::numeric_limits<float>::max();
    const auto candidates = grid.neighbours(pattern);
    int best = candidates[0];  // only kept when every distance overflows
    for (const uint16_t g : candidates) {
        float d2 = 0;
        for (int i = 0; i < 4; ++i) {
            const float diff = scale * level(grid.code(g, i)) - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) {
            best_d2 = d2;
            best = g;
        }
    }
    for (int i = 0; i < 4; ++i) L[i] = int8_t(grid.code(best, i));
    return best;
}

// Codes of group k for inv_scale, replaced by the nearest neighbour at `scale` when off the grid.
// Returns whether the rounded codes were on the grid.
bool fit_group(const iq3_search &s, const float *xval, const float *waux, float inv_scale, float scale,
               int8_t *L) {
    for (int i = 0; i < 4; ++i) L[i] = int8_t(code_of(inv_scale, xval[i]));
    const uint32_t u = s.grid.pattern(L);
    if (s.grid.find(u) >= 0) return true;
    nearest_neighbour(s.grid, u, xval, waux, scale, L);
    return false;
}

void sums_of(const float *xval, const float *weight, const int8_t *L, float *sumqx, float *sumq2) {
    float qx = 0, q2 = 0;
    for (int i = 0; i < sub; ++i) {
        const float q = level(L[i]);
        qx += weight[i] * xval[i] * q;
        q2 += weight[i] * q * q;
    }
    *sumqx = qx;
    *sumq2 = q2;
}

// The scale of one sub-block of magnitudes xval (max: the largest), its codes to L (on the grid).
float search_sub_block(const iq3_search &s, const float *xval, const float *weight, const float *waux,
                       float max, int8_t *L) {
    std::memset(L, 0, sub);
    bool on_grid[n_points], on_grid_aux[n_points];
    std::fill(on_grid, on_grid + n_points, s.start_on_grid);
    int8_t Laux[sub];
    float best = 0, scale = max / 15;
    for (int step = -s.n_steps; step <= s.n_steps; ++step) {
        const float id = (15 + float(step) * 0.2f) / max;
        const float this_scale = 1 / id;
        for (int k = 0; k < n_points; ++k)
            on_grid_aux[k] = fit_group(s, xval + 4 * k, waux + 4 * k, id, this_scale, Laux + 4 * k);
        float sumqx, sumq2;
        sums_of(xval, weight, Laux, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            std::copy(Laux, Laux + sub, L);
            std::copy(on_grid_aux, on_grid_aux + n_points, on_grid);
        }
    }
    if (std::count(on_grid, on_grid + n_points, false) > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < n_points; ++k)
            if (s.refit_all || !on_grid[k]) fit_group(s, xval + 4 * k, waux + 4 * k, id, scale, L + 4 * k);
        float sumqx, sumq2;
        sums_of(xval, weight, L, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

// The weights of a sub-block's values, and their square roots (the neighbour searches' weights).
void weights_of(const float *x, const float *importance, float sigma2, float *weight, float *waux) {
    importance_weights(x, sub, importance, sigma2, weight);
    for (int i = 0; i < sub; ++i) waux[i] = std::sqrt(weight[i]);
}

void quantize_iq3_xxs(const float *x, void *dst, int64_t n, const float *importance) {
    const iq3_search search{iq3xxs_lookup(), 15, false, true};
    auto *y = static_cast<block_iq3_xxs *>(dst);
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        block_iq3_xxs &b = y[ibl];
        std::memset(&b, 0, sizeof b);
        uint32_t signs_and_scale[n_sub] = {};
        float scales[n_sub];
        float max_scale = 0;
        const float sigma2 = importance_sigma2(x, qk_k);
        for (int ib = 0; ib < n_sub; ++ib) {
            const float *xb = x + sub * ib;
            float weight[sub], waux[sub], xval[sub];
            weights_of(xb, importance ? importance + qk_k * ibl + sub * ib : nullptr, sigma2, weight, waux);
            for (int k = 0; k < sub / 8; ++k) {
                int n_negative = 0;
                uint8_t signs = 0;
                for (int i = 8 * k; i < 8 * k + 8; ++i) {
                    xval[i] = std::fabs(xb[i]);
                    if (xb[i] < 0) {
                        ++n_negative;
                        signs = uint8_t(signs | (1 << (i - 8 * k)));
                    }
                }
                if (n_negative % 2) {
                    // The least important value takes the wrong sign (a negative magnitude).
                    int imin = 8 * k;
                    float min = weight[imin] * xb[imin] * xb[imin];
                    for (int i = 8 * k + 1; i < 8 * k + 8; ++i) {
                        const float v = weight[i] * xb[i] * xb[i];
                        if (v < min) {
                            min = v;
                            imin = i;
                        }
                    }
                    xval[imin] = -xval[imin];
                    signs = uint8_t(signs ^ (1 << (imin - 8 * k)));
                }
                signs_and_scale[ib] |= uint32_t(signs & 127) << (7 * k);
            }
            float max = xval[0];
            for (int i = 1; i < sub; ++i) max = max_of(max, xval[i]);
            if (max < 1e-8f) {
                // (Near) zero: left as zeros, signs included.
                signs_and_scale[ib] = 0;
                scales[ib] = 0;
                continue;
            }
            int8_t L[sub];
            const float scale = search_sub_block(search, xval, weight, waux, max, L);
            for (int k = 0; k < n_points; ++k)
                b.qs[8 * ib + k] = uint8_t(search.grid.find(search.grid.pattern(L + 4 * k)));
            scales[ib] = scale;
            max_scale = max_of(max_scale, scale);
        }
        if (!max_scale) {
            std::memset(&b, 0, sizeof b);
            continue;
        }
        const float d = max_scale / 31;
        b.d = fp32_to_fp16(d * 1.0125f);  // the established quantizer's fudge factor
        const float id = 1 / d;
        for (int ib = 0; ib < n_sub; ++ib) {
            const uint32_t w = signs_and_scale[ib] | (uint32_t(odd_scale_code(id, scales[ib], 15)) << 28);
            std::memcpy(b.qs + qk_k / 4 + 4 * ib, &w, sizeof w);
        }
    }
}

void quantize_iq3_s(const float *x, void *dst, int64_t n, const float *importance) {
    const iq3_search search{iq3s_lookup(), 9, true, false};
    auto *y = static_cast<block_iq3_s *>(dst);
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        block_iq3_s &b = y[ibl];
        std::memset(&b, 0, sizeof b);
        // The established quantizer advances its write positions for indices and signs only past
        // sub-blocks it quantized: after an all-zero sub-block the next ones are stored one slot
        // early (and the last slots stay zero). Reproduced for identical files.
        uint8_t *qs = b.qs, *signs_out = b.signs;
        float scales[n_sub];
        float max_scale = 0;
        const float sigma2 = importance_sigma2(x, qk_k);
        for (int ib = 0; ib < n_sub; ++ib) {
            const float *xb = x + sub * ib;
            float weight[sub], waux[sub], xval[sub];
            weights_of(xb, importance ? importance + qk_k * ibl + sub * ib : nullptr, sigma2, weight, waux);
            uint8_t signs[sub / 8] = {};
            for (int i = 0; i < sub; ++i) {
                xval[i] = std::fabs(xb[i]);
                if (xb[i] < 0) signs[i / 8] = uint8_t(signs[i / 8] | (1 << (i % 8)));
            }
            float max = xval[0];
            for (int i = 1; i < sub; ++i) max = max_of(max, xval[i]);
            if (!max) {
                scales[ib] = 0;
                continue;
            }
            int8_t L[sub];
            const float scale = search_sub_block(search, xval, weight, waux, max, L);
            for (int k = 0; k < n_points; ++k) {
                const int g = search.grid.find(search.grid.pattern(L + 4 * k));
                qs[k] = uint8_t(g & 255);
                b.qh[ib] = uint8_t(b.qh[ib] | ((g >> 8) << k));
            }
            qs += n_points;
            std::copy(signs, signs + sub / 8, signs_out);
            signs_out += sub / 8;
            scales[ib] = scale;
            max_scale = max_of(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 31;
        b.d = fp32_to_fp16(d * 1.033f);  // the established quantizer's fudge factor
        const float id = 1 / d;
        for (int ib = 0; ib < n_sub; ib += 2)
            b.scales[ib / 2] =
                uint8_t(odd_scale_code(id, scales[ib], 15) | (odd_scale_code(id, scales[ib + 1], 15) << 4));
    }
}

}  // namespace

void from_float_iq3_xxs_ref(const float *src, void *dst, int64_t n) {
    quantize_iq3_xxs(src, dst, n, nullptr);
}
void from_float_iq3_s_ref(const float *src, void *dst, int64_t n) {
    quantize_iq3_s(src, dst, n, nullptr);
}
void quantize_row_iq3_xxs_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq3_xxs(src, dst, n, importance);
}
void quantize_row_iq3_s_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq3_s(src, dst, n, importance);
}

}  // namespace weft::quant
