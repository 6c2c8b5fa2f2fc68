// src/backends/cpu/interleaved.h — weights repacked at load into groups of 16 interleaved rows, the
// activation format their products read, and the group kernels of every ISA.
//
// Layout of a repacked matrix [k, m] (m a multiple of 16): the rows are taken in groups of 16; a
// group stores its blocks in order. The 32-value types (q4_0, q4_1, q5_0, q5_1, q8_0): block b of
// a group holds
//   - the 16 rows' fp16 scales (32 bytes), row r at r (q4_1, q5_1: then the 16 fp16 mins);
//   - the quants in slots of 64 bytes: slot s holds, for r = 0..15, bytes 4s..4s+3 of row r's
//     block (nibble types: 4 slots of packed nibbles, low nibbles = elements 4s..4s+3, high
//     nibbles = elements 16+4s..16+4s+3; q8_0: 8 slots of elements 4s..4s+3, stored as q + 128);
//   - q5_0 and q5_1: a 64-byte plane of fifth bits, bit j of byte (row r, e) for element 4j + e.
// The K-quants keep 256-value super-blocks; block b of a group holds the 16 rows' fp16 d (and dmin
// where the type has mins), each sub-block's 16 integer scales (and mins) a byte per row (q2_K's
// 4-bit scale and min packed in one byte), and planes of quant bits in 64-byte slots, with chunk
// c = values 4c..4c+3: q4_K / q5_K / q6_K a plane of low nibbles in 32 slots (slot 8p + r: chunk
// 16p + r in the low nibbles, chunk 16p + 8 + r in the high ones); q6_K its two high bits in 16
// slots (slot u: chunk u + 16v in bits 2v, 2v + 1); q5_K its fifth bit in 8 slots (slot u: chunk
// u + 8v in bit v); q2_K / q3_K their two low bits in 16 slots laid out as q6_K's high bits, and
// q3_K its third bit in 8 slots laid out as q5_K's fifth bits.
// The grid i-quants (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m) are decoded at load into
// their signed levels (a grid magnitude with its sign: iq2 +-8, 25, 43; iq3_xxs +-4, 12 .. 62; iq3_s
// +-1, 3 .. 15; iq1 level + delta in eighths, +-1, 7, 9), each a 4-bit index into a codebook of the
// type (magnitude rank, + 8 when negative), laid out as iq4_xs's indices, then their 16 scales
// (1..31, one per 16 values) a byte per row and d, padded to whole cache lines; a product ends
// multiplied by the type's unit (1/8, 1/4, 1; iq1 1/8).
// The codebook types store 4-bit indices into kvalues_iq4nl where the others store quants: iq4_nl
// is laid out as q4_0 (its 18-byte block has q4_0's shape); mxfp4 (indices into kvalues_mxfp4, the
// E2M1 values doubled) as q4_0 too, but for its scales: the 16 rows' e8m0 exponents a byte each (16
// bytes, then the 4 slots: its plain size), widened to float 2^(e - 128) by the kernels; iq4_xs as q4_K's
// nibble plane (32 slots, first in the block, so every slot is cache-line aligned), then its 8 signed six-bit
// scales a byte per row (scale - 32, in [-32, 31]) and d, padded to whole cache lines (64 bytes more than the
// plain layout per 16 rows and 256 values). Their kernels turn the indices into levels with a byte
// shuffle: into level + 128 where a dot product takes the weights unsigned (vpdpbusd; the offset
// 128 comes off through the activation sums), into the signed level where AVX2's maddubs takes them
// by the sign trick (|w| against x with w's sign: |w|, |x| <= 127 cannot saturate).
// So one 64-byte load gives four quants of each of 16 rows, in the lanes where a 16-lane integer
// dot product (vpdpbusd) wants them, and no horizontal sums are needed. The size is the plain
// layout's, except where byte-wide scales and cache-line alignment add a little (interleaved_size).
//
// The result of every product is defined by one order of operations per output element, the same
// for every ISA, tile shape, thread count and batch composition:
//   acc = 0; for each block b in order: acc = fma(float(isum_b), dw_b * da_b, acc)
//   then, for q4_1 / q5_1:  acc = fma(float(xsum_b), m_b * da_b, acc)
//   and for q2_K / q4_K / q5_K:  acc = fma(float(msum_b), -(dmin_b * da_b), acc)
// q8_0 included: until Dec 2026 it kept the reference engine's order (eight float lanes, lane j the
// exact dot of elements 4j..4j+3, summed pairwise at the end), which cost 8 conversions and 8 fmas a
// block and column where this costs one of each; the accuracy rule is now the reference's distance
// from the F32 logits, which this order meets (tests/runtime/test_reference_rows.cpp,
// test_family_reference.cpp), not its summation order. q8_0's row kernels (vec_dot_q8_0_*) take the
// same steps: repacked or not, the same bits. Its kernels are q4_0's with the 8 slots loaded as they
// are (the quants + 128; AVX2 takes them signed again, stored ^ 0x80, by the sign trick).
// Here isum_b is the exact integer dot product of the block's weight values (the stored unsigned
// quant minus the type's offset, or the codebook level of the stored index; for the K-quants the sum over
// sub-blocks of the integer scale times the sub-block's dot product), xsum_b the sum of the block's
// activation quants, msum_b the sum of the integer mins times the sub-blocks' activation sums, dw_b / m_b /
// dmin_b the weight's fp16 scales widened to float (mxfp4: 2^(e - 128)) and da_b the activation scale.
// Integer sums are exact in any order, so the kernels are free to compute them however suits the ISA; the
// float steps are fixed. For q8_0, iq4_nl, iq4_xs and mxfp4 these are also the per-row kernels' steps
// (vec_dot_q8_0_*, vec_dot_iq4_*, vec_dot_mxfp4_*: one integer sum and one fma per block, into one float sum
// in block order), so repacking them does not change a bit; so for the grid i-quants (vec_dot_grid of
// quant/iq_grid_quants.cpp), whose product then ends with acc times the type's unit.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "backends/cpu/simd_level.h"
#include "weft/core/tensor.h"
#include "weft/quant/blocks.h"

namespace weft::cpu {

constexpr int64_t interleave_rows = 16;
constexpr int64_t interleave_block = 32;

enum class interleaved_kind : uint8_t {
    q4_0x16,
    q4_1x16,
    q5_0x16,
    q5_1x16,
    q8_0x16,
    q2_kx16,
    q3_kx16,
    q4_kx16,
    q5_kx16,
    q6_kx16,
    iq4_nlx16,
    iq4_xsx16,
    iq_gridx16,
    mxfp4x16
};

// The types whose stored 4-bit values are indices into a codebook of 16 signed levels (the
// layout's `codebook`): kvalues_iq4nl, or a grid i-quant's levels.
constexpr bool is_codebook_kind(interleaved_kind k) {
    return k == interleaved_kind::iq4_nlx16 || k == interleaved_kind::iq4_xsx16 ||
           k == interleaved_kind::iq_gridx16 || k == interleaved_kind::mxfp4x16;
}
// mxfp4's block scales are e8m0 exponents, a byte per row (the others' are fp16): the kernels widen
// them to float as 2^(e - 128) (e8m0_half_bits), the scale of its doubled levels.
constexpr bool has_e8m0_scales(interleaved_kind k) {
    return k == interleaved_kind::mxfp4x16;
}
// The codebook as the kernels' unsigned operands (level + 128; the layouts' offset is 128).
inline constexpr std::array<uint8_t, 16> iq4_levels_u8 = [] {
    std::array<uint8_t, 16> a{};
    for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(kvalues_iq4nl[i] + 128);
    return a;
}();
inline constexpr std::array<uint8_t, 16> mxfp4_levels_u8 = [] {
    std::array<uint8_t, 16> a{};
    for (size_t i = 0; i < a.size(); ++i) a[i] = uint8_t(kvalues_mxfp4[i] + 128);
    return a;
}();

// The 32-value types whose quants are nibbles in the slots (q5_0 / q5_1 add a fifth-bit plane;
// iq4_nl's are codebook indices).
constexpr bool is_nibble_kind(interleaved_kind k) {
    return k == interleaved_kind::q4_0x16 || k == interleaved_kind::q4_1x16 ||
           k == interleaved_kind::q5_0x16 || k == interleaved_kind::q5_1x16 ||
           k == interleaved_kind::iq4_nlx16 || k == interleaved_kind::mxfp4x16;
}
constexpr bool has_fifth_bit_plane(interleaved_kind k) {
    return k == interleaved_kind::q5_0x16 || k == interleaved_kind::q5_1x16;
}
constexpr bool has_block_min(interleaved_kind k) {
    return k == interleaved_kind::q4_1x16 || k == interleaved_kind::q5_1x16;
}

// The bytes of one block of a group of a 32-value type (the layout's block_bytes): the 16 rows' scales
// (fp16, mxfp4 a byte), their mins, the quant slots, the fifth-bit plane. Known at compile time, a
// kernel's prefetch of a block is a few instructions, not a loop.
constexpr size_t block_bytes_32(interleaved_kind k) {
    const size_t rows = interleave_rows, slot = 4 * interleave_rows;
    return (has_e8m0_scales(k) ? rows : 2 * rows) + (has_block_min(k) ? 2 * rows : 0) +
           (k == interleaved_kind::q8_0x16 ? 8 : 4) * slot + (has_fifth_bit_plane(k) ? slot : 0);
}

// What tensor::extra points at for a repacked weight.
struct interleaved_layout {
    interleaved_kind kind;
    dtype type;          // the weight type it was repacked from
    int64_t block;       // values per block: 32, or 256 for the K-quants' and iq4_xs' super-blocks
    size_t block_bytes;  // bytes of one block of one group (16 rows)
    int32_t offset;      // the stored unsigned quant (codebook types: level + 128) minus this is the value
    // byte offsets inside a block: the quant slots (low nibble plane for the K-quants) and, for
    // the K-quants, the high-bit plane, the sub-block scales and mins, dmin
    uint16_t low_at = 32, high_at = 0, scales_at = 0, mins_at = 0, dmin_at = 0;
    int32_t n_sub = 1;  // sub-blocks per block
    uint16_t d_at = 0;  // the 16 rows' fp16 scales
    // the codebook types: the 16 levels + 128 an index stands for
    const uint8_t *codebook = nullptr;
    float unit = 1.0f;  // the grid i-quants: every product ends multiplied by it (a power of two)
    bool k_quant() const { return block == 256; }
};

// The layout of t, or null when t is in the plain GGUF layout.
const interleaved_layout *interleaved_layout_of(const tensor &t);
// Whether t (a contiguous q4_0 / q4_1 / q5_0 / q5_1 / q8_0 / q2_K ... q6_K / iq4_nl / iq4_xs matrix
// whose rows come in 16s, or a stack of them [k, m, n], e.g. a mixture's experts: each matrix repacked after
// the previous one, interleaved_size(t) / n bytes each) can be repacked, and the bytes it then takes (the
// plain size, q4_K 64 bytes more per 16 rows and 256 values: its six-bit scales are stored a byte each). A
// repacked stack is read only by mul_mat_id, one matrix at a time.
bool can_interleave(const tensor &t);
size_t interleaved_size(const tensor &t);
// Writes t's data (plain layout, at src) repacked to dst (interleaved_size(t) bytes) and marks t
// as interleaved (t.extra); the caller points t.data at dst.
void interleave_tensor(tensor &t, const void *src, void *dst);
// The plain layout of row `row` of a repacked t, as blocks (for tests and for reading back).
void deinterleave_row(const tensor &t, int64_t row, void *dst_blocks);

// How a product's activations are quantized: q8_0's values with a sum per block (the 32-value types,
// q8_0 included), or q8_K's (the K-quants, iq4_xs and the grid i-quants).
enum class q8_format : uint8_t { q8_0_block_sums, q8_k };
int64_t values_per_scale(q8_format f);  // 32 or 256
int64_t values_per_sum(q8_format f);    // 32 or 16

// Activations quantized to q8 for the products, split into three arrays: the k int8 values of a
// row (row c at qs + c * k), a float scale per d_block values and the sum of every sum_block values.
// For the 32-value types (q4_0 ... q5_1, q8_0, iq4_nl, mxfp4) they are q8_0's values (d_block =
// sum_block = 32); for the K-quants and iq4_xs q8_K's (d_block = 256, sum_block = 16).
struct q8_rows {
    const int8_t *qs = nullptr;
    const float *d = nullptr;
    const int32_t *sum = nullptr;
    int64_t k = 0;  // values per row
    int64_t d_block = interleave_block;
    int64_t sum_block = interleave_block;
    int64_t nb() const { return k / d_block; }    // scales per row
    int64_t ns() const { return k / sum_block; }  // sums per row
};

// Computes the 16 rows of one group against columns [c0, c0 + n_cols) of a: out(c)[r] for
// r = 0..15, where out(c) = dst + c * dst_stride (floats). group = the group's first block.
using group_kernel_fn = void (*)(const interleaved_layout &layout, const uint8_t *group, const q8_rows &a,
                                 int64_t c0, int64_t n_cols, float *dst, int64_t dst_stride);

// The kernel of one ISA (only call it where supported), and the best one for this CPU (scalar
// under WEFT_FORCE_SCALAR).
group_kernel_fn group_kernel_at(simd_level level);
group_kernel_fn best_group_kernel();

// Computes n_groups consecutive groups of one matrix (group g at groups + g * group_stride bytes)
// against columns [c0, c0 + n_cols) of a: group g's rows at dst + 16 g + c * dst_stride. The same
// bits as group_kernel on each group; the SIMD ones read q8_0's groups side by side for one column
// (q8_0_side_by_side_then_each; interleaved_avx512.cpp, interleaved_ymm.h).
using groups_kernel_fn = void (*)(const interleaved_layout &layout, const uint8_t *groups,
                                  size_t group_stride, int64_t n_groups, const q8_rows &a, int64_t c0,
                                  int64_t n_cols, float *dst, int64_t dst_stride);
groups_kernel_fn groups_kernel_at(simd_level level);
groups_kernel_fn best_groups_kernel();
void groups_kernel_avx512vnni(const interleaved_layout &layout, const uint8_t *groups, size_t group_stride,
                              int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                              int64_t dst_stride);
void groups_kernel_avx2(const interleaved_layout &layout, const uint8_t *groups, size_t group_stride,
                        int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                        int64_t dst_stride);
void groups_kernel_avxvnni(const interleaved_layout &layout, const uint8_t *groups, size_t group_stride,
                           int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                           int64_t dst_stride);

// A groups kernel made of a group kernel: the groups one after the other.
template <group_kernel_fn Kernel>
void each_group(const interleaved_layout &layout, const uint8_t *groups, size_t group_stride,
                int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                int64_t dst_stride) {
    for (int64_t g = 0; g < n_groups; ++g)
        Kernel(layout, groups + size_t(g) * group_stride, a, c0, n_cols, dst + g * interleave_rows,
               dst_stride);
}

// A SIMD groups kernel: a one-column q8_0 run read side by side in tiles of 4 groups, then one of 2
// (mul_mat's chunks are 4, 2 or 1 groups) — tile(std::integral_constant<int, G>{}, first group,
// its dst) —, the rest (and every other product) by the group kernel, group after group.
template <group_kernel_fn Kernel, class Tile>
void q8_0_side_by_side_then_each(const interleaved_layout &layout, const uint8_t *groups, size_t group_stride,
                                 int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                                 int64_t dst_stride, Tile &&tile) {
    int64_t g = 0;
    if (n_cols == 1 && layout.kind == interleaved_kind::q8_0x16) {
        for (; g + 4 <= n_groups; g += 4)
            tile(std::integral_constant<int, 4>{}, groups + size_t(g) * group_stride,
                 dst + g * interleave_rows);
        if (g + 2 <= n_groups) {
            tile(std::integral_constant<int, 2>{}, groups + size_t(g) * group_stride,
                 dst + g * interleave_rows);
            g += 2;
        }
    }
    each_group<Kernel>(layout, groups + size_t(g) * group_stride, group_stride, n_groups - g, a, c0, n_cols,
                       dst + g * interleave_rows, dst_stride);
}

// The activation format of a layout's products (every kernel, scalar and SIMD, takes the same one).
q8_format activation_format(const interleaved_layout &layout);

// The ISA kernels (interleaved_*.cpp).
void group_kernel_scalar(const interleaved_layout &layout, const uint8_t *group, const q8_rows &a, int64_t c0,
                         int64_t n_cols, float *dst, int64_t dst_stride);
void group_kernel_avx2(const interleaved_layout &layout, const uint8_t *group, const q8_rows &a, int64_t c0,
                       int64_t n_cols, float *dst, int64_t dst_stride);
void group_kernel_avx512vnni(const interleaved_layout &layout, const uint8_t *group, const q8_rows &a,
                             int64_t c0, int64_t n_cols, float *dst, int64_t dst_stride);
void group_kernel_avxvnni(const interleaved_layout &layout, const uint8_t *group, const q8_rows &a,
                          int64_t c0, int64_t n_cols, float *dst, int64_t dst_stride);

// Calls fn(std::integral_constant<interleaved_kind, K>{}) with K = kind, so an ISA file instantiates
// its kernels once per kind.
template <class Fn>
void with_interleaved_kind(interleaved_kind kind, Fn &&fn) {
    using k = interleaved_kind;
    switch (kind) {
        case k::q4_0x16:
            return fn(std::integral_constant<k, k::q4_0x16>{});
        case k::q4_1x16:
            return fn(std::integral_constant<k, k::q4_1x16>{});
        case k::q5_0x16:
            return fn(std::integral_constant<k, k::q5_0x16>{});
        case k::q5_1x16:
            return fn(std::integral_constant<k, k::q5_1x16>{});
        case k::q8_0x16:
            return fn(std::integral_constant<k, k::q8_0x16>{});
        case k::q2_kx16:
            return fn(std::integral_constant<k, k::q2_kx16>{});
        case k::q3_kx16:
            return fn(std::integral_constant<k, k::q3_kx16>{});
        case k::q4_kx16:
            return fn(std::integral_constant<k, k::q4_kx16>{});
        case k::q5_kx16:
            return fn(std::integral_constant<k, k::q5_kx16>{});
        case k::q6_kx16:
            return fn(std::integral_constant<k, k::q6_kx16>{});
        case k::iq4_nlx16:
            return fn(std::integral_constant<k, k::iq4_nlx16>{});
        case k::iq4_xsx16:
            return fn(std::integral_constant<k, k::iq4_xsx16>{});
        case k::iq_gridx16:
            return fn(std::integral_constant<k, k::iq_gridx16>{});
        case k::mxfp4x16:
            return fn(std::integral_constant<k, k::mxfp4x16>{});
    }
}
// The kinds of 256-value super-blocks with integer sub-block scales (the K-quants, iq4_xs and the
// grid i-quants).
constexpr bool is_k_kind(interleaved_kind k) {
    return k == interleaved_kind::q2_kx16 || k == interleaved_kind::q3_kx16 ||
           k == interleaved_kind::q4_kx16 || k == interleaved_kind::q5_kx16 ||
           k == interleaved_kind::q6_kx16 || k == interleaved_kind::iq4_xsx16 ||
           k == interleaved_kind::iq_gridx16;
}
// The K-quants with 16 sub-blocks of 16 values (the others have 8 of 32), and the grid i-quants.
constexpr bool has_sub_blocks_of_16(interleaved_kind k) {
    return k == interleaved_kind::q2_kx16 || k == interleaved_kind::q3_kx16 ||
           k == interleaved_kind::q6_kx16 || k == interleaved_kind::iq_gridx16;
}
// The K-quants with sub-block mins (x = d * scale * q - dmin * min).
constexpr bool has_sub_block_mins(interleaved_kind k) {
    return k == interleaved_kind::q2_kx16 || k == interleaved_kind::q4_kx16 || k == interleaved_kind::q5_kx16;
}

// Calls tile(std::integral_constant<int, C>{}, c) over n_cols columns in tiles of Max columns and
// one last tile of the rest, so a kernel's tile width is a compile-time constant (the ISA files).
template <int C, class Fn>
void last_column_tile(int64_t rest, int64_t c, Fn &tile) {
    if constexpr (C >= 1) {
        if (rest == C)
            tile(std::integral_constant<int, C>{}, c);
        else
            last_column_tile<C - 1>(rest, c, tile);
    }
}
template <int Max, class Fn>
void for_column_tiles(int64_t n_cols, Fn &&tile) {
    int64_t c = 0;
    for (; c + Max <= n_cols; c += Max) tile(std::integral_constant<int, Max>{}, c);
    last_column_tile<Max - 1>(n_cols - c, c, tile);
}

// Quantizes one float row of k values into the split arrays, with the same values and scales as
// the activation quantizer of q8_0 (32 | k) or q8_K (256 | k). block_scratch: the row's blocks.
void quantize_q8_row(const float *x, int64_t k, q8_format format, int8_t *qs, float *d, int32_t *sum,
                     void *block_scratch);
// The q8_rows view of activations quantized that way.
q8_rows make_q8_rows(const int8_t *qs, const float *d, const int32_t *sum, int64_t k, q8_format format);
// quantize_q8_row for q8_0_block_sums with AVX2 (row_kernels_avx2.cpp): from_float_q8_0_avx2's values
// and scales (as float) straight into the split arrays, with the block sums.
void quantize_q8_0_split_avx2(const float *src, int64_t n, int8_t *qs, float *d, int32_t *sum);

}  // namespace weft::cpu
