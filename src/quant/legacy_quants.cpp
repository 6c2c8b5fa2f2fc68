// src/quant/legacy_quants.cpp — scalar reference kernels of the 32-element types q4_0 ... q8_1.
//
// The quantizers reproduce the established reference quantizer bit for bit (same formulas, same
// float operations in the same order), so files written by either tool are identical.
#include <algorithm>
#include <cfloat>
#include <cmath>

#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

float absmax(const float *x, int n) {
    float amax = 0;
    for (int j = 0; j < n; ++j) amax = std::max(amax, std::fabs(x[j]));
    return amax;
}

void min_max(const float *x, int n, float *min, float *max) {
    *min = FLT_MAX;
    *max = -FLT_MAX;
    for (int j = 0; j < n; ++j) {
        *min = std::min(*min, x[j]);
        *max = std::max(*max, x[j]);
    }
}

// Bit j of a q5 block's fifth-bit word.
uint32_t load_qh(const uint8_t qh[4]) {
    uint32_t v;
    std::memcpy(&v, qh, sizeof v);
    return v;
}

}  // namespace

// ---- q4_0: symmetric 4-bit. The scale maps the extreme value to -8, so the other end gets +7
// values and the full 16 levels are used.

void from_float_q4_0_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q4_0 *>(dst);
    for (int64_t i = 0; i < n / qk4_0; ++i, src += qk4_0) {
        const float max = signed_absmax(src, qk4_0);
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < qk4_0 / 2; ++j) {
            const float x0 = src[j] * id;
            const float x1 = src[qk4_0 / 2 + j] * id;
            const uint8_t q0 = uint8_t(std::min<int>(15, int8_t(x0 + 8.5f)));
            const uint8_t q1 = uint8_t(std::min<int>(15, int8_t(x1 + 8.5f)));
            y[i].qs[j] = uint8_t(q0 | (q1 << 4));
        }
    }
}

void to_float_q4_0(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q4_0 *>(src);
    for (int64_t i = 0; i < n / qk4_0; ++i, dst += qk4_0) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < qk4_0 / 2; ++j) {
            dst[j] = float((x[i].qs[j] & 0xF) - 8) * d;
            dst[j + qk4_0 / 2] = float((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void vec_dot_q4_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q4_0 *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk4_0; ++i) {
        int sumi = 0;
        for (int j = 0; j < qk4_0 / 2; ++j) {
            sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + qk4_0 / 2];
        }
        sum += float(sumi) * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

// ---- q4_1: asymmetric 4-bit between the block's min and max.

void from_float_q4_1_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q4_1 *>(dst);
    for (int64_t i = 0; i < n / qk4_1; ++i, src += qk4_1) {
        float min, max;
        min_max(src, qk4_1, &min, &max);
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(min);
        for (int j = 0; j < qk4_1 / 2; ++j) {
            const float x0 = (src[j] - min) * id;
            const float x1 = (src[qk4_1 / 2 + j] - min) * id;
            const uint8_t q0 = uint8_t(std::min<int>(15, int8_t(x0 + 0.5f)));
            const uint8_t q1 = uint8_t(std::min<int>(15, int8_t(x1 + 0.5f)));
            y[i].qs[j] = uint8_t(q0 | (q1 << 4));
        }
    }
}

void to_float_q4_1(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q4_1 *>(src);
    for (int64_t i = 0; i < n / qk4_1; ++i, dst += qk4_1) {
        const float d = fp16_to_fp32(x[i].d);
        const float m = fp16_to_fp32(x[i].m);
        for (int j = 0; j < qk4_1 / 2; ++j) {
            dst[j] = float(x[i].qs[j] & 0xF) * d + m;
            dst[j + qk4_1 / 2] = float(x[i].qs[j] >> 4) * d + m;
        }
    }
}

// sum_j (d q_j + m) dy y_j = d dy sum(q y) + m (dy sum y) = d dy sum(q y) + m s.
void vec_dot_q4_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q4_1 *>(vx);
    const auto *y = static_cast<const block_q8_1 *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk4_1; ++i) {
        int sumi = 0;
        for (int j = 0; j < qk4_1 / 2; ++j) {
            sumi += (x[i].qs[j] & 0xF) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + qk4_1 / 2];
        }
        sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) * float(sumi) +
               fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    *s = sum;
}

// ---- q5_0: symmetric 5-bit, extreme value at -16.

void from_float_q5_0_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q5_0 *>(dst);
    for (int64_t i = 0; i < n / qk5_0; ++i, src += qk5_0) {
        const float max = signed_absmax(src, qk5_0);
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        uint32_t qh = 0;
        for (int j = 0; j < qk5_0 / 2; ++j) {
            const float x0 = src[j] * id;
            const float x1 = src[qk5_0 / 2 + j] * id;
            const uint8_t q0 = uint8_t(std::min<int>(31, int8_t(x0 + 16.5f)));
            const uint8_t q1 = uint8_t(std::min<int>(31, int8_t(x1 + 16.5f)));
            y[i].qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= uint32_t((q0 & 0x10u) >> 4) << j;
            qh |= uint32_t((q1 & 0x10u) >> 4) << (j + qk5_0 / 2);
        }
        std::memcpy(y[i].qh, &qh, sizeof qh);
    }
}

void to_float_q5_0(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q5_0 *>(src);
    for (int64_t i = 0; i < n / qk5_0; ++i, dst += qk5_0) {
        const float d = fp16_to_fp32(x[i].d);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < qk5_0 / 2; ++j) {
            const int h0 = int((qh >> j) & 1) << 4;
            const int h1 = int((qh >> (j + qk5_0 / 2)) & 1) << 4;
            dst[j] = float(((x[i].qs[j] & 0xF) | h0) - 16) * d;
            dst[j + qk5_0 / 2] = float(((x[i].qs[j] >> 4) | h1) - 16) * d;
        }
    }
}

void vec_dot_q5_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q5_0 *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk5_0; ++i) {
        const uint32_t qh = load_qh(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < qk5_0 / 2; ++j) {
            const int h0 = int((qh >> j) & 1) << 4;
            const int h1 = int((qh >> (j + qk5_0 / 2)) & 1) << 4;
            sumi += (((x[i].qs[j] & 0xF) | h0) - 16) * y[i].qs[j];
            sumi += (((x[i].qs[j] >> 4) | h1) - 16) * y[i].qs[j + qk5_0 / 2];
        }
        sum += float(sumi) * fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d);
    }
    *s = sum;
}

// ---- q5_1: asymmetric 5-bit.

void from_float_q5_1_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q5_1 *>(dst);
    for (int64_t i = 0; i < n / qk5_1; ++i, src += qk5_1) {
        float min, max;
        min_max(src, qk5_1, &min, &max);
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        y[i].m = fp32_to_fp16(min);
        uint32_t qh = 0;
        for (int j = 0; j < qk5_1 / 2; ++j) {
            const float x0 = (src[j] - min) * id;
            const float x1 = (src[qk5_1 / 2 + j] - min) * id;
            // (max - min) * id rounds to at most 31 + a few ulps, so + 0.5 truncates to <= 31.
            const uint8_t q0 = uint8_t(x0 + 0.5f);
            const uint8_t q1 = uint8_t(x1 + 0.5f);
            y[i].qs[j] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
            qh |= uint32_t((q0 & 0x10u) >> 4) << j;
            qh |= uint32_t((q1 & 0x10u) >> 4) << (j + qk5_1 / 2);
        }
        std::memcpy(y[i].qh, &qh, sizeof qh);
    }
}

void to_float_q5_1(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q5_1 *>(src);
    for (int64_t i = 0; i < n / qk5_1; ++i, dst += qk5_1) {
        const float d = fp16_to_fp32(x[i].d);
        const float m = fp16_to_fp32(x[i].m);
        const uint32_t qh = load_qh(x[i].qh);
        for (int j = 0; j < qk5_1 / 2; ++j) {
            const int h0 = int((qh >> j) & 1) << 4;
            const int h1 = int((qh >> (j + qk5_1 / 2)) & 1) << 4;
            dst[j] = float((x[i].qs[j] & 0xF) | h0) * d + m;
            dst[j + qk5_1 / 2] = float((x[i].qs[j] >> 4) | h1) * d + m;
        }
    }
}

void vec_dot_q5_1_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q5_1 *>(vx);
    const auto *y = static_cast<const block_q8_1 *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk5_1; ++i) {
        const uint32_t qh = load_qh(x[i].qh);
        int sumi = 0;
        for (int j = 0; j < qk5_1 / 2; ++j) {
            const int h0 = int((qh >> j) & 1) << 4;
            const int h1 = int((qh >> (j + qk5_1 / 2)) & 1) << 4;
            sumi += ((x[i].qs[j] & 0xF) | h0) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) | h1) * y[i].qs[j + qk5_1 / 2];
        }
        sum += fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d) * float(sumi) +
               fp16_to_fp32(x[i].m) * fp16_to_fp32(y[i].s);
    }
    *s = sum;
}

// ---- q8_0: symmetric 8-bit, round half away from zero (roundf).

void from_float_q8_0_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q8_0 *>(dst);
    for (int64_t i = 0; i < n / qk8_0; ++i, src += qk8_0) {
        const float d = absmax(src, qk8_0) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        for (int j = 0; j < qk8_0; ++j) y[i].qs[j] = int8_t(std::round(src[j] * id));
    }
}

void to_float_q8_0(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q8_0 *>(src);
    for (int64_t i = 0; i < n / qk8_0; ++i, dst += qk8_0) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < qk8_0; ++j) dst[j] = float(x[i].qs[j]) * d;
    }
}

// One exact integer sum per block, added by one fma with the product of the two scales, in block
// order: the order of every 32-value product (backends/cpu/interleaved.h), so the repacked products
// equal these bit for bit.
void vec_dot_q8_0_ref(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q8_0 *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    float acc = 0;
    for (int64_t i = 0; i < n / qk8_0; ++i) {
        int32_t sumi = 0;
        for (int j = 0; j < qk8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
        acc = std::fma(float(sumi), fp16_to_fp32(x[i].d) * fp16_to_fp32(y[i].d), acc);
    }
    *s = acc;
}

// ---- q8_1: q8_0 plus the scaled sum of the quants.

void from_float_q8_1_ref(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q8_1 *>(dst);
    for (int64_t i = 0; i < n / qk8_1; ++i, src += qk8_1) {
        const float d = absmax(src, qk8_1) / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < qk8_1; ++j) {
            y[i].qs[j] = int8_t(std::round(src[j] * id));
            sum += y[i].qs[j];
        }
        y[i].s = fp32_to_fp16(float(sum) * d);
    }
}

void to_float_q8_1(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const block_q8_1 *>(src);
    for (int64_t i = 0; i < n / qk8_1; ++i, dst += qk8_1) {
        const float d = fp16_to_fp32(x[i].d);
        for (int j = 0; j < qk8_1; ++j) dst[j] = float(x[i].qs[j]) * d;
    }
}

}  // namespace weft::quant

// ---- importance-weighted variants: instead of fixing the scale by the extreme value, search it
// (and the min) to minimize the error weighted by importance times the search's default weight
// (x^2 for the symmetric types, |x| plus the block's RMS for the asymmetric ones, as in q4_K).

namespace weft::quant {
namespace {

template <typename Block, int nmax>
void quantize_symmetric_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<Block *>(dst);
    constexpr int qk = int(sizeof(Block::qs) * 2);
    for (int64_t i = 0; i < n / qk; ++i, src += qk, importance += qk) {
        float weights[qk];
        for (int j = 0; j < qk; ++j) weights[j] = importance[j] * src[j] * src[j];
        int8_t L[qk];  // in [0, 2 nmax - 1], value = scale * (L - nmax)
        y[i].d = fp32_to_fp16(make_qx_quants(qk, nmax, src, L, weights));
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; ++j) {
            y[i].qs[j] = uint8_t((L[j] & 0xF) | ((L[j + qk / 2] & 0xF) << 4));
            qh |= uint32_t(L[j] >> 4) << j;
            qh |= uint32_t(L[j + qk / 2] >> 4) << (j + qk / 2);
        }
        if constexpr (nmax == 16) std::memcpy(y[i].qh, &qh, sizeof qh);
    }
}

template <typename Block, int nmax>
void quantize_asymmetric_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    auto *y = static_cast<Block *>(dst);
    constexpr int qk = int(sizeof(Block::qs) * 2);
    // The search parameters of q4_K (4 bits) and q5_K (5 bits).
    constexpr float rmin = nmax == 15 ? -1.0f : -0.5f;
    constexpr int nstep = nmax == 15 ? 20 : 15;
    for (int64_t i = 0; i < n / qk; ++i, src += qk, importance += qk) {
        float sum_x2 = 0;
        for (int j = 0; j < qk; ++j) sum_x2 += src[j] * src[j];
        const float rms = std::sqrt(sum_x2 / qk);
        float weights[qk];
        for (int j = 0; j < qk; ++j) weights[j] = importance[j] * (rms + std::fabs(src[j]));
        uint8_t L[qk], Laux[qk];
        float neg_min;
        y[i].d = fp32_to_fp16(
            make_qkx2_quants(qk, nmax, src, weights, L, &neg_min, Laux, rmin, 0.1f, nstep, false));
        y[i].m = fp32_to_fp16(-neg_min);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; ++j) {
            y[i].qs[j] = uint8_t((L[j] & 0xF) | ((L[j + qk / 2] & 0xF) << 4));
            qh |= uint32_t(L[j] >> 4) << j;
            qh |= uint32_t(L[j + qk / 2] >> 4) << (j + qk / 2);
        }
        if constexpr (nmax == 31) std::memcpy(y[i].qh, &qh, sizeof qh);
    }
}

}  // namespace

void quantize_row_q4_0_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_symmetric_weighted<block_q4_0, 8>(src, dst, n, importance);
}
void quantize_row_q5_0_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_symmetric_weighted<block_q5_0, 16>(src, dst, n, importance);
}
void quantize_row_q4_1_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_asymmetric_weighted<block_q4_1, 15>(src, dst, n, importance);
}
void quantize_row_q5_1_weighted(const float *src, void *dst, int64_t n, const float *importance) {
    quantize_asymmetric_weighted<block_q5_1, 31>(src, dst, n, importance);
}

}  // namespace weft::quant
