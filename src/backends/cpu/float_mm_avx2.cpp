// src/backends/cpu/float_mm_avx2.cpp — float tiles with AVX2: the 16 lanes of an output element as
// two ymm, 2 weight rows x 2 columns per step. Bit-identical to float_tile_scalar (float_mm.h).
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/float_mm.h"
#include "backends/cpu/interleaved.h"

namespace weft::cpu {

namespace {

constexpr int tile_rows = 2;
constexpr int tile_cols = 2;

// 8 weights from value i of a row.
template <dtype W>
__m256 load_weights(const char *row, int64_t i) {
    if constexpr (W == dtype::f16) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + i * 2)));
    } else if constexpr (W == dtype::bf16) {
        const __m256i wide =
            _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row + i * 2)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    } else {
        return _mm256_loadu_ps(reinterpret_cast<const float *>(row + i * 4));
    }
}

float sum_lanes(__m256 lo, __m256 hi) {
    const __m256 s8 = _mm256_add_ps(lo, hi);
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <dtype W, int R, int C>
void tile(const char *a, size_t a_stride, const float *x, size_t x_stride, int64_t k, float *dst,
          size_t dst_stride) {
    __m256 acc[R][C][2];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16)
        for (int h = 0; h < 2; ++h) {
            __m256 w[R];
            for (int r = 0; r < R; ++r) w[r] = load_weights<W>(a + size_t(r) * a_stride, i + 8 * h);
            for (int c = 0; c < C; ++c) {
                const __m256 xv = _mm256_loadu_ps(x + size_t(c) * x_stride + i + 8 * h);
                for (int r = 0; r < R; ++r) acc[r][c][h] = _mm256_fmadd_ps(w[r], xv, acc[r][c][h]);
            }
        }
    if (i < k) {
        // the last, partial step: zero-padded copies, and lanes past the end keep their value
        const int64_t rest = k - i;
        alignas(32) float xs[C][16] = {};
        for (int c = 0; c < C; ++c)
            std::memcpy(xs[c], x + size_t(c) * x_stride + i, size_t(rest) * sizeof(float));
        alignas(32) char ws[R][64] = {};
        const size_t wsize = W == dtype::f32 ? 4 : 2;
        for (int r = 0; r < R; ++r)
            std::memcpy(ws[r], a + size_t(r) * a_stride + size_t(i) * wsize, size_t(rest) * wsize);
        const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        for (int h = 0; h < 2; ++h) {
            const __m256 keep =
                _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(int(rest - 8 * h)), lane));
            for (int r = 0; r < R; ++r) {
                const __m256 w = load_weights<W>(ws[r], 8 * h);
                for (int c = 0; c < C; ++c) {
                    const __m256 sum = _mm256_fmadd_ps(w, _mm256_load_ps(xs[c] + 8 * h), acc[r][c][h]);
                    acc[r][c][h] = _mm256_blendv_ps(acc[r][c][h], sum, keep);
                }
            }
        }
    }
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r)
            dst[size_t(c) * dst_stride + size_t(r)] = sum_lanes(acc[r][c][0], acc[r][c][1]);
}

template <dtype W, int R>
void row_tile(const char *a, size_t a_stride, const float *x, size_t x_stride, int64_t n_cols, int64_t k,
              float *dst, size_t dst_stride) {
    int64_t c = 0;
    for (; c + tile_cols <= n_cols; c += tile_cols)
        tile<W, R, tile_cols>(a, a_stride, x + size_t(c) * x_stride, x_stride, k,
                              dst + size_t(c) * dst_stride, dst_stride);
    for (; c < n_cols; ++c)
        tile<W, R, 1>(a, a_stride, x + size_t(c) * x_stride, x_stride, k, dst + size_t(c) * dst_stride,
                      dst_stride);
}

template <dtype W>
void rows(const char *a, size_t a_stride, int64_t n_rows, const float *x, size_t x_stride, int64_t n_cols,
          int64_t k, float *dst, size_t dst_stride) {
    int64_t r = 0;
    for (; r + tile_rows <= n_rows; r += tile_rows)
        row_tile<W, tile_rows>(a + size_t(r) * a_stride, a_stride, x, x_stride, n_cols, k, dst + r,
                               dst_stride);
    for (; r < n_rows; ++r)
        row_tile<W, 1>(a + size_t(r) * a_stride, a_stride, x, x_stride, n_cols, k, dst + r, dst_stride);
}

// --- grouped float weights (rows in lanes): a group's 16 rows as two halves of 8 ----------------------

constexpr size_t elt_size(dtype t) {
    return t == dtype::f32 ? 4 : 2;
}

template <dtype W, int C>
void group_columns(const char *group, int64_t k, const float *panel, int64_t width, float *dst,
                   size_t dst_stride) {
    for (int half = 0; half < 2; ++half) {
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t i = 0; i < k; ++i) {
            const __m256 w = load_weights<W>(group + (size_t(i) * 16 + 8 * size_t(half)) * elt_size(W), 0);
            for (int c = 0; c < C; ++c)
                acc[c] = _mm256_fmadd_ps(w, _mm256_set1_ps(panel[i * width + c]), acc[c]);
        }
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(dst + size_t(c) * dst_stride + 8 * half, acc[c]);
    }
}

// --- bf16 weights in value pairs (float_mm.h): two FMAs a pair, as vdpbf16ps computes it ------------

// MXCSR's flush-to-zero for the scope: results below the smallest normal become zero, as vdpbf16ps
// flushes them (the subnormal inputs are zero already, see float_mm.h).
class flush_to_zero_scope {
  public:
    flush_to_zero_scope() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | _MM_FLUSH_ZERO_ON); }
    ~flush_to_zero_scope() { _mm_setcsr(saved_); }
    flush_to_zero_scope(const flush_to_zero_scope &) = delete;
    flush_to_zero_scope &operator=(const flush_to_zero_scope &) = delete;

  private:
    unsigned saved_;
};

template <int C>
void bf16_group_columns(const char *group, int64_t k, const uint32_t *panel, int64_t width, float *dst,
                        size_t dst_stride) {
    const __m256i high_half = _mm256_set1_epi32(int(0xFFFF0000u));
    for (int half = 0; half < 2; ++half) {
        __m256 acc[C];
        for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
        for (int64_t j = 0; j < k / 2; ++j) {
            const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(
                group + (size_t(j) * 16 + 8 * size_t(half)) * sizeof(uint32_t)));
            const __m256 w_odd = _mm256_castsi256_ps(_mm256_and_si256(w, high_half));
            const __m256 w_even = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            for (int c = 0; c < C; ++c) {
                const __m256i xp = _mm256_set1_epi32(int(panel[j * width + c]));
                acc[c] = _mm256_fmadd_ps(w_odd, _mm256_castsi256_ps(_mm256_and_si256(xp, high_half)), acc[c]);
                acc[c] = _mm256_fmadd_ps(w_even, _mm256_castsi256_ps(_mm256_slli_epi32(xp, 16)), acc[c]);
            }
        }
        for (int c = 0; c < C; ++c) _mm256_storeu_ps(dst + size_t(c) * dst_stride + 8 * half, acc[c]);
    }
}

template <dtype W>
void groups(const char *g0, size_t group_stride, int64_t n_groups, int64_t k, const float *x, int64_t width,
            int64_t n_cols, float *dst, size_t dst_stride) {
    if constexpr (takes_bf16_pairs(W)) {
        const flush_to_zero_scope flush;
        const auto *pairs = reinterpret_cast<const uint32_t *>(x);
        for (int64_t g = 0; g < n_groups; ++g)
            for_column_tiles<8>(n_cols, [&](auto cols, int64_t c) {
                bf16_group_columns<decltype(cols)::value>(g0 + size_t(g) * group_stride, k,
                                                          pairs + panel_index(0, c, k / 2, width), width,
                                                          dst + size_t(c) * dst_stride + 16 * g, dst_stride);
            });
        return;
    }
    for (int64_t g = 0; g < n_groups; ++g)
        for_column_tiles<8>(n_cols, [&](auto cols, int64_t c) {
            group_columns<W, decltype(cols)::value>(g0 + size_t(g) * group_stride, k,
                                                    x + panel_index(0, c, k, width), width,
                                                    dst + size_t(c) * dst_stride + 16 * g, dst_stride);
        });
}

// out[i] = value i of the 8 columns whose values i0 .. i0 + 7 are in r[0..7] (an 8 x 8 transpose).
void transpose_8x8(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int p = 0; p < 4; ++p) {
        t[2 * p] = _mm256_unpacklo_ps(r[2 * p], r[2 * p + 1]);      // r0[0] r1[0] r0[1] r1[1] | [4], [5]
        t[2 * p + 1] = _mm256_unpackhi_ps(r[2 * p], r[2 * p + 1]);  // [2], [3] | [6], [7]
    }
    for (int h = 0; h < 2; ++h) {  // columns 0-3, then 4-7
        const __m256 *th = t + 4 * h;
        u[4 * h + 0] = _mm256_shuffle_ps(th[0], th[2], 0x44);  // values 0 | 4
        u[4 * h + 1] = _mm256_shuffle_ps(th[0], th[2], 0xEE);  // values 1 | 5
        u[4 * h + 2] = _mm256_shuffle_ps(th[1], th[3], 0x44);  // values 2 | 6
        u[4 * h + 3] = _mm256_shuffle_ps(th[1], th[3], 0xEE);  // values 3 | 7
    }
    for (int v = 0; v < 4; ++v) {
        r[v] = _mm256_permute2f128_ps(u[v], u[4 + v], 0x20);
        r[v + 4] = _mm256_permute2f128_ps(u[v], u[4 + v], 0x31);
    }
}

}  // namespace

void pack_panel_avx2(const float *const *columns, int64_t n, int64_t k, int64_t width, float *panel) {
    constexpr int64_t values_per_step = 64;  // as pack_panel_scalar: the lines being filled stay in L1
    const int64_t n8 = n - n % 8, k8 = k - k % 8;
    for (int64_t i0 = 0; i0 < k; i0 += values_per_step) {
        const int64_t i1 = std::min(k, i0 + values_per_step), i1_8 = std::min(k8, i1);
        for (int64_t j0 = 0; j0 < n8; j0 += 8) {
            for (int64_t i = i0; i < i1_8; i += 8) {
                __m256 r[8];
                for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(columns[j0 + j] + i);
                transpose_8x8(r);
                for (int v = 0; v < 8; ++v) _mm256_storeu_ps(panel + (i + v) * width + j0, r[v]);
            }
            for (int64_t j = j0; j < j0 + 8; ++j)
                for (int64_t i = i1_8; i < i1; ++i) panel[i * width + j] = columns[j][i];
        }
        for (int64_t j = n8; j < n; ++j)
            for (int64_t i = i0; i < i1; ++i) panel[i * width + j] = columns[j][i];
    }
}

void round_to_bf16_pairs_avx2(const float *x, int64_t k, uint32_t *pairs) {
    // round_to_bf16 on 8 values at a time: the NaNs quiet, the subnormals zero, the rest rounded to
    // nearest even; then the upper halves of two vectors packed as 8 pairs
    const __m256i exponent = _mm256_set1_epi32(0x7f800000), magnitude = _mm256_set1_epi32(0x7fffffff);
    const __m256i sign = _mm256_set1_epi32(int(0x80000000u)), one = _mm256_set1_epi32(1);
    const __m256i half_ulp = _mm256_set1_epi32(0x7fff), quiet = _mm256_set1_epi32(0x00400000);
    auto round8 = [&](const float *v) {  // bf16 bits in the upper half of each 32-bit lane
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(v));
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, magnitude), exponent);
        const __m256i is_subnormal =
            _mm256_cmpeq_epi32(_mm256_and_si256(w, exponent), _mm256_setzero_si256());
        const __m256i rounded =
            _mm256_add_epi32(w, _mm256_add_epi32(half_ulp, _mm256_and_si256(_mm256_srli_epi32(w, 16), one)));
        __m256i r = _mm256_blendv_epi8(rounded, _mm256_or_si256(w, quiet), is_nan);
        r = _mm256_blendv_epi8(r, _mm256_and_si256(w, sign), is_subnormal);
        return _mm256_srli_epi32(r, 16);
    };
    int64_t j = 0;
    for (; 2 * j + 16 <= k; j += 8) {
        // packus takes 128-bit lanes in turn: values 0-3, 8-11, 4-7, 12-15, put back in order
        const __m256i packed = _mm256_packus_epi32(round8(x + 2 * j), round8(x + 2 * j + 8));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(pairs + j), _mm256_permute4x64_epi64(packed, 0xD8));
    }
    round_to_bf16_pairs_scalar(x + 2 * j, k - 2 * j, pairs + j);
}

void float_groups_avx2(dtype wtype, const char *g0, size_t group_stride, int64_t n_groups, int64_t k,
                       const float *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    with_float_weight_type(wtype, [&](auto w) {
        groups<decltype(w)::value>(g0, group_stride, n_groups, k, x, width, n_cols, dst, dst_stride);
    });
}

void float_tile_avx2(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                     size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride) {
    with_float_weight_type(wtype, [&](auto w) {
        rows<decltype(w)::value>(a, a_stride, n_rows, x, x_stride, n_cols, k, dst, dst_stride);
    });
}

}  // namespace weft::cpu
