// src/quant/iq_grid_quants.cpp — scalar reference kernels of the grid i-quant types (to-float and
// the dot product against q8_K activations); the quantizers are in iq2_quantize.cpp, iq3_quantize.cpp
// and iq1_quantize.cpp.
//
// Every type decodes a block the same way: 256 signed levels q (a grid magnitude with its sign, an
// int8) and one integer scale ls per group of 16 values, so that x = (d * ls) * unit * q, with d
// the block's fp16 scale and unit a power of two of the type (1/8 for iq2, 1/4 for iq3_xxs, 1 for
// iq3_s). Scaling by a power of two is exact, so this gives the established dequantization's bits.
// The dot product is exact integer arithmetic inside a block (sum over groups of ls * sum q * q8),
// then one std::fma per block in block order, then the unit.
#include <cmath>
#include <cstring>

#include "quant/iq_grids.h"
#include "quant/kernels.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

namespace weft::quant {
namespace {

constexpr int group = 16;
constexpr int n_groups = qk_k / group;

// A decoded block: levels in element order, the scale of each group of 16.
struct levels {
    int8_t q[qk_k];
    int ls[n_groups];
};

// Writes the 4 or 8 elements of a grid entry with their signs (bit j of `signs`: element j negative).
template <class Entry>
void put_grid(Entry entry, int count, uint8_t signs, int8_t *q) {
    for (int j = 0; j < count; ++j) {
        const int m = grid_byte(entry, j);
        q[j] = int8_t((signs >> j) & 1 ? -m : m);
    }
}

// Byte k (< 8) of the 4 little-endian 16-bit words from w.
uint32_t byte_of(const uint16_t *w, int k) {
    return (w[k / 2] >> (8 * (k % 2))) & 0xff;
}

float decode_iq2_xxs(const void *block, levels &out) {
    const auto &b = *static_cast<const block_iq2_xxs *>(block);
    for (int s = 0; s < qk_k / 32; ++s) {
        const uint16_t *w = b.qs + 4 * s;
        const uint32_t high = uint32_t(w[2]) | (uint32_t(w[3]) << 16);
        out.ls[2 * s] = out.ls[2 * s + 1] = int(1 + 2 * (high >> 28));
        for (int g = 0; g < 4; ++g)
            put_grid(iq2xxs_grid[byte_of(w, g)], 8, even_signs(high >> (7 * g)), out.q + 32 * s + 8 * g);
    }
    return fp16_to_fp32(b.d);
}

float decode_iq2_xs(const void *block, levels &out) {
    const auto &b = *static_cast<const block_iq2_xs *>(block);
    for (int g = 0; g < qk_k / 8; ++g) {
        const uint16_t w = b.qs[g];
        put_grid(iq2xs_grid[w & 511], 8, even_signs(w >> 9), out.q + 8 * g);
    }
    for (int h = 0; h < n_groups; ++h) out.ls[h] = 1 + 2 * ((b.scales[h / 2] >> (4 * (h % 2))) & 0xf);
    return fp16_to_fp32(b.d);
}

float decode_iq2_s(const void *block, levels &out) {
    const auto &b = *static_cast<const block_iq2_s *>(block);
    for (int g = 0; g < qk_k / 8; ++g) {
        const int index = b.qs[g] | (((b.qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
        put_grid(iq2s_grid[index], 8, b.qs[qk_k / 8 + g], out.q + 8 * g);
    }
    for (int h = 0; h < n_groups; ++h) out.ls[h] = 1 + 2 * ((b.scales[h / 2] >> (4 * (h % 2))) & 0xf);
    return fp16_to_fp32(b.d);
}

float decode_iq3_xxs(const void *block, levels &out) {
    const auto &b = *static_cast<const block_iq3_xxs *>(block);
    for (int s = 0; s < qk_k / 32; ++s) {
        const uint8_t *w = b.qs + qk_k / 4 + 4 * s;
        const uint32_t word =
            uint32_t(w[0]) | (uint32_t(w[1]) << 8) | (uint32_t(w[2]) << 16) | (uint32_t(w[3]) << 24);
        out.ls[2 * s] = out.ls[2 * s + 1] = int(1 + 2 * (word >> 28));
        for (int g = 0; g < 4; ++g) {
            const uint8_t signs = even_signs(word >> (7 * g));
            int8_t *q = out.q + 32 * s + 8 * g;
            put_grid(iq3xxs_grid[b.qs[8 * s + 2 * g]], 4, signs, q);
            put_grid(iq3xxs_grid[b.qs[8 * s + 2 * g + 1]], 4, uint8_t(signs >> 4), q + 4);
        }
    }
    return fp16_to_fp32(b.d);
}

float decode_iq3_s(const void *block, levels &out) {
    const auto &b = *static_cast<const block_iq3_s *>(block);
    for (int s = 0; s < qk_k / 32; ++s) {
        const int scale = (b.scales[s / 2] >> (4 * (s % 2))) & 0xf;
        out.ls[2 * s] = out.ls[2 * s + 1] = 1 + 2 * scale;
        for (int g = 0; g < 4; ++g)
            for (int h = 0; h < 2; ++h) {
                const int k = 2 * g + h;
                const int index = b.qs[8 * s + k] | (((b.qh[s] >> k) & 1) << 8);
                const uint8_t signs = uint8_t(b.signs[4 * s + g] >> (4 * h));
                put_grid(iq3s_grid[index], 4, signs, out.q + 32 * s + 8 * g + 4 * h);
            }
    }
    return fp16_to_fp32(b.d);
}

template <class Block, float (*decode)(const void *, levels &)>
void to_float_grid(const void *src, float *dst, int64_t n, float unit) {
    const auto *x = static_cast<const Block *>(src);
    for (int64_t i = 0; i < n / qk_k; ++i, dst += qk_k) {
        levels l;
        const float d = decode(&x[i], l);
        for (int g = 0; g < n_groups; ++g) {
            const float dl = d * float(l.ls[g]) * unit;
            for (int j = 0; j < group; ++j) dst[group * g + j] = dl * float(l.q[group * g + j]);
        }
    }
}

template <class Block, float (*decode)(const void *, levels &)>
void vec_dot_grid(int64_t n, float *s, const void *vx, const void *vy, float unit) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        levels l;
        const float d = decode(&x[i], l);
        int32_t bsum = 0;
        for (int g = 0; g < n_groups; ++g) {
            int32_t sumi = 0;
            for (int j = 0; j < group; ++j) sumi += int32_t(l.q[group * g + j]) * y[i].qs[group * g + j];
            bsum += l.ls[g] * sumi;
        }
        sum = std::fma(d * y[i].d, float(bsum), sum);
    }
    *s = unit * sum;
}

// A block as grid_block_ints (weft/quant/quant.h).
bool block_ints(const void *block, grid_block_ints &out, float (*decode)(const void *, levels &),
                float unit) {
    levels l;
    decode(block, l);
    for (int i = 0; i < qk_k; ++i) out.q[i] = l.q[i];
    for (int g = 0; g < n_groups; ++g) out.ls[g] = uint8_t(l.ls[g]);
    std::memcpy(&out.d, block, sizeof out.d);  // every grid block starts with its fp16 d
    out.unit = unit;
    return true;
}

}  // namespace

void to_float_iq2_xxs(const void *src, float *dst, int64_t n) {
    to_float_grid<block_iq2_xxs, decode_iq2_xxs>(src, dst, n, 0.125f);
}
void vec_dot_iq2_xxs_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_grid<block_iq2_xxs, decode_iq2_xxs>(n, s, vx, vy, 0.125f);
}

void to_float_iq2_xs(const void *src, float *dst, int64_t n) {
    to_float_grid<block_iq2_xs, decode_iq2_xs>(src, dst, n, 0.125f);
}
void vec_dot_iq2_xs_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_grid<block_iq2_xs, decode_iq2_xs>(n, s, vx, vy, 0.125f);
}

void to_float_iq2_s(const void *src, float *dst, int64_t n) {
    to_float_grid<block_iq2_s, decode_iq2_s>(src, dst, n, 0.125f);
}
void vec_dot_iq2_s_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_grid<block_iq2_s, decode_iq2_s>(n, s, vx, vy, 0.125f);
}

void to_float_iq3_xxs(const void *src, float *dst, int64_t n) {
    to_float_grid<block_iq3_xxs, decode_iq3_xxs>(src, dst, n, 0.25f);
}
void vec_dot_iq3_xxs_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_grid<block_iq3_xxs, decode_iq3_xxs>(n, s, vx, vy, 0.25f);
}

void to_float_iq3_s(const void *src, float *dst, int64_t n) {
    to_float_grid<block_iq3_s, decode_iq3_s>(src, dst, n, 1.0f);
}
void vec_dot_iq3_s_ref(int64_t n, float *s, const void *vx, const void *vy) {
    vec_dot_grid<block_iq3_s, decode_iq3_s>(n, s, vx, vy, 1.0f);
}

}  // namespace weft::quant

namespace weft {

bool grid_block_to_ints(dtype t, const void *block, grid_block_ints &out) {
    using namespace quant;
    switch (t) {
        case dtype::iq2_xxs:
            return block_ints(block, out, decode_iq2_xxs, 0.125f);
        case dtype::iq2_xs:
            return block_ints(block, out, decode_iq2_xs, 0.125f);
        case dtype::iq2_s:
            return block_ints(block, out, decode_iq2_s, 0.125f);
        case dtype::iq3_xxs:
            return block_ints(block, out, decode_iq3_xxs, 0.25f);
        case dtype::iq3_s:
            return block_ints(block, out, decode_iq3_s, 1.0f);
        default:
            return iq1_block_to_ints(t, block, out);
    }
}

}  // namespace weft
