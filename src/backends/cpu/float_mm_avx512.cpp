// src/backends/cpu/float_mm_avx512.cpp — float tiles with AVX-512: one zmm of 16 lanes per output
// element, 4 weight rows x 6 columns per step; grouped f16 weights with FMAs, grouped bf16 weights with
// AVX-512 BF16's vdpbf16ps. Bit-identical to the scalar kernels (float_mm.h).
#include <immintrin.h>

#include "backends/cpu/float_mm.h"
#include "backends/cpu/interleaved.h"
#include "weft/core/cpu_features.h"

namespace weft::cpu {

namespace {

constexpr int tile_rows = 4;
constexpr int tile_cols = 6;

// 16 weights from value i of a row; the first `n` of them where a mask is given.
template <dtype W>
__m512 load_weights(const char *row, int64_t i) {
    if constexpr (W == dtype::f16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + i * 2)));
    } else if constexpr (W == dtype::bf16) {
        const __m512i wide =
            _mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(row + i * 2)));
        return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    } else {
        return _mm512_loadu_ps(row + i * 4);
    }
}
template <dtype W>
__m512 load_weights_masked(const char *row, int64_t i, __mmask16 m) {
    if constexpr (W == dtype::f16) {
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, row + i * 2));
    } else if constexpr (W == dtype::bf16) {
        const __m512i wide = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, row + i * 2));
        return _mm512_castsi512_ps(_mm512_slli_epi32(wide, 16));
    } else {
        return _mm512_maskz_loadu_ps(m, row + i * 4);
    }
}

float sum_lanes(__m512 v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

template <dtype W, int R, int C>
void tile(const char *a, size_t a_stride, const float *x, size_t x_stride, int64_t k, float *dst,
          size_t dst_stride) {
    __m512 acc[R][C];
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= k; i += 16) {
        __m512 w[R];
        for (int r = 0; r < R; ++r) w[r] = load_weights<W>(a + size_t(r) * a_stride, i);
        for (int c = 0; c < C; ++c) {
            const __m512 xv = _mm512_loadu_ps(x + size_t(c) * x_stride + i);
            for (int r = 0; r < R; ++r) acc[r][c] = _mm512_fmadd_ps(w[r], xv, acc[r][c]);
        }
    }
    if (i < k) {
        const auto m = __mmask16((1u << (k - i)) - 1);
        __m512 w[R];
        for (int r = 0; r < R; ++r) w[r] = load_weights_masked<W>(a + size_t(r) * a_stride, i, m);
        for (int c = 0; c < C; ++c) {
            const __m512 xv = _mm512_maskz_loadu_ps(m, x + size_t(c) * x_stride + i);
            for (int r = 0; r < R; ++r) acc[r][c] = _mm512_mask3_fmadd_ps(w[r], xv, acc[r][c], m);
        }
    }
    for (int c = 0; c < C; ++c)
        for (int r = 0; r < R; ++r) dst[size_t(c) * dst_stride + size_t(r)] = sum_lanes(acc[r][c]);
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
    if (n_cols == 1)  // a single column (decode): more rows in flight to keep memory busy
        for (; r + 8 <= n_rows; r += 8)
            row_tile<W, 8>(a + size_t(r) * a_stride, a_stride, x, x_stride, n_cols, k, dst + r, dst_stride);
    for (; r + tile_rows <= n_rows; r += tile_rows)
        row_tile<W, tile_rows>(a + size_t(r) * a_stride, a_stride, x, x_stride, n_cols, k, dst + r,
                               dst_stride);
    for (; r < n_rows; ++r)
        row_tile<W, 1>(a + size_t(r) * a_stride, a_stride, x, x_stride, n_cols, k, dst + r, dst_stride);
}

// --- grouped float weights (rows in lanes) ---------------------------------------------------------

// The 16 rows' value i of a group.
template <dtype W>
__m512 load_group_values(const char *p) {
    static_assert(!takes_bf16_pairs(W), "bf16 groups hold value pairs (bf16_groups)");
    if constexpr (W == dtype::f16) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    } else {
        return _mm512_loadu_ps(reinterpret_cast<const float *>(p));
    }
}

constexpr size_t elt_size(dtype t) {
    return t == dtype::f32 ? 4 : 2;
}

// One column against G groups at once (decode: G independent chains, G streams).
template <dtype W, int G>
void groups_one_column(const char *groups, size_t group_stride, int64_t k, const float *x, float *dst) {
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; ++i) {
        const __m512 xv = _mm512_set1_ps(x[i]);
        for (int g = 0; g < G; ++g)
            acc[g] = _mm512_fmadd_ps(
                load_group_values<W>(groups + size_t(g) * group_stride + size_t(i) * 16 * elt_size(W)), xv,
                acc[g]);
    }
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(dst + 16 * g, acc[g]);
}

// G groups against C columns: each weight load feeds C fmas, each broadcast activation G. Used as
// 2 groups x 12 columns (24 accumulators): 3.6% faster F16 prefill on Zen 5 than 2 x 8 (alternating
// runs, 176.6 vs 170.4 tokens/s); 1 group x 16 columns, one load per fma, ran ~3% slower than 2 x 8.
template <dtype W, int G, int C>
void groups_columns(const char *group, size_t group_stride, int64_t k, const float *panel, int64_t width,
                    float *dst, size_t dst_stride) {
    __m512 acc[G][C];
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < k; ++i) {
        __m512 w[G];
        for (int g = 0; g < G; ++g)
            w[g] = load_group_values<W>(group + size_t(g) * group_stride + size_t(i) * 16 * elt_size(W));
        for (int c = 0; c < C; ++c) {
            const __m512 xv = _mm512_set1_ps(panel[i * width + c]);
            for (int g = 0; g < G; ++g) acc[g][c] = _mm512_fmadd_ps(w[g], xv, acc[g][c]);
        }
    }
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + size_t(c) * dst_stride + 16 * g, acc[g][c]);
}

// Column tiles of up to C_max (a divisor of the panel width: a tile never spans two panels).
template <dtype W, int G, int C_max>
void groups_column_tiles(const char *group, size_t group_stride, int64_t k, const float *x, int64_t width,
                         int64_t n_cols, float *dst, size_t dst_stride) {
    for_column_tiles<C_max>(n_cols, [&](auto cols, int64_t c) {
        groups_columns<W, G, decltype(cols)::value>(group, group_stride, k, x + panel_index(0, c, k, width),
                                                    width, dst + size_t(c) * dst_stride, dst_stride);
    });
}

// --- bf16 weights in value pairs (float_mm.h): vdpbf16ps, two values of 16 rows an instruction ------
// (compiled for AVX-512 BF16 here only: the build's other code runs on AVX-512 CPUs without it)

#define WEFT_AVX512BF16 __attribute__((target("avx512bf16")))

WEFT_AVX512BF16 inline __m512bh bf16_pairs_at(const void *p) {
    return reinterpret_cast<__m512bh>(_mm512_loadu_si512(p));
}

// One column against G groups (decode): G independent chains, G streams.
template <int G>
WEFT_AVX512BF16 void bf16_groups_one_column(const char *groups, size_t group_stride, int64_t kp,
                                            const uint32_t *x, float *dst) {
    __m512 acc[G];
    for (int g = 0; g < G; ++g) acc[g] = _mm512_setzero_ps();
    for (int64_t j = 0; j < kp; ++j) {
        const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(x[j])));
        for (int g = 0; g < G; ++g)
            acc[g] = _mm512_dpbf16_ps(acc[g],
                                      bf16_pairs_at(groups + size_t(g) * group_stride + size_t(j) * 64), xv);
    }
    for (int g = 0; g < G; ++g) _mm512_storeu_ps(dst + 16 * g, acc[g]);
}

// Pairs of a tile's columns asked for this many panel rows ahead: the tile reads C words of each
// `width`-word row, a stride the hardware prefetcher follows too late; 32 rows ahead took the 2 x 12
// tile from 0.62 to 0.56 cycles per vdpbf16ps on Zen 5 (k 2048 and 5632, weights and panels in L2,
// thread CPU time; the peak is 0.5), prefetching the weights too gained nothing more.
constexpr int64_t panel_prefetch_rows = 32;

// G groups against C columns, as groups_columns below with a pair of values per step.
template <int G, int C>
WEFT_AVX512BF16 void bf16_groups_columns(const char *group, size_t group_stride, int64_t kp,
                                         const uint32_t *panel, int64_t width, float *dst,
                                         size_t dst_stride) {
    __m512 acc[G][C];
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c) acc[g][c] = _mm512_setzero_ps();
    for (int64_t j = 0; j < kp; ++j) {
        // a hint only: past the panel's end it reads nothing and cannot fault
        const auto *ahead = reinterpret_cast<const char *>(reinterpret_cast<uintptr_t>(panel + j * width) +
                                                           size_t(panel_prefetch_rows * width) * 4);
        _mm_prefetch(ahead, _MM_HINT_T0);
        if constexpr (C > 1) _mm_prefetch(ahead + (C - 1) * sizeof(uint32_t), _MM_HINT_T0);
        __m512bh w[G];
        for (int g = 0; g < G; ++g) w[g] = bf16_pairs_at(group + size_t(g) * group_stride + size_t(j) * 64);
        for (int c = 0; c < C; ++c) {
            const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(int(panel[j * width + c])));
            for (int g = 0; g < G; ++g) acc[g][c] = _mm512_dpbf16_ps(acc[g][c], w[g], xv);
        }
    }
    for (int g = 0; g < G; ++g)
        for (int c = 0; c < C; ++c) _mm512_storeu_ps(dst + size_t(c) * dst_stride + 16 * g, acc[g][c]);
}

template <int G, int C_max>
WEFT_AVX512BF16 void bf16_groups_column_tiles(const char *group, size_t group_stride, int64_t kp,
                                              const uint32_t *x, int64_t width, int64_t n_cols, float *dst,
                                              size_t dst_stride) {
    for_column_tiles<C_max>(n_cols, [&](auto cols, int64_t c) WEFT_AVX512BF16 {
        bf16_groups_columns<G, decltype(cols)::value>(group, group_stride, kp,
                                                      x + panel_index(0, c, kp, width), width,
                                                      dst + size_t(c) * dst_stride, dst_stride);
    });
}

WEFT_AVX512BF16 void bf16_groups(const char *g0, size_t group_stride, int64_t n_groups, int64_t k,
                                 const uint32_t *x, int64_t width, int64_t n_cols, float *dst,
                                 size_t dst_stride) {
    const int64_t kp = k / 2;
    if (n_cols == 1) {
        int64_t g = 0;
        for (; g + 4 <= n_groups; g += 4)
            bf16_groups_one_column<4>(g0 + size_t(g) * group_stride, group_stride, kp, x, dst + 16 * g);
        for (; g < n_groups; ++g)
            bf16_groups_one_column<1>(g0 + size_t(g) * group_stride, group_stride, kp, x, dst + 16 * g);
        return;
    }
    int64_t g = 0;
    for (; g + 2 <= n_groups; g += 2)
        bf16_groups_column_tiles<2, 12>(g0 + size_t(g) * group_stride, group_stride, kp, x, width, n_cols,
                                        dst + 16 * g, dst_stride);
    for (; g < n_groups; ++g)
        bf16_groups_column_tiles<1, 24>(g0 + size_t(g) * group_stride, group_stride, kp, x, width, n_cols,
                                        dst + 16 * g, dst_stride);
}

template <dtype W>
void groups(const char *g0, size_t group_stride, int64_t n_groups, int64_t k, const float *x, int64_t width,
            int64_t n_cols, float *dst, size_t dst_stride) {
    if (n_cols == 1) {
        int64_t g = 0;
        for (; g + 4 <= n_groups; g += 4)
            groups_one_column<W, 4>(g0 + size_t(g) * group_stride, group_stride, k, x, dst + 16 * g);
        for (; g < n_groups; ++g)
            groups_one_column<W, 1>(g0 + size_t(g) * group_stride, group_stride, k, x, dst + 16 * g);
        return;
    }
    int64_t g = 0;
    for (; g + 2 <= n_groups; g += 2)
        groups_column_tiles<W, 2, 12>(g0 + size_t(g) * group_stride, group_stride, k, x, width, n_cols,
                                      dst + 16 * g, dst_stride);
    for (; g < n_groups; ++g)
        groups_column_tiles<W, 1, 24>(g0 + size_t(g) * group_stride, group_stride, k, x, width, n_cols,
                                      dst + 16 * g, dst_stride);
}

}  // namespace

void float_groups_avx512(dtype wtype, const char *g0, size_t group_stride, int64_t n_groups, int64_t k,
                         const float *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    if (takes_bf16_pairs(wtype)) {
        // without AVX-512 BF16 the AVX2 kernel's two FMAs a pair: the same bits
        if (!host_cpu_features().avx512bf16)
            return float_groups_avx2(wtype, g0, group_stride, n_groups, k, x, width, n_cols, dst, dst_stride);
        return bf16_groups(g0, group_stride, n_groups, k, reinterpret_cast<const uint32_t *>(x), width,
                           n_cols, dst, dst_stride);
    }
    if (wtype == dtype::f16)
        return groups<dtype::f16>(g0, group_stride, n_groups, k, x, width, n_cols, dst, dst_stride);
    groups<dtype::f32>(g0, group_stride, n_groups, k, x, width, n_cols, dst, dst_stride);
}

void float_tile_avx512(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                       size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride) {
    with_float_weight_type(wtype, [&](auto w) {
        rows<decltype(w)::value>(a, a_stride, n_rows, x, x_stride, n_cols, k, dst, dst_stride);
    });
}

}  // namespace weft::cpu
