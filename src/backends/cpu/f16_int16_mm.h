// src/backends/cpu/f16_int16_mm.h — products of f16 weights as 16-bit integers: weights and
// activations in blocks of 32 values, each block of a row (or column) an int16 vector and one f32
// scale, the block's 32 products summed exactly in int32 (AVX-512 VNNI's vpdpwssd: 32 int16 products
// an instruction, twice the f32 FMA's 16; AVX2's vpmaddwd + vpaddd elsewhere).
//
// Activations (quantized per product; one function, so every ISA has the same values): for a block
// v[0..32) with m = max |v|: scale = m / 8191, q[i] = round-to-nearest-even of v[i] · (8191 / m),
// clamped to [-8191, 8191] (a zero v[i] is q 0 even when m is so small that 8191 / m is infinite); an
// all-zero block has scale 0 and q 0; a block holding an infinity or a NaN has scale NaN and q 0 (its
// products are NaN, as the floats' would be).
//
// Weights (f16 values, quantized at load): block b of a row takes a power-of-two step 2^k_b, k_b the
// least integer with round(m_b / 2^k_b) <= 8191 (m_b = the block's max |w|: its q is in [4096, 8191]),
// and q = round-to-nearest-even of w / 2^k_b — an exact division, so every value within two binades
// of the block's maximum (an f16 has 11 significant bits) is exact. The row keeps one scale s =
// 2^k_min (k_min the least k_b of its nonzero blocks) and each block the exponent e_b = k_b - k_min
// (0 for an all-zero block, whose q are 0); f16 values put k_b in [-36, 3], so e_b <= 39. A row
// holding an infinity or a NaN has s = NaN and every q 0.
//
// Overflow: vpdpwssd adds two int16 × int16 products to an int32 lane without saturation. With both
// operands within ±8191, a block's 32 products sum to at most 32 · 8191² = 2,146,959,392 < 2^31 =
// 2,147,483,648 in magnitude, and every partial sum is smaller still: the int32 sum of a block is
// exact whatever the order of its additions (a test checks the extreme blocks).
//
// Canonical order of one output element (every ISA, tile, thread count and batch): acc = 0; for each
// block b in order: acc = fma(ldexp(float(isum_b), e_b), sx_b, acc), isum_b the exact int32 sum,
// float() rounding to nearest even, ldexp exact (|float(isum_b)| is 0 or in [1, 2^31]); then the
// output is acc · s, one f32 product. The power of two costs an integer add to the float's exponent
// field, which issues beside the products, where a per-block f32 scale of the weights cost a
// multiply (sw_b · sx_b) on the pipes vpdpwssd uses. The scalar kernel is the oracle.
//
// Layouts. Weights (a 2-D f16 matrix, rows in 16s, k a multiple of 32), rows in groups of 16 as the
// other grouped float weights (float_mm.h): a group is its 16 rows' scales s (f32), then every
// block's exponents (block b at bytes 16 b .. 16 b + 15, a byte per row; padded to a cache line), then
// every block's pairs, 1 KB a block: pair j = 0..15 (values 2j, 2j + 1) of the 16 rows as 32-bit words
// (row r at word j * 16 + r, value 2j in the low half) — one vector load gives the 16 rows' pair j.
// Exponents as bytes cost 1.6% of the weights' bytes, which a decode reads from memory (as int32
// words beside each block they cost 6.25%); apart from the pairs, so that each load of the kernel
// steps by one constant stride from block to block (4 blocks to a line of exponents, with the line
// among the pairs, made the strides uneven and a decode from memory 25% slower).
// Activations in panels of `width` columns (as float_mm.h's panels): block b of a panel is
// 17 · width words: the columns' scales (f32), then pair j of column c at word width · (1 + j) + c.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/simd_level.h"
#include "weft/core/tensor.h"

namespace weft::cpu {

constexpr int64_t int16_block = 32;    // values per block (and per int32 sum)
constexpr int32_t int16_limit = 8191;  // |q| <= this (the overflow bound above)
constexpr int64_t int16_pairs = int16_block / 2;
constexpr int64_t int16_rows = 16;  // rows of a group (float_group_rows)
constexpr size_t f16_int16_pair_bytes = int16_pairs * int16_rows * sizeof(uint32_t);  // a block's pairs
constexpr int64_t int16_panel_words = 1 + int16_pairs;  // words of one column in a panel's block

static_assert(int64_t(int16_block) * int16_limit * int16_limit < (int64_t(1) << 31),
              "a block's int32 sum could overflow");
constexpr int int16_exponent_shift = 23;    // a float's exponent field: e_b << 23 adds e_b to it
constexpr int32_t int16_max_exponent = 39;  // e_b of f16 values (k_b in [-36, 3])

// Where block b's 16 exponent bytes start, from the group's start; where the group's pairs start (block
// b's at f16_int16_pairs_at(n_blocks) + b * f16_int16_pair_bytes); the bytes of a group of k values.
inline size_t f16_int16_exponents_at(int64_t b) {
    return int16_rows * sizeof(float) + size_t(b) * int16_rows;
}
inline size_t f16_int16_pairs_at(int64_t n_blocks) {
    return (f16_int16_exponents_at(n_blocks) + 63) / 64 * 64;
}
inline size_t f16_int16_group_bytes(int64_t k) {
    const int64_t n_blocks = k / int16_block;
    return f16_int16_pairs_at(n_blocks) + size_t(n_blocks) * f16_int16_pair_bytes;
}

// 32 activations quantized as above: q written as 16 pair words (value 2j in the low half of word j);
// returns the scale.
float quantize_int16_block(const float *v, uint32_t *pairs);
// A row of k f16 values (as floats) quantized as weights: block b's exponent at exponents[b], its 16
// pair words at pairs + 16 b; returns the row's scale s.
float quantize_int16_weight_row(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs);
// The same bits, compiled for the ISA (the loops vectorized), chosen at run time.
using quantize_weight_row_fn = float (*)(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs);
float quantize_int16_weight_row_avx2(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs);
float quantize_int16_weight_row_avx512(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs);
quantize_weight_row_fn best_quantize_int16_weight_row();  // scalar under WEFT_FORCE_SCALAR

// f16 matrices that take this layout when weights are repacked at load: 2-D, contiguous, rows in
// 16s, k a multiple of 32 (other f16 weights keep float_mm.h's groups).
bool can_group_f16_int16(const tensor &t);
// Marks t (t.extra) as holding this layout; whether it does.
void mark_f16_int16(tensor &t);
bool is_grouped_f16_int16(const tensor &t);
// Bytes of t in this layout.
size_t f16_int16_size(const tensor &t);
// Writes t's data (plain f16 rows at src) in this layout to dst (f16_int16_size bytes).
void group_f16_int16(const tensor &t, const void *src, void *dst);

// Bytes of one column in a panel (all its blocks), and of a panel of `width` columns.
inline size_t int16_panel_bytes(int64_t k, int64_t width) {
    return size_t(k / int16_block * int16_panel_words * width) * sizeof(uint32_t);
}
// The width of the panels of several columns (one column alone is a panel of width 1).
constexpr int64_t int16_panel_width = 24;
// Column j of a panel of `width` columns from k floats x (the scalar definition: quantize_int16_block
// block after block).
void quantize_int16_column(const float *x, int64_t k, int64_t j, int64_t width, uint32_t *panel);
// The same values by the ISA's quantizer, for a panel of width 1 (one column's words in order: block
// b's scale at word 17 · b, its pairs after it); every build writes the same bits.
using quantize_int16_fn = void (*)(const float *x, int64_t k, uint32_t *column);
void quantize_int16_scalar(const float *x, int64_t k, uint32_t *column);
void quantize_int16_avx2(const float *x, int64_t k, uint32_t *column);
void quantize_int16_avx512(const float *x, int64_t k, uint32_t *column);
quantize_int16_fn quantize_int16_at(simd_level level);
quantize_int16_fn best_quantize_int16();  // scalar under WEFT_FORCE_SCALAR
// n <= width columns, each quantized as a panel of width 1 (columns[j]: int16_panel_bytes(k, 1)),
// transposed into one panel of `width` (the panel's words are the columns' words, 32 bits each, in
// the panel order of float_mm.h's panels).
void pack_int16_panel(const uint32_t *const *columns, int64_t n, int64_t k, int64_t width, uint32_t *panel);

// Blocks of k a kernel takes at a time against several columns (the accumulators kept in dst between
// slices: the same order of additions).
constexpr int64_t int16_slice_blocks = 64;

// Rows [0, 16 * n_groups) of the groups at `groups` (group g at groups + g * group_stride bytes)
// against n_cols columns of panels of `width` (int16_panel_width, or 1 for one column alone; x at the
// first column's panel, that column a multiple of the width): result (r, c) at dst[c * dst_stride + r].
using int16_group_fn = void (*)(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                                const uint32_t *x, int64_t width, int64_t n_cols, float *dst,
                                size_t dst_stride);
void int16_groups_scalar(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride);
void int16_groups_avx2(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                       const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride);
void int16_groups_avx512(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride);
int16_group_fn int16_groups_at(simd_level level);
int16_group_fn best_int16_groups();  // scalar under WEFT_FORCE_SCALAR

// mul_mat of weights in this layout against float activations (ops_mul_mat.cpp hands them over): the
// work memory, and the products dsts[0 .. n) of one activation matrix (one, or a layer's Q, K and V,
// its gate and up: compute_mul_mat_shared): the activations quantized into panels once by all
// threads, then the chunks of weight groups of every product from one dispenser (plan_shared_chunks).
struct compute_params;
size_t work_size_mul_mat_f16_int16(const tensor &dst, int n_threads);
void compute_mul_mat_f16_int16(const compute_params &p, tensor *const *dsts, int n_dsts);

}  // namespace weft::cpu
