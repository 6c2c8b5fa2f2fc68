// src/quant/iq_quants.cpp — scalar reference kernels of the non-linear 4-bit types iq4_nl and iq4_xs.
//
// Both store 4-bit indices into one fixed codebook of 16 int8 levels (kvalues_iq4nl, denser near
// zero) times a scale: iq4_nl one fp16 scale per 32 values, iq4_xs a six-bit scale per 32 values
// against one fp16 super-scale per 256. iq4_nl is dotted against q8_0 activations, iq4_xs against
// q8_K, as in the established implementation.
//
// The quantizer follows the established one: per group of 32 a least-squares scale is searched
// over 15 candidate grid stretches (weights x^2, or importance * sqrt(sigma^2 + x^2) when an
// importance is given), each value takes the nearest codebook level.
#include <algorithm>
#include <cmath>
#include <iterator>

#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

// The codebook index whose level is nearest to x (the lower one on ties), by bisection.
int nearest_level(float x) {
    const int8_t *v = kvalues_iq4nl;
    if (x <= float(v[0])) return 0;
    if (x >= float(v[15])) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < float(v[mid]))
            hi = mid;
        else
            lo = mid;
    }
    return x - float(v[hi - 1]) < float(v[hi]) - x ? hi - 1 : hi;
}

// Weighted least-squares fit of x ≈ d * level[L] for a given inverse scale: assigns the levels and
// returns sum w q x and sum w q^2.
void fit_levels(const float *x, const float *w, int n, float inv_scale, uint8_t *L, float *sum_qx,
                float *sum_q2) {
    float qx = 0, q2 = 0;
    for (int j = 0; j < n; ++j) {
        const int l = nearest_level(inv_scale * x[j]);
        if (L) L[j] = uint8_t(l);
        const float q = float(kvalues_iq4nl[l]);
        qx += w[j] * q * x[j];
        q2 += w[j] * q * q;
    }
    *sum_qx = qx;
    *sum_q2 = q2;
}

// The number of grid stretches tried on each side of the plain absmax scale.
constexpr int n_try = 7;

// The best scale of one group of 32 (levels to L), weights from the group's values and the
// importance (sigma2: twice the mean square of the whole super-block). 0 for an all-zero group.
float search_group_scale(const float *x, const float *importance, float sigma2, uint8_t *L) {
    constexpr int n = 32;
    float w[n];
    importance_weights(x, n, importance, sigma2, w);
    float amax = 0, max = 0;
    for (int j = 0; j < n; ++j) {
        const float ax = std::fabs(x[j]);
        if (ax > amax) {
            amax = ax;
            max = x[j];
        }
    }
    if (amax < k_group_max_eps) {
        // All (near) zero: any scale decodes to zero; the levels are set when the block is written.
        std::fill(L, L + n, uint8_t(0));
        return 0;
    }
    const float v0 = float(kvalues_iq4nl[0]);  // -127: the extreme value maps to the lowest level
    float sum_qx, sum_q2;
    fit_levels(x, w, n, 1 / (-max / v0), L, &sum_qx, &sum_q2);
    float d = sum_qx / sum_q2;
    float best = d * sum_qx;
    for (int itry = -n_try; itry <= n_try; ++itry) {
        fit_levels(x, w, n, float(itry + kvalues_iq4nl[0]) / max, nullptr, &sum_qx, &sum_q2);
        if (sum_q2 > 0 && sum_qx * sum_qx > best * sum_q2) {
            d = sum_qx / sum_q2;
            best = d * sum_qx;
        }
    }
    return d;
}

// Levels of a group for the scale it will be decoded with (0: any level decodes to zero).
void assign_levels(const float *x, int n, float scale, uint8_t *L) {
    const float inv = scale ? 1 / scale : 0.f;
    for (int j = 0; j < n; ++j) L[j] = uint8_t(nearest_level(inv * x[j]));
}

// 32 levels to 16 bytes: element j in the low nibble of byte j, element j + 16 in the high one.
void pack_nibbles_32(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t(L[j] | (L[j + 16] << 4));
}

void quantize_iq4_nl(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_iq4_nl *>(dst);
    for (int64_t i = 0; i < n / qk4_nl; ++i, x += qk4_nl) {
        uint8_t L[qk4_nl];
        const float d = search_group_scale(x, importance ? importance + i * qk4_nl : nullptr,
                                           importance_sigma2(x, qk4_nl), L);
        y[i].d = fp32_to_fp16(d);
        // The established quantizer re-assigns with the unrounded scale.
        assign_levels(x, qk4_nl, d, L);
        pack_nibbles_32(L, y[i].qs);
    }
}

void quantize_iq4_xs(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_iq4_xs *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        const float *imp = importance ? importance + i * qk_k : nullptr;
        const float sigma2 = importance_sigma2(x, qk_k);
        uint8_t L[qk_k];
        float scales[qk_k / 32];
        for (int j = 0; j < qk_k / 32; ++j)
            scales[j] = search_group_scale(x + 32 * j, imp ? imp + 32 * j : nullptr, sigma2, L + 32 * j);
        const float max_scale = signed_absmax(scales, qk_k / 32);
        // Six-bit signed sub-block scales against d = -max_scale / 32 (the largest maps to -32).
        const float d = -max_scale / 32;
        y[i].d = fp32_to_fp16(d);
        const float id = d ? 1 / d : 0.f;
        y[i].scales_h = 0;
        std::fill(std::begin(y[i].scales_l), std::end(y[i].scales_l), uint8_t(0));
        for (int j = 0; j < qk_k / 32; ++j) {
            const int l = std::max(-32, std::min(31, nearest_int(id * scales[j])));
            assign_levels(x + 32 * j, 32, d * float(l), L + 32 * j);
            const int u = l + 32;
            y[i].scales_l[j / 2] |= uint8_t((u & 0xF) << (4 * (j % 2)));
            y[i].scales_h = uint16_t(y[i].scales_h | ((u >> 4) << (2 * j)));
        }
        for (int j = 0; j < qk_k / 32; ++j) pack_nibbles_32(L + 32 * j, y[i].qs + 16 * j);
    }
}

// The integer dot product of 32 codebook levels (16 packed bytes) with 32 activation quants.
int dot_levels_32(const uint8_t *qs, const int8_t *y) {
    int sum = 0;
    for (int j = 0; j < 16; ++j) {
        sum += kvalues_iq4nl[qs[j] & 0xF] * y[j];
        sum += kvalues_iq4nl[qs[j] >> 4] * y[j + 16];
    }
    return sum;
}

}  // namespace

void from_float_iq4_nl_ref(const float *src, void *dst, int64_t n) {
    quantize_iq4_nl(src, dst, n, nullptr);
}
void from_float_iq4_xs_ref(const float *src, void *dst, int64_t n) {
    quantize_iq4_xs(src, dst, n, nullptr);
}
void quantize_row_iq4_nl_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq4_nl(src, dst, n, importance);
}
void quantize_row_iq4_xs_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_iq4_xs(src, dst, n, importance);
}

void to_float_iq4_nl(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_iq4_nl *>(src);
    for (int64_t i = 0; i < n / qk4_nl; ++i, dst += qk4_nl) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < qk4_nl / 2; ++j) {
            dst[j] = d * float(kvalues_iq4nl[x[i].qs[j] & 0xF]);
            dst[j + qk4_nl / 2] = d * float(kvalues_iq4nl[x[i].qs[j] >> 4]);
        }
    }
}

void to_float_iq4_xs(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_iq4_xs *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < qk_k / 32; ++j) {
            const float dl = d * float(scale_iq4_xs(j, x[i]));
            const uint8_t *qs = x[i].qs + 16 * j;
            float *out = dst + 32 * j;
            for (int l = 0; l < 16; ++l) {
                out[l] = dl * float(kvalues_iq4nl[qs[l] & 0xF]);
                out[l + 16] = dl * float(kvalues_iq4nl[qs[l] >> 4]);
            }
        }
    }
}

// One integer sum per block, then one fused multiply-add per block into a single float sum, in
// block order. std::fma rounds once whatever the compiler's contraction settings, so the CPU
// backend's AVX2 kernel (row_kernels_avx2.cpp) gives the same bits.
void vec_dot_iq4_nl_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_iq4_nl *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk4_nl; ++i)
        sum = std::fma(fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d), float(dot_levels_32(x[i].qs, y[i].qs)),
                       sum);
    *s = sum;
}

// Per super-block: the sub-block sums times their integer scales, summed as integers (|sum| <=
// 8 * 32 * 32 * 127 * 127 < 2^31), then one fused multiply-add, as above.
void vec_dot_iq4_xs_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_iq4_xs *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        int sumi = 0;
        for (int j = 0; j < qk_k / 32; ++j)
            sumi += scale_iq4_xs(j, x[i]) * dot_levels_32(x[i].qs + 16 * j, y[i].qs + 32 * j);
        sum = std::fma(fp16_to_fp32(x[i].d) * y[i].d, float(sumi), sum);
    }
    *s = sum;
}

}  // namespace weft::quant
