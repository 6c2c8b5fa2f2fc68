// src/backends/cpu/f16_int16_mm_avx512.cpp — the int16 group kernel with AVX-512 VNNI: one zmm holds
// the 16 rows of a group, vpdpwssd adds two int16 products per row and instruction (32 in all).
// Bit-identical to the scalar kernel (f16_int16_mm.h); chosen only where the CPU has VNNI. The
// activation quantizer needs only AVX-512 F/BW (a block in 2 zmm): the scalar definition's bits.
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "backends/cpu/f16_int16_mm_impl.h"

namespace weft::cpu {

namespace {

struct zmm_ops {
    using ints = __m512i;
    using floats = __m512;
    static floats zero_floats() { return _mm512_setzero_ps(); }
    static ints load_ints(const void *p) { return _mm512_loadu_si512(p); }
    static floats load_floats(const void *p) { return _mm512_loadu_ps(p); }
    static ints broadcast(uint32_t pair) { return _mm512_set1_epi32(int(pair)); }
    static floats broadcast_float(const uint32_t *p) {
        return _mm512_set1_ps(*reinterpret_cast<const float *>(p));
    }
    static ints pair_products(ints w, ints x) { return _mm512_madd_epi16(w, x); }
    static ints add_pair_products(ints sum, ints w, ints x) { return _mm512_dpwssd_epi32(sum, w, x); }
    static ints add_ints(ints a, ints b) { return _mm512_add_epi32(a, b); }
    // 16 exponent bytes as words e << 23
    static ints load_exponents(const void *p) {
        return _mm512_slli_epi32(_mm512_cvtepu8_epi32(_mm_loadu_si128(static_cast<const __m128i *>(p))),
                                 int16_exponent_shift);
    }
    // ldexp(float(v), e) lane by lane, e given as words e << 23: e added to the exponent field of each
    // nonzero lane's float (exact: its exponent stays below the infinities'), a zero lane left +0
    static floats ldexp_of_ints(ints v, ints exponent_words) {
        const __m512i f = _mm512_castps_si512(_mm512_cvtepi32_ps(v));
        return _mm512_castsi512_ps(_mm512_mask_add_epi32(f, _mm512_test_epi32_mask(v, v), f, exponent_words));
    }
    static floats mul(floats a, floats b) { return _mm512_mul_ps(a, b); }
    static floats fma(floats a, floats b, floats c) { return _mm512_fmadd_ps(a, b, c); }
    static void store(float *p, floats v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

float quantize_int16_weight_row_avx512(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs) {
    return int16_kernels::quantize_weight_row(v, k, exponents, pairs);
}

void quantize_int16_avx512(const float *x, int64_t k, uint32_t *column) {
    // quantize_int16_block on a block's 2 vectors of 16, as quantize_int16_avx2 does it: the same max,
    // division, product, clamp and rounding (cvtps2dq rounds to nearest even, as nearbyint does),
    // then the 32 values narrowed to int16 in order (value 2j in the low half of word j)
    const __m512 magnitude = _mm512_castsi512_ps(_mm512_set1_epi32(0x7fffffff));
    const __m512i largest_finite = _mm512_set1_epi32(0x7f7fffff);
    const float limit = float(int16_limit);
    const __m512 high = _mm512_set1_ps(limit), low = _mm512_set1_ps(-limit);
    for (int64_t b = 0; b < k / int16_block; ++b) {
        const float *v = x + b * int16_block;
        uint32_t *out = column + b * int16_panel_words;
        const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
        const __m512 a0 = _mm512_and_ps(v0, magnitude), a1 = _mm512_and_ps(v1, magnitude);
        // an infinity or a NaN
        const __mmask16 special = _mm512_cmpgt_epi32_mask(_mm512_castps_si512(a0), largest_finite) |
                                  _mm512_cmpgt_epi32_mask(_mm512_castps_si512(a1), largest_finite);
        __m512 m = _mm512_max_ps(a0, a1);
        m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, 0x4E));
        m = _mm512_max_ps(m, _mm512_shuffle_f32x4(m, m, 0xB1));
        m = _mm512_max_ps(m, _mm512_permute_ps(m, 0x4E));
        m = _mm512_max_ps(m, _mm512_permute_ps(m, 0xB1));
        const float max_abs = _mm512_cvtss_f32(m);
        if (special != 0 || max_abs == 0.0f) {
            const float scale = special == 0 ? 0.0f : std::numeric_limits<float>::quiet_NaN();
            std::memcpy(out, &scale, sizeof scale);
            _mm512_storeu_si512(out + 1, _mm512_setzero_si512());
            continue;
        }
        const __m512 inverse = _mm512_set1_ps(limit / max_abs);
        // a NaN product (a zero value times an infinite inverse) clamps to the low end, then the zero
        // values are set to 0
        const __m512 t0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, inverse), low), high);
        const __m512 t1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, inverse), low), high);
        const __m512i q0 =
            _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v0, _mm512_setzero_ps(), _CMP_NEQ_UQ), t0);
        const __m512i q1 =
            _mm512_maskz_cvtps_epi32(_mm512_cmp_ps_mask(v1, _mm512_setzero_ps(), _CMP_NEQ_UQ), t1);
        const float scale = max_abs / limit;
        std::memcpy(out, &scale, sizeof scale);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 1), _mm512_cvtepi32_epi16(q0));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 9), _mm512_cvtepi32_epi16(q1));
    }
}

void int16_groups_avx512(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    int16_kernels::groups<zmm_ops, 4, 2, 6>(groups, group_stride, n_groups, k, x, width, n_cols, dst,
                                            dst_stride);
}

}  // namespace weft::cpu
