// src/backends/cpu/interleaved_avx512.cpp — the group kernel with AVX-512 VNNI: one zmm lane per
// row of the group, vpdpbusd against four broadcast activation bytes, up to 8 columns per tile
// sharing the unpacked weights (the groups kernel: two groups and up to 4 columns per tile, where
// the columns are several). Bit-identical to group_kernel_scalar (see interleaved.h).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/interleaved.h"
#include "backends/cpu/prefetch.h"
#include "weft/core/error.h"

namespace weft::cpu {

namespace {

constexpr int max_tile_cols = 8;

int32_t load_i32(const int8_t *p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The codebook types' levels + 128 in all four 128-bit lanes (the layouts' offset is 128).
[[gnu::always_inline]] inline __m512i codebook_table(const interleaved_layout &l) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(l.codebook)));
}

// The 16 rows' block scales widened to float: fp16, or mxfp4's e8m0 exponents as 2^(e - 128) made
// from its bits (e8m0_half_bits: e - 1 in the exponent field, or for e < 2 the subnormal 0x00200000 << e).
template <interleaved_kind Kind>
[[gnu::always_inline]] inline __m512 block_scales(const uint8_t *block) {
    if constexpr (has_e8m0_scales(Kind)) {
        const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(block)));
        const __m512i normal = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
        const __m512i subnormal = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
        const __mmask16 below_2 = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
        return _mm512_castsi512_ps(_mm512_mask_blend_epi32(below_2, normal, subnormal));
    } else {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block)));
    }
}

// The 8 operand vectors of one block: w[j] holds elements 4j..4j+3 of every row (unsigned).
template <interleaved_kind Kind>
[[gnu::always_inline]] inline void load_block(const interleaved_layout &l, const uint8_t *block,
                                              __m512i w[8]) {
    const uint8_t *slots = block + l.low_at;
    if constexpr (Kind == interleaved_kind::q8_0x16) {  // the slots hold the quants + 128 as they are
        for (int j = 0; j < 8; ++j) w[j] = _mm512_loadu_si512(slots + 64 * j);
        return;
    }
    static_assert(is_nibble_kind(Kind) || Kind == interleaved_kind::q8_0x16);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int s = 0; s < 4; ++s) {
        const __m512i v = _mm512_loadu_si512(slots + 64 * s);
        w[s] = _mm512_and_si512(v, low4);
        w[s + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
    if constexpr (is_codebook_kind(Kind)) {
        const __m512i table = codebook_table(l);
        for (int j = 0; j < 8; ++j) w[j] = _mm512_shuffle_epi8(table, w[j]);
    }
    if constexpr (has_fifth_bit_plane(Kind)) {
        // the fifth bit of chunk j (elements 4j..4j+3): bit j of the plane's bytes
        const __m512i h = _mm512_loadu_si512(block + l.high_at);
        const __m512i one = _mm512_set1_epi8(0x01);
        for (int j = 0; j < 8; ++j)
            w[j] =
                _mm512_or_si512(w[j], _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(h, j), one), 4));
    }
}

// start plus the exact integer dot of a block's 8 operand vectors with the 32 activation values at
// x, in Chains independent chains of vpdpbusd (the first one begun at start).
template <int Chains>
[[gnu::always_inline]] inline __m512i dot_block(const __m512i w[8], const int8_t *x, __m512i start) {
    __m512i s[Chains];
    for (int i = 0; i < Chains; ++i)
        s[i] = _mm512_dpbusd_epi32(i == 0 ? start : _mm512_setzero_si512(), w[i],
                                   _mm512_set1_epi32(load_i32(x + 4 * i)));
    for (int j = Chains; j < 8; ++j)
        s[j % Chains] = _mm512_dpbusd_epi32(s[j % Chains], w[j], _mm512_set1_epi32(load_i32(x + 4 * j)));
    if constexpr (Chains == 4)
        return _mm512_add_epi32(_mm512_add_epi32(s[0], s[1]), _mm512_add_epi32(s[2], s[3]));
    return _mm512_add_epi32(s[0], s[1]);
}

// The activation rows of a tile's C columns from c0: quants, block scales, block sums.
template <int C>
struct tile_columns {
    const int8_t *qs[C];
    const float *d[C];
    const int32_t *sum[C];
    tile_columns(const q8_rows &a, int64_t c0) {
        for (int c = 0; c < C; ++c) {
            qs[c] = a.qs + (c0 + c) * a.k;
            d[c] = a.d + (c0 + c) * a.nb();
            sum[c] = a.sum + (c0 + c) * a.nb();
        }
    }
};

// prefetch (every tile kind): whether this tile asks for the weights ahead — only the first column
// tile of a call; the others read the same group right after it.
template <interleaved_kind Kind, int C>
void tile(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, float *dst,
          int64_t dst_stride, bool prefetch) {
    const int32_t offset = l.offset;
    constexpr size_t block_bytes = block_bytes_32(Kind);
    const int64_t nb = a.nb();
    const tile_columns<C> cols(a, c0);
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = group + size_t(b) * block_bytes;
        if (prefetch) prefetch_block_share(block, block_bytes, 0, 1);
        const __m512 dw = block_scales<Kind>(block);
        __m512i w[8];
        load_block<Kind>(l, block, w);
        for (int c = 0; c < C; ++c) {
            // independent integer chains (exact: their order does not matter): two where the
            // columns give the core other work, four for one column
            const __m512i isum = dot_block<(C == 1 ? 4 : 2)>(w, cols.qs[c] + b * 32,
                                                             _mm512_set1_epi32(-offset * cols.sum[c][b]));
            const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(cols.d[c][b]));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[c]);
            if constexpr (has_block_min(Kind)) {
                const __m512 m =
                    _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + l.dmin_at)));
                acc[c] = _mm512_fmadd_ps(_mm512_set1_ps(float(cols.sum[c][b])),
                                         _mm512_mul_ps(m, _mm512_set1_ps(cols.d[c][b])), acc[c]);
            }
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + c * dst_stride, acc[c]);
}

// --- K-quants: 256-value super-blocks, integer sub-block scales (see interleaved.h) ---------------

constexpr int max_tile_cols_k = 4;

// The 8 operand vectors of values 32t..32t+31 of a K super-block (chunks 8t..8t+7).
template <interleaved_kind Kind>
[[gnu::always_inline]] inline void load_k_unit(const interleaved_layout &l, const uint8_t *block, int t,
                                               __m512i w[8]) {
    if constexpr (Kind == interleaved_kind::q2_kx16 || Kind == interleaved_kind::q3_kx16) {
        // two low bits of chunk 8t + r: slot 8 (t & 1) + r, bits 2 (t / 2); q3_K's third: slot r, bit t
        const uint8_t *two = block + l.low_at + 64 * 8 * (t & 1);
        const __m512i three = _mm512_set1_epi8(0x03);
        for (int r = 0; r < 8; ++r)
            w[r] = _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(two + 64 * r), 2 * (t / 2)), three);
        if constexpr (Kind == interleaved_kind::q3_kx16) {
            const uint8_t *third = block + l.high_at;
            const __m512i one = _mm512_set1_epi8(0x01);
            for (int r = 0; r < 8; ++r)
                w[r] = _mm512_or_si512(
                    w[r],
                    _mm512_slli_epi16(
                        _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(third + 64 * r), t), one), 2));
        }
        return;
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const uint8_t *low = block + l.low_at + 64 * 8 * (t / 2);
    if constexpr (Kind == interleaved_kind::q6_kx16) {
        // the high bits first: q6_K's layout puts them before the nibbles, in first-touch order
        const uint8_t *high = block + l.high_at + 64 * 8 * (t & 1);
        // bits 2v, 2v + 1 (v = t / 2) moved to bits 4, 5 with one shift and one mask
        const __m512i bits45 = _mm512_set1_epi8(0x30);
        const int v = t / 2;
        __m512i h[8];
        for (int r = 0; r < 8; ++r) {
            const __m512i raw = _mm512_loadu_si512(high + 64 * r);
            const __m512i moved = v == 0   ? _mm512_slli_epi16(raw, 4)
                                  : v == 1 ? _mm512_slli_epi16(raw, 2)
                                  : v == 2 ? raw
                                           : _mm512_srli_epi16(raw, 2);
            h[r] = _mm512_and_si512(moved, bits45);
        }
        // (nibble & 0x0F) | high bits in one ternary-logic op
        for (int r = 0; r < 8; ++r) {
            const __m512i nib = (t & 1) ? _mm512_srli_epi16(_mm512_loadu_si512(low + 64 * r), 4)
                                        : _mm512_loadu_si512(low + 64 * r);
            w[r] = _mm512_ternarylogic_epi32(nib, low4, h[r], 0xEA);
        }
    } else {
        if constexpr (Kind == interleaved_kind::q5_kx16) {
            // the fifth bit of chunk 8t + r: slot r, bit t, moved to bit 4 with one shift and one
            // mask, then (nibble & 0x0F) | fifth bit in one ternary-logic op
            const uint8_t *high = block + l.high_at;
            const __m512i bit4 = _mm512_set1_epi8(0x10);
            for (int r = 0; r < 8; ++r) {
                const __m512i raw = _mm512_loadu_si512(high + 64 * r);
                const __m512i moved = t < 4 ? _mm512_slli_epi16(raw, 4 - t) : _mm512_srli_epi16(raw, t - 4);
                const __m512i nib = (t & 1) ? _mm512_srli_epi16(_mm512_loadu_si512(low + 64 * r), 4)
                                            : _mm512_loadu_si512(low + 64 * r);
                w[r] = _mm512_ternarylogic_epi32(nib, low4, _mm512_and_si512(moved, bit4), 0xEA);
            }
        } else {
            for (int r = 0; r < 8; ++r)
                w[r] =
                    _mm512_and_si512(_mm512_srli_epi16(_mm512_loadu_si512(low + 64 * r), 4 * (t & 1)), low4);
            if constexpr (is_codebook_kind(Kind)) {
                const __m512i table = codebook_table(l);
                for (int r = 0; r < 8; ++r) w[r] = _mm512_shuffle_epi8(table, w[r]);
            }
        }
    }
}

// n (4 or 8) chunks, in two independent chains (integer sums: exact in any order).
[[gnu::always_inline]] inline __m512i dot_chunks(const __m512i *w, const int8_t *x, int n) {
    __m512i s0 = _mm512_setzero_si512(), s1 = _mm512_setzero_si512();
    for (int r = 0; r < n; r += 2) {
        s0 = _mm512_dpbusd_epi32(s0, w[r], _mm512_set1_epi32(load_i32(x + 4 * r)));
        s1 = _mm512_dpbusd_epi32(s1, w[r + 1], _mm512_set1_epi32(load_i32(x + 4 * r + 4)));
    }
    return _mm512_add_epi32(s0, s1);
}

[[gnu::always_inline]] inline __m512i bytes_to_i32(const uint8_t *p, bool is_signed) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    return is_signed ? _mm512_cvtepi8_epi32(v) : _mm512_cvtepu8_epi32(v);
}

template <interleaved_kind Kind, int C>
void tile_k(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, float *dst,
            int64_t dst_stride, bool prefetch) {
    const int64_t nb = a.nb(), ns = a.ns();
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = group + size_t(b) * l.block_bytes;
        __m512i isum[C];
        for (int c = 0; c < C; ++c) isum[c] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int t = 0; t < 8; ++t) {
            if (prefetch) prefetch_block_share(block, l.block_bytes, t, 8);
            __m512i w[8];
            load_k_unit<Kind>(l, block, t, w);
            if constexpr (Kind == interleaved_kind::q4_kx16 || Kind == interleaved_kind::q5_kx16) {
                const __m512i sc = bytes_to_i32(block + l.scales_at + 16 * t, false);
                for (int c = 0; c < C; ++c) {
                    const int8_t *x = a.qs + (c0 + c) * a.k + b * 256 + 32 * t;
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(dot_chunks(w, x, 8), sc));
                }
            } else if constexpr (Kind == interleaved_kind::iq4_xsx16) {  // signed scales, levels + 128
                const __m512i sc = bytes_to_i32(block + l.scales_at + 16 * t, true);
                for (int c = 0; c < C; ++c) {
                    const int8_t *x = a.qs + (c0 + c) * a.k + b * 256 + 32 * t;
                    const int32_t *xs = a.sum + (c0 + c) * ns + b * 16 + 2 * t;
                    const __m512i dot =
                        _mm512_sub_epi32(dot_chunks(w, x, 8), _mm512_set1_epi32(l.offset * (xs[0] + xs[1])));
                    isum[c] = _mm512_add_epi32(isum[c], _mm512_mullo_epi32(dot, sc));
                }
            } else {
                // 16 sub-blocks: q2_K / q3_K / q6_K, the grid i-quants (unsigned scales < 32, levels
                // + 128)
                __m512i sc0 =
                    bytes_to_i32(block + l.scales_at + 16 * (2 * t), Kind != interleaved_kind::q2_kx16);
                __m512i sc1 =
                    bytes_to_i32(block + l.scales_at + 16 * (2 * t + 1), Kind != interleaved_kind::q2_kx16);
                if constexpr (Kind == interleaved_kind::q2_kx16) {  // scale | min << 4
                    sc0 = _mm512_and_si512(sc0, _mm512_set1_epi32(0x0F));
                    sc1 = _mm512_and_si512(sc1, _mm512_set1_epi32(0x0F));
                }
                for (int c = 0; c < C; ++c) {
                    const int8_t *x = a.qs + (c0 + c) * a.k + b * 256 + 32 * t;
                    const int32_t *xs = a.sum + (c0 + c) * ns + b * 16 + 2 * t;
                    const __m512i d0 =
                        _mm512_sub_epi32(dot_chunks(w, x, 4), _mm512_set1_epi32(l.offset * xs[0]));
                    const __m512i d1 =
                        _mm512_sub_epi32(dot_chunks(w + 4, x + 16, 4), _mm512_set1_epi32(l.offset * xs[1]));
                    isum[c] = _mm512_add_epi32(
                        isum[c], _mm512_add_epi32(_mm512_mullo_epi32(d0, sc0), _mm512_mullo_epi32(d1, sc1)));
                }
            }
        }
        const __m512 dw =
            _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + l.d_at)));
        for (int c = 0; c < C; ++c) {
            const float da = a.d[(c0 + c) * nb + b];
            acc[c] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[c]), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc[c]);
        }
        if constexpr (has_sub_block_mins(Kind)) {
            const __m512 dmin =
                _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + l.dmin_at)));
            for (int c = 0; c < C; ++c) {
                const int32_t *xs = a.sum + (c0 + c) * ns + b * 16;
                __m512i msum = _mm512_setzero_si512();
                if constexpr (Kind == interleaved_kind::q2_kx16) {  // 16 mins, the high nibbles
                    for (int j = 0; j < 16; ++j)
                        msum = _mm512_add_epi32(
                            msum, _mm512_mullo_epi32(
                                      _mm512_srli_epi32(bytes_to_i32(block + l.mins_at + 16 * j, false), 4),
                                      _mm512_set1_epi32(xs[j])));
                } else {
                    for (int j = 0; j < 8; ++j)
                        msum = _mm512_add_epi32(
                            msum, _mm512_mullo_epi32(bytes_to_i32(block + l.mins_at + 16 * j, false),
                                                     _mm512_set1_epi32(xs[2 * j] + xs[2 * j + 1])));
                }
                const float da = a.d[(c0 + c) * nb + b];
                acc[c] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, _mm512_set1_ps(da)),
                                          acc[c]);
            }
        }
    }
    if constexpr (Kind == interleaved_kind::iq_gridx16)
        for (int c = 0; c < C; ++c) acc[c] = _mm512_mul_ps(acc[c], _mm512_set1_ps(l.unit));
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + c * dst_stride, acc[c]);
}

template <interleaved_kind Kind>
void columns_k(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
               int64_t n_cols, float *dst, int64_t dst_stride) {
    for_column_tiles<max_tile_cols_k>(n_cols, [&](auto cols, int64_t c) {
        tile_k<Kind, decltype(cols)::value>(l, group, a, c0 + c, dst + c * dst_stride, dst_stride, c == 0);
    });
}

template <interleaved_kind Kind>
void columns(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, int64_t n_cols,
             float *dst, int64_t dst_stride) {
    for_column_tiles<max_tile_cols>(n_cols, [&](auto cols, int64_t c) {
        tile<Kind, decltype(cols)::value>(l, group, a, c0 + c, dst + c * dst_stride, dst_stride, c == 0);
    });
}

// --- several columns: two groups at a time ------------------------------------------------------

// Two groups (32 rows) against C columns, each broadcast activation dword feeding a vpdpbusd of
// either group. This Zen 5 core loads 2 values a cycle, broadcasts included, and runs vpdpbusd,
// vmulps and vfmadd on 2 of its 4 vector pipes: one group against a column (tile) loads a broadcast
// for every vpdpbusd, so loads bound it as tightly as the products; two groups halve those loads.
// 16 registers hold the two groups' operands, 8 the integer sums (one chain a group and column: at 2
// vpdpbusd a cycle, each of the 8 chains' next one is due as the 4-cycle latency of its last ends)
// and 8 the accumulators. bench_group_kernel --pass 16, 512 columns, k 2048, against the one-group
// tiles: q4_0 1.22-1.27x (0.72-0.74 cycles per 64 multiply-adds), q4_1 1.20x, q8_0 1.15x, iq4_nl
// 1.10-1.15x, mxfp4 1.08-1.10x (the codebook's byte shuffles share the vpdpbusd pipes); 3 columns
// were slower, and q5_0's fifth-bit plane needs more registers (0.85x), so q5_0 and q5_1 keep the
// one-group tiles. Each output element takes group_kernel_scalar's steps, as in tile.
template <interleaved_kind Kind, int C>
void tile_pair(const interleaved_layout &l, const uint8_t *group0, size_t group_stride, const q8_rows &a,
               int64_t c0, float *dst, int64_t dst_stride, bool prefetch) {
    const int32_t offset = l.offset;
    constexpr size_t block_bytes = block_bytes_32(Kind);
    const int64_t nb = a.nb();
    const tile_columns<C> cols(a, c0);
    __m512 acc[2][C];
    for (int g = 0; g < 2; ++g)
        for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block[2] = {group0 + size_t(b) * block_bytes,
                                   group0 + group_stride + size_t(b) * block_bytes};
        if (prefetch)
            for (const uint8_t *p : block) prefetch_block_share(p, block_bytes, 0, 1);
        __m512i w[2][8];
        for (int g = 0; g < 2; ++g) load_block<Kind>(l, block[g], w[g]);
        // each chain begun at the offset's share of the integer sum
        __m512i isum[2][C];
        for (int c = 0; c < C; ++c) isum[0][c] = isum[1][c] = _mm512_set1_epi32(-offset * cols.sum[c][b]);
        for (int j = 0; j < 8; ++j)
            for (int c = 0; c < C; ++c) {
                const __m512i x = _mm512_set1_epi32(load_i32(cols.qs[c] + b * 32 + 4 * j));
                for (int g = 0; g < 2; ++g) isum[g][c] = _mm512_dpbusd_epi32(isum[g][c], w[g][j], x);
            }
        for (int g = 0; g < 2; ++g) {
            const __m512 dw = block_scales<Kind>(block[g]);
            // the group's block mins, widened once for every column (q4_1)
            [[maybe_unused]] __m512 m = _mm512_setzero_ps();
            if constexpr (has_block_min(Kind))
                m = _mm512_cvtph_ps(
                    _mm256_loadu_si256(reinterpret_cast<const __m256i *>(block[g] + l.dmin_at)));
            for (int c = 0; c < C; ++c) {
                const __m512 sx = _mm512_set1_ps(cols.d[c][b]);
                acc[g][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][c]), _mm512_mul_ps(dw, sx), acc[g][c]);
                if constexpr (has_block_min(Kind))
                    acc[g][c] = _mm512_fmadd_ps(_mm512_set1_ps(float(cols.sum[c][b])), _mm512_mul_ps(m, sx),
                                                acc[g][c]);
            }
        }
    }
    for (int g = 0; g < 2; ++g)
        for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + c * dst_stride + interleave_rows * g, acc[g][c]);
}

constexpr int max_pair_cols = 4;

// The kinds tile_pair computes (the 32-value kinds but q5_0 and q5_1).
constexpr bool in_group_pairs(interleaved_kind k) {
    return !is_k_kind(k) && !has_fifth_bit_plane(k);
}

// Groups two at a time (tile_pair), the last one of an odd count alone (tile).
template <interleaved_kind Kind>
void group_pairs(const interleaved_layout &l, const uint8_t *groups, size_t group_stride, int64_t n_groups,
                 const q8_rows &a, int64_t c0, int64_t n_cols, float *dst, int64_t dst_stride) {
    int64_t g = 0;
    for (; g + 2 <= n_groups; g += 2)
        for_column_tiles<max_pair_cols>(n_cols, [&](auto cols, int64_t c) {
            tile_pair<Kind, decltype(cols)::value>(l, groups + size_t(g) * group_stride, group_stride, a,
                                                   c0 + c, dst + c * dst_stride + g * interleave_rows,
                                                   dst_stride, c == 0);
        });
    if (g < n_groups)
        columns<Kind>(l, groups + size_t(g) * group_stride, a, c0, n_cols, dst + g * interleave_rows,
                      dst_stride);
}

// --- one column (decode): several groups side by side ----------------------------------------

// Only q8_0 reads its groups side by side (q8_0_side_by_side_then_each): q4_0 read so streamed no faster than
// group after group (27.8 vs 27.6 GB/s on one core), so the nibble types keep the tile.
// G q8_0 groups (stride bytes apart) against one column, reading their quants 64-byte slot by slot:
// slot j of groups 0..G-1, then slot j + 1, the way the f16 int16 kernel reads its groups. A decode
// is memory-bound; a group after the other (tile above) streamed q8_0 at 25-27 GB/s on one Zen 4
// core, with or without software prefetch (any distance or hint), G groups block by block 28-30,
// slot by slot 34-35 (tests/backends/bench_decode_stream.cpp, the fastest of 24 passes alternating in
// one process). The hardware prefetcher follows the G streams; no software prefetch. Each group's
// steps are group_kernel_scalar's (exact integer sums, one fma a block in block order).
template <int G>
void q8_0_one_column_side_by_side(const interleaved_layout &l, const uint8_t *groups, size_t stride,
                                  const q8_rows &a, int64_t col, float *dst) {
    constexpr interleaved_kind Kind = interleaved_kind::q8_0x16;
    constexpr size_t block_bytes = block_bytes_32(Kind);
    const int64_t nb = a.nb();
    const int8_t *qs = a.qs + col * a.k;
    const float *da = a.d + col * nb;
    const int32_t *sa = a.sum + col * nb;
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = groups + size_t(b) * block_bytes;
        const int8_t *x = qs + b * 32;
        // two chains a group (even and odd chunks); the offset taken off once
        __m512i s0[G], s1[G];
        for (int g = 0; g < G; ++g) {
            s0[g] = _mm512_set1_epi32(-l.offset * sa[b]);
            s1[g] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m512i xj = _mm512_set1_epi32(load_i32(x + 4 * j));
            for (int g = 0; g < G; ++g) {
                const __m512i w = _mm512_loadu_si512(block + size_t(g) * stride + l.low_at + 64 * j);
                if (j % 2 == 0)
                    s0[g] = _mm512_dpbusd_epi32(s0[g], w, xj);
                else
                    s1[g] = _mm512_dpbusd_epi32(s1[g], w, xj);
            }
        }
        const __m512 sx = _mm512_set1_ps(da[b]);
        for (int g = 0; g < G; ++g) {
            const __m512 dw = block_scales<Kind>(block + size_t(g) * stride);
            acc[g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0[g], s1[g])),
                                     _mm512_mul_ps(dw, sx), acc[g]);
        }
    }
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(dst + interleave_rows * g, acc[g]);
}

}  // namespace

void groups_kernel_avx512vnni(const interleaved_layout &l, const uint8_t *groups, size_t group_stride,
                              int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                              int64_t dst_stride) {
    if (n_cols > 1 && in_group_pairs(l.kind)) {
        with_interleaved_kind(l.kind, [&](auto kind) {
            constexpr interleaved_kind K = decltype(kind)::value;
            if constexpr (in_group_pairs(K))
                group_pairs<K>(l, groups, group_stride, n_groups, a, c0, n_cols, dst, dst_stride);
        });
        return;
    }
    // one group left: the tile's software prefetch keeps it streaming
    q8_0_side_by_side_then_each<group_kernel_avx512vnni>(
        l, groups, group_stride, n_groups, a, c0, n_cols, dst, dst_stride,
        [&](auto tile, const uint8_t *first, float *out) {
            q8_0_one_column_side_by_side<decltype(tile)::value>(l, first, group_stride, a, c0, out);
        });
}

void group_kernel_avx512vnni(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                             int64_t n_cols, float *dst, int64_t dst_stride) {
    with_interleaved_kind(l.kind, [&](auto kind) {
        constexpr interleaved_kind K = decltype(kind)::value;
        if constexpr (is_k_kind(K))
            columns_k<K>(l, group, a, c0, n_cols, dst, dst_stride);
        else
            columns<K>(l, group, a, c0, n_cols, dst, dst_stride);
    });
}

}  // namespace weft::cpu
