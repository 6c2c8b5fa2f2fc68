// src/quant/iq1_quants.cpp — scalar reference kernels of the 1-bit i-quants iq1_s and iq1_m (to-float
// and the dot product against q8_K activations); their quantizers are in iq1_quantize.cpp.
//
// Both decode a block to levels in {-1, 0, 1} (iq1s grid points), a 3-bit scale ls per 16 values
// and a shift delta = +-1/8 per group of 8: x = (d * (1 + 2 ls)) * (level + delta), as the
// established dequantization computes it. The dot product keeps two exact integer sums per block,
// sum (1 + 2 ls) * level * q8 and sum (1 + 2 ls) * sign(delta) * q8, and then computes
// d * d8 * (sum1 + sum2 / 8) in float, block by block, as the established kernel does.
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

struct iq1_levels {
    int8_t q[qk_k];
    int ls[qk_k / 16];    // 1 + 2 * the 3-bit scale, per 16 values
    int shift[qk_k / 8];  // the sign of delta, per 8 values
};

void put_point(int index, int8_t *q) {
    for (int j = 0; j < 8; ++j) q[j] = int8_t(iq1s_value(index, j));
}

float decode_iq1_s(const void *block, iq1_levels &out) {
    const auto &b = *static_cast<const block_iq1_s *>(block);
    for (int s = 0; s < qk_k / 32; ++s) {
        const uint16_t h = b.qh[s];
        out.ls[2 * s] = out.ls[2 * s + 1] = 1 + 2 * ((h >> 12) & 7);
        for (int g = 0; g < 4; ++g) {
            put_point(b.qs[4 * s + g] | (((h >> (3 * g)) & 7) << 8), out.q + 32 * s + 8 * g);
            out.shift[4 * s + g] = h & 0x8000 ? -1 : 1;
        }
    }
    return fp16_to_fp32(b.d);
}

float decode_iq1_m(const void *block, iq1_levels &out) {
    const auto &b = *static_cast<const block_iq1_m *>(block);
    uint16_t sc[4];
    for (int k = 0; k < 4; ++k) sc[k] = uint16_t(b.scales[2 * k] | (b.scales[2 * k + 1] << 8));
    const fp16_t d =
        fp16_t((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
    for (int s = 0; s < qk_k / 32; ++s) {
        out.ls[2 * s] = 1 + 2 * ((sc[s / 2] >> (6 * (s % 2))) & 7);
        out.ls[2 * s + 1] = 1 + 2 * ((sc[s / 2] >> (6 * (s % 2) + 3)) & 7);
    }
    for (int g = 0; g < qk_k / 8; ++g) {
        const int h = (b.qh[g / 2] >> (4 * (g % 2))) & 0xf;
        put_point(b.qs[g] | ((h & 7) << 8), out.q + 8 * g);
        out.shift[g] = h & 8 ? -1 : 1;
    }
    return fp16_to_fp32(d);
}

constexpr float iq1_delta = 0.125f;

template <class Block, float (*decode)(const void *, iq1_levels &)>
void to_float_iq1(const void *src, float *dst, int64_t n) {
    const auto *x = static_cast<const Block *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k) {
        iq1_levels l;
        const float d = decode(&x[i], l);
        for (int g = 0; g < qk_k / 8; ++g) {
            const float dl = d * float(l.ls[g / 2]);
            const float delta = l.shift[g] < 0 ? -iq1_delta : iq1_delta;
            for (int j = 0; j < 8; ++j) dst[8 * g + j] = dl * (float(l.q[8 * g + j]) + delta);
        }
    }
}

template <class Block, float (*decode)(const void *, iq1_levels &)>
void vec_dot_iq1(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        iq1_levels l;
        const float d = decode(&x[i], l);
        int32_t sum1 = 0, sum2 = 0;
        for (int g = 0; g < qk_k / 8; ++g) {
            int32_t dot = 0, plain = 0;
            for (int j = 0; j < 8; ++j) {
                dot += int32_t(l.q[8 * g + j]) * y[i].qs[8 * g + j];
                plain += y[i].qs[8 * g + j];
            }
            sum1 += l.ls[g / 2] * dot;
            sum2 += l.ls[g / 2] * l.shift[g] * plain;
        }
        sum += d * y[i].d * (float(sum1) + iq1_delta * float(sum2));
    }
    *s = sum;
}

}  // namespace

void to_float_iq1_s(const void *src, float *dst, int64_t n) {
    to_float_iq1<block_iq1_s, decode_iq1_s>(src, dst, n);
}
void vec_dot_iq1_s_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_iq1<block_iq1_s, decode_iq1_s>(n, s, vx, vy);
}
void to_float_iq1_m(const void *src, float *dst, int64_t n) {
    to_float_iq1<block_iq1_m, decode_iq1_m>(src, dst, n);
}
void vec_dot_iq1_m_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_iq1<block_iq1_m, decode_iq1_m>(n, s, vx, vy);
}

}  // namespace weft::quant
