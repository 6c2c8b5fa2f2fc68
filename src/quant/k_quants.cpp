// src/quant/k_quants.cpp — scalar reference kernels of the K-quants (q2_K ... q6_K) and q8_K.
//
// A K-quant block covers 256 values split into sub-blocks of 16 or 32. Each sub-block gets its own
// scale (and, for the asymmetric types, min), found by a small search that minimizes a weighted
// squared (or absolute) error; the sub-block scales are then quantized to 4, 6 or 8 bits against
// one fp16 super-scale, and finally every value is re-quantized with the scale it will actually be
// decoded with. Without importance weights this follows the established reference quantizer, and
// with them for q2_K too (the others' importance-weighted searches are weft's own).
#include <algorithm>
#include <cmath>
#include <iterator>

#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

// ---- unpacking: the integer quants of one block, in element order

void unpack(const block_q2_k &b, int8_t q[qk_k]) {
    for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
            for (int l = 0; l < 32; ++l) q[128 * h + 32 * s + l] = int8_t((b.qs[32 * h + l] >> (2 * s)) & 3);
}

void unpack(const block_q3_k &b, int8_t q[qk_k]) {
    for (int h = 0; h < 2; ++h)
        for (int s = 0; s < 4; ++s)
            for (int l = 0; l < 32; ++l) {
                const int e = 128 * h + 32 * s + l;
                const int low = (b.qs[32 * h + l] >> (2 * s)) & 3;
                const bool high = (b.hmask[e % 32] >> (e / 32)) & 1;
                q[e] = int8_t(low - (high ? 0 : 4));
            }
}

void unpack(const block_q4_k &b, int8_t q[qk_k]) {
    for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) {
            q[64 * p + l] = int8_t(b.qs[32 * p + l] & 0xF);
            q[64 * p + 32 + l] = int8_t(b.qs[32 * p + l] >> 4);
        }
}

void unpack(const block_q5_k &b, int8_t q[qk_k]) {
    for (int p = 0; p < 4; ++p)
        for (int l = 0; l < 32; ++l) {
            q[64 * p + l] = int8_t((b.qs[32 * p + l] & 0xF) | (((b.qh[l] >> (2 * p)) & 1) << 4));
            q[64 * p + 32 + l] = int8_t((b.qs[32 * p + l] >> 4) | (((b.qh[l] >> (2 * p + 1)) & 1) << 4));
        }
}

void unpack(const block_q6_k &b, int8_t q[qk_k]) {
    for (int h = 0; h < 2; ++h)
        for (int c = 0; c < 4; ++c)
            for (int l = 0; l < 32; ++l) {
                const int low = (b.ql[64 * h + 32 * (c & 1) + l] >> (4 * (c >> 1))) & 0xF;
                const int high = (b.qh[32 * h + l] >> (2 * c)) & 3;
                q[128 * h + 32 * c + l] = int8_t((low | (high << 4)) - 32);
            }
}

// ---- the integer sub-block scales: (scale, min) of the asymmetric types, signed scale of the
// symmetric ones

void sub_block_scale_min(const block_q2_k &b, int j, uint8_t *scale, uint8_t *min) {
    *scale = b.scales[j] & 0xF;
    *min = b.scales[j] >> 4;
}
void sub_block_scale_min(const block_q4_k &b, int j, uint8_t *scale, uint8_t *min) {
    scale_min_k4(j, b.scales, scale, min);
}
void sub_block_scale_min(const block_q5_k &b, int j, uint8_t *scale, uint8_t *min) {
    scale_min_k4(j, b.scales, scale, min);
}
int sub_block_scale(const block_q3_k &b, int j) {
    return scale_q3_k(j, b.scales);
}
int sub_block_scale(const block_q6_k &b, int j) {
    return b.scales[j];
}

// ---- packing: the inverse of the above, from levels L (already offset to be >= 0)

void pack_2bit(const uint8_t L[qk_k], uint8_t qs[qk_k / 4]) {
    for (int h = 0; h < 2; ++h)
        for (int l = 0; l < 32; ++l) {
            const uint8_t *g = L + 128 * h + l;
            qs[32 * h + l] = uint8_t(g[0] | (g[32] << 2) | (g[64] << 4) | (g[96] << 6));
        }
}

// The eight six-bit scales and mins of q4_K / q5_K, see scale_min_k4.
void pack_scales_mins_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[k_scale_size]) {
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            out[j] = ls[j];
            out[j + 4] = lm[j];
        } else {
            out[j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            out[j - 4] |= uint8_t((ls[j] >> 4) << 6);
            out[j] |= uint8_t((lm[j] >> 4) << 6);
        }
    }
}

// Per-element weights of a sub-block of 32 for q4_K / q5_K: the magnitude of each value plus the
// sub-block's RMS, times the importance when given.
void sub_block_weights_32(const float *x, const float *importance, float weights[32]) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[l] * x[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[l]);
    if (importance)
        for (int l = 0; l < 32; ++l) weights[l] *= importance[l];
}

// q4_K and q5_K share everything but the number of bits per value: finds the eight (scale, min)
// pairs of a 256-value super-block, stores them in the block (d, dmin, scales) and quantizes every
// value with the decoded pair; L receives levels in [0, nmax].
template <class Block>
void quantize_super_block_k4(const float *x, const float *importance, int nmax, float rmin, int nstep,
                             Block &block, uint8_t L[qk_k]) {
    float scales[8], mins[8], weights[32];
    uint8_t Laux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; ++j) {
        sub_block_weights_32(x + 32 * j, importance ? importance + 32 * j : nullptr, weights);
        scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, 0.1f,
                                     nstep, false);
        max_scale = std::max(max_scale, scales[j]);
        max_min = std::max(max_min, mins[j]);
    }
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; ++j) {
        ls[j] = uint8_t(std::min(63, nearest_int(inv_scale * scales[j])));
        lm[j] = uint8_t(std::min(63, nearest_int(inv_min * mins[j])));
    }
    pack_scales_mins_k4(ls, lm, block.scales);
    block.d = fp32_to_fp16(max_scale / 63.f);
    block.dmin = fp32_to_fp16(max_min / 63.f);

    for (int j = 0; j < 8; ++j) {
        uint8_t sc, m;
        sub_block_scale_min(block, j, &sc, &m);
        const float d = fp16_to_fp32(block.d) * float(sc);
        if (!d) continue;
        const float dm = fp16_to_fp32(block.dmin) * float(m);
        for (int i = 0; i < 32; ++i) {
            const int l = nearest_int((x[32 * j + i] + dm) / d);
            L[32 * j + i] = uint8_t(std::max(0, std::min(nmax, l)));
        }
    }
}

// The sixteen sub-block scales of a symmetric super-block (q3_K, q6_K): each sub-block of 16 is
// fitted by `search` (weights importance * x^2 when importance is given), its levels go to L.
// Returns the scale of largest magnitude, with its sign.
using symmetric_search_fn = float (*)(int n, int nmax, const float *x, int8_t *L, const float *weights);
float search_scales_16(const float *x, const float *importance, int nmax, symmetric_search_fn search,
                       float scales[16], int8_t L[qk_k]) {
    float weights[16];
    for (int j = 0; j < 16; ++j) {
        if (importance)
            for (int l = 0; l < 16; ++l) weights[l] = importance[16 * j + l] * x[16 * j + l] * x[16 * j + l];
        scales[j] = search(16, nmax, x + 16 * j, L + 16 * j, importance ? weights : nullptr);
    }
    return signed_absmax(scales, 16);
}

// The integer dot product of a sub-block of quants with the activations' quants.
int dot_i8(const int8_t *a, const int8_t *b, int n) {
    int sum = 0;
    for (int i = 0; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

int sum_i8(const int8_t *a, int n) {
    int sum = 0;
    for (int i = 0; i < n; ++i) sum += a[i];
    return sum;
}

// The asymmetric K-quants (q2_K: 16 sub-blocks of 16; q4_K, q5_K: 8 sub-blocks of 32) decode as
// d * scale * q - dmin * min with each sub-block's integer scale and min; the symmetric ones
// (q3_K, q6_K: 16 sub-blocks of 16) as d * scale * q. The types differ only in how the quants
// and the sub-block scales are stored (unpack, sub_block_scale_min, sub_block_scale).
template <class Block, int sub_block>
void to_float_asymmetric(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const Block *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k) {
        int8_t q[qk_k];
        unpack(x[i], q);
        const float d = fp16_to_fp32(x[i].d), dmin = fp16_to_fp32(x[i].dmin);
        for (int j = 0; j < qk_k / sub_block; ++j) {
            uint8_t sc, m;
            sub_block_scale_min(x[i], j, &sc, &m);
            for (int l = 0; l < sub_block; ++l)
                dst[sub_block * j + l] = d * float(sc) * float(q[sub_block * j + l]) - dmin * float(m);
        }
    }
}

template <class Block>
void to_float_symmetric(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const Block *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k) {
        int8_t q[qk_k];
        unpack(x[i], q);
        const float d = fp16_to_fp32(x[i].d);
        for (int e = 0; e < qk_k; ++e) dst[e] = d * float(sub_block_scale(x[i], e / 16)) * float(q[e]);
    }
}

// The dot products with q8_K activations: per sub-block an integer dot, scaled by the sub-block's
// integer scale; the mins multiply the sums of the activations' quants.
template <class Block, int sub_block>
void vec_dot_asymmetric(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        int8_t q[qk_k];
        unpack(x[i], q);
        int sum_scaled = 0, sum_mins = 0;
        for (int j = 0; j < qk_k / sub_block; ++j) {
            uint8_t sc, m;
            sub_block_scale_min(x[i], j, &sc, &m);
            sum_scaled += sc * dot_i8(q + sub_block * j, y[i].qs + sub_block * j, sub_block);
            sum_mins += m * sum_i8(y[i].qs + sub_block * j, sub_block);
        }
        sum +=
            y[i].d * (fp16_to_fp32(x[i].d) * float(sum_scaled) - fp16_to_fp32(x[i].dmin) * float(sum_mins));
    }
    *s = sum;
}

template <class Block>
void vec_dot_symmetric(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        int8_t q[qk_k];
        unpack(x[i], q);
        int sumi = 0;
        for (int j = 0; j < 16; ++j)
            sumi += sub_block_scale(x[i], j) * dot_i8(q + 16 * j, y[i].qs + 16 * j, 16);
        sum += fp16_to_fp32(x[i].d) * y[i].d * float(sumi);
    }
    *s = sum;
}

// ---- the quantizers, with optional importance (one weight per value of the row)

// q2_K without importance (with it: quantize_q2_k_with_importance).
void quantize_q2_k(const float *x, void *dst, int64_t n) {
    auto *y = static_cast<block_q2_k *>(dst);
    // The 4-bit sub-block scales and mins are quantized against max / 15.
    constexpr float q4scale = 15.f;
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        uint8_t L[qk_k], Laux[16];
        float weights[16], mins[16], scales[16];
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f,
                                         15, true);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < 16; ++j) y[i].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
            y[i].d = fp32_to_fp16(max_scale / q4scale);
        } else {
            for (int j = 0; j < 16; ++j) y[i].scales[j] = 0;
            y[i].d = fp32_to_fp16(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < 16; ++j) y[i].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = fp32_to_fp16(max_min / q4scale);
        } else {
            y[i].dmin = fp32_to_fp16(0.f);
        }
        for (int j = 0; j < 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * float(y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = fp16_to_fp32(y[i].dmin) * float(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; ++l) {
                const int q = nearest_int((x[16 * j + l] + dm) / d);
                L[16 * j + l] = uint8_t(std::max(0, std::min(3, q)));
            }
        }
        pack_2bit(L, y[i].qs);
    }
}

// q2_K with importance, as the established quantizer does it (a different search from the plain
// one above): each sub-block's scale and min are fitted by weighted least squares (weights
// importance * sqrt(sigma^2 + x^2)), and the 16 scales and 16 mins are then themselves quantized
// to 4 bits by a weighted search (make_qp_quants) whose weights are the sub-blocks' summed weights.
void quantize_q2_k_with_importance(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_q2_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        const float *imp = importance + i * qk_k;
        float sumx2 = 0;
        for (int j = 0; j < qk_k; ++j) sumx2 += x[j] * x[j];
        const float sigma2 = sumx2 / float(qk_k);
        uint8_t L[qk_k], Laux[16], Ls[16], Lm[16];
        float weights[16], mins[16], scales[16], sub_block_weight[16];
        for (int j = 0; j < 16; ++j) {
            sub_block_weight[j] = 0;
            for (int l = 0; l < 16; ++l) {
                weights[l] = imp[16 * j + l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
                sub_block_weight[j] += weights[l];
            }
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f,
                                         36, false);
        }
        y[i].d = fp32_to_fp16(make_qp_quants(16, 15, scales, Ls, sub_block_weight));
        y[i].dmin = fp32_to_fp16(make_qp_quants(16, 15, mins, Lm, sub_block_weight));
        const float dm = fp16_to_fp32(y[i].d), mm = fp16_to_fp32(y[i].dmin);
        for (int j = 0; j < 16; ++j) y[i].scales[j] = uint8_t(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < 16; ++j) {
            const float d = dm * float(y[i].scales[j] & 0xF);
            if (!d) continue;  // the levels of the search stand
            const float m = mm * float(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; ++l)
                L[16 * j + l] = uint8_t(std::max(0, std::min(3, nearest_int((x[16 * j + l] + m) / d))));
        }
        pack_2bit(L, y[i].qs);
    }
}

void quantize_q3_k(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_q3_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        int8_t L[qk_k];
        float scales[16];
        const float max_scale =
            search_scales_16(x, importance ? importance + i * qk_k : nullptr, 4, make_q3_quants, scales, L);
        std::fill(std::begin(y[i].scales), std::end(y[i].scales), uint8_t(0));
        if (max_scale) {
            // Six-bit signed sub-block scales: low nibbles in bytes 0..7 (two per byte), the top
            // two bits of scale j in bits 2 (j / 4) of byte 8 + j % 4.
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; ++j) {
                const int l = std::max(-32, std::min(31, nearest_int(iscale * scales[j]))) + 32;
                if (j < 8)
                    y[i].scales[j] = uint8_t(l & 0xF);
                else
                    y[i].scales[j - 8] |= uint8_t((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= uint8_t((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = fp32_to_fp16(1 / iscale);
        } else {
            y[i].d = fp32_to_fp16(0.f);
        }
        uint8_t levels[qk_k];
        for (int j = 0; j < 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * float(scale_q3_k(j, y[i].scales));
            for (int l = 0; l < 16; ++l) {
                // A zero scale decodes to zero whatever the level; keep the first search's level.
                const int q =
                    d ? std::max(-4, std::min(3, nearest_int(x[16 * j + l] / d))) : L[16 * j + l] - 4;
                levels[16 * j + l] = uint8_t(q + 4);
            }
        }
        // The high bit (level >= 4) goes to hmask, the low two bits to qs.
        std::fill(std::begin(y[i].hmask), std::end(y[i].hmask), uint8_t(0));
        for (int e = 0; e < qk_k; ++e) {
            if (levels[e] > 3) {
                y[i].hmask[e % 32] |= uint8_t(1 << (e / 32));
                levels[e] = uint8_t(levels[e] - 4);
            }
        }
        pack_2bit(levels, y[i].qs);
    }
}

void quantize_q4_k(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_q4_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        uint8_t L[qk_k];
        quantize_super_block_k4(x, importance ? importance + i * qk_k : nullptr, 15, -1.f, 20, y[i], L);
        for (int p = 0; p < 4; ++p)
            for (int l = 0; l < 32; ++l)
                y[i].qs[32 * p + l] = uint8_t(L[64 * p + l] | (L[64 * p + 32 + l] << 4));
    }
}

void quantize_q5_k(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_q5_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        uint8_t L[qk_k];
        quantize_super_block_k4(x, importance ? importance + i * qk_k : nullptr, 31, -0.5f, 15, y[i], L);
        std::fill(std::begin(y[i].qh), std::end(y[i].qh), uint8_t(0));
        for (int p = 0; p < 4; ++p)
            for (int l = 0; l < 32; ++l) {
                const int lo = L[64 * p + l], hi = L[64 * p + 32 + l];
                y[i].qs[32 * p + l] = uint8_t((lo & 0xF) | ((hi & 0xF) << 4));
                y[i].qh[l] |= uint8_t(((lo >> 4) << (2 * p)) | ((hi >> 4) << (2 * p + 1)));
            }
    }
}

void quantize_q6_k(const float *x, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<block_q6_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, x += qk_k) {
        int8_t L[qk_k];
        float scales[16];
        const float max_scale =
            search_scales_16(x, importance ? importance + i * qk_k : nullptr, 32, make_qx_quants, scales, L);
        if (std::fabs(max_scale) < k_group_max_eps) {
            std::memset(&y[i], 0, sizeof y[i]);
            y[i].d = fp32_to_fp16(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ++ib)
            y[i].scales[ib] = int8_t(std::min(127, nearest_int(iscale * scales[ib])));
        uint8_t levels[qk_k];
        for (int j = 0; j < 16; ++j) {
            const float d = fp16_to_fp32(y[i].d) * float(y[i].scales[j]);
            for (int l = 0; l < 16; ++l) {
                const int q =
                    d ? std::max(-32, std::min(31, nearest_int(x[16 * j + l] / d))) + 32 : L[16 * j + l];
                levels[16 * j + l] = uint8_t(q);
            }
        }
        // Low nibbles of columns 0/1 of each half in ql's low nibbles, columns 2/3 in the high ones;
        // the top two bits of all four columns in one qh byte.
        for (int h = 0; h < 2; ++h)
            for (int l = 0; l < 32; ++l) {
                const uint8_t *g = levels + 128 * h + l;
                y[i].ql[64 * h + l] = uint8_t((g[0] & 0xF) | ((g[64] & 0xF) << 4));
                y[i].ql[64 * h + 32 + l] = uint8_t((g[32] & 0xF) | ((g[96] & 0xF) << 4));
                y[i].qh[32 * h + l] =
                    uint8_t((g[0] >> 4) | ((g[32] >> 4) << 2) | ((g[64] >> 4) << 4) | ((g[96] >> 4) << 6));
            }
    }
}

}  // namespace

// ---- public row kernels

void from_float_q2_k_ref(const float *src, void *dst, int64_t n) {
    quantize_q2_k(src, dst, n);
}
void from_float_q3_k_ref(const float *src, void *dst, int64_t n) {
    quantize_q3_k(src, dst, n, nullptr);
}
void from_float_q4_k_ref(const float *src, void *dst, int64_t n) {
    quantize_q4_k(src, dst, n, nullptr);
}
void from_float_q5_k_ref(const float *src, void *dst, int64_t n) {
    quantize_q5_k(src, dst, n, nullptr);
}
void from_float_q6_k_ref(const float *src, void *dst, int64_t n) {
    quantize_q6_k(src, dst, n, nullptr);
}

void quantize_row_q2_k_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_q2_k_with_importance(src, dst, n, importance);
}
void quantize_row_q3_k_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_q3_k(src, dst, n, importance);
}
void quantize_row_q4_k_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_q4_k(src, dst, n, importance);
}
void quantize_row_q5_k_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_q5_k(src, dst, n, importance);
}
void quantize_row_q6_k_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_q6_k(src, dst, n, importance);
}

void to_float_q2_k(const void *src, float *dst, int64_t n) {
    to_float_asymmetric<block_q2_k, 16>(src, dst, n);
}
void to_float_q3_k(const void *src, float *dst, int64_t n) {
    to_float_symmetric<block_q3_k>(src, dst, n);
}
void to_float_q4_k(const void *src, float *dst, int64_t n) {
    to_float_asymmetric<block_q4_k, 32>(src, dst, n);
}
void to_float_q5_k(const void *src, float *dst, int64_t n) {
    to_float_asymmetric<block_q5_k, 32>(src, dst, n);
}
void to_float_q6_k(const void *src, float *dst, int64_t n) {
    to_float_symmetric<block_q6_k>(src, dst, n);
}

void vec_dot_q2_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_asymmetric<block_q2_k, 16>(n, s, vx, vy);
}
void vec_dot_q3_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_symmetric<block_q3_k>(n, s, vx, vy);
}
void vec_dot_q4_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_asymmetric<block_q4_k, 32>(n, s, vx, vy);
}
void vec_dot_q5_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_asymmetric<block_q5_k, 32>(n, s, vx, vy);
}
void vec_dot_q6_k_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_symmetric<block_q6_k>(n, s, vx, vy);
}

// ---- q8_K: activations for the K-quants. Symmetric with the scale amax / 127 (so no clamping
// is needed), rounding to nearest even, plus the sums of each group of 16 quants.

void from_float_q8_k_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q8_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, src += qk_k) {
        float amax = 0;
        for (int j = 0; j < qk_k; ++j) amax = std::max(amax, std::fabs(src[j]));
        if (!amax) {
            std::memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = 127.f / amax;
        for (int j = 0; j < qk_k; ++j) y[i].qs[j] = int8_t(nearest_int(iscale * src[j]));
        for (int g = 0; g < qk_k / 16; ++g) y[i].bsums[g] = int16_t(sum_i8(y[i].qs + 16 * g, 16));
        y[i].d = 1 / iscale;
    }
}

void to_float_q8_k(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q8_k *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k)
        for (int j = 0; j < qk_k; ++j) dst[j] = x[i].d * float(x[i].qs[j]);
}

}  // namespace weft::quant

namespace weft {

namespace {
template <class Block>
void decode_asymmetric(const Block &b, int n_sub, k_block_ints &out) {
    quant::unpack(b, out.q);
    out.n_sub = n_sub;
    for (int j = 0; j < n_sub; ++j) {
        uint8_t sc, mn;
        quant::sub_block_scale_min(b, j, &sc, &mn);
        out.scale[j] = int8_t(sc);
        out.min[j] = mn;
    }
    out.d = b.d;
    out.dmin = b.dmin;
}
template <class Block>
void decode_symmetric(const Block &b, int n_sub, k_block_ints &out) {
    quant::unpack(b, out.q);
    out.n_sub = n_sub;
    for (int j = 0; j < n_sub; ++j) {
        out.scale[j] = int8_t(quant::sub_block_scale(b, j));
        out.min[j] = 0;
    }
    out.d = b.d;
    out.dmin = 0;
}
}  // namespace

bool k_block_to_ints(dtype t, const void *block, k_block_ints &out) {
    switch (t) {
        case dtype::q2_k:
            decode_asymmetric(*static_cast<const block_q2_k *>(block), 16, out);
            return true;
        case dtype::q3_k:
            decode_symmetric(*static_cast<const block_q3_k *>(block), 16, out);
            return true;
        case dtype::q4_k:
            decode_asymmetric(*static_cast<const block_q4_k *>(block), 8, out);
            return true;
        case dtype::q5_k:
            decode_asymmetric(*static_cast<const block_q5_k *>(block), 8, out);
            return true;
        case dtype::q6_k:
            decode_symmetric(*static_cast<const block_q6_k *>(block), 16, out);
            return true;
        default:
            return false;
    }
}

}  // namespace weft
