// src/backends/cpu/float_mm.h — matrix products of float weights (f32, f16, bf16) against f32
// activations, tile by tile, with one fixed order of operations per output element.
//
// The canonical order (every ISA, tile shape, thread count and batch composition): 16 lanes; value
// i of the dot product goes to lane i % 16, each lane accumulates acc = fma(w_i, x_i, acc) in order
// of i (a lane without a value in the last, partial step is left as it is); then the lanes are
// summed as a tree: s8[l] = a[l] + a[l + 8], s4[l] = s8[l] + s8[l + 4], s2[l] = s4[l] + s4[l + 2],
// result = s2[0] + s2[1]. The scalar kernel is the oracle; the SIMD kernels equal it bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/simd_level.h"
#include "weft/core/tensor.h"
#include "weft/core/type.h"

namespace weft::cpu {

// n_rows x n_cols dot products of length k: rows of weights a (of type wtype, row r at
// a + r * a_stride bytes) against f32 columns x (column c at x + c * x_stride floats); result (r, c)
// at dst[c * dst_stride + r].
using float_tile_fn = void (*)(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                               size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);

void float_tile_scalar(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                       size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);
void float_tile_avx2(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                     size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);
void float_tile_avx512(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                       size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);

// The build of one level (only call it where simd_level_supported), and the best for this CPU.
float_tile_fn float_tile_at(simd_level level);
float_tile_fn best_float_tile();  // scalar under WEFT_FORCE_SCALAR

// --- float weights repacked into groups of 16 rows (weights repacked at load, like interleaved.h) ---
// Value i of row r of group g lies at g * k * 16 + i * 16 + r: one vector load gives the 16 rows'
// value i. Canonical order of these products (every ISA, tile, batch): acc = 0, then
// acc = fma(w_i, x_i, acc) for i = 0, 1, ..., k - 1 — no horizontal sums at all.
constexpr int64_t float_group_rows = 16;

// f16 / bf16 (f32 keeps the tiles' order, see float_mm.cpp), contiguous, rows in 16s; 2-D, or a
// stack of matrices [k, m, n] (as interleaved.h)
bool can_group_float(const tensor &t);
bool is_grouped_float(const tensor &t);
// Writes t's data (plain layout, at src) regrouped to dst (t.nbytes() bytes) and marks t (t.extra).
void group_float_tensor(tensor &t, const void *src, void *dst);

// Columns in panels of `width` (1, or float_panel_width for several columns): value i of column c
// at x[(c / width) * k * width + i * width + c % width], so a tile of columns reads one cache line
// per value instead of one per column (columns k floats apart would share cache sets).
constexpr int64_t float_panel_width = 24;
inline size_t panel_index(int64_t i, int64_t c, int64_t k, int64_t width) {
    return size_t((c / width) * k * width + i * width + c % width);
}

// n <= width f32 columns (columns[j]: k contiguous values) written as one panel: value i of column j
// at panel[i * width + j] (panel_index for the panel's first column). A copy: every build writes the
// same bits; the SIMD ones transpose 8 x 8 blocks in registers.
using pack_panel_fn = void (*)(const float *const *columns, int64_t n, int64_t k, int64_t width,
                               float *panel);
void pack_panel_scalar(const float *const *columns, int64_t n, int64_t k, int64_t width, float *panel);
void pack_panel_avx2(const float *const *columns, int64_t n, int64_t k, int64_t width, float *panel);
pack_panel_fn pack_panel_at(simd_level level);
pack_panel_fn best_pack_panel();

// Rows [0, 16 * n_groups) of the groups at `groups` (group g at groups + g * group_stride bytes)
// against n_cols columns in panels (x at the first column's panel; that column a multiple of
// the panel width): result (r, c) at dst[c * dst_stride + r].
using float_group_fn = void (*)(dtype wtype, const char *groups, size_t group_stride, int64_t n_groups,
                                int64_t k, const float *x, int64_t width, int64_t n_cols, float *dst,
                                size_t dst_stride);
void float_groups_scalar(dtype wtype, const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const float *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride);
void float_groups_avx2(dtype wtype, const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                       const float *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride);
void float_groups_avx512(dtype wtype, const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const float *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride);
float_group_fn float_groups_at(simd_level level);
float_group_fn best_float_groups();

// Calls fn(std::integral_constant<dtype, T>{}) with T the float weight type t (f16, bf16, else
// f32), so ISA files instantiate their loops per type once.
template <class Fn>
void with_float_weight_type(dtype t, Fn &&fn) {
    switch (t) {
        case dtype::f16:
            return fn(std::integral_constant<dtype, dtype::f16>{});
        case dtype::bf16:
            return fn(std::integral_constant<dtype, dtype::bf16>{});
        default:
            return fn(std::integral_constant<dtype, dtype::f32>{});
    }
}

inline bool is_float_weight(dtype t) {
    return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16;
}

}  // namespace weft::cpu
