// src/quant/iq1_quants.cpp — scalar reference kernels of the 1-bit i-quants iq1_s and iq1_m (to-float
// and the dot product against q8_K activations); their quantizers are in iq1_quantize.cpp.
//
// Both decode a block to levels in {-1, 0, 1} (iq1s grid points), a 3-bit scale ls per 16 values
// and a shift delta = +-1/8 per group of 8: x = (d * (1 + 2 ls)) * (level + delta), as the
// established dequantization computes it. In eighths, level + delta is the integer 8 level + sign(delta)
// (one of +-1, +-7, +-9), so the dot product is the grid i-quants' (iq_grid_quants.cpp): one exact
// integer sum per block, sum (1 + 2 ls) * (8 level + sign) * q8, added by one fma of d * d8, the
// whole times 1/8 at the end; the same value as the established kernel's d * d8 * (sum1 + sum2 / 8)
// up to the rounding of that product and sum (the fma rounds once). Repacked weights
// (backends/cpu/interleaved.cpp) compute exactly this.
#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "weft/quant/blocks.h"

namespace weft::quant {
namespace {

struct iq1_levels {
    int8_t q[qk_k];
    int ls[qk_k / 16];    // 1 + 2 * the 3-bit scale, per 16 values
    int shift[qk_k / 8];  // the sign of delta, per 8 values
    fp16_t d = 0;         // the block's scale (iq1_m's assembled from its scales' top bits)
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
    out.d = b.d;
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
    out.d = d;
    return fp16_to_fp32(d);
}

constexpr float iq1_delta = 0.125f;
constexpr float iq1_unit = 0.125f;  // the levels of the dot product are eighths

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
        int32_t bsum = 0;
        for (int g = 0; g < qk_k / 8; ++g) {
            int32_t dot = 0;
            for (int j = 0; j < 8; ++j)
                dot += (8 * int32_t(l.q[8 * g + j]) + l.shift[g]) * y[i].qs[8 * g + j];
            bsum += l.ls[g / 2] * dot;
        }
        sum = std::fma(d * y[i].d, float(bsum), sum);
    }
    *s = iq1_unit * sum;
}

// A block as grid_block_ints: the levels in eighths (8 level + sign(delta)), a scale per 16 values.
template <class Block, float (*decode)(const void *, iq1_levels &)>
void block_ints(const void *block, grid_block_ints &out) {
    iq1_levels l;
    decode(block, l);
    for (int i = 0; i < qk_k; ++i) out.q[i] = int8_t(8 * l.q[i] + l.shift[i / 8]);
    for (int g = 0; g < qk_k / 16; ++g) out.ls[g] = uint8_t(l.ls[g]);
    out.d = l.d;
    out.unit = iq1_unit;
}

}  // namespace

void to_float_iq1_s(const void *src, float *dst, int64_t n) {
    to_float_iq1<block_iq1_s, decode_iq1_s>(src, dst, n);
}
void vec_dot_iq1_s_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_iq1<block_iq1_s, decode_iq1_s>(n, s, vx, vy);
}
bool iq1_block_to_ints(dtype t, const void *block, grid_block_ints &out) {
    if (t == dtype::iq1_s) {
        block_ints<block_iq1_s, decode_iq1_s>(block, out);
        return true;
    }
    if (t == dtype::iq1_m) {
        block_ints<block_iq1_m, decode_iq1_m>(block, out);
        return true;
    }
    return false;
}
void to_float_iq1_m(const void *src, float *dst, int64_t n) {
    to_float_iq1<block_iq1_m, decode_iq1_m>(src, dst, n);
}
void vec_dot_iq1_m_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_iq1<block_iq1_m, decode_iq1_m>(n, s, vx, vy);
}

}  // namespace weft::quant
