// src/backends/cpu/f16_int16_mm_impl.h — the int16 group kernel's loops for one ISA (included by
// f16_int16_mm_avx2.cpp and f16_int16_mm_avx512.cpp): `V` names the ISA's vector operations on 16
// rows (one zmm, or two ymm). The order of operations is f16_int16_mm.h's.
#pragma once

#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/interleaved.h"
#include "weft/core/error.h"

namespace weft::cpu::int16_kernels {

// G groups against C columns of panels of width W (a constant: every activation's address is then
// the block's plus a constant): each weight load feeds C products, each broadcast activation pair G.
template <class V, int G, int C, int W>
void groups_columns(const char *group, size_t group_stride, int64_t n_blocks, const uint32_t *panel,
                    float *dst, size_t dst_stride) {
    constexpr int64_t width = W;
    typename V::floats acc[G][C];
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c) acc[g][c] = V::zero_floats();
    for (int64_t b = 0; b < n_blocks; ++b) {
        const uint32_t *xb = panel + b * int16_panel_words * width;
        const char *wb = group + size_t(b) * f16_int16_block_bytes;
        // S chains of sums per output (pairs j with j % S == s), added at the block's end: a column
        // alone (C = 1) has too few independent vpdpwssd to hide their latency otherwise. Integer sums:
        // the same value in any order.
        constexpr int S = C == 1 ? 2 : 1;
        typename V::ints chain[S][G][C];
        // unrolled, so the sums stay in registers
#pragma GCC unroll 16
        for (int j = 0; j < int16_pairs; ++j) {
            typename V::ints w[G];
            for (int g = 0; g < G; ++g)
                w[g] =
                    V::load_ints(wb + size_t(g) * group_stride + int16_rows * sizeof(float) + size_t(j) * 64);
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
        typename V::floats sw[G];
        for (int g = 0; g < G; ++g) sw[g] = V::load_floats(wb + size_t(g) * group_stride);
        for (int c = 0; c < C; ++c) {
            const typename V::floats sx = V::broadcast_float(xb + c);
            for (int g = 0; g < G; ++g)
                acc[g][c] = V::fma(V::to_floats(isum[g][c]), V::mul(sw[g], sx), acc[g][c]);
        }
    }
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c) V::store(dst + size_t(c) * dst_stride + int16_rows * g, acc[g][c]);
}

// Column tiles of up to C_max (a divisor of the panel width W: a tile never spans two panels).
template <class V, int G, int C_max, int W>
void groups_column_tiles(const char *group, size_t group_stride, int64_t n_blocks, const uint32_t *x,
                         int64_t n_cols, float *dst, size_t dst_stride) {
    static_assert(W % C_max == 0);
    for_column_tiles<C_max>(n_cols, [&](auto cols, int64_t c) {
        const uint32_t *panel = x + (c / W) * n_blocks * int16_panel_words * W + c % W;
        groups_columns<V, G, decltype(cols)::value, W>(group, group_stride, n_blocks, panel,
                                                       dst + size_t(c) * dst_stride, dst_stride);
    });
}

// The kernel: G_one groups at a time for one column alone (decode: a panel of width 1), G x C_max
// tiles for the columns of panels of int16_panel_width.
template <class V, int G_one, int G, int C_max>
void groups(const char *g0, size_t group_stride, int64_t n_groups, int64_t k, const uint32_t *x,
            int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    const int64_t n_blocks = k / int16_block;
    int64_t g = 0;
    if (width == 1) {
        WEFT_ASSERT(n_cols == 1);
        for (; g + G_one <= n_groups; g += G_one)
            groups_columns<V, G_one, 1, 1>(g0 + size_t(g) * group_stride, group_stride, n_blocks, x,
                                           dst + int16_rows * g, dst_stride);
        for (; g < n_groups; ++g)
            groups_columns<V, 1, 1, 1>(g0 + size_t(g) * group_stride, group_stride, n_blocks, x,
                                       dst + int16_rows * g, dst_stride);
        return;
    }
    WEFT_ASSERT(width == int16_panel_width);
    constexpr int W = int(int16_panel_width);
    for (; g + G <= n_groups; g += G)
        groups_column_tiles<V, G, C_max, W>(g0 + size_t(g) * group_stride, group_stride, n_blocks, x, n_cols,
                                            dst + int16_rows * g, dst_stride);
    for (; g < n_groups; ++g)
        groups_column_tiles<V, 1, C_max, W>(g0 + size_t(g) * group_stride, group_stride, n_blocks, x, n_cols,
                                            dst + int16_rows * g, dst_stride);
}

}  // namespace weft::cpu::int16_kernels
