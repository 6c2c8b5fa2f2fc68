// src/backends/cpu/ops_attention_avx2.cpp — attention_impl.h compiled for AVX2 + FMA + F16C.
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/attention_simd.h"

namespace weft::cpu {

namespace {
struct ymm {
    using type = __m256;
    static constexpr int width = 8;
    static type load(const float *p) { return _mm256_loadu_ps(p); }
    static void store(float *p, type v) { _mm256_storeu_ps(p, v); }
    static type fma(type a, type b, type c) { return _mm256_fmadd_ps(a, b, c); }
    static type set1(float x) { return _mm256_set1_ps(x); }
    static type zero() { return _mm256_setzero_ps(); }
    static type add(type a, type b) { return _mm256_add_ps(a, b); }
    static type mul(type a, type b) { return _mm256_mul_ps(a, b); }
    // b where a is not above it (NaN a or b, equal values): std::max(b, a)
    static type max(type a, type b) { return _mm256_max_ps(a, b); }
    static type round_f16(type x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
    static type widen_fp16(const char *p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    }
    static float fp16_to_float(uint16_t h) { return _cvtsh_ss(h); }
    static constexpr bool can_transpose16 = false;
    static void transpose16(const type *, float *, int64_t) {}
    // The integer dots of NH q8_0 query heads with 16 q8_0 or q4_0 K rows (rows[i], nb blocks each),
    // to out[h][0, 16), 8 rows at a time: lane i of a vector is row i. Per block the rows' quants are
    // transposed so that vector g holds the 4 quants [4g, 4g + 4) of every row; q8_0: |k| times q with
    // k's sign (vpmaddubsw: no pair reaches the int16 limit, |k| <= 128 and |q| <= 127), q4_0: the
    // nibbles (k + 8) times q from -8 * the query's sum; summed in int32.
    static constexpr bool can_dot_int = true;
    static bool has_dot_int() { return true; }
    template <int NH, dtype T>
    static void dots_int_16(const q8_query *q, const char *const *rows, int64_t nb, float *const *out) {
        for (int half = 0; half < 2; ++half) dots_int_8<NH, T>(q, rows + 8 * half, nb, out, 8 * half);
    }
    // Within each 128-bit lane, the 4 x 4 32-bit words of z[0..3] transposed: word m of u[j]'s lane
    // is word j of z[m]'s.
    static void transpose_in_lanes(const __m256i z[4], __m256i u[4]) {
        const __m256i lo01 = _mm256_unpacklo_epi32(z[0], z[1]), hi01 = _mm256_unpackhi_epi32(z[0], z[1]);
        const __m256i lo23 = _mm256_unpacklo_epi32(z[2], z[3]), hi23 = _mm256_unpackhi_epi32(z[2], z[3]);
        u[0] = _mm256_unpacklo_epi64(lo01, lo23);
        u[1] = _mm256_unpackhi_epi64(lo01, lo23);
        u[2] = _mm256_unpacklo_epi64(hi01, hi23);
        u[3] = _mm256_unpackhi_epi64(hi01, hi23);
    }
    // t[g]: quant group g of the 8 rows, lane i row i (q8_0 signed, q4_0 the unsigned nibbles)
    template <dtype T>
    static void transposed_quants(const char *const *rows, int64_t at, __m256i t[8]) {
        __m256i r[8], u[8];
        if constexpr (T == dtype::q8_0) {
            for (int i = 0; i < 8; ++i)
                r[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(rows[i] + at + 2));
            // u[j] (rows 0-3) and u[4 + j] (rows 4-7): groups j (low lane) and j + 4 (high lane)
            transpose_in_lanes(r, u);
            transpose_in_lanes(r + 4, u + 4);
            for (int j = 0; j < 4; ++j) {  // t[g]: group g of rows 0-7 in lanes 0-7
                t[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
                t[j + 4] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
            }
        } else {
            static_assert(T == dtype::q4_0);
            // 128-bit lane L of z[m]: the 16 nibble bytes of row 4L + m; after two interleaves within
            // the lanes, lane i of u[j] holds bytes 4j .. 4j + 3 of row i: groups j (low nibbles) and
            // j + 4 (high nibbles)
            __m256i z[4];
            for (int m = 0; m < 4; ++m)
                z[m] = _mm256_inserti128_si256(
                    _mm256_castsi128_si256(
                        _mm_loadu_si128(reinterpret_cast<const __m128i *>(rows[m] + at + 2))),
                    _mm_loadu_si128(reinterpret_cast<const __m128i *>(rows[4 + m] + at + 2)), 1);
            transpose_in_lanes(z, u);
            const __m256i low4 = _mm256_set1_epi8(0x0F);
            for (int j = 0; j < 4; ++j) {
                t[j] = _mm256_and_si256(u[j], low4);
                t[j + 4] = _mm256_and_si256(_mm256_srli_epi16(u[j], 4), low4);
            }
        }
    }
    template <int NH, dtype T>
    static void dots_int_8(const q8_query *q, const char *const *rows, int64_t nb, float *const *out,
                           int at_lane) {
        const __m256i ones = _mm256_set1_epi16(1);
        __m256 acc[NH];
        for (auto &x : acc) x = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
            const int64_t at = b * int_k_block_bytes<T>;
            __m256i t[8];
            transposed_quants<T>(rows, at, t);
            alignas(16) uint16_t scale_bits[8];
            gather_scales(rows, at, 8, scale_bits);
            const __m256 dk = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i *>(scale_bits)));
            __m256i magnitude[8];
            for (int g = 0; g < 8; ++g) magnitude[g] = T == dtype::q8_0 ? _mm256_abs_epi8(t[g]) : t[g];
            for (int h = 0; h < NH; ++h) {
                const int8_t *qq = q[h].blocks[b].qs;
                __m256i sum = _mm256_set1_epi32(T == dtype::q8_0 ? 0 : -int_k_offset<T> * q[h].sum[b]);
                for (int g = 0; g < 8; ++g) {
                    int32_t four;
                    std::memcpy(&four, qq + 4 * g, sizeof four);
                    const __m256i qv = _mm256_set1_epi32(four);
                    const __m256i signed_q = T == dtype::q8_0 ? _mm256_sign_epi8(qv, t[g]) : qv;
                    sum = _mm256_add_epi32(
                        sum, _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[g], signed_q), ones));
                }
                acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum),
                                         _mm256_mul_ps(dk, _mm256_set1_ps(q[h].d[b])), acc[h]);
            }
        }
        for (int h = 0; h < NH; ++h) _mm256_storeu_ps(out[h] + at_lane, acc[h]);
    }
};
}  // namespace

void attention_task_avx2(const attention_task &a) {
    run_attention_task<simd_attention_loops<ymm>>(a);
}

bool attention_token_split_avx2(const attention_task &a, const attention_split &sp) {
    if (!reads_rows<simd_attention_loops<ymm>>(*a.k, *a.v, a.max_slots)) return false;
    run_attention_token_split<simd_attention_loops<ymm>>(a, sp);
    return true;
}

}  // namespace weft::cpu
