// src/backends/cpu/interleaved_avx512.cpp — the group kernel with AVX-512 VNNI: one zmm lane per
// row of the group, vpdpbusd against four broadcast activation bytes, up to 8 columns per tile
// sharing the unpacked weights. Bit-identical to group_kernel_scalar (see interleaved.h).
// GCC 12 warns that the undefined vectors inside its own AVX-512 conversion intrinsics
// (_mm512_cvtph_ps, _mm512_cvtepi32_ps) may be used uninitialized: a false positive.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/interleaved.h"

namespace weft::cpu {

namespace {

constexpr int max_tile_cols = 8;

int32_t load_i32(const int8_t *p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// The 8 operand vectors of one block: w[j] holds elements 4j..4j+3 of every row (unsigned).
template <interleaved_kind Kind>
void load_block(const uint8_t *block, __m512i w[8]) {
    const uint8_t *slots = block + 32;
    if constexpr (Kind == interleaved_kind::q4_0x16) {
        const __m512i low4 = _mm512_set1_epi8(0x0F);
        for (int s = 0; s < 4; ++s) {
            const __m512i v = _mm512_loadu_si512(slots + 64 * s);
            w[s] = _mm512_and_si512(v, low4);
            w[s + 4] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
        }
    } else {
        for (int s = 0; s < 8; ++s) w[s] = _mm512_loadu_si512(slots + 64 * s);
    }
}

template <interleaved_kind Kind, int C>
void tile(const uint8_t *group, int32_t offset, size_t block_bytes, const q8_rows &a, int64_t c0, float *dst,
          int64_t dst_stride) {
    const int64_t nb = a.nb();
    const int8_t *qs[C];
    const float *da[C];
    const int32_t *sa[C];
    for (int c = 0; c < C; ++c) {
        qs[c] = a.qs + (c0 + c) * a.k;
        da[c] = a.d + (c0 + c) * nb;
        sa[c] = a.sum + (c0 + c) * nb;
    }
    __m512 acc[C];
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
        const uint8_t *block = group + size_t(b) * block_bytes;
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(block)));
        __m512i w[8];
        load_block<Kind>(block, w);
        for (int c = 0; c < C; ++c) {
            const int8_t *x = qs[c] + b * 32;
            // two independent integer chains (exact: their order does not matter)
            __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[0], _mm512_set1_epi32(load_i32(x)));
            __m512i s1 =
                _mm512_dpbusd_epi32(_mm512_setzero_si512(), w[1], _mm512_set1_epi32(load_i32(x + 4)));
            s0 = _mm512_dpbusd_epi32(s0, w[2], _mm512_set1_epi32(load_i32(x + 8)));
            s1 = _mm512_dpbusd_epi32(s1, w[3], _mm512_set1_epi32(load_i32(x + 12)));
            s0 = _mm512_dpbusd_epi32(s0, w[4], _mm512_set1_epi32(load_i32(x + 16)));
            s1 = _mm512_dpbusd_epi32(s1, w[5], _mm512_set1_epi32(load_i32(x + 20)));
            s0 = _mm512_dpbusd_epi32(s0, w[6], _mm512_set1_epi32(load_i32(x + 24)));
            s1 = _mm512_dpbusd_epi32(s1, w[7], _mm512_set1_epi32(load_i32(x + 28)));
            const __m512i isum =
                _mm512_sub_epi32(_mm512_add_epi32(s0, s1), _mm512_set1_epi32(offset * sa[c][b]));
            const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(da[c][b]));
            acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), scale, acc[c]);
        }
    }
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + c * dst_stride, acc[c]);
}

template <interleaved_kind Kind>
void columns(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0, int64_t n_cols,
             float *dst, int64_t dst_stride) {
    for_column_tiles<max_tile_cols>(n_cols, [&](auto cols, int64_t c) {
        tile<Kind, decltype(cols)::value>(group, l.offset, l.block_bytes, a, c0 + c, dst + c * dst_stride,
                                          dst_stride);
    });
}

}  // namespace

void group_kernel_avx512vnni(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                             int64_t n_cols, float *dst, int64_t dst_stride) {
    if (l.kind == interleaved_kind::q4_0x16)
        columns<interleaved_kind::q4_0x16>(l, group, a, c0, n_cols, dst, dst_stride);
    else
        columns<interleaved_kind::q8_0x16>(l, group, a, c0, n_cols, dst, dst_stride);
}

}  // namespace weft::cpu
