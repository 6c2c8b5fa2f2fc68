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
#include "weft/core/fp16.h"
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

// --- bf16 weights: two products per lane, the order of AVX-512 BF16's vdpbf16ps ---
// Grouped bf16 weights (k even) lie in value pairs: pair j (values 2j, 2j + 1) of row r of group g is
// the 32-bit word at bf16 index g * k * 16 + (j * 16 + r) * 2, value 2j in its low half. The
// activations are rounded to bf16 (round_to_bf16) and take the panels as pairs: pair j of column c
// (the same word layout) where value j of an f32 column would be, panel_index(j, c, k / 2, width) —
// the `x` of float_group_fn then holds these words. Canonical order of a bf16 product (every ISA,
// tile, batch): acc = 0; for each pair j: acc = flush(acc + w[2j+1] x[2j+1]), then
// acc = flush(acc + w[2j] x[2j]) — each product exact in f32 (8-bit mantissas), each sum rounded to
// nearest even, flush() taking a result below the smallest normal to zero with its sign; subnormal
// weights and activations count as zero (the weights are flushed when grouped, the activations when
// rounded). That is vdpbf16ps's definition, so on CPUs with it one instruction does two values of
// 16 rows, twice the f32 FMA rate; elsewhere two FMAs per pair under MXCSR's flush-to-zero give the
// same bits. The reference engine also rounds the activations of bf16 weights to bf16.
constexpr bool takes_bf16_pairs(dtype wtype) {
    return wtype == dtype::bf16;
}
// f32 to bf16: subnormals to zero with their sign, then round to nearest even (NaN stays a quiet NaN).
inline uint16_t round_to_bf16(float f) {
    const uint32_t w = fp32_to_bits(f);
    if ((w & 0x7f800000u) == 0) return uint16_t((w >> 16) & 0x8000u);
    return fp32_to_bf16(f);
}
// k (even) floats as k / 2 pairs of round_to_bf16 values (value 2j in the low half of word j); every
// build writes the same bits.
using round_pairs_fn = void (*)(const float *x, int64_t k, uint32_t *pairs);
void round_to_bf16_pairs_scalar(const float *x, int64_t k, uint32_t *pairs);
void round_to_bf16_pairs_avx2(const float *x, int64_t k, uint32_t *pairs);
round_pairs_fn round_to_bf16_pairs_at(simd_level level);
round_pairs_fn best_round_to_bf16_pairs();

// f16 / bf16 (f32 keeps the tiles' order, see float_mm.cpp), contiguous, rows in 16s (bf16: and k
// even — an odd k keeps its rows and the tiles' order); 2-D, or a stack of matrices [k, m, n] (as
// interleaved.h)
bool can_group_float(const tensor &t);
bool is_grouped_float(const tensor &t);
// f16 weights that can (f16_int16_mm.h) take the int16 layout instead: its products run on 16-bit
// integers (vpdpwssd), its values quantized in blocks of 32; WEFT_F16_INT16=0 keeps them in float groups.
bool takes_f16_int16(const tensor &t);
// The bytes of t grouped (t.nbytes(), or the int16 layout's size).
size_t grouped_float_size(const tensor &t);
// Writes t's data (plain layout, at src) regrouped to dst (grouped_float_size(t) bytes) and marks t
// (t.extra).
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
// the panel width; for bf16 weights the panels of bf16 pairs above): result (r, c) at
// dst[c * dst_stride + r].
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
