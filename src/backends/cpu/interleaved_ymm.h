// src/backends/cpu/interleaved_ymm.h — the group kernel with 256-bit vectors: the 16 rows of a group
// as two halves of 8 ymm lanes against four broadcast activation bytes, up to 4 columns per tile.
// Written once over the integer dot of four byte pairs: AVX2's maddubs/madd (interleaved_avx2.cpp)
// or AVX-VNNI's vpdpbusd (interleaved_avxvnni.cpp). Integer sums are exact, so both builds equal
// group_kernel_scalar bit for bit (see interleaved.h). Included by those files only, each compiling
// it for its ISA (internal linkage: no copy is shared between them).
#pragma once

#include <immintrin.h>

#include <cstring>

#include "backends/cpu/interleaved.h"
#include "backends/cpu/prefetch.h"
#include "weft/core/error.h"

namespace weft::cpu {

namespace {

constexpr int max_tile_cols = 4;

__m256i broadcast_4(const int8_t *p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

// AVX2 takes the weights of the codebook types (their levels, codebook_table) and of q8_0 (stored ^
// 0x80) signed, by the sign trick: maddubs would saturate on unsigned bytes above 127 times x.
template <bool Vnni, interleaved_kind Kind>
constexpr bool signed_weights() {
    return !Vnni && (is_codebook_kind(Kind) || Kind == interleaved_kind::q8_0x16);
}

// s plus eight int32 sums of four products each: the stored unsigned weights w times signed x. VNNI
// adds them in one instruction, AVX2 with maddubs + madd; where AVX2 takes w signed (signed_weights),
// |w| times x with w's sign (pairs of at most 2 x 128 x 127: maddubs does not saturate), and the sums
// need no offset correction (uses_offset). Exact either way.
template <bool Vnni, interleaved_kind Kind>
[[gnu::always_inline]] inline __m256i add_dot4(__m256i s, __m256i w, __m256i x) {
    if constexpr (Vnni) {
        return _mm256_dpbusd_avx_epi32(s, w, x);
    } else {
        const __m256i ones = _mm256_set1_epi16(1);
        if constexpr (signed_weights<Vnni, Kind>()) {
            return _mm256_add_epi32(
                s, _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)),
                                     ones));
        } else {
            return _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
        }
    }
}
template <bool Vnni, interleaved_kind Kind>
constexpr bool uses_offset() {
    return !signed_weights<Vnni, Kind>();
}

// The codebook types' lookup table in both 128-bit lanes: the levels + 128 where the dot takes them
// unsigned with the offset correction (VNNI), the signed levels for the sign trick (AVX2).
template <bool Vnni>
[[gnu::always_inline]] inline __m256i codebook_table(const interleaved_layout &l) {
    const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i *>(l.codebook));
    return _mm256_broadcastsi128_si256(Vnni ? u : _mm_xor_si128(u, _mm_set1_epi8(char(0x80))));
}

// Rows 8 half .. 8 half + 7's block scales widened to float: fp16, or mxfp4's e8m0 exponents as
// 2^(e - 128) made from its bits (e8m0_half_bits: e - 1 in the exponent field, or for e < 2 the
// subnormal 0x00200000 << e).
template <interleaved_kind Kind>
[[gnu::always_inline]] inline __m256 block_scales(const uint8_t *block, int half) {
    if constexpr (has_e8m0_scales(Kind)) {
        const __m256i e =
            _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(block + 8 * half)));
        const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        const __m256i subnormal = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
        const __m256i below_2 = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        return _mm256_castsi256_ps(_mm256_blendv_epi8(normal, subnormal, below_2));
    } else {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 16 * half)));
    }
}

template <bool Vnni, interleaved_kind Kind>
[[gnu::always_inline]] inline void load_half(const interleaved_layout &l, const uint8_t *block, int half,
                                             __m256i w[8]) {
    const uint8_t *slots = block + l.low_at + 32 * half;
    if constexpr (Kind == interleaved_kind::q8_0x16) {  // the quants + 128, or (AVX2) the signed quants
        const __m256i flip = _mm256_set1_epi8(char(Vnni ? 0 : 0x80));
        for (int j = 0; j < 8; ++j)
            w[j] =
                _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(slots + 64 * j)), flip);
        return;
    }
    static_assert(is_nibble_kind(Kind) || Kind == interleaved_kind::q8_0x16);
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int s = 0; s < 4; ++s) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(slots + 64 * s));
        w[s] = _mm256_and_si256(v, low4);
        w[s + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
    }
    if constexpr (is_codebook_kind(Kind)) {
        const __m256i table = codebook_table<Vnni>(l);
        for (int j = 0; j < 8; ++j) w[j] = _mm256_shuffle_epi8(table, w[j]);
    }
    if constexpr (has_fifth_bit_plane(Kind)) {
        // the fifth bit of chunk j (elements 4j..4j+3): bit j of the plane's bytes
        const __m256i h =
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(block + l.high_at + 32 * half));
        const __m256i one = _mm256_set1_epi8(0x01);
        for (int j = 0; j < 8; ++j)
            w[j] =
                _mm256_or_si256(w[j], _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, j), one), 4));
    }
}

template <bool Vnni, interleaved_kind Kind, int C>
void tile(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, float *dst,
          int64_t dst_stride) {
    const int64_t nb = a.nb();
    constexpr size_t block_bytes = block_bytes_32(Kind);
    // sums of the unsigned stored values subtract offset * sum(x)
    const int32_t correction = uses_offset<Vnni, Kind>() ? l.offset : 0;
    for (int half = 0; half < 2; ++half) {
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *block = group + size_t(b) * block_bytes;
            if (half == 0) prefetch_block_share(block, block_bytes, 0, 1);  // half 1 finds it in L2
            const __m256 dw = block_scales<Kind>(block, half);
            __m256i w[8];
            load_half<Vnni, Kind>(l, block, half, w);
            for (int c = 0; c < C; ++c) {
                const int64_t col = c0 + c;
                const int8_t *x = a.qs + col * a.k + b * 32;
                // two independent integer chains (exact: their order does not matter)
                __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
                for (int j = 0; j < 8; j += 2) {
                    s0 = add_dot4<Vnni, Kind>(s0, w[j], broadcast_4(x + 4 * j));
                    s1 = add_dot4<Vnni, Kind>(s1, w[j + 1], broadcast_4(x + 4 * j + 4));
                }
                const __m256i isum = _mm256_sub_epi32(_mm256_add_epi32(s0, s1),
                                                      _mm256_set1_epi32(correction * a.sum[col * nb + b]));
                const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[col * nb + b]));
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[c]);
                if constexpr (has_block_min(Kind)) {
                    const __m256 m = _mm256_cvtph_ps(
                        _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + l.dmin_at + 16 * half)));
                    acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(float(a.sum[col * nb + b])),
                                             _mm256_mul_ps(m, _mm256_set1_ps(a.d[col * nb + b])), acc[c]);
                }
            }
        }
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(dst + c * dst_stride + 8 * half, acc[c]);
    }
}

// --- K-quants: 256-value super-blocks, integer sub-block scales (see interleaved.h) ---------------

constexpr int max_tile_cols_k = 2;

// The 8 operand vectors of values 32t..32t+31 of a K super-block, rows 8 * half .. 8 * half + 7.
template <bool Vnni, interleaved_kind Kind>
[[gnu::always_inline]] inline void load_k_unit(const interleaved_layout &l, const uint8_t *block, int half,
                                               int t, __m256i w[8]) {
    if constexpr (Kind == interleaved_kind::q2_kx16 || Kind == interleaved_kind::q3_kx16) {
        // two low bits of chunk 8t + r: slot 8 (t & 1) + r, bits 2 (t / 2); q3_K's third: slot r, bit t
        const uint8_t *two = block + l.low_at + 64 * 8 * (t & 1) + 32 * half;
        const __m256i three = _mm256_set1_epi8(0x03);
        for (int r = 0; r < 8; ++r)
            w[r] = _mm256_and_si256(
                _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(two + 64 * r)),
                                  2 * (t / 2)),
                three);
        if constexpr (Kind == interleaved_kind::q3_kx16) {
            const uint8_t *third = block + l.high_at + 32 * half;
            const __m256i one = _mm256_set1_epi8(0x01);
            for (int r = 0; r < 8; ++r) {
                const __m256i h = _mm256_and_si256(
                    _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(third + 64 * r)),
                                      t),
                    one);
                w[r] = _mm256_or_si256(w[r], _mm256_slli_epi16(h, 2));
            }
        }
        return;
    }
    const uint8_t *low = block + l.low_at + 64 * 8 * (t / 2) + 32 * half;
    const __m256i low4 = _mm256_set1_epi8(0x0F);
    for (int r = 0; r < 8; ++r)
        w[r] = _mm256_and_si256(
            _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(low + 64 * r)),
                              4 * (t & 1)),
            low4);
    if constexpr (is_codebook_kind(Kind)) {
        const __m256i table = codebook_table<Vnni>(l);
        for (int r = 0; r < 8; ++r) w[r] = _mm256_shuffle_epi8(table, w[r]);
    }
    if constexpr (Kind == interleaved_kind::q6_kx16) {
        const uint8_t *high = block + l.high_at + 64 * 8 * (t & 1) + 32 * half;
        const __m256i low2 = _mm256_set1_epi8(0x03);
        for (int r = 0; r < 8; ++r) {
            const __m256i h = _mm256_and_si256(
                _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(high + 64 * r)),
                                  2 * (t / 2)),
                low2);
            w[r] = _mm256_or_si256(w[r], _mm256_slli_epi16(h, 4));
        }
    }
    if constexpr (Kind == interleaved_kind::q5_kx16) {
        // the fifth bit of chunk 8t + r: slot r, bit t
        const uint8_t *high = block + l.high_at + 32 * half;
        const __m256i one = _mm256_set1_epi8(0x01);
        for (int r = 0; r < 8; ++r) {
            const __m256i h = _mm256_and_si256(
                _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(high + 64 * r)), t),
                one);
            w[r] = _mm256_or_si256(w[r], _mm256_slli_epi16(h, 4));
        }
    }
}

// Unsigned weights (< 64) times signed activations, four at a time: exact.
template <bool Vnni, interleaved_kind Kind>
[[gnu::always_inline]] inline __m256i dot_chunks(const __m256i *w, const int8_t *x, int n) {
    __m256i s = _mm256_setzero_si256();
    for (int r = 0; r < n; ++r) s = add_dot4<Vnni, Kind>(s, w[r], broadcast_4(x + 4 * r));
    return s;
}

[[gnu::always_inline]] inline __m256i bytes_to_i32(const uint8_t *p, bool is_signed) {
    const __m128i v = _mm_loadl_epi64(reinterpret_cast<const __m128i *>(p));
    return is_signed ? _mm256_cvtepi8_epi32(v) : _mm256_cvtepu8_epi32(v);
}

template <bool Vnni, interleaved_kind Kind, int C>
void tile_k(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, float *dst,
            int64_t dst_stride) {
    const int64_t nb = a.nb(), ns = a.ns();
    for (int half = 0; half < 2; ++half) {
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *block = group + size_t(b) * l.block_bytes;
            __m256i isum[C];
            for (int c = 0; c < C; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 8
            for (int t = 0; t < 8; ++t) {
                if (half == 0) prefetch_block_share(block, l.block_bytes, t, 8);
                __m256i w[8];
                load_k_unit<Vnni, Kind>(l, block, half, t, w);
                if constexpr (Kind == interleaved_kind::q4_kx16 || Kind == interleaved_kind::q5_kx16) {
                    const __m256i sc = bytes_to_i32(block + l.scales_at + 16 * t + 8 * half, false);
                    for (int c = 0; c < C; ++c) {
                        const int8_t *x = a.qs + (c0 + c) * a.k + b * 256 + 32 * t;
                        isum[c] = _mm256_add_epi32(isum[c],
                                                   _mm256_mullo_epi32(dot_chunks<Vnni, Kind>(w, x, 8), sc));
                    }
                } else if constexpr (Kind ==
                                     interleaved_kind::iq4_xsx16) {  // signed scales, offset with VNNI
                    const __m256i sc = bytes_to_i32(block + l.scales_at + 16 * t + 8 * half, true);
                    for (int c = 0; c < C; ++c) {
                        const int8_t *x = a.qs + (c0 + c) * a.k + b * 256 + 32 * t;
                        __m256i dot = dot_chunks<Vnni, Kind>(w, x, 8);
                        if constexpr (uses_offset<Vnni, Kind>()) {
                            const int32_t *xs = a.sum + (c0 + c) * ns + b * 16 + 2 * t;
                            dot = _mm256_sub_epi32(dot, _mm256_set1_epi32(l.offset * (xs[0] + xs[1])));
                        }
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_mullo_epi32(dot, sc));
                    }
                } else {
                    constexpr bool packed = Kind == interleaved_kind::q2_kx16;  // scale | min << 4
                    __m256i sc0 = bytes_to_i32(block + l.scales_at + 16 * (2 * t) + 8 * half, !packed);
                    __m256i sc1 = bytes_to_i32(block + l.scales_at + 16 * (2 * t + 1) + 8 * half, !packed);
                    if constexpr (packed) {
                        sc0 = _mm256_and_si256(sc0, _mm256_set1_epi32(0x0F));
                        sc1 = _mm256_and_si256(sc1, _mm256_set1_epi32(0x0F));
                    }
                    // the grid i-quants: their signed levels without VNNI (no offset to take off)
                    constexpr bool offset = !is_codebook_kind(Kind) || uses_offset<Vnni, Kind>();
                    for (int c = 0; c < C; ++c) {
                        const int8_t *x = a.qs + (c0 + c) * a.k + b * 256 + 32 * t;
                        const int32_t *xs = a.sum + (c0 + c) * ns + b * 16 + 2 * t;
                        const __m256i d0 = _mm256_sub_epi32(dot_chunks<Vnni, Kind>(w, x, 4),
                                                            _mm256_set1_epi32(offset ? l.offset * xs[0] : 0));
                        const __m256i d1 = _mm256_sub_epi32(dot_chunks<Vnni, Kind>(w + 4, x + 16, 4),
                                                            _mm256_set1_epi32(offset ? l.offset * xs[1] : 0));
                        isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(_mm256_mullo_epi32(d0, sc0),
                                                                             _mm256_mullo_epi32(d1, sc1)));
                    }
                }
            }
            const __m256 dw = _mm256_cvtph_ps(
                _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + l.d_at + 16 * half)));
            for (int c = 0; c < C; ++c) {
                const float da = a.d[(c0 + c) * nb + b];
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_mul_ps(dw, _mm256_set1_ps(da)),
                                         acc[c]);
            }
            if constexpr (has_sub_block_mins(Kind)) {
                const __m256 dmin = _mm256_cvtph_ps(
                    _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + l.dmin_at + 16 * half)));
                for (int c = 0; c < C; ++c) {
                    const int32_t *xs = a.sum + (c0 + c) * ns + b * 16;
                    __m256i msum = _mm256_setzero_si256();
                    if constexpr (Kind == interleaved_kind::q2_kx16) {  // 16 mins, the high nibbles
                        for (int j = 0; j < 16; ++j)
                            msum = _mm256_add_epi32(
                                msum, _mm256_mullo_epi32(
                                          _mm256_srli_epi32(
                                              bytes_to_i32(block + l.mins_at + 16 * j + 8 * half, false), 4),
                                          _mm256_set1_epi32(xs[j])));
                    } else {
                        for (int j = 0; j < 8; ++j)
                            msum = _mm256_add_epi32(
                                msum,
                                _mm256_mullo_epi32(bytes_to_i32(block + l.mins_at + 16 * j + 8 * half, false),
                                                   _mm256_set1_epi32(xs[2 * j] + xs[2 * j + 1])));
                    }
                    const float da = a.d[(c0 + c) * nb + b];
                    acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum),
                                              _mm256_mul_ps(dmin, _mm256_set1_ps(da)), acc[c]);
                }
            }
        }
        if constexpr (Kind == interleaved_kind::iq_gridx16)
            for (int c = 0; c < C; ++c) acc[c] = _mm256_mul_ps(acc[c], _mm256_set1_ps(l.unit));
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(dst + c * dst_stride + 8 * half, acc[c]);
    }
}

template <bool Vnni, interleaved_kind Kind>
void columns_k(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
               int64_t n_cols, float *dst, int64_t dst_stride) {
    for_column_tiles<max_tile_cols_k>(n_cols, [&](auto cols, int64_t c) {
        tile_k<Vnni, Kind, decltype(cols)::value>(l, group, a, c0 + c, dst + c * dst_stride, dst_stride);
    });
}

template <bool Vnni, interleaved_kind Kind>
void columns(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, int64_t n_cols,
             float *dst, int64_t dst_stride) {
    for_column_tiles<max_tile_cols>(n_cols, [&](auto cols, int64_t c) {
        tile<Vnni, Kind, decltype(cols)::value>(l, group, a, c0 + c, dst + c * dst_stride, dst_stride);
    });
}

// The group kernel (group_kernel_fn) of one build.
template <bool Vnni>
void group_kernel_ymm(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                      int64_t n_cols, float *dst, int64_t dst_stride) {
    with_interleaved_kind(l.kind, [&](auto kind) {
        constexpr interleaved_kind K = decltype(kind)::value;
        if constexpr (is_k_kind(K))
            columns_k<Vnni, K>(l, group, a, c0, n_cols, dst, dst_stride);
        else
            columns<Vnni, K>(l, group, a, c0, n_cols, dst, dst_stride);
    });
}

// q8_0 against one column: G groups (stride bytes apart) side by side, their quants read slot by
// slot (both halves of slot j of the G groups, then slot j + 1), as groups_kernel_avx512vnni reads
// them; each group's steps are the tile's (exact integer sums, one fma a block in order).
template <bool Vnni, int G>
void q8_0_one_column_side_by_side(const interleaved_layout &l, const uint8_t *groups, size_t stride,
                                  const q8_rows &a, int64_t col, float *dst) {
    constexpr interleaved_kind Kind = interleaved_kind::q8_0x16;
    constexpr size_t block_bytes = block_bytes_32(Kind);
    const int32_t correction = uses_offset<Vnni, Kind>() ? l.offset : 0;
    const __m256i flip = _mm256_set1_epi8(char(Vnni ? 0 : 0x80));
    const int64_t nb = a.nb();
    const int8_t *qs = a.qs + col * a.k;
    const float *da = a.d + col * nb;
    const int32_t *sa = a.sum + col * nb;
    __m256 acc[G][2];
    for (int g = 0; g < G; ++g) acc[g][0] = acc[g][1] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = groups + size_t(b) * block_bytes;
        __m256i s[G][2];
        for (int g = 0; g < G; ++g) s[g][0] = s[g][1] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int j = 0; j < 8; ++j) {
            const __m256i xj = broadcast_4(qs + b * 32 + 4 * j);
            for (int g = 0; g < G; ++g)
                for (int half = 0; half < 2; ++half) {
                    const __m256i w =
                        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(
                                             block + size_t(g) * stride + l.low_at + 64 * j + 32 * half)),
                                         flip);
                    s[g][half] = add_dot4<Vnni, Kind>(s[g][half], w, xj);
                }
        }
        const __m256i offset = _mm256_set1_epi32(correction * sa[b]);
        const __m256 sx = _mm256_set1_ps(da[b]);
        for (int g = 0; g < G; ++g)
            for (int half = 0; half < 2; ++half) {
                const __m256 dw = block_scales<Kind>(block + size_t(g) * stride, half);
                acc[g][half] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(s[g][half], offset)),
                                               _mm256_mul_ps(dw, sx), acc[g][half]);
            }
    }
    for (int g = 0; g < G; ++g)
        for (int half = 0; half < 2; ++half)
            _mm256_storeu_ps(dst + interleave_rows * g + 8 * half, acc[g][half]);
}

// The groups kernel of this build: q8_0's one-column runs side by side, the rest group after group.
// One core of this (Zen 4) machine, one column from memory (bench_decode_stream --compare, run with
// WEFT_MAX_ISA=avx2 / avxvnni): AVX2 17.0 -> 20.6 GB/s, AVX-VNNI 17.3 -> 25.8; two groups at a time
// gave AVX2 nothing and AVX-VNNI 17.8 -> 23.3.
template <bool Vnni>
void groups_kernel_ymm(const interleaved_layout &l, const uint8_t *groups, size_t group_stride,
                       int64_t n_groups, const q8_rows &a, int64_t c0, int64_t n_cols, float *dst,
                       int64_t dst_stride) {
    q8_0_side_by_side_then_each<group_kernel_ymm<Vnni>>(
        l, groups, group_stride, n_groups, a, c0, n_cols, dst, dst_stride,
        [&](auto tile, const uint8_t *first, float *out) {
            q8_0_one_column_side_by_side<Vnni, decltype(tile)::value>(l, first, group_stride, a, c0, out);
        });
}

}  // namespace
}  // namespace weft::cpu
