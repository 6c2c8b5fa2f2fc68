// src/backends/cpu/interleaved_avx2.cpp — the group kernel with AVX2: the 16 rows of a group as two
// halves of 8 ymm lanes, maddubs/madd against four broadcast activation bytes, up to 4 columns per
// tile. Bit-identical to group_kernel_scalar (see interleaved.h).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/interleaved.h"

namespace weft::cpu {

namespace {

constexpr int max_tile_cols = 4;

__m256i broadcast_4(const int8_t *p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm256_set1_epi32(v);
}

// Eight int32 sums of four products each: unsigned weights w (< 128 for q4_0) times signed x, or
// for q8_0 (stored as q + 128) the signed weights q = w ^ 0x80 times x by the sign trick. Exact.
template <interleaved_kind Kind>
__m256i dot4(__m256i w, __m256i x) {
    const __m256i ones = _mm256_set1_epi16(1);
    if constexpr (Kind == interleaved_kind::q4_0x16) {
        return _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones);
    } else {
        const __m256i q = _mm256_xor_si256(w, _mm256_set1_epi8(char(0x80)));
        return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)), ones);
    }
}

template <interleaved_kind Kind>
void load_half(const uint8_t *block, int half, __m256i w[8]) {
    const uint8_t *slots = block + 32 + 32 * half;
    if constexpr (Kind == interleaved_kind::q4_0x16) {
        const __m256i low4 = _mm256_set1_epi8(0x0F);
        for (int s = 0; s < 4; ++s) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(slots + 64 * s));
            w[s] = _mm256_and_si256(v, low4);
            w[s + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        }
    } else {
        for (int s = 0; s < 8; ++s)
            w[s] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(slots + 64 * s));
    }
}

template <interleaved_kind Kind, int C>
void tile(const uint8_t *group, int32_t offset, size_t block_bytes, const q8_rows &a, int64_t c0, float *dst,
          int64_t dst_stride) {
    const int64_t nb = a.nb();
    // q4_0 sums are of the unsigned stored nibbles and subtract offset * sum(x); q8_0 sums are signed
    const int32_t correction = Kind == interleaved_kind::q4_0x16 ? offset : 0;
    for (int half = 0; half < 2; ++half) {
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const uint8_t *block = group + size_t(b) * block_bytes;
            const __m256 dw =
                _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 16 * half)));
            __m256i w[8];
            load_half<Kind>(block, half, w);
            for (int c = 0; c < C; ++c) {
                const int64_t col = c0 + c;
                const int8_t *x = a.qs + col * a.k + b * 32;
                __m256i s0 = dot4<Kind>(w[0], broadcast_4(x));
                __m256i s1 = dot4<Kind>(w[1], broadcast_4(x + 4));
                for (int j = 2; j < 8; j += 2) {
                    s0 = _mm256_add_epi32(s0, dot4<Kind>(w[j], broadcast_4(x + 4 * j)));
                    s1 = _mm256_add_epi32(s1, dot4<Kind>(w[j + 1], broadcast_4(x + 4 * j + 4)));
                }
                const __m256i isum = _mm256_sub_epi32(_mm256_add_epi32(s0, s1),
                                                      _mm256_set1_epi32(correction * a.sum[col * nb + b]));
                const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(a.d[col * nb + b]));
                acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), scale, acc[c]);
            }
        }
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(dst + c * dst_stride + 8 * half, acc[c]);
    }
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

void group_kernel_avx2(const interleaved_layout &l, const uint8_t *group, const q8_rows &a, int64_t c0,
                       int64_t n_cols, float *dst, int64_t dst_stride) {
    if (l.kind == interleaved_kind::q4_0x16)
        columns<interleaved_kind::q4_0x16>(l, group, a, c0, n_cols, dst, dst_stride);
    else
        columns<interleaved_kind::q8_0x16>(l, group, a, c0, n_cols, dst, dst_stride);
}

}  // namespace weft::cpu
