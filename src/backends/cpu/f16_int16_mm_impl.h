// src/backends/cpu/f16_int16_mm_impl.h — the int16 group kernel's loops for one ISA (included by
// f16_int16_mm_avx2.cpp and f16_int16_mm_avx512.cpp): `V` names the ISA's vector operations on 16
// rows (one zmm, or two ymm). The order of operations is f16_int16_mm.h's. Also the weights'
// quantizer, one definition compiled by the scalar file and each ISA's.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/interleaved.h"
#include "weft/core/error.h"

namespace weft::cpu::int16_kernels {

// Functions of this header are compiled once for each ISA: in an unnamed namespace, so no build of
// one may stand in for another's at link time.
namespace {

// The unbiased exponent of a normal float; 2^e as a float for e in [-126, 127].
inline int32_t exponent_of(float m) {
    uint32_t bits;
    std::memcpy(&bits, &m, sizeof bits);
    return int32_t((bits >> 23) & 0xFFu) - 127;
}
inline float power_of_two(int32_t e) {
    const uint32_t bits = uint32_t(e + 127) << 23;
    float p;
    std::memcpy(&p, &bits, sizeof p);
    return p;
}

// quantize_int16_weight_row (f16_int16_mm.h), compiled for each ISA: every operation is exact or
// rounds as IEEE defines it, so any vectorization of these loops gives the scalar build's bits.
inline float quantize_weight_row(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs) {
    // Written for speed (every weight of a model passes here at load) with the definition's bits: a
    // block's max |w| from the magnitudes' bits (an integer max that vectorizes; infinities and NaNs
    // are the bits above the largest finite float's), the division by 2^k_b as a product by the exact
    // power 2^-k_b (f16 values: k_b in [-36, 3]; every f16 value is a normal float, so exponents and
    // powers are read and written as bits; the product is exact, so a contraction with the next
    // addition into an fma changes nothing), nearbyint as the addition and subtraction of 1.5 · 2^23,
    // which rounds to nearest even every |x| < 2^22 (|q| <= 8191.5 here).
    const int64_t n_blocks = k / int16_block;
    const float limit = float(int16_limit);
    constexpr uint32_t largest_finite = 0x7f7fffffu;
    constexpr float round_magic = 12582912.0f;  // 1.5 · 2^23
    auto round_even = [&](float x) { return (x + round_magic) - round_magic; };
    // each nonzero block's step 2^k_b (kept in exponents[] for now), and the least of them
    constexpr int32_t zero_block = std::numeric_limits<int32_t>::max();
    int32_t k_min = zero_block;
    bool special = false;  // an infinity or a NaN
    for (int64_t b = 0; b < n_blocks; ++b) {
        uint32_t bits[int16_block];
        std::memcpy(bits, v + b * int16_block, sizeof bits);
        uint32_t top = 0;
        for (int64_t i = 0; i < int16_block; ++i) top = std::max(top, bits[i] & 0x7fffffffu);
        const bool bad = top > largest_finite;
        float m;
        std::memcpy(&m, &top, sizeof m);
        special |= bad;
        int32_t step = zero_block;
        if (!bad && m != 0.0f) {
            step = exponent_of(m) - 12;  // m / 2^step in [4096, 8192)
            if (round_even(m * power_of_two(-step)) > limit) ++step;
            WEFT_ASSERT(step >= -36 && step <= 3);  // f16 values
        }
        exponents[b] = step;
        k_min = std::min(k_min, step);
    }
    std::fill(pairs, pairs + n_blocks * int16_pairs, 0u);
    if (special || k_min == zero_block) {
        std::fill(exponents, exponents + n_blocks, 0);
        return special ? std::numeric_limits<float>::quiet_NaN() : 0.0f;
    }
    for (int64_t b = 0; b < n_blocks; ++b) {
        if (exponents[b] == zero_block) {
            exponents[b] = 0;
            continue;
        }
        const int32_t step = exponents[b];
        exponents[b] = step - k_min;  // <= int16_max_exponent
        const float inverse = power_of_two(-step);
        const float *vb = v + b * int16_block;
        int16_t q[int16_block];
        for (int64_t i = 0; i < int16_block; ++i) q[i] = int16_t(round_even(vb[i] * inverse));
        std::memcpy(pairs + b * int16_pairs, q, sizeof q);  // value 2j in the low half of word j
    }
    return power_of_two(k_min);
}

}  // namespace

// Blocks [begin, end) of a row's n_blocks: a slice of k. A slice after the first takes the
// accumulators from dst (stored unscaled by the slice before it), and one before the last stores them
// unscaled — exact, so the order of every output's additions is the same in slices as in one go.
struct block_slice {
    int64_t begin, end;
    bool first() const { return begin == 0; }
    bool last(int64_t n_blocks) const { return end == n_blocks; }
};

// G groups against C columns of panels of width W (a constant: every activation's address is then
// the block's plus a constant): each weight load feeds C products, each broadcast activation pair G.
template <class V, int G, int C, int W>
void groups_columns(const char *group, size_t group_stride, int64_t n_blocks, block_slice blocks,
                    const uint32_t *panel, float *dst, size_t dst_stride) {
    constexpr int64_t width = W;
    typename V::floats acc[G][C];
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c)
            acc[g][c] = blocks.first() ? V::zero_floats()
                                       : V::load_floats(dst + size_t(c) * dst_stride + int16_rows * g);
    const char *pairs = group + f16_int16_pairs_at(n_blocks);
    for (int64_t b = blocks.begin; b < blocks.end; ++b) {
        const uint32_t *xb = panel + b * int16_panel_words * width;
        const char *wb = pairs + size_t(b) * f16_int16_pair_bytes;
        // S chains of sums per output (pairs j with j % S == s), added at the block's end: a column
        // alone (C = 1) has too few independent vpdpwssd to hide their latency otherwise. Integer sums:
        // the same value in any order.
        constexpr int S = C == 1 ? 2 : 1;
        typename V::ints chain[S][G][C];
        // unrolled, so the sums stay in registers
#pragma GCC unroll 16
        for (int j = 0; j < int16_pairs; ++j) {
            typename V::ints w[G];
            for (int g = 0; g < G; ++g) w[g] = V::load_ints(wb + size_t(g) * group_stride + size_t(j) * 64);
            for (int c = 0; c < C; ++c) {
                const typename V::ints xv = V::broadcast(xb[width * (1 + j) + c]);
                for (int g = 0; g < G; ++g) {
                    typename V::ints &sum = chain[j % S][g][c];
                    sum = j < S ? V::pair_products(w[g], xv) : V::add_pair_products(sum, w[g], xv);
                }
            }
        }
        typename V::ints isum[G][C];
        for (int g = 0; g < G; ++g)
            for (int c = 0; c < C; ++c) {
                isum[g][c] = chain[0][g][c];
                for (int s = 1; s < S; ++s) isum[g][c] = V::add_ints(isum[g][c], chain[s][g][c]);
            }
        typename V::ints exponents[G];
        const char *eb = group + f16_int16_exponents_at(b);
        for (int g = 0; g < G; ++g) exponents[g] = V::load_exponents(eb + size_t(g) * group_stride);
        for (int c = 0; c < C; ++c) {
            const typename V::floats sx = V::broadcast_float(xb + c);
            for (int g = 0; g < G; ++g)
                acc[g][c] = V::fma(V::ldexp_of_ints(isum[g][c], exponents[g]), sx, acc[g][c]);
        }
    }
    const bool last = blocks.last(n_blocks);
    for (int g = 0; g < G; ++g) {
        const typename V::floats scale = V::load_floats(group + size_t(g) * group_stride);
        for (int c = 0; c < C; ++c)
            V::store(dst + size_t(c) * dst_stride + int16_rows * g,
                     last ? V::mul(acc[g][c], scale) : acc[g][c]);
    }
}

// Column tiles of up to C_max (a divisor of the panel width W: a tile never spans two panels).
template <class V, int G, int C_max, int W>
void groups_column_tiles(const char *group, size_t group_stride, int64_t n_blocks, block_slice blocks,
                         const uint32_t *x, int64_t n_cols, float *dst, size_t dst_stride) {
    static_assert(W % C_max == 0);
    for_column_tiles<C_max>(n_cols, [&](auto cols, int64_t c) {
        const uint32_t *panel = x + (c / W) * n_blocks * int16_panel_words * W + c % W;
        groups_columns<V, G, decltype(cols)::value, W>(group, group_stride, n_blocks, blocks, panel,
                                                       dst + size_t(c) * dst_stride, dst_stride);
    });
}

// The kernel: G_one groups at a time for one column alone (decode: a panel of width 1), G x C_max
// tiles for the columns of panels of int16_panel_width, k in slices of int16_slice_blocks: a slice's
// weights of the groups and activations of the columns stay in L2 while each column tile reads them
// (at k 5632 a pass's whole rows did not: its products ran 15-20% slower than at k 2048; in slices,
// bench_group_kernel --k 5632 --rows 2048 --cols 512, 11 alternations, 149 -> 157 GMAC/s a thread).
template <class V, int G_one, int G, int C_max>
void groups(const char *g0, size_t group_stride, int64_t n_groups, int64_t k, const uint32_t *x,
            int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    const int64_t n_blocks = k / int16_block;
    const block_slice all{0, n_blocks};
    int64_t g = 0;
    if (width == 1) {
        WEFT_ASSERT(n_cols == 1);
        for (; g + G_one <= n_groups; g += G_one)
            groups_columns<V, G_one, 1, 1>(g0 + size_t(g) * group_stride, group_stride, n_blocks, all, x,
                                           dst + int16_rows * g, dst_stride);
        for (; g < n_groups; ++g)
            groups_columns<V, 1, 1, 1>(g0 + size_t(g) * group_stride, group_stride, n_blocks, all, x,
                                       dst + int16_rows * g, dst_stride);
        return;
    }
    WEFT_ASSERT(width == int16_panel_width);
    constexpr int W = int(int16_panel_width);
    for (int64_t b0 = 0; b0 < n_blocks; b0 += int16_slice_blocks) {
        const block_slice blocks{b0, std::min(n_blocks, b0 + int16_slice_blocks)};
        for (g = 0; g + G <= n_groups; g += G)
            groups_column_tiles<V, G, C_max, W>(g0 + size_t(g) * group_stride, group_stride, n_blocks, blocks,
                                                x, n_cols, dst + int16_rows * g, dst_stride);
        for (; g < n_groups; ++g)
            groups_column_tiles<V, 1, C_max, W>(g0 + size_t(g) * group_stride, group_stride, n_blocks, blocks,
                                                x, n_cols, dst + int16_rows * g, dst_stride);
    }
}

}  // namespace weft::cpu::int16_kernels
