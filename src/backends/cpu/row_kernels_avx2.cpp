// src/backends/cpu/row_kernels_avx2.cpp — AVX2/FMA/F16C dot products and activation quantizers
// (run-time selected by row_kernels.cpp).
//
// Every kernel here has a scalar twin in src/quant (float_types.cpp, legacy_quants.cpp, k_quants.cpp) that
// defines its meaning; tests compare the two. The integer kernels multiply unsigned weight quants
// by signed activation quants with _mm256_maddubs_epi16, so weights with negative levels are
// either kept unsigned and corrected with the activations' sums (q6_K, q3_K), or made unsigned by
// moving their sign onto the activations (q4_0, q5_0, q8_0).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/interleaved.h"
#include "backends/cpu/row_kernels.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"

namespace weft::cpu {
namespace {

float hsum_f32x8(__m256 x) {
    __m128 r = _mm_add_ps(_mm256_extractf128_ps(x, 1), _mm256_castps256_ps128(x));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

int hsum_i32x8(__m256i x) {
    __m128i r = _mm_add_epi32(_mm256_extracti128_si256(x, 1), _mm256_castsi256_si128(x));
    r = _mm_add_epi32(r, _mm_unpackhi_epi64(r, r));
    r = _mm_add_epi32(r, _mm_shuffle_epi32(r, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(r);
}

float half(fp16_t h) {
    return _cvtsh_ss(h);
}

// 32 nibbles: bytes 0..15 the low nibbles of p[0..15], bytes 16..31 their high nibbles.
__m256i nibbles_32(const uint8_t *p) {
    const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
    return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// Byte i is 0xFF when bit i of the 32-bit word at p is set, else 0.
__m256i bits_32(const uint8_t *p) {
    uint32_t word;
    std::memcpy(&word, p, sizeof word);
    const __m256i byte_of_bit =
        _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
    const __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int(word)), byte_of_bit);
    const __m256i bit_in_byte = _mm256_set1_epi64x(int64_t(0x8040201008040201));
    return _mm256_cmpeq_epi8(_mm256_and_si256(bytes, bit_in_byte), bit_in_byte);
}

// Sums of adjacent products of unsigned a (< 128) and signed b, as eight int32.
__m256i dot_u8_i8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

// Signed a times signed b as |a| times b with a's sign: sums of adjacent products, as 16 int16.
__m256i pair_sums_i8_i8(__m256i a, __m256i b) {
    return _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

// Sums of four products of signed a and b, as eight int32.
__m256i dot_i8_i8(__m256i a, __m256i b) {
    return _mm256_madd_epi16(pair_sums_i8_i8(a, b), _mm256_set1_epi16(1));
}

// dot_i8_i8 times a small integer scale (|scale| < 2^15): the pair sums multiplied and added by one
// madd, the same integers as multiplying dot_i8_i8's sums (no step overflows).
__m256i dot_i8_i8_scaled(__m256i a, __m256i b, int scale) {
    return _mm256_madd_epi16(pair_sums_i8_i8(a, b), _mm256_set1_epi16(int16_t(scale)));
}

__m256i load_32(const void *p) {
    return _mm256_loadu_si256(static_cast<const __m256i *>(p));
}

// int16 lanes 0..7 = a, 8..15 = b: the scales of two adjacent 16-element sub-blocks.
__m256i two_scales(int a, int b) {
    return _mm256_setr_m128i(_mm_set1_epi16(int16_t(a)), _mm_set1_epi16(int16_t(b)));
}

// A 32-element group of K-quant weights (two 16-element sub-blocks) against the matching
// activations, each sub-block's sum multiplied by its scale, as eight int32.
__m256i scaled_dot_16x2(__m256i q, const int8_t *y, int scale_a, int scale_b) {
    const __m256i products = _mm256_maddubs_epi16(q, load_32(y));
    return _mm256_madd_epi16(products, two_scales(scale_a, scale_b));
}

// The same group against one 32-element sub-block scale.
__m256i scaled_dot_32(__m256i q, const int8_t *y, int scale) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(q, load_32(y)), _mm256_set1_epi16(int16_t(scale)));
}

// Sum of scale_j * bsums_j over the 16 sub-blocks (scales as 16 int16).
int scaled_bsums(__m256i scales16, const int16_t *bsums) {
    return hsum_i32x8(_mm256_madd_epi16(scales16, load_32(bsums)));
}

// The eight six-bit scales and mins of q4_K / q5_K (see scale_min_k4), four per 32-bit word.
void decode_scales_mins_k4(const uint8_t *packed, uint8_t scales[8], uint8_t mins[8]) {
    uint32_t u[3];
    std::memcpy(u, packed, sizeof u);
    const uint32_t sc[2] = {u[0] & 0x3f3f3f3fu, (u[2] & 0x0f0f0f0fu) | ((u[0] >> 2) & 0x30303030u)};
    const uint32_t mn[2] = {u[1] & 0x3f3f3f3fu, ((u[2] >> 4) & 0x0f0f0f0fu) | ((u[1] >> 2) & 0x30303030u)};
    std::memcpy(scales, sc, sizeof sc);
    std::memcpy(mins, mn, sizeof mn);
}

// The sixteen signed scales of q3_K (see scale_q3_k), four per 32-bit word.
void decode_scales_q3_k(const uint8_t *packed, int8_t scales[16]) {
    uint32_t u[3];
    std::memcpy(u, packed, sizeof u);
    const uint32_t lo = 0x0f0f0f0fu, hi = 0x03030303u;
    uint32_t w[4] = {(u[0] & lo) | ((u[2] & hi) << 4), (u[1] & lo) | (((u[2] >> 2) & hi) << 4),
                     ((u[0] >> 4) & lo) | (((u[2] >> 4) & hi) << 4),
                     ((u[1] >> 4) & lo) | (((u[2] >> 6) & hi) << 4)};
    uint8_t bytes[16];
    std::memcpy(bytes, w, sizeof w);
    for (int j = 0; j < 16; ++j) scales[j] = int8_t(bytes[j] - 32);
}

// Sum over the 8 32-element sub-blocks of mins_j * (bsums[2j] + bsums[2j + 1]).
int mins_times_bsums_8(const uint8_t mins[8], const int16_t *bsums) {
    const __m128i pair_sums = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(bsums)),
                                             _mm_loadu_si128(reinterpret_cast<const __m128i *>(bsums + 8)));
    const __m128i mins16 = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(mins)));
    __m128i prod = _mm_madd_epi16(mins16, pair_sums);
    prod = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    prod = _mm_add_epi32(prod, _mm_shuffle_epi32(prod, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(prod);
}

// A row of 32-element blocks against q8_0 activations, for the types with signed quants (q4_0,
// q5_0, q8_0): quants_of(block) gives a block's 32 quants as signed bytes.
static_assert(qk4_0 == qk8_0 && qk5_0 == qk8_0 && qk4_1 == qk8_1 && qk5_1 == qk8_1 && qk8_0 == 32);
template <class Block, class QuantsOf>
float vec_dot_signed_32_avx2(int64_t n, const void *vx, const void *vy, QuantsOf quants_of) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / qk8_0; ++i) {
        const __m256 dots = _mm256_cvtepi32_ps(dot_i8_i8(quants_of(x[i]), load_32(y[i].qs)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[i].d) * half(y[i].d)), dots, acc);
    }
    return hsum_f32x8(acc);
}

// The same against q8_1 for the types with unsigned quants and a min (q4_1, q5_1): the mins
// multiply the activations' block sums.
template <class Block, class QuantsOf>
float vec_dot_unsigned_32_avx2(int64_t n, const void *vx, const void *vy, QuantsOf quants_of) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_1 *>(vy);
    __m256 acc = _mm256_setzero_ps();
    float sum_mins = 0;
    for (int64_t i = 0; i < n / qk8_1; ++i) {
        sum_mins += half(x[i].m) * half(y[i].s);
        const __m256 dots = _mm256_cvtepi32_ps(dot_u8_i8(quants_of(x[i]), load_32(y[i].qs)));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[i].d) * half(y[i].d)), dots, acc);
    }
    return hsum_f32x8(acc) + sum_mins;
}

// The unsigned quants of two adjacent 32-element sub-blocks.
struct quants_64 {
    __m256i lo, hi;
};

// q4_K and q5_K against q8_K: eight sub-blocks of 32 with a six-bit scale and min each; the mins
// come off through the activations' bsums. Only how the quants are stored differs:
// quants_of(block, p) gives those of sub-blocks 2p and 2p + 1.
template <class Block, class QuantsOf>
float vec_dot_k4_avx2(int64_t n, const void *vx, const void *vy, QuantsOf quants_of) {
    const auto *x = static_cast<const Block *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    __m256 acc = _mm256_setzero_ps();
    float sum_mins = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        uint8_t scales[8], mins[8];
        decode_scales_mins_k4(x[i].scales, scales, mins);
        sum_mins += y[i].d * half(x[i].dmin) * float(mins_times_bsums_8(mins, y[i].bsums));
        __m256i sumi = _mm256_setzero_si256();
        for (int p = 0; p < 4; ++p) {
            const quants_64 q = quants_of(x[i], p);
            sumi = _mm256_add_epi32(sumi, scaled_dot_32(q.lo, y[i].qs + 64 * p, scales[2 * p]));
            sumi = _mm256_add_epi32(sumi, scaled_dot_32(q.hi, y[i].qs + 64 * p + 32, scales[2 * p + 1]));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[i].d * half(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    }
    return hsum_f32x8(acc) - sum_mins;
}

// 32 integral floats (|v| <= 127) to 32 int8 in order.
__m256i pack_i8_32(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
    const __m256i a = _mm256_packs_epi32(_mm256_cvtps_epi32(v0), _mm256_cvtps_epi32(v1));
    const __m256i b = _mm256_packs_epi32(_mm256_cvtps_epi32(v2), _mm256_cvtps_epi32(v3));
    // The packs work per 128-bit lane; the permutation puts the 4-byte groups back in order.
    return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

float absmax_32(const float *x) {
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x));
    for (int k = 8; k < 32; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + k)));
    __m128 r = _mm_max_ps(_mm256_extractf128_ps(m, 1), _mm256_castps256_ps128(m));
    r = _mm_max_ps(r, _mm_movehl_ps(r, r));
    r = _mm_max_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}

// q8_0 / q8_1 activation quants of one 32-value block: x * id rounded to nearest, ties to even (the
// rounding mode of _mm256_round_ps), as the scalar activation quantizer (row_kernels.cpp).
__m256i quantize_32_nearest(const float *x, float id) {
    const __m256 mul = _mm256_set1_ps(id);
    auto q = [&](int k) {
        return _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x + k), mul),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    };
    return pack_i8_32(q(0), q(8), q(16), q(24));
}

}  // namespace

// ---- plain float types

void vec_dot_f32_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const float *>(vx);
    const auto *y = static_cast<const float *>(vy);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8 * k), _mm256_loadu_ps(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8)
        acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc[0]);
    float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += x[i] * y[i];
    *s = sum;
}

void vec_dot_f16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const fp16_t *>(vx);
    const auto *y = static_cast<const fp16_t *>(vy);
    auto load = [](const fp16_t *p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    };
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; ++k)
            acc[k] = _mm256_fmadd_ps(load(x + i + 8 * k), load(y + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load(x + i), load(y + i), acc[0]);
    float sum = hsum_f32x8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; ++i) sum += half(x[i]) * half(y[i]);
    *s = sum;
}

void vec_dot_bf16_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const bf16_t *>(vx);
    const auto *y = static_cast<const bf16_t *>(vy);
    // A bfloat16 is the top half of a float.
    auto load = [](const bf16_t *p) {
        const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
    };
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc[0] = _mm256_fmadd_ps(load(x + i), load(y + i), acc[0]);
        acc[1] = _mm256_fmadd_ps(load(x + i + 8), load(y + i + 8), acc[1]);
    }
    float sum = hsum_f32x8(_mm256_add_ps(acc[0], acc[1]));
    for (; i < n; ++i) sum += bf16_to_fp32(x[i]) * bf16_to_fp32(y[i]);
    *s = sum;
}

void to_float_f16_avx2(const void *src, float *dst, int64_t n) {
    const auto *h = static_cast<const fp16_t *>(src);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(h + i))));
    for (; i < n; ++i) dst[i] = half(h[i]);
}

void from_float_f16_avx2(const float *src, void *dst, int64_t n) {
    auto *h = static_cast<fp16_t *>(dst);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i *>(h + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

// ---- 32-element types

void vec_dot_q4_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    *s = vec_dot_signed_32_avx2<block_q4_0>(n, vx, vy, [](const block_q4_0 &b) {
        return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_set1_epi8(8));
    });
}

void vec_dot_q4_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    *s =
        vec_dot_unsigned_32_avx2<block_q4_1>(n, vx, vy, [](const block_q4_1 &b) { return nibbles_32(b.qs); });
}

void vec_dot_q5_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    *s = vec_dot_signed_32_avx2<block_q5_0>(n, vx, vy, [](const block_q5_0 &b) {
        // (nibble | h << 4) - 16 is the nibble itself when h is set, else the nibble with the
        // top four bits set (nibble - 16 in two's complement).
        const __m256i no_high = _mm256_andnot_si256(bits_32(b.qh), _mm256_set1_epi8(int8_t(0xF0)));
        return _mm256_or_si256(nibbles_32(b.qs), no_high);
    });
}

void vec_dot_q5_1_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    *s = vec_dot_unsigned_32_avx2<block_q5_1>(n, vx, vy, [](const block_q5_1 &b) {
        const __m256i high = _mm256_and_si256(bits_32(b.qh), _mm256_set1_epi8(0x10));
        return _mm256_or_si256(nibbles_32(b.qs), high);
    });
}

namespace {
// One exact integer sum per block and one fma per block, in block order (vec_dot_q8_0_ref's steps).
float dot_q8_0_block(const block_q8_0 &x, const block_q8_0 &y, float acc) {
    return std::fma(float(hsum_i32x8(dot_i8_i8(load_32(x.qs), load_32(y.qs)))), half(x.d) * half(y.d), acc);
}
}  // namespace

void vec_dot_q8_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q8_0 *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    float acc = 0;
    for (int64_t i = 0; i < n / qk8_0; ++i) acc = dot_q8_0_block(x[i], y[i], acc);
    *s = acc;
}

namespace {

// A tile of R weight rows × C activation rows of q8_0: each dot vec_dot_q8_0_avx2's steps, so the
// same bits; the tile shares the loads of the activations.
template <int R, int C>
void q8_0_tile(int64_t nb, const block_q8_0 *const *x, const block_q8_0 *const *y, float *const *out,
               int64_t i0) {
    float acc[R][C] = {};
    for (int64_t b = 0; b < nb; ++b)
        for (int r = 0; r < R; ++r)
            for (int c = 0; c < C; ++c) acc[r][c] = dot_q8_0_block(x[r][b], y[c][b], acc[r][c]);
    for (int r = 0; r < R; ++r)
        for (int c = 0; c < C; ++c) out[c][i0 + r] = acc[r][c];
}

template <int R>
void q8_0_row_tiles(int64_t nb, const block_q8_0 *const *x, const block_q8_0 *const *y, int64_t cols,
                    float *const *out, int64_t i0) {
    int64_t j = 0;
    for (; j + 4 <= cols; j += 4) q8_0_tile<R, 4>(nb, x, y + j, out + j, i0);
    if (cols - j == 3) q8_0_tile<R, 3>(nb, x, y + j, out + j, i0);
    if (cols - j == 2) q8_0_tile<R, 2>(nb, x, y + j, out + j, i0);
    if (cols - j == 1) q8_0_tile<R, 1>(nb, x, y + j, out + j, i0);
}

}  // namespace

void dot_tile_q8_0_avx2(int64_t k, const void *a, size_t a_stride, int64_t rows, const void *const *y,
                        int64_t cols, float *const *out) {
    const int64_t nb = k / qk8_0;
    const auto *const *ys = reinterpret_cast<const block_q8_0 *const *>(y);
    auto row = [&](int64_t i) {
        return reinterpret_cast<const block_q8_0 *>(static_cast<const char *>(a) + size_t(i) * a_stride);
    };
    int64_t i = 0;
    for (; i + 2 <= rows; i += 2) {
        const block_q8_0 *x[2] = {row(i), row(i + 1)};
        q8_0_row_tiles<2>(nb, x, ys, cols, out, i);
    }
    if (i < rows) {
        const block_q8_0 *x[1] = {row(i)};
        q8_0_row_tiles<1>(nb, x, ys, cols, out, i);
    }
}

void from_float_q8_0_avx2(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q8_0 *>(dst);
    for (int64_t i = 0; i < n / qk8_0; ++i, src += qk8_0) {
        const float amax = absmax_32(src);
        const float d = amax / 127.0f;
        y[i].d = fp32_to_fp16(d);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y[i].qs),
                            quantize_32_nearest(src, amax != 0.0f ? 127.0f / amax : 0.0f));
    }
}

void quantize_q8_0_split_avx2(const float *src, int64_t n, int8_t *qs, float *d, int32_t *sum) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t i = 0; i < n / qk8_0; ++i, src += qk8_0) {
        const float amax = absmax_32(src);
        d[i] = fp16_to_fp32(fp32_to_fp16(amax / 127.0f));  // the scale as a q8_0 block stores it
        const __m256i q = quantize_32_nearest(src, amax != 0.0f ? 127.0f / amax : 0.0f);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(qs + i * qk8_0), q);
        // the block's sum, exact: byte pairs to 16 bits, then pairs of those to 32
        sum[i] = hsum_i32x8(_mm256_madd_epi16(_mm256_maddubs_epi16(ones, q), _mm256_set1_epi16(1)));
    }
}

void from_float_q8_1_avx2(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q8_1 *>(dst);
    for (int64_t i = 0; i < n / qk8_1; ++i, src += qk8_1) {
        const float amax = absmax_32(src);
        const float d = amax / 127.0f;
        y[i].d = fp32_to_fp16(d);
        const __m256i q = quantize_32_nearest(src, amax != 0.0f ? 127.0f / amax : 0.0f);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y[i].qs), q);
        const int sum =
            hsum_i32x8(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1)));
        y[i].s = fp32_to_fp16(float(sum) * d);
    }
}

// ---- K-quants against q8_K

void vec_dot_q2_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q2_k *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    const __m256i two_bits = _mm256_set1_epi8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x[i].scales));
        const __m256i mins16 =
            _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), _mm_set1_epi8(0xF)));
        const int sum_mins = scaled_bsums(mins16, y[i].bsums);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i qs = load_32(x[i].qs + 32 * h);
            for (int c = 0; c < 4; ++c) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), two_bits);
                const int j = 8 * h + 2 * c;
                sumi =
                    _mm256_add_epi32(sumi, scaled_dot_16x2(q, y[i].qs + 128 * h + 32 * c,
                                                           x[i].scales[j] & 0xF, x[i].scales[j + 1] & 0xF));
            }
        }
        sum += y[i].d * (half(x[i].d) * float(hsum_i32x8(sumi)) - half(x[i].dmin) * float(sum_mins));
    }
    *s = sum;
}

void vec_dot_q3_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q3_k *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    const __m256i two_bits = _mm256_set1_epi8(3), one_bit = _mm256_set1_epi8(1);
    __m256 acc = _mm256_setzero_ps();
    float sum_offsets = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        int8_t scales[16];
        decode_scales_q3_k(x[i].scales, scales);
        // Quants are used as low | high << 2 in [0, 7]; the offset 4 comes off through the bsums.
        const __m256i scales16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(scales)));
        const int offset = 4 * scaled_bsums(scales16, y[i].bsums);
        const __m256i hmask = load_32(x[i].hmask);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i qs = load_32(x[i].qs + 32 * h);
            for (int c = 0; c < 4; ++c) {
                const __m256i low = _mm256_and_si256(_mm256_srli_epi16(qs, 2 * c), two_bits);
                const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hmask, 4 * h + c), one_bit);
                const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
                const int j = 8 * h + 2 * c;
                sumi = _mm256_add_epi32(
                    sumi, scaled_dot_16x2(q, y[i].qs + 128 * h + 32 * c, scales[j], scales[j + 1]));
            }
        }
        const float d = half(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        sum_offsets += d * float(offset);
    }
    *s = hsum_f32x8(acc) - sum_offsets;
}

void vec_dot_q4_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    *s = vec_dot_k4_avx2<block_q4_k>(n, vx, vy, [](const block_q4_k &b, int p) {
        const __m256i nibble = _mm256_set1_epi8(0xF);
        const __m256i qs = load_32(b.qs + 32 * p);
        return quants_64{_mm256_and_si256(qs, nibble), _mm256_and_si256(_mm256_srli_epi16(qs, 4), nibble)};
    });
}

void vec_dot_q5_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    *s = vec_dot_k4_avx2<block_q5_k>(n, vx, vy, [](const block_q5_k &b, int p) {
        const __m256i nibble = _mm256_set1_epi8(0xF), one_bit = _mm256_set1_epi8(1);
        const __m256i qs = load_32(b.qs + 32 * p);
        const __m256i qh = load_32(b.qh);
        const __m256i hbit_lo = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p), one_bit);
        const __m256i hbit_hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * p + 1), one_bit);
        return quants_64{_mm256_or_si256(_mm256_and_si256(qs, nibble), _mm256_slli_epi16(hbit_lo, 4)),
                         _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qs, 4), nibble),
                                         _mm256_slli_epi16(hbit_hi, 4))};
    });
}

void vec_dot_q6_k_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_q6_k *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    const __m256i nibble = _mm256_set1_epi8(0xF), two_bits = _mm256_set1_epi8(3);
    __m256 acc = _mm256_setzero_ps();
    float sum_offsets = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        // Quants are used unsigned in [0, 63]; the offset 32 comes off through the bsums.
        const __m256i scales16 =
            _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x[i].scales)));
        const int offset = 32 * scaled_bsums(scales16, y[i].bsums);
        __m256i sumi = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = load_32(x[i].ql + 64 * h);
            const __m256i ql1 = load_32(x[i].ql + 64 * h + 32);
            const __m256i qh = load_32(x[i].qh + 32 * h);
            for (int c = 0; c < 4; ++c) {
                const __m256i ql = c & 1 ? ql1 : ql0;
                const __m256i low = _mm256_and_si256(c < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble);
                const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), two_bits);
                const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));
                const int j = 8 * h + 2 * c;
                sumi = _mm256_add_epi32(
                    sumi, scaled_dot_16x2(q, y[i].qs + 128 * h + 32 * c, x[i].scales[j], x[i].scales[j + 1]));
            }
        }
        const float d = half(x[i].d) * y[i].d;
        acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(sumi), acc);
        sum_offsets += d * float(offset);
    }
    *s = hsum_f32x8(acc) - sum_offsets;
}

void from_float_q8_k_avx2(const float *src, void *dst, int64_t n) {
    auto *y = static_cast<block_q8_k *>(dst);
    for (int64_t i = 0; i < n / qk_k; ++i, src += qk_k) {
        float amax = 0;
        for (int k = 0; k < qk_k; k += 32) amax = std::max(amax, absmax_32(src + k));
        if (!amax) {
            std::memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = 127.f / amax;
        const __m256 mul = _mm256_set1_ps(iscale);
        auto scaled = [&](int k) {
            return _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(src + k), mul),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        };
        for (int k = 0; k < qk_k; k += 32) {
            const __m256i q = pack_i8_32(scaled(k), scaled(k + 8), scaled(k + 16), scaled(k + 24));
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(y[i].qs + k), q);
            // Two groups of 16: pairwise byte sums, then sums of four pairs per 128-bit lane.
            const __m256i pairs = _mm256_maddubs_epi16(_mm256_set1_epi8(1), q);
            const __m256i quads = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
            const __m128i lane0 = _mm256_castsi256_si128(quads), lane1 = _mm256_extracti128_si256(quads, 1);
            __m128i sums = _mm_hadd_epi32(lane0, lane1);  // [a01, a23, b01, b23]
            sums = _mm_hadd_epi32(sums, sums);            // [a, b, a, b]
            y[i].bsums[k / 16] = int16_t(_mm_extract_epi32(sums, 0));
            y[i].bsums[k / 16 + 1] = int16_t(_mm_extract_epi32(sums, 1));
        }
        y[i].d = 1 / iscale;
    }
}

// ---- iq4_nl, iq4_xs: a byte shuffle looks the 4-bit indices up in the codebook. Integer sums are
// exact and each block ends in one std::fma into one float sum in block order, the reference's
// own operations, so these give the reference's bits (not only its value within rounding).

// 32 codebook levels (signed bytes) of 16 packed bytes, in element order.
__m256i iq4_levels_32(const uint8_t *qs) {
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kvalues_iq4nl)));
    return _mm256_shuffle_epi8(table, nibbles_32(qs));
}

void vec_dot_iq4_nl_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_iq4_nl *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    static_assert(qk4_nl == qk8_0);
    float sum = 0;
    for (int64_t i = 0; i < n / qk4_nl; ++i) {
        const int sumi = hsum_i32x8(dot_i8_i8(iq4_levels_32(x[i].qs), load_32(y[i].qs)));
        sum = std::fma(half(x[i].d) * half(y[i].d), float(sumi), sum);
    }
    *s = sum;
}

// mxfp4: the same lookup into its doubled E2M1 levels; the scale 2^(e - 128) as vec_dot_mxfp4_ref
// takes it, so the same bits.
void vec_dot_mxfp4_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_mxfp4 *>(vx);
    const auto *y = static_cast<const block_q8_0 *>(vy);
    static_assert(qk_mxfp4 == qk8_0);
    const __m256i table =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kvalues_mxfp4)));
    float sum = 0;
    for (int64_t i = 0; i < n / qk_mxfp4; ++i) {
        const __m256i levels = _mm256_shuffle_epi8(table, nibbles_32(x[i].qs));
        const int sumi = hsum_i32x8(dot_i8_i8(levels, load_32(y[i].qs)));
        sum = std::fma(e8m0_to_fp32_half(x[i].e) * half(y[i].d), float(sumi), sum);
    }
    *s = sum;
}

void vec_dot_iq4_xs_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_iq4_xs *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        __m256i sumi = _mm256_setzero_si256();
        for (int j = 0; j < qk_k / 32; ++j) {
            sumi = _mm256_add_epi32(sumi, dot_i8_i8_scaled(iq4_levels_32(x[i].qs + 16 * j),
                                                           load_32(y[i].qs + 32 * j), scale_iq4_xs(j, x[i])));
        }
        sum = std::fma(half(x[i].d) * y[i].d, float(hsum_i32x8(sumi)), sum);
    }
    *s = sum;
}

// ---- tq1_0, tq2_0: the codes c in {0, 1, 2} (weight c - 1) are unsigned, so the integer sum is
// sum c * y minus the sum of the activations (their bsums). As for iq4, integer sums are exact and
// each block ends in one std::fma into one float sum in block order: the reference's bits.

// The sum of a q8_K block's 256 activations.
int activation_sum(const block_q8_k &y) {
    return scaled_bsums(_mm256_set1_epi16(1), y.bsums);
}

// The codes of 32 tq1_0 bytes (see tq1_code): byte b's code for the power of 3 that its 16-bit
// lane of pow3 holds. Each byte is moved to the top of a 16-bit lane, so that the lane product
// keeps byte * 3^k mod 256 in the top byte, and the high half of its product with 3 is the code.
__m256i tq1_codes_32(__m256i bytes, __m256i pow3) {
    const __m256i three = _mm256_set1_epi16(3);
    const __m256i low = _mm256_mullo_epi16(_mm256_slli_epi16(bytes, 8), pow3);
    const __m256i high =
        _mm256_mullo_epi16(_mm256_and_si256(bytes, _mm256_set1_epi16(int16_t(0xFF00))), pow3);
    return _mm256_or_si256(_mm256_mulhi_epu16(low, three),
                           _mm256_slli_epi16(_mm256_mulhi_epu16(high, three), 8));
}

void vec_dot_tq1_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_tq1_0 *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    // Codes 0..4 of qs[0..31] are elements 0..159; codes k and k + 1 of qs[32..47] (the 16 bytes
    // in both halves) elements 160 + 16 k ..; code 4 of qs[32..47] and the four codes of qh[0..3]
    // (repeated four times, lane 4k + j holding qh[j] for code k) elements 224..255.
    const __m256i pow3_first[5] = {_mm256_set1_epi16(1), _mm256_set1_epi16(3), _mm256_set1_epi16(9),
                                   _mm256_set1_epi16(27), _mm256_set1_epi16(81)};
    const __m256i pow3_pairs[2] = {_mm256_setr_m128i(_mm_set1_epi16(1), _mm_set1_epi16(3)),
                                   _mm256_setr_m128i(_mm_set1_epi16(9), _mm_set1_epi16(27))};
    const __m256i pow3_last = _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        const int8_t *q8 = y[i].qs;
        const __m256i first = load_32(x[i].qs);
        const __m128i tail = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x[i].qs + 32));
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, sizeof qh);
        __m256i acc = _mm256_setzero_si256();
        for (int k = 0; k < 5; ++k)
            acc = _mm256_add_epi32(acc, dot_u8_i8(tq1_codes_32(first, pow3_first[k]), load_32(q8 + 32 * k)));
        for (int p = 0; p < 2; ++p) {
            const __m256i codes = tq1_codes_32(_mm256_set_m128i(tail, tail), pow3_pairs[p]);
            acc = _mm256_add_epi32(acc, dot_u8_i8(codes, load_32(q8 + 160 + 32 * p)));
        }
        const __m256i last = tq1_codes_32(_mm256_set_m128i(_mm_set1_epi32(int(qh)), tail), pow3_last);
        acc = _mm256_add_epi32(acc, dot_u8_i8(last, load_32(q8 + 224)));
        const int sumi = hsum_i32x8(acc) - activation_sum(y[i]);
        sum = std::fma(half(x[i].d) * y[i].d, float(sumi), sum);
    }
    *s = sum;
}

void vec_dot_tq2_0_avx2(int64_t n, float *s, const void *vx, const void *vy) {
    const auto *x = static_cast<const block_tq2_0 *>(vx);
    const auto *y = static_cast<const block_q8_k *>(vy);
    const __m256i three = _mm256_set1_epi8(3);
    float sum = 0;
    for (int64_t i = 0; i < n / qk_k; ++i) {
        __m256i acc = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i packed = load_32(x[i].qs + 32 * h);
            for (int l = 0; l < 4; ++l) {
                const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(packed, 2 * l), three);
                acc = _mm256_add_epi32(acc, dot_u8_i8(codes, load_32(y[i].qs + 128 * h + 32 * l)));
            }
        }
        const int sumi = hsum_i32x8(acc) - activation_sum(y[i]);
        sum = std::fma(half(x[i].d) * y[i].d, float(sumi), sum);
    }
    *s = sum;
}

}  // namespace weft::cpu
