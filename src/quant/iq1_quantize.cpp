// src/quant/iq1_quantize.cpp — the quantizers of iq1_s and iq1_m, reproducing the established
// quantizer's bytes.
//
// A group of 8 values is one point of the iq1s grid, levels -1, 0, 1, shifted by delta = +-1/8:
// x ≈ scale * (level + delta). With three levels, the best levels for a block of values (32 for
// iq1_s, 16 for iq1_m) are found exactly: sorted by value, every split into a low, a middle and a
// high run is scored by its weighted least-squares fit (sum w q x)^2 / sum w q^2 for each choice of
// delta's sign (one per block in iq1_s, one per group of 8 in iq1_m), and the best split wins.
// Groups whose levels are not a grid point take the neighbour nearest at that scale, and the scale
// is fitted again. Weights are importance * sqrt(sigma^2 + x^2) (sigma^2: twice the mean square of
// the super-block), or x^2 without importance (iq1_m only: iq1_s needs an importance).
//
// iq1_s: 3-bit block scales (1 + 2 l) of d = max scale / 15, stored times 1.125. iq1_m: 3-bit
// scales per 16 values; its d is then refitted over the whole super-block at those scales and
// stored times 1.1125. (The factors are the established quantizer's.)
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/grid_lookup.h"
#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

constexpr float delta = 0.125f;
// The three shifted levels, code 0..2, for a positive and a negative delta.
constexpr float shifted_up[3] = {-1 + delta, delta, 1 + delta};
constexpr float shifted_down[3] = {-1 - delta, -delta, 1 - delta};

float max_abs(const float *x, int n) {
    float max = std::fabs(x[0]);
    for (int i = 1; i < n; ++i) max = max_of(max, std::fabs(x[i]));
    return max;
}

// Positions of the n values in ascending order of value (equal values in position order; a NaN,
// which quantize_rows refuses but a direct call may pass, sorts last instead of breaking the sort).
void sort_by_value(const float *x, int n, int *order) {
    for (int i = 0; i < n; ++i) order[i] = i;
    std::stable_sort(order, order + n,
                     [x](int a, int b) { return x[a] < x[b] || (!std::isnan(x[a]) && std::isnan(x[b])); });
}

// Levels from a split of the sorted values: below i1 code 0, from i1 to i2 code 1, above code 2.
void levels_of_split(const int *order, int n, int i1, int i2, int8_t *L) {
    for (int j = 0; j < n; ++j) L[order[j]] = int8_t(j < i1 ? 0 : j < i2 ? 1 : 2);
}

// The grid point for 8 levels L (shifted values xx) at `scale`: the point itself, or the neighbour
// nearest to x (weights w). Sets *on_grid false for a neighbour.
int grid_point(const float *x, const float *w, float scale, const float *xx, const int8_t *L, bool *on_grid) {
    const grid_lookup &grid = iq1s_lookup();
    const uint32_t u = grid.pattern(L);
    const int g = grid.find(u);
    if (g >= 0) return g;
    *on_grid = false;
    auto distance = [&](int point) {
        float d2 = 0;
        for (int j = 0; j < 8; ++j) {
            const float diff = scale * xx[grid.code(point, j)] - x[j];
            d2 += w[j] * diff * diff;
        }
        return d2;
    };
    float best_d2 = std::numeric_limits<float>::max();
    int best = -1;
    for (const uint16_t point : grid.neighbours(u)) {
        const float d2 = distance(point);
        if (d2 < best_d2) {
            best_d2 = d2;
            best = point;
        }
    }
    // Only when every distance overflows: the whole grid, then the first neighbour.
    for (int point = 0; best < 0 && point < grid.size(); ++point) {
        const float d2 = distance(point);
        if (d2 < best_d2) {
            best_d2 = d2;
            best = point;
        }
    }
    return best >= 0 ? best : grid.neighbours(u)[0];
}

// Adds group g's fit terms w q x and w q^2, q = xx[code] * multiplier.
void add_group_sums(int g, const float *x, const float *w, const float *xx, float multiplier, float *sumqx,
                    float *sumq2) {
    const grid_lookup &grid = iq1s_lookup();
    for (int j = 0; j < 8; ++j) {
        const float q = xx[grid.code(g, j)] * multiplier;
        *sumqx += w[j] * q * x[j];
        *sumq2 += w[j] * q * q;
    }
}

// ---- iq1_s: blocks of 32, one delta sign per block

constexpr int s_block = 32;

void quantize_iq1_s(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_iq1_s *>(dst);
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        block_iq1_s &b = y[ibl];
        std::memset(&b, 0, sizeof b);
        float scales[qk_k / s_block];
        int shifts[qk_k / s_block];
        float max_scale = 0;
        const float sigma2 = importance_sigma2(x, qk_k);
        for (int ib = 0; ib < qk_k / s_block; ++ib) {
            const float *xb = x + s_block * ib;
            float weight[s_block];
            importance_weights(xb, s_block, importance + qk_k * ibl + s_block * ib, sigma2, weight);
            scales[ib] = 0;
            shifts[ib] = 1;
            const float max = max_abs(xb, s_block);
            if (max < 1e-12f) continue;
            int order[s_block];
            sort_by_value(xb, s_block, order);
            // Prefix sums of w x and w over the sorted values: each split scores in constant time.
            float sumx[s_block + 1], sumw[s_block + 1];
            sumx[0] = sumw[0] = 0;
            for (int j = 0; j < s_block; ++j) {
                const int i = order[j];
                sumx[j + 1] = sumx[j] + weight[i] * xb[i];
                sumw[j + 1] = sumw[j] + weight[i];
            }
            float best_score = -std::numeric_limits<float>::max(), scale = max;
            int best_i1 = -1, best_i2 = -1, best_shift = 0;
            for (int i1 = 0; i1 <= s_block; ++i1)
                for (int i2 = i1; i2 <= s_block; ++i2)
                    for (const int shift : {1, -1}) {
                        const float *v = shift == 1 ? shifted_up : shifted_down;
                        const float low = sumx[i1] - sumx[0], mid = sumx[i2] - sumx[i1],
                                    high = sumx[s_block] - sumx[i2];
                        const float wlow = sumw[i1] - sumw[0], wmid = sumw[i2] - sumw[i1],
                                    whigh = sumw[s_block] - sumw[i2];
                        const float sumqx = low * v[0] + mid * v[1] + high * v[2];
                        const float sumq2 = wlow * v[0] * v[0] + wmid * v[1] * v[1] + whigh * v[2] * v[2];
                        if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
                            scale = sumqx / sumq2;
                            best_score = scale * sumqx;
                            best_i1 = i1;
                            best_i2 = i2;
                            best_shift = shift;
                        }
                    }
            if (best_i1 < 0) continue;  // no split fits (all weights zero)
            int8_t L[s_block];
            levels_of_split(order, s_block, best_i1, best_i2, L);
            if (scale < 0) {
                for (int8_t &l : L) l = int8_t(2 - l);
                scale = -scale;
                best_shift = -best_shift;
            }
            const float *xx = best_shift == 1 ? shifted_up : shifted_down;
            bool all_on_grid = true;
            int index[s_block / 8];
            for (int k = 0; k < s_block / 8; ++k)
                index[k] = grid_point(xb + 8 * k, weight + 8 * k, scale, xx, L + 8 * k, &all_on_grid);
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < s_block / 8; ++k)
                    add_group_sums(index[k], xb + 8 * k, weight + 8 * k, xx, 1.0f, &sumqx, &sumq2);
                if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
            }
            uint16_t h = 0;
            for (int k = 0; k < s_block / 8; ++k) {
                b.qs[(s_block / 8) * ib + k] = uint8_t(index[k] & 255);
                h = uint16_t(h | ((index[k] >> 8) << (3 * k)));
            }
            b.qh[ib] = h;
            scales[ib] = scale;
            shifts[ib] = best_shift;
            max_scale = max_of(max_scale, scale);
        }
        if (!max_scale) continue;
        const float d = max_scale / 15;
        b.d = fp32_to_fp16(d * 1.125f);
        const float id = 1 / d;
        for (int ib = 0; ib < qk_k / s_block; ++ib) {
            const int l = odd_scale_code(id, scales[ib], 7) | (shifts[ib] == -1 ? 8 : 0);
            b.qh[ib] = uint16_t(b.qh[ib] | (l << 12));
        }
    }
}

// ---- iq1_m: blocks of 16, one delta sign per group of 8

constexpr int m_block = 16;

// The delta choices of a block's two groups: 0 (+, +), 1 (+, -), 2 (-, +), 3 (-, -).
const float *shifted_levels(int choice, int group) {
    const bool down = group == 0 ? choice >= 2 : choice % 2 == 1;
    return down ? shifted_down : shifted_up;
}

struct split {
    int i1 = -1, i2 = -1, choice = -1;
    float scale = 0;
};

// The best split and delta choices of a block of 16 sorted values. Every split's four sums are
// accumulated value by value in sorted order, as the quantizer that made the established files
// does: prefix sums (as iq1_s uses) would be faster but round differently and pick another split
// now and then (one block of the 10752 of tiny-llama-IQ1_M).
split search_iq1_m_block(const float *xb, const float *weight, const int *order, float max) {
    split best;
    best.scale = max;
    float best_score = -std::numeric_limits<float>::min();
    for (int i1 = 0; i1 <= m_block; ++i1)
        for (int i2 = i1; i2 <= m_block; ++i2) {
            float sumqx[4] = {}, sumq2[4] = {};
            for (int j = 0; j < m_block; ++j) {
                const int i = order[j];
                const int code = j < i1 ? 0 : j < i2 ? 1 : 2;
                const float up = shifted_up[code], down = shifted_down[code];
                // choices 0 and 3 shift both groups up / down; 1 and 2 one group each way
                const bool first = i < m_block / 2;
                const int up1 = first ? 1 : 2, down1 = first ? 2 : 1;
                sumqx[0] += weight[i] * up * xb[i];
                sumqx[up1] += weight[i] * up * xb[i];
                sumqx[down1] += weight[i] * down * xb[i];
                sumqx[3] += weight[i] * down * xb[i];
                sumq2[0] += weight[i] * up * up;
                sumq2[up1] += weight[i] * up * up;
                sumq2[down1] += weight[i] * down * down;
                sumq2[3] += weight[i] * down * down;
            }
            for (int k = 0; k < 4; ++k)
                if (sumq2[k] > 0 && sumqx[k] * sumqx[k] > best_score * sumq2[k]) {
                    best.scale = sumqx[k] / sumq2[k];
                    best_score = best.scale * sumqx[k];
                    best.i1 = i1;
                    best.i2 = i2;
                    best.choice = k;
                }
        }
    return best;
}

void quantize_iq1_m(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_iq1_m *>(dst);
    constexpr uint8_t delta_bits[4] = {0x00, 0x80, 0x08, 0x88};  // bit 3: group 0 down, bit 7: group 1
    for (int64_t ibl = 0; ibl < n / qk_k; ++ibl, x += qk_k) {
        block_iq1_m &b = y[ibl];
        std::memset(&b, 0, sizeof b);
        const float *imp = importance ? importance + qk_k * ibl : nullptr;
        float scales[qk_k / m_block];
        int choices[qk_k / m_block];
        float max_scale = 0;
        const float sigma2 = importance_sigma2(x, qk_k);
        for (int ib = 0; ib < qk_k / m_block; ++ib) {
            const float *xb = x + m_block * ib;
            float weight[m_block];
            importance_weights(xb, m_block, imp ? imp + m_block * ib : nullptr, sigma2, weight);
            scales[ib] = 0;
            choices[ib] = 0;
            const float max = max_abs(xb, m_block);
            if (max < 1e-7f) continue;
            int order[m_block];
            sort_by_value(xb, m_block, order);
            split best = search_iq1_m_block(xb, weight, order, max);
            if (best.i1 < 0) continue;  // no split fits (all weights zero)
            int8_t L[m_block];
            levels_of_split(order, m_block, best.i1, best.i2, L);
            if (best.scale < 0) {
                for (int8_t &l : L) l = int8_t(2 - l);
                best.scale = -best.scale;
                best.choice = 3 - best.choice;
            }
            bool all_on_grid = true;
            int index[2];
            for (int k = 0; k < 2; ++k)
                index[k] = grid_point(xb + 8 * k, weight + 8 * k, best.scale, shifted_levels(best.choice, k),
                                      L + 8 * k, &all_on_grid);
            if (!all_on_grid) {
                float sumqx = 0, sumq2 = 0;
                for (int k = 0; k < 2; ++k)
                    add_group_sums(index[k], xb + 8 * k, weight + 8 * k, shifted_levels(best.choice, k), 1.0f,
                                   &sumqx, &sumq2);
                if (sumqx > 0 && sumq2 > 0) best.scale = sumqx / sumq2;
            }
            b.qs[2 * ib] = uint8_t(index[0] & 255);
            b.qs[2 * ib + 1] = uint8_t(index[1] & 255);
            b.qh[ib] = uint8_t((index[0] >> 8) | ((index[1] >> 8) << 4));
            scales[ib] = best.scale;
            choices[ib] = best.choice;
            max_scale = max_of(max_scale, best.scale);
        }
        if (!max_scale) continue;
        // d is fitted again over the super-block with the 3-bit scales fixed.
        uint16_t sc[4] = {};
        float d = max_scale / 15;
        const float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int ib = 0; ib < qk_k / m_block; ++ib) {
            const int l = odd_scale_code(id, scales[ib], 7);
            sc[ib / 4] = uint16_t(sc[ib / 4] | (l << (3 * (ib % 4))));
            b.qh[ib] = uint8_t(b.qh[ib] | delta_bits[choices[ib]]);
            const float *xb = x + m_block * ib;
            float weight[m_block];
            importance_weights(xb, m_block, imp ? imp + m_block * ib : nullptr, sigma2, weight);
            for (int k = 0; k < 2; ++k) {
                const int g = b.qs[2 * ib + k] | (((b.qh[ib] >> (4 * k)) & 7) << 8);
                add_group_sums(g, xb + 8 * k, weight + 8 * k, shifted_levels(choices[ib], k),
                               float(2 * l + 1), &sumqx, &sumq2);
            }
        }
        if (sumq2 > 0) d = sumqx / sumq2;
        const fp16_t d16 = fp32_to_fp16(d * 1.1125f);
        // The fp16 d lives in the top nibbles of the four scale words.
        for (int k = 0; k < 4; ++k) {
            sc[k] = uint16_t(sc[k] | (((d16 >> (4 * k)) & 0xf) << 12));
            b.scales[2 * k] = uint8_t(sc[k] & 0xff);
            b.scales[2 * k + 1] = uint8_t(sc[k] >> 8);
        }
    }
}

}  // namespace

void quantize_row_iq1_s_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq1_s(src, dst, n, importance);
}
void from_float_iq1_m_ref(const float *src, void *dst, int64_t n) {
    quantize_iq1_m(src, dst, n, nullptr);
}
void quantize_row_iq1_m_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq1_m(src, dst, n, importance);
}

}  // namespace weft::quant
