// src/backends/cpu/interleaved.cpp — repacking to and from the interleaved layout, the scalar group
// kernel (the oracle the SIMD kernels must match bit for bit) and the run-time ISA choice.
#include "backends/cpu/interleaved.h"

#include "backends/cpu/float_mm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/numa.h"
#include "backends/cpu/row_kernels.h"
#include "weft/backends/cpu.h"
#include "weft/core/cpu_features.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

namespace {

constexpr size_t scales_bytes = interleave_rows * sizeof(fp16_t);  // 32
constexpr size_t slot_bytes = interleave_rows * 4;                 // 64

const interleaved_layout layout_q4_0{interleaved_kind::q4_0x16, dtype::q4_0, 32,
                                     block_bytes_32(interleaved_kind::q4_0x16), 8};
// q4_1 / q5_0 / q5_1: d, the mins (q4_1, q5_1), the 4 nibble slots, the fifth-bit plane (q5_*)
const interleaved_layout layout_q4_1{interleaved_kind::q4_1x16,
                                     dtype::q4_1,
                                     32,
                                     block_bytes_32(interleaved_kind::q4_1x16),
                                     0,
                                     /*low_at*/ 2 * scales_bytes,
                                     0,
                                     0,
                                     0,
                                     /*dmin_at*/ scales_bytes};
const interleaved_layout layout_q5_0{interleaved_kind::q5_0x16,
                                     dtype::q5_0,
                                     32,
                                     block_bytes_32(interleaved_kind::q5_0x16),
                                     16,
                                     /*low_at*/ scales_bytes,
                                     /*high_at*/ scales_bytes + 4 * slot_bytes};
const interleaved_layout layout_q5_1{interleaved_kind::q5_1x16,
                                     dtype::q5_1,
                                     32,
                                     block_bytes_32(interleaved_kind::q5_1x16),
                                     0,
                                     /*low_at*/ 2 * scales_bytes,
                                     /*high_at*/ 2 * scales_bytes + 4 * slot_bytes,
                                     0,
                                     0,
                                     /*dmin_at*/ scales_bytes};
const interleaved_layout layout_q8_0{interleaved_kind::q8_0x16, dtype::q8_0, 32,
                                     block_bytes_32(interleaved_kind::q8_0x16), 128};
// q2_K: d, dmin, 16 (scale | min << 4) bytes per row, 16 slots of two-bit pairs
const interleaved_layout layout_q2_k{interleaved_kind::q2_kx16,
                                     dtype::q2_k,
                                     256,
                                     2 * scales_bytes + 16 * interleave_rows + 16 * slot_bytes,
                                     0,
                                     /*low_at*/ 2 * scales_bytes + 16 * interleave_rows,
                                     /*high_at*/ 0,
                                     /*scales_at*/ 2 * scales_bytes,
                                     /*mins_at*/ 2 * scales_bytes,
                                     /*dmin_at*/ scales_bytes,
                                     16};
// q3_K: 16 signed scales a byte per row, 8 slots of third bits, 16 slots of two-bit pairs (in the
// order the kernels first touch them), then d
const interleaved_layout layout_q3_k{interleaved_kind::q3_kx16,
                                     dtype::q3_k,
                                     256,
                                     scales_bytes + 16 * interleave_rows + 24 * slot_bytes,
                                     4,
                                     /*low_at*/ 16 * interleave_rows + 8 * slot_bytes,
                                     /*high_at*/ 16 * interleave_rows,
                                     /*scales_at*/ 0,
                                     /*mins_at*/ 0,
                                     /*dmin_at*/ 0,
                                     16,
                                     /*d_at*/ 16 * interleave_rows + 24 * slot_bytes};
// q4_K: d, dmin, 8 scales and 8 mins a byte per row, 32 nibble slots
const interleaved_layout layout_q4_k{interleaved_kind::q4_kx16,
                                     dtype::q4_k,
                                     256,
                                     2 * scales_bytes + 16 * interleave_rows + 32 * slot_bytes,
                                     0,
                                     /*low_at*/ 2 * scales_bytes + 16 * interleave_rows,
                                     /*high_at*/ 0,
                                     /*scales_at*/ 2 * scales_bytes,
                                     /*mins_at*/ 2 * scales_bytes + 8 * interleave_rows,
                                     /*dmin_at*/ scales_bytes,
                                     8};
// q5_K: as q4_K, with 8 slots of fifth bits before the nibbles (the order in which the kernels
// first touch them, so the hardware prefetcher follows a decode stream)
const interleaved_layout layout_q5_k{interleaved_kind::q5_kx16,
                                     dtype::q5_k,
                                     256,
                                     2 * scales_bytes + 16 * interleave_rows + 40 * slot_bytes,
                                     0,
                                     /*low_at*/ 2 * scales_bytes + 16 * interleave_rows + 8 * slot_bytes,
                                     /*high_at*/ 2 * scales_bytes + 16 * interleave_rows,
                                     /*scales_at*/ 2 * scales_bytes,
                                     /*mins_at*/ 2 * scales_bytes + 8 * interleave_rows,
                                     /*dmin_at*/ scales_bytes,
                                     8};
// q6_K: 16 slots of high bit pairs and 32 nibble slots first (cache-line aligned, in the order the
// kernels first touch them, so the hardware prefetcher follows), then 16 scales a byte per row and
// d; padded to a whole number of cache lines (32 bytes more than the plain layout per 16 rows and
// 256 values)
const interleaved_layout layout_q6_k{interleaved_kind::q6_kx16,
                                     dtype::q6_k,
                                     256,
                                     48 * slot_bytes + 16 * interleave_rows + scales_bytes + 32,
                                     32,
                                     /*low_at*/ 16 * slot_bytes,
                                     /*high_at*/ 0,
                                     /*scales_at*/ 48 * slot_bytes,
                                     /*mins_at*/ 0,
                                     /*dmin_at*/ 0,
                                     16,
                                     /*d_at*/ 48 * slot_bytes + 16 * interleave_rows};

// A layout whose indices stand for the levels of `codebook` (levels + 128).
constexpr interleaved_layout with_codebook(interleaved_layout l, const std::array<uint8_t, 16> &codebook,
                                           float unit = 1.0f) {
    l.codebook = codebook.data();
    l.unit = unit;
    return l;
}

// iq4_nl: q4_0's layout, indices for quants
const interleaved_layout layout_iq4_nl = with_codebook(
    {interleaved_kind::iq4_nlx16, dtype::iq4_nl, 32, block_bytes_32(interleaved_kind::iq4_nlx16), 128},
    iq4_levels_u8);
// mxfp4: the 16 rows' e8m0 exponents a byte each, then q4_0's 4 slots of indices
const interleaved_layout layout_mxfp4 = with_codebook(
    {interleaved_kind::mxfp4x16, dtype::mxfp4, 32, block_bytes_32(interleaved_kind::mxfp4x16), 128,
     /*low_at*/ interleave_rows},
    mxfp4_levels_u8);
// iq4_xs: 32 nibble slots (as q4_K's), 8 signed scales a byte per row, d, 32 bytes of padding (so
// that every block starts on a cache line)
const interleaved_layout layout_iq4_xs =
    with_codebook({interleaved_kind::iq4_xsx16, dtype::iq4_xs, 256,
                   32 * slot_bytes + 8 * interleave_rows + scales_bytes + 32, 128,
                   /*low_at*/ 0,
                   /*high_at*/ 0,
                   /*scales_at*/ 32 * slot_bytes,
                   /*mins_at*/ 0,
                   /*dmin_at*/ 0, 8,
                   /*d_at*/ 32 * slot_bytes + 8 * interleave_rows},
                  iq4_levels_u8);

// The grid i-quants' codebooks: levels + 128 (see interleaved.h), magnitudes by rank, + 8 negative.
constexpr std::array<uint8_t, 16> grid_codebook(std::array<int, 8> magnitudes) {
    std::array<uint8_t, 16> a{};
    for (size_t i = 0; i < 8; ++i) {
        a[i] = uint8_t(128 + magnitudes[i]);
        a[i + 8] = uint8_t(128 - magnitudes[i]);
    }
    return a;
}
constexpr std::array<uint8_t, 16> codebook_iq2 = grid_codebook({8, 25, 43, 0, 0, 0, 0, 0});
constexpr std::array<uint8_t, 16> codebook_iq3_xxs = grid_codebook({4, 12, 20, 28, 36, 44, 52, 62});
constexpr std::array<uint8_t, 16> codebook_iq3_s = grid_codebook({1, 3, 5, 7, 9, 11, 13, 15});
// iq1_s, iq1_m: level + delta in eighths, 8 level +- 1 (weft/quant/quant.h)
constexpr std::array<uint8_t, 16> codebook_iq1 = grid_codebook({1, 7, 9, 0, 0, 0, 0, 0});

// The grid i-quants: 32 nibble slots of codebook indices (as iq4_xs's), 16 scales a byte per row,
// d, 32 bytes of padding (whole cache lines).
constexpr interleaved_layout grid_layout(dtype t, const std::array<uint8_t, 16> &codebook, float unit) {
    return with_codebook({interleaved_kind::iq_gridx16, t, 256,
                          32 * slot_bytes + 16 * interleave_rows + scales_bytes + 32, 128,
                          /*low_at*/ 0,
                          /*high_at*/ 0,
                          /*scales_at*/ 32 * slot_bytes,
                          /*mins_at*/ 0,
                          /*dmin_at*/ 0, 16,
                          /*d_at*/ 32 * slot_bytes + 16 * interleave_rows},
                         codebook, unit);
}
const interleaved_layout layout_iq2_xxs = grid_layout(dtype::iq2_xxs, codebook_iq2, 0.125f);
const interleaved_layout layout_iq2_xs = grid_layout(dtype::iq2_xs, codebook_iq2, 0.125f);
const interleaved_layout layout_iq2_s = grid_layout(dtype::iq2_s, codebook_iq2, 0.125f);
const interleaved_layout layout_iq3_xxs = grid_layout(dtype::iq3_xxs, codebook_iq3_xxs, 0.25f);
const interleaved_layout layout_iq3_s = grid_layout(dtype::iq3_s, codebook_iq3_s, 1.0f);
const interleaved_layout layout_iq1_s = grid_layout(dtype::iq1_s, codebook_iq1, 0.125f);
const interleaved_layout layout_iq1_m = grid_layout(dtype::iq1_m, codebook_iq1, 0.125f);
static_assert((32 * slot_bytes + 16 * interleave_rows + scales_bytes + 32) % 64 == 0);

static_assert(sizeof(block_q4_0) * interleave_rows == scales_bytes + 4 * slot_bytes);
static_assert(sizeof(block_iq4_nl) * interleave_rows == scales_bytes + 4 * slot_bytes);
static_assert(sizeof(block_mxfp4) * interleave_rows == interleave_rows + 4 * slot_bytes);
static_assert(sizeof(block_iq4_xs) * interleave_rows + 64 ==
              32 * slot_bytes + 8 * interleave_rows + scales_bytes + 32);
static_assert((32 * slot_bytes + 8 * interleave_rows + scales_bytes + 32) % 64 == 0);
static_assert(sizeof(block_q8_0) * interleave_rows == scales_bytes + 8 * slot_bytes);
static_assert(sizeof(block_q4_1) * interleave_rows == 2 * scales_bytes + 4 * slot_bytes);
static_assert(sizeof(block_q2_k) * interleave_rows ==
              2 * scales_bytes + 16 * interleave_rows + 16 * slot_bytes);
static_assert(sizeof(block_q5_0) * interleave_rows == scales_bytes + 5 * slot_bytes);
static_assert(sizeof(block_q5_1) * interleave_rows == 2 * scales_bytes + 5 * slot_bytes);
static_assert(sizeof(block_q6_k) * interleave_rows + 32 ==
              48 * slot_bytes + 16 * interleave_rows + scales_bytes + 32);

const interleaved_layout *layout_for(dtype t) {
    switch (t) {
        case dtype::q4_0:
            return &layout_q4_0;
        case dtype::q4_1:
            return &layout_q4_1;
        case dtype::q5_0:
            return &layout_q5_0;
        case dtype::q5_1:
            return &layout_q5_1;
        case dtype::q8_0:
            return &layout_q8_0;
        case dtype::q2_k:
            return &layout_q2_k;
        case dtype::q3_k:
            return &layout_q3_k;
        case dtype::q4_k:
            return &layout_q4_k;
        case dtype::q5_k:
            return &layout_q5_k;
        case dtype::q6_k:
            return &layout_q6_k;
        case dtype::iq4_nl:
            return &layout_iq4_nl;
        case dtype::iq4_xs:
            return &layout_iq4_xs;
        case dtype::iq2_xxs:
            return &layout_iq2_xxs;
        case dtype::iq2_xs:
            return &layout_iq2_xs;
        case dtype::iq2_s:
            return &layout_iq2_s;
        case dtype::iq3_xxs:
            return &layout_iq3_xxs;
        case dtype::iq3_s:
            return &layout_iq3_s;
        case dtype::iq1_s:
            return &layout_iq1_s;
        case dtype::iq1_m:
            return &layout_iq1_m;
        case dtype::mxfp4:
            return &layout_mxfp4;
        default:
            return nullptr;
    }
}

// Where value i (0..255) of a K-quant super-block lies: its low nibble in slot `slot` (the high
// nibble of the byte when `high_nibble`), its high bits in slot `hslot` at bit `hshift` (the
// positions of q6_K's two high bits; q5_K's one bit: see high_bit_position).
struct k_position {
    int slot;
    bool high_nibble;
    int hslot;
    int hshift;
    int byte;  // 0..3 within the row's four bytes
};
k_position k_position_of(int i) {
    const int c = i / 4, p = c / 16, r = c % 16;
    return {8 * p + r % 8, r >= 8, c % 16, 2 * (c / 16), i % 4};
}
// q5_K's fifth bit of value i: slot c % 8, bit c / 8.
void high_bit_position(int i, k_position &at) {
    const int c = i / 4;
    at.hslot = c % 8;
    at.hshift = c / 8;
}
// The positions of the 256 values, computed once.
const std::array<k_position, 256> k_positions = [] {
    std::array<k_position, 256> a{};
    for (int i = 0; i < 256; ++i) a[size_t(i)] = k_position_of(i);
    return a;
}();
const std::array<k_position, 256> k_positions_q5 = [] {
    std::array<k_position, 256> a{};
    for (int i = 0; i < 256; ++i) {
        a[size_t(i)] = k_position_of(i);
        high_bit_position(i, a[size_t(i)]);
    }
    return a;
}();
const k_position &k_position_in(const interleaved_layout &l, int i) {
    return l.kind == interleaved_kind::q5_kx16 ? k_positions_q5[size_t(i)] : k_positions[size_t(i)];
}
int high_bit_mask(const interleaved_layout &l) {
    return l.kind == interleaved_kind::q5_kx16 ? 1 : 3;
}
bool has_high_bits(const interleaved_layout &l) {
    return l.kind == interleaved_kind::q5_kx16 || l.kind == interleaved_kind::q6_kx16;
}

// Unsigned quant i (0..31, or 0..255 for the K-quants) of row r (0..15) of one interleaved block.
// q2_K / q3_K: two low bits in 16 slots (chunk c: slot c % 16, bits 2 (c / 16)), q3_K's third bit
// in 8 slots (chunk c: slot c % 8, bit c / 8).
bool has_two_bit_plane(const interleaved_layout &l) {
    return l.kind == interleaved_kind::q2_kx16 || l.kind == interleaved_kind::q3_kx16;
}
size_t in_slot(int slot, int r, int i) {
    return size_t(slot) * slot_bytes + size_t(r) * 4 + size_t(i % 4);
}

uint8_t interleaved_quant(const interleaved_layout &l, const uint8_t *block, int r, int i) {
    const uint8_t *slots = block + l.low_at;
    if (has_two_bit_plane(l)) {
        const int c = i / 4;
        int value = (slots[in_slot(c % 16, r, i)] >> (2 * (c / 16))) & 3;
        if (l.kind == interleaved_kind::q3_kx16)
            value |= ((block[l.high_at + in_slot(c % 8, r, i)] >> (c / 8)) & 1) << 2;
        return uint8_t(value);
    }
    if (l.k_quant()) {
        const k_position &at = k_position_in(l, i);
        const uint8_t byte = slots[size_t(at.slot) * slot_bytes + size_t(r) * 4 + size_t(at.byte)];
        int value = at.high_nibble ? byte >> 4 : byte & 0x0F;
        if (has_high_bits(l))
            value |= ((block[l.high_at + size_t(at.hslot) * slot_bytes + size_t(r) * 4 + size_t(at.byte)] >>
                       at.hshift) &
                      high_bit_mask(l))
                     << 4;
        return uint8_t(value);
    }
    if (is_nibble_kind(l.kind)) {
        const int s = (i % 16) / 4;
        const uint8_t byte = slots[size_t(s) * slot_bytes + size_t(r) * 4 + size_t(i % 4)];
        int value = i < 16 ? (byte & 0x0F) : (byte >> 4);
        if (has_fifth_bit_plane(l.kind))
            value |= ((block[l.high_at + size_t(r) * 4 + size_t(i % 4)] >> (i / 4)) & 1) << 4;
        return uint8_t(value);
    }
    return slots[size_t(i / 4) * slot_bytes + size_t(r) * 4 + size_t(i % 4)];
}

// The unsigned value the integer dots take for quant i of row r: the stored quant, or for the
// codebook types the level of the stored index plus 128 (the layout's offset comes off either way).
int32_t stored_value(const interleaved_layout &l, const uint8_t *block, int r, int i) {
    const uint8_t q = interleaved_quant(l, block, r, i);
    return is_codebook_kind(l.kind) ? int32_t(l.codebook[q]) : int32_t(q);
}

}  // namespace

const interleaved_layout *interleaved_layout_of(const tensor &t) {
    for (const interleaved_layout *l :
         {&layout_q4_0,    &layout_q4_1,   &layout_q5_0,    &layout_q5_1,   &layout_q8_0,
          &layout_q2_k,    &layout_q3_k,   &layout_q4_k,    &layout_q5_k,   &layout_q6_k,
          &layout_iq4_nl,  &layout_iq4_xs, &layout_iq2_xxs, &layout_iq2_xs, &layout_iq2_s,
          &layout_iq3_xxs, &layout_iq3_s,  &layout_iq1_s,   &layout_iq1_m,  &layout_mxfp4})
        if (t.extra == l) return l;
    return nullptr;
}

bool can_interleave(const tensor &t) {
    const interleaved_layout *l = layout_for(t.type);
    return l != nullptr && t.ne[3] == 1 && t.ne[1] % interleave_rows == 0 && t.ne[0] % l->block == 0 &&
           t.is_contiguous() && !t.is_view() && t.extra == nullptr;
}

size_t interleaved_size(const tensor &t) {
    const interleaved_layout &l = *layout_for(t.type);
    return size_t(t.nrows() / interleave_rows) * size_t(t.ne[0] / l.block) * l.block_bytes;
}

namespace {

// One K-quant super-block of 16 rows (rows[r] = row r's plain block) into the interleaved block.
void interleave_k_block(const interleaved_layout &l, const uint8_t *const rows[interleave_rows],
                        uint8_t *block) {
    std::memset(block, 0, l.block_bytes);
    for (int r = 0; r < interleave_rows; ++r) {
        k_block_ints v;
        const bool ok = k_block_to_ints(l.type, rows[r], v);
        WEFT_ASSERT(ok && v.n_sub == l.n_sub);
        std::memcpy(block + l.d_at + size_t(r) * sizeof(fp16_t), &v.d, sizeof(fp16_t));
        if (l.dmin_at) std::memcpy(block + l.dmin_at + size_t(r) * sizeof(fp16_t), &v.dmin, sizeof(fp16_t));
        for (int j = 0; j < l.n_sub; ++j) {
            if (l.kind == interleaved_kind::q2_kx16) {  // scale and min stay packed in one byte
                block[l.scales_at + size_t(j) * interleave_rows + size_t(r)] =
                    uint8_t(v.scale[j] | (v.min[j] << 4));
                continue;
            }
            block[l.scales_at + size_t(j) * interleave_rows + size_t(r)] = uint8_t(v.scale[j]);
            if (l.mins_at) block[l.mins_at + size_t(j) * interleave_rows + size_t(r)] = v.min[j];
        }
        for (int i = 0; i < 256; ++i) {
            const int u =
                v.q[i] + l.offset;  // 0..3 (q2_K), 0..7 (q3_K), 0..15 (q4_K), 0..31 (q5_K), 0..63 (q6_K)
            if (has_two_bit_plane(l)) {
                const int c = i / 4;
                block[l.low_at + in_slot(c % 16, r, i)] |= uint8_t((u & 3) << (2 * (c / 16)));
                if (l.kind == interleaved_kind::q3_kx16)
                    block[l.high_at + in_slot(c % 8, r, i)] |= uint8_t((u >> 2) << (c / 8));
                continue;
            }
            const k_position &at = k_position_in(l, i);
            uint8_t &low = block[l.low_at + size_t(at.slot) * slot_bytes + size_t(r) * 4 + size_t(at.byte)];
            low = uint8_t(low | ((u & 0x0F) << (at.high_nibble ? 4 : 0)));
            if (has_high_bits(l))
                block[l.high_at + size_t(at.hslot) * slot_bytes + size_t(r) * 4 + size_t(at.byte)] |=
                    uint8_t((u >> 4) << at.hshift);
        }
    }
}

// Row r of a super-block of 4-bit indices (iq4_xs, the grid i-quants): its fp16 d, its n_sub scale
// bytes and its 256 indices where q4_K's nibbles go (block zeroed before its first row).
void put_indexed_row(const interleaved_layout &l, uint8_t *block, int r, const void *d, const uint8_t *scales,
                     const uint8_t *indices) {
    std::memcpy(block + l.d_at + size_t(r) * sizeof(fp16_t), d, sizeof(fp16_t));
    for (int j = 0; j < l.n_sub; ++j)
        block[l.scales_at + size_t(j) * interleave_rows + size_t(r)] = scales[j];
    for (int i = 0; i < 256; ++i) {
        const k_position &at = k_position_in(l, i);
        block[l.low_at + size_t(at.slot) * slot_bytes + size_t(r) * 4 + size_t(at.byte)] |=
            uint8_t(indices[i] << (at.high_nibble ? 4 : 0));
    }
}

// One iq4_xs super-block of 16 rows into the interleaved block: the scales a signed byte per row.
void interleave_iq4_xs_block(const interleaved_layout &l, const uint8_t *const rows[interleave_rows],
                             uint8_t *block) {
    std::memset(block, 0, l.block_bytes);
    for (int r = 0; r < interleave_rows; ++r) {
        block_iq4_xs x;
        std::memcpy(&x, rows[r], sizeof x);
        uint8_t scales[8], indices[256];
        for (int j = 0; j < 8; ++j) scales[j] = uint8_t(int8_t(scale_iq4_xs(j, x)));
        for (int i = 0; i < 256; ++i) {
            const int j = i / 32, e = i % 32;  // sub-block j: element e in qs[16 j + e % 16]
            const uint8_t byte = x.qs[16 * j + e % 16];
            indices[i] = uint8_t(e < 16 ? byte & 0x0F : byte >> 4);
        }
        put_indexed_row(l, block, r, &x.d, scales, indices);
    }
}

// One grid i-quant super-block of 16 rows into the interleaved block: each level's codebook index,
// the 16 scales a byte per row.
void interleave_grid_block(const interleaved_layout &l, const uint8_t *const rows[interleave_rows],
                           uint8_t *block) {
    std::memset(block, 0, l.block_bytes);
    for (int r = 0; r < interleave_rows; ++r) {
        grid_block_ints v;
        const bool ok = grid_block_to_ints(l.type, rows[r], v);
        WEFT_ASSERT(ok && v.unit == l.unit);
        uint8_t indices[256];
        for (int i = 0; i < 256; ++i) {
            int index = 0;
            while (index < 16 && int(l.codebook[index]) - 128 != v.q[i]) ++index;
            WEFT_ASSERT(index < 16);
            indices[i] = uint8_t(index);
        }
        put_indexed_row(l, block, r, &v.d, v.ls, indices);
    }
}

}  // namespace

void interleave_tensor(tensor &t, const void *src, void *dst) {
    WEFT_ASSERT(can_interleave(t));
    const interleaved_layout &l = *layout_for(t.type);
    const int64_t nb = t.ne[0] / l.block;
    const size_t block_size = type_traits(t.type).type_size;
    const auto *in = static_cast<const uint8_t *>(src);
    auto *out = static_cast<uint8_t *>(dst);
    for (int64_t g = 0; g < t.nrows() / interleave_rows; ++g) {  // a stack's matrices one after the other
        for (int64_t b = 0; b < nb; ++b) {
            uint8_t *block = out + (size_t(g) * size_t(nb) + size_t(b)) * l.block_bytes;
            if (l.k_quant()) {
                const uint8_t *rows[interleave_rows];
                for (int r = 0; r < interleave_rows; ++r)
                    rows[r] = in + size_t(g * interleave_rows + r) * t.nb[1] + size_t(b) * block_size;
                if (l.kind == interleaved_kind::iq4_xsx16)
                    interleave_iq4_xs_block(l, rows, block);
                else if (l.kind == interleaved_kind::iq_gridx16)
                    interleave_grid_block(l, rows, block);
                else
                    interleave_k_block(l, rows, block);
                continue;
            }
            // slot s of row r is bytes 4s..4s+3 of the row's quants as they are (q4_0: low nibbles
            // elements 4s.., high nibbles 16+4s..), or with the sign bit flipped (q8_0: q + 128)
            // (q4_1 / q5_0 / q5_1: the min, the fifth bits (a 32-bit word) come before the nibbles)
            uint8_t *slots = block + l.low_at;
            const int n_slots = is_nibble_kind(l.kind) ? 4 : 8;
            for (int r = 0; r < interleave_rows; ++r) {
                const uint8_t *plain =
                    in + size_t(g * interleave_rows + r) * t.nb[1] + size_t(b) * block_size;
                const size_t scale_bytes = has_e8m0_scales(l.kind) ? 1 : sizeof(fp16_t);
                std::memcpy(block + size_t(r) * scale_bytes, plain, scale_bytes);
                const uint8_t *after_d = plain + scale_bytes;
                if (has_block_min(l.kind)) {
                    std::memcpy(block + l.dmin_at + size_t(r) * sizeof(fp16_t), after_d, sizeof(fp16_t));
                    after_d += sizeof(fp16_t);
                }
                if (has_fifth_bit_plane(l.kind)) {
                    uint32_t qh;
                    std::memcpy(&qh, after_d, sizeof qh);
                    after_d += sizeof qh;
                    for (int e = 0; e < 4; ++e) {
                        uint8_t bits = 0;
                        for (int j = 0; j < 8; ++j) bits = uint8_t(bits | (((qh >> (4 * j + e)) & 1u) << j));
                        block[l.high_at + size_t(r) * 4 + size_t(e)] = bits;
                    }
                }
                const uint8_t *qs = after_d;
                for (int sl = 0; sl < n_slots; ++sl) {
                    uint32_t word;
                    std::memcpy(&word, qs + 4 * sl, 4);
                    if (l.kind == interleaved_kind::q8_0x16) word ^= 0x80808080u;
                    std::memcpy(slots + size_t(sl) * slot_bytes + size_t(r) * 4, &word, 4);
                }
            }
        }
    }
    t.extra = const_cast<interleaved_layout *>(&l);
}

void deinterleave_row(const tensor &t, int64_t row, void *dst_blocks) {
    const interleaved_layout *l = interleaved_layout_of(t);
    WEFT_ASSERT(l != nullptr &&
                (l->kind == interleaved_kind::q4_0x16 || l->kind == interleaved_kind::iq4_nlx16 ||
                 l->kind == interleaved_kind::q8_0x16 || l->kind == interleaved_kind::mxfp4x16) &&
                row >= 0 && row < t.ne[1]);
    static_assert(sizeof(block_iq4_nl) == sizeof(block_q4_0));  // the same fields: d, 16 nibble bytes
    const int64_t nb = t.ne[0] / interleave_block;
    const int64_t g = row / interleave_rows;
    const int r = int(row % interleave_rows);
    const auto *base = static_cast<const uint8_t *>(t.data);
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = base + (size_t(g) * size_t(nb) + size_t(b)) * l->block_bytes;
        if (l->kind == interleaved_kind::mxfp4x16) {
            auto &out = static_cast<block_mxfp4 *>(dst_blocks)[b];
            out.e = block[r];
            for (int i = 0; i < 16; ++i)
                out.qs[i] = uint8_t(interleaved_quant(*l, block, r, i) |
                                    (interleaved_quant(*l, block, r, i + 16) << 4));
            continue;
        }
        fp16_t d;
        std::memcpy(&d, block + size_t(r) * sizeof(fp16_t), sizeof d);
        if (l->kind != interleaved_kind::q8_0x16) {  // q4_0, iq4_nl
            auto &out = static_cast<block_q4_0 *>(dst_blocks)[b];
            out.d = d;
            for (int i = 0; i < 16; ++i)
                out.qs[i] = uint8_t(interleaved_quant(*l, block, r, i) |
                                    (interleaved_quant(*l, block, r, i + 16) << 4));
        } else {
            auto &out = static_cast<block_q8_0 *>(dst_blocks)[b];
            out.d = d;
            for (int i = 0; i < 32; ++i) out.qs[i] = int8_t(int(interleaved_quant(*l, block, r, i)) - 128);
        }
    }
}

namespace {

float fp16_at(const uint8_t *p) {
    fp16_t h;
    std::memcpy(&h, p, sizeof h);
    return fp16_to_fp32(h);
}

// Row r's scale of one interleaved block, widened to float.
float block_scale(const interleaved_layout &l, const uint8_t *block, int r) {
    if (has_e8m0_scales(l.kind)) return e8m0_to_fp32_half(block[l.d_at + size_t(r)]);
    return fp16_at(block + l.d_at + size_t(r) * sizeof(fp16_t));
}

// Row r of one interleaved block against one column: the canonical steps of interleaved.h.
float block_dot_scalar(const interleaved_layout &l, const uint8_t *block, int r, const int8_t *x,
                       const int32_t *sums, float da, float acc) {
    const float dw = block_scale(l, block, r);
    if (!l.k_quant()) {
        int32_t isum = 0;
        for (int i = 0; i < 32; ++i) isum += stored_value(l, block, r, i) * x[i];
        isum -= l.offset * sums[0];
        acc = std::fma(float(isum), dw * da, acc);
        if (l.dmin_at)
            acc = std::fma(float(sums[0]), fp16_at(block + l.dmin_at + size_t(r) * sizeof(fp16_t)) * da, acc);
        return acc;
    }
    const int sub = int(l.block / l.n_sub);  // values per sub-block
    const int sums_per_sub = sub / 16;       // activation sums are per 16 values
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < l.n_sub; ++j) {
        int32_t dot = 0, xsum = 0;
        for (int i = 0; i < sub; ++i) dot += stored_value(l, block, r, j * sub + i) * x[j * sub + i];
        for (int s = 0; s < sums_per_sub; ++s) xsum += sums[j * sums_per_sub + s];
        const uint8_t scale_byte = block[l.scales_at + size_t(j) * interleave_rows + size_t(r)];
        const bool packed = l.kind == interleaved_kind::q2_kx16;  // scale | min << 4
        const int32_t scale = packed ? int32_t(scale_byte & 0x0F) : int32_t(int8_t(scale_byte));
        isum += scale * (dot - l.offset * xsum);
        if (l.mins_at)
            msum += int32_t(packed ? scale_byte >> 4
                                   : block[l.mins_at + size_t(j) * interleave_rows + size_t(r)]) *
                    xsum;
    }
    acc = std::fma(float(isum), dw * da, acc);
    if (l.dmin_at)
        acc = std::fma(float(msum), -(fp16_at(block + l.dmin_at + size_t(r) * sizeof(fp16_t)) * da), acc);
    return acc;
}

}  // namespace

void group_kernel_scalar(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                         int64_t n_cols, float *dst, int64_t dst_stride) {
    const int64_t nb = a.nb(), ns = a.ns(), sums_per_block = l.block / a.sum_block;
    for (int64_t c = 0; c < n_cols; ++c) {
        const int64_t col = c0 + c;
        for (int r = 0; r < interleave_rows; ++r) {
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; ++b)
                acc =
                    block_dot_scalar(l, group + size_t(b) * l.block_bytes, r, a.qs + col * a.k + b * l.block,
                                     a.sum + col * ns + b * sums_per_block, a.d[col * nb + b], acc);
            dst[c * dst_stride + r] = l.kind == interleaved_kind::iq_gridx16 ? l.unit * acc : acc;
        }
    }
}

group_kernel_fn group_kernel_at(simd_level level) {
    // AVX-512 without VNNI runs the 256-bit build; that build takes AVX-VNNI's vpdpbusd where the CPU
    // has it (off under WEFT_MAX_ISA=avx2, so the maddubs build stays tested)
    const group_kernel_fn ymm = host_cpu_features().avxvnni ? group_kernel_avxvnni : group_kernel_avx2;
    const group_kernel_fn by_level[] = {group_kernel_scalar, ymm, ymm, group_kernel_avx512vnni};
    return by_level[size_t(level)];
}

group_kernel_fn best_group_kernel() {
    return group_kernel_at(best_simd_level());
}

groups_kernel_fn groups_kernel_at(simd_level level) {
    const groups_kernel_fn ymm = host_cpu_features().avxvnni ? groups_kernel_avxvnni : groups_kernel_avx2;
    const groups_kernel_fn by_level[] = {each_group<group_kernel_scalar>, ymm, ymm, groups_kernel_avx512vnni};
    return by_level[size_t(level)];
}

groups_kernel_fn best_groups_kernel() {
    return groups_kernel_at(best_simd_level());
}

}  // namespace weft::cpu

namespace weft {

std::unique_ptr<backend_buffer> cpu_repack_weights(
    std::span<tensor *const> weights, const std::function<void(const void *, size_t)> &released) {
    // the bytes a weight takes repacked, 0 when it stays where it is
    auto repacked_bytes = [](const tensor *t) -> size_t {
        if (!t) return 0;
        if (cpu::can_interleave(*t)) return cpu::pad_to_cache_line(cpu::interleaved_size(*t));
        if (cpu::can_group_float(*t)) return cpu::pad_to_cache_line(cpu::grouped_float_size(*t));
        return 0;
    };
    size_t total = 0;
    for (const tensor *t : weights) total += repacked_bytes(t);
    if (total == 0) return nullptr;
    std::unique_ptr<backend_buffer> buf = cpu_buffer_type().alloc(total);
    auto *base = static_cast<uint8_t *>(buf->base());
    // where each weight goes, then the weights repacked by all cores (largest first)
    std::vector<std::pair<tensor *, size_t>> jobs;
    size_t at = 0;
    for (tensor *t : weights) {
        const size_t bytes = repacked_bytes(t);
        if (bytes == 0) continue;
        jobs.push_back({t, at});
        at += bytes;
    }
    std::sort(jobs.begin(), jobs.end(),
              [](const auto &a, const auto &b) { return a.first->nbytes() > b.first->nbytes(); });
    // under --numa, each node's share of every matrix's rows placed on that node first (numa.h)
    if (cpu::current_numa().places_memory()) {
        std::vector<cpu::first_touch_job> touch;
        for (const auto &[t, offset] : jobs) {
            const int64_t groups = t->ne[1] / cpu::interleave_rows;
            if (t->ne[2] != 1 || t->ne[3] != 1 || groups == 0)
                continue;  // stacks of experts: where they fall
            const size_t bytes =
                cpu::can_interleave(*t) ? cpu::interleaved_size(*t) : cpu::grouped_float_size(*t);
            touch.push_back({reinterpret_cast<std::byte *>(base + offset), groups, bytes / size_t(groups)});
        }
        cpu::first_touch(touch, cpu::current_numa());
    }
    std::atomic<size_t> next{0};
    auto work = [&] {
        for (size_t j = next.fetch_add(1); j < jobs.size(); j = next.fetch_add(1)) {
            tensor &t = *jobs[j].first;
            uint8_t *dst = base + jobs[j].second;
            if (cpu::can_interleave(t))
                cpu::interleave_tensor(t, t.data, dst);
            else
                cpu::group_float_tensor(t, t.data, dst);
            if (released) released(t.data, t.nbytes());
        }
    };
    const unsigned n_threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 64u));
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n_threads; ++i) threads.emplace_back(work);
    work();
    for (auto &th : threads) th.join();
    for (const auto &[t, offset] : jobs) {
        t->data = base + offset;
        t->buffer = buf.get();
    }
    return buf;
}

}  // namespace weft

namespace weft::cpu {

q8_format activation_format(const interleaved_layout &layout) {
    return layout.k_quant() ? q8_format::q8_k : q8_format::q8_0_block_sums;
}

int64_t values_per_scale(q8_format f) {
    return f == q8_format::q8_k ? qk_k : interleave_block;
}

int64_t values_per_sum(q8_format f) {
    return f == q8_format::q8_k ? 16 : interleave_block;
}

void quantize_q8_row(const float *x, int64_t k, q8_format format, int8_t *qs, float *d, int32_t *sum,
                     void *block_scratch) {
    if (format != q8_format::q8_k) {
        // the table's quantizer (the reference one under force_scalar) has an AVX2 build that writes
        // the split arrays directly: the same values, without the blocks and a second pass over them
        if (row_traits_of(dtype::q8_0).from_float == from_float_q8_0_avx2)
            return quantize_q8_0_split_avx2(x, k, qs, d, sum);
        row_traits_of(dtype::q8_0).from_float(x, block_scratch, k);
        const auto *blocks = static_cast<const block_q8_0 *>(block_scratch);
        for (int64_t b = 0; b < k / interleave_block; ++b) {
            std::memcpy(qs + b * 32, blocks[b].qs, 32);
            d[b] = fp16_to_fp32(blocks[b].d);
            int32_t s = 0;
            for (int i = 0; i < 32; ++i) s += blocks[b].qs[i];
            sum[b] = s;
        }
        return;
    }
    row_traits_of(dtype::q8_k).from_float(x, block_scratch, k);
    const auto *blocks = static_cast<const block_q8_k *>(block_scratch);
    for (int64_t b = 0; b < k / qk_k; ++b) {
        std::memcpy(qs + b * qk_k, blocks[b].qs, qk_k);
        d[b] = blocks[b].d;
        for (int j = 0; j < qk_k / 16; ++j) sum[b * 16 + j] = blocks[b].bsums[j];
    }
}

q8_rows make_q8_rows(const int8_t *qs, const float *d, const int32_t *sum, int64_t k, q8_format format) {
    q8_rows a{qs, d, sum, k};
    a.d_block = values_per_scale(format);
    a.sum_block = values_per_sum(format);
    return a;
}

}  // namespace weft::cpu
