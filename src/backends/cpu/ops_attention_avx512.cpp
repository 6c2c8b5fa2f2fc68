// src/backends/cpu/ops_attention_avx512.cpp — attention_impl.h compiled for AVX-512.
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "backends/cpu/attention_simd.h"
#include "backends/cpu/simd_level.h"

namespace weft::cpu {

namespace {
struct zmm {
    using type = __m512;
    static constexpr int width = 16;
    static type load(const float *p) { return _mm512_loadu_ps(p); }
    static void store(float *p, type v) { _mm512_storeu_ps(p, v); }
    static type fma(type a, type b, type c) { return _mm512_fmadd_ps(a, b, c); }
    static type set1(float x) { return _mm512_set1_ps(x); }
    static type zero() { return _mm512_setzero_ps(); }
    static type add(type a, type b) { return _mm512_add_ps(a, b); }
    static type sub(type a, type b) { return _mm512_sub_ps(a, b); }
    static type mul(type a, type b) { return _mm512_mul_ps(a, b); }
    // b where a is not above it (NaN a or b, equal values): std::max(b, a)
    static type max(type a, type b) { return _mm512_max_ps(a, b); }
    static type round_f16(type x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
    static type widen_fp16(const char *p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    }
    // 16 int8 values to floats (exact)
    static type widen_i8(const char *p) {
        return _mm512_cvtepi32_ps(
            _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))));
    }
    // the low (or high) nibbles of 16 bytes, less 8, to floats (exact)
    static type widen_nibbles(const char *p, bool high) {
        __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
        if (high) b = _mm_srli_epi16(b, 4);
        b = _mm_sub_epi8(_mm_and_si128(b, _mm_set1_epi8(0x0F)), _mm_set1_epi8(8));
        return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
    }
    static float fp16_to_float(uint16_t h) { return _cvtsh_ss(h); }
    // exp_reference (canonical_math.h) of 16 values: its operations lane by lane, the selections
    // as masks (so the same bits; GCC's own vectorization of the scalar loop took ~3x the instructions).
    static constexpr bool has_exp = true;
    static type exp_reference(type x) {
        const __m512 shifter = _mm512_set1_ps(0x1.8p23f);
        const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shifter), shifter);
        // fma(-n, c, y) is fnmadd(n, c, y): the same exact product, negated, then one rounding
        const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                          _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
        const __m512 u = _mm512_mul_ps(b, b);
        const __m512 j = _mm512_fmadd_ps(
            _mm512_fmadd_ps(
                _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
            u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
        // Where every n lies in [-125, 127] (a softmax's scores within ~86 of their max), the selections
        // below take e1 = n + 127, e2 = 127 (f2 = 1, an exact factor) and `scaled`: j * 2^n alone.
        const __mmask16 normal = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-125.0f), _CMP_GE_OQ) &
                                 _mm512_cmp_ps_mask(n, _mm512_set1_ps(127.0f), _CMP_LE_OQ);
        if (normal == 0xFFFF)
            return _mm512_mul_ps(j,
                                 _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23)));
        // nc = !(n >= -192) ? -192 : (n > 192 ? 192 : n)
        const __mmask16 at_least = _mm512_cmp_ps_mask(n, _mm512_set1_ps(-192.0f), _CMP_GE_OQ);
        __m512 nc = _mm512_mask_blend_ps(at_least, _mm512_set1_ps(-192.0f), n);
        nc = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(nc, _mm512_set1_ps(192.0f), _CMP_GT_OQ), nc,
                                  _mm512_set1_ps(192.0f));
        const __mmask16 low = _mm512_cmp_ps_mask(nc, _mm512_set1_ps(-125.0f), _CMP_LT_OQ);
        const __mmask16 high = _mm512_cmp_ps_mask(nc, _mm512_set1_ps(127.0f), _CMP_GT_OQ);
        const __m512i bias = _mm512_set1_epi32(127);
        // e1 = int(low ? nc + 100 : min(nc, 127)) + 127; e2 = low ? 27 : (high ? int(nc - 127) + 127 : 127)
        const __m512 t1 = _mm512_mask_blend_ps(low, _mm512_mask_blend_ps(high, nc, _mm512_set1_ps(127.0f)),
                                               _mm512_add_ps(nc, _mm512_set1_ps(100.0f)));
        const __m512i e1 = _mm512_add_epi32(_mm512_cvttps_epi32(t1), bias);
        const __m512i e2 = _mm512_mask_blend_epi32(
            low,
            _mm512_mask_blend_epi32(
                high, bias,
                _mm512_add_epi32(_mm512_cvttps_epi32(_mm512_sub_ps(nc, _mm512_set1_ps(127.0f))), bias)),
            _mm512_set1_epi32(27));
        const __m512 f1 = _mm512_castsi512_ps(_mm512_slli_epi32(e1, 23));
        const __m512 f2 = _mm512_castsi512_ps(_mm512_slli_epi32(e2, 23));
        const __m512 scaled = _mm512_mul_ps(_mm512_mul_ps(j, f1), f2);
        // |n| > 192: n <= 0 ? 0 : INF
        const __m512 big =
            _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ),
                                 _mm512_set1_ps(std::numeric_limits<float>::infinity()), _mm512_setzero_ps());
        const __mmask16 far = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_GT_OQ);
        return _mm512_mask_blend_ps(far, scaled, big);
    }
    // Lane i of the result: the lane tree of canonical_math.h (sum_lanes_16) over the lanes of
    // a[i], all 16 trees at once: each level adds the halves of two vectors' partial sums.
    static type reduce16(const type a[16]) {
        __m512 b[8], c[4], d[2];
        for (int i = 0; i < 8; ++i)  // s8 of a[2i] in lanes 0-7, of a[2i + 1] in lanes 8-15
            b[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                                 _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
        for (int i = 0; i < 4; ++i)  // s4: one 128-bit block per vector
            c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x88),
                                 _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xDD));
        for (int i = 0; i < 2; ++i)  // s2: two lanes per vector
            d[i] = _mm512_add_ps(_mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44),
                                 _mm512_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
        // the sums of a[4r + q] land in lane 4q + r: put lane i's own back in place
        const __m512 sums =
            _mm512_add_ps(_mm512_shuffle_ps(d[0], d[1], 0x88), _mm512_shuffle_ps(d[0], d[1], 0xDD));
        return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15),
                                     sums);
    }
    // The integer dots of NH q8_0 query heads with 16 q8_0 or q4_0 K rows (rows[i], nb blocks each),
    // to out[h][0, 16): lane i of a vector is row i. Per block the rows' quants are transposed, as
    // unsigned bytes (q8_0: q + 128, q4_0: its nibbles, q + 8), so that vector g holds the 4 quants
    // [4g, 4g + 4) of every row; vpdpbusd against the query's 4 quants broadcast, from -offset * the
    // query's sum, gives each row's exact sum.
    static constexpr bool can_dot_int = true;
    static bool has_dot_int() { return simd_level_supported(simd_level::avx512_vnni); }
    // the 8 vectors of block `at` (bytes) of the 16 rows
    // Within each 128-bit lane, the 4 x 4 32-bit words of z[0..3] transposed: word m of u[j]'s lane
    // is word j of z[m]'s.
    static void transpose_in_lanes(const __m512i z[4], __m512i u[4]) {
        const __m512i lo01 = _mm512_unpacklo_epi32(z[0], z[1]), hi01 = _mm512_unpackhi_epi32(z[0], z[1]);
        const __m512i lo23 = _mm512_unpacklo_epi32(z[2], z[3]), hi23 = _mm512_unpackhi_epi32(z[2], z[3]);
        u[0] = _mm512_unpacklo_epi64(lo01, lo23);
        u[1] = _mm512_unpackhi_epi64(lo01, lo23);
        u[2] = _mm512_unpacklo_epi64(hi01, hi23);
        u[3] = _mm512_unpackhi_epi64(hi01, hi23);
    }
    template <dtype T>
    static void transposed_quants(const char *const *rows, int64_t at, __m512i t[8]) {
        if constexpr (T == dtype::q8_0) {
            // rows (p, p + 4) share a vector, the row p in its low half: after the transposition
            // below, lane i holds row i
            static constexpr int pairs[8][2] = {{0, 4},  {1, 5},  {2, 6},   {3, 7},
                                                {8, 12}, {9, 13}, {10, 14}, {11, 15}};
            const __m512i flip = _mm512_set1_epi8(char(0x80));
            __m512i z[8], u[8];
            for (int p = 0; p < 8; ++p) {
                const auto *lo = reinterpret_cast<const __m256i *>(rows[pairs[p][0]] + at + 2);
                const auto *hi = reinterpret_cast<const __m256i *>(rows[pairs[p][1]] + at + 2);
                z[p] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(lo)),
                                                           _mm256_loadu_si256(hi), 1),
                                        flip);
            }
            // 32-bit then 64-bit interleaves within 128-bit lanes: for the vectors of rows 0-7,
            // u[j] holds quant group j of the rows (0, 1, 2, 3) in 128-bit lane 0 and (4, 5, 6, 7) in
            // lane 2, group j + 4 in lanes 1 and 3; u[4 + j] the same for rows 8-15
            for (int h = 0; h < 2; ++h) transpose_in_lanes(z + 4 * h, u + 4 * h);
            for (int j = 0; j < 4; ++j) {  // t[g]: group g of rows 0-15 in lanes 0-15
                t[j] = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);
                t[j + 4] = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);
            }
        } else {
            static_assert(T == dtype::q4_0);
            // 128-bit lane L of z[m]: the 16 nibble bytes of row 4L + m; after two interleaves
            // within the lanes, lane i of u[j] holds bytes 4j .. 4j + 3 of row i: groups j (low
            // nibbles, values 4j ..) and j + 4 (high nibbles, values 16 + 4j ..)
            __m512i z[4];
            for (int m = 0; m < 4; ++m) {
                auto nibbles = [&](int l) {
                    return _mm_loadu_si128(reinterpret_cast<const __m128i *>(rows[4 * l + m] + at + 2));
                };
                // the lane numbers are written out: an immediate, also where loops are not unrolled (-O1)
                z[m] = _mm512_castsi128_si512(nibbles(0));
                z[m] = _mm512_inserti32x4(z[m], nibbles(1), 1);
                z[m] = _mm512_inserti32x4(z[m], nibbles(2), 2);
                z[m] = _mm512_inserti32x4(z[m], nibbles(3), 3);
            }
            __m512i u[4];
            transpose_in_lanes(z, u);
            const __m512i low4 = _mm512_set1_epi8(0x0F);
            for (int j = 0; j < 4; ++j) {
                t[j] = _mm512_and_si512(u[j], low4);
                t[j + 4] = _mm512_and_si512(_mm512_srli_epi16(u[j], 4), low4);
            }
        }
    }
    template <int NH, dtype T>
    static void dots_int_16(const q8_query *q, const char *const *rows, int64_t nb, float *const *out) {
        __m512 acc[NH];
        for (auto &x : acc) x = _mm512_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t at = b * int_k_block_bytes<T>;
            __m512i t[8];
            transposed_quants<T>(rows, at, t);
            alignas(32) uint16_t scale_bits[16];
            gather_scales(rows, at, 16, scale_bits);
            const __m512 dk =
                _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i *>(scale_bits)));
            for (int h = 0; h < NH; ++h) {
                const int8_t *qq = q[h].blocks[b].qs;
                __m512i sum = _mm512_set1_epi32(-int_k_offset<T> * q[h].sum[b]);
                for (int g = 0; g < 8; ++g) {
                    int32_t four;
                    std::memcpy(&four, qq + 4 * g, sizeof four);
                    sum = _mm512_dpbusd_epi32(sum, t[g], _mm512_set1_epi32(four));
                }
                acc[h] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum),
                                         _mm512_mul_ps(dk, _mm512_set1_ps(q[h].d[b])), acc[h]);
            }
        }
        for (int h = 0; h < NH; ++h) _mm512_storeu_ps(out[h], acc[h]);
    }

    // 16 vectors of 16 values (the rows), transposed: value d of row i to dst[d * stride + i].
    static constexpr bool can_transpose16 = true;
    static void transpose16(const type rows[16], float *dst, int64_t stride) {
        __m512 r[16], t[16];
        for (int i = 0; i < 16; ++i) r[i] = rows[i];
        // 32-bit interleave of row pairs, then 64-bit interleave of pair pairs: u[4k + m], 128-bit lane
        // L, holds value 4L + m of rows 4k .. 4k + 3
        for (int k = 0; k < 8; ++k) {
            t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
            t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
        }
        for (int k = 0; k < 4; ++k) {
            const __m512d a = _mm512_castps_pd(t[4 * k]), b = _mm512_castps_pd(t[4 * k + 1]);
            const __m512d c = _mm512_castps_pd(t[4 * k + 2]), d = _mm512_castps_pd(t[4 * k + 3]);
            r[4 * k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            r[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            r[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            r[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        // then the 128-bit lanes: value 4L + m of all 16 rows
        for (int m = 0; m < 4; ++m) {
            const __m512 v02 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0x88),
                         w02 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0x88);
            const __m512 v13 = _mm512_shuffle_f32x4(r[m], r[4 + m], 0xDD),
                         w13 = _mm512_shuffle_f32x4(r[8 + m], r[12 + m], 0xDD);
            _mm512_storeu_ps(dst + (0 + m) * stride, _mm512_shuffle_f32x4(v02, w02, 0x88));
            _mm512_storeu_ps(dst + (8 + m) * stride, _mm512_shuffle_f32x4(v02, w02, 0xDD));
            _mm512_storeu_ps(dst + (4 + m) * stride, _mm512_shuffle_f32x4(v13, w13, 0x88));
            _mm512_storeu_ps(dst + (12 + m) * stride, _mm512_shuffle_f32x4(v13, w13, 0xDD));
        }
    }
};
}  // namespace

void attention_task_avx512(const attention_task &a) {
    run_attention_task<simd_attention_loops<zmm>>(a);
}

bool attention_token_split_avx512(const attention_task &a, const attention_split &sp) {
    if (!reads_rows<simd_attention_loops<zmm>>(*a.k, *a.v, a.max_slots)) return false;
    run_attention_token_split<simd_attention_loops<zmm>>(a, sp);
    return true;
}

}  // namespace weft::cpu
