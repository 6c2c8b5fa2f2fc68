// src/backends/cpu/f16_int16_mm_avx2.cpp — the int16 group kernel with AVX2: the 16 rows of a group in
// two ymm, vpmaddwd's pair products added with vpaddd. Bit-identical to the scalar kernel
// (f16_int16_mm.h).
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "backends/cpu/f16_int16_mm_impl.h"

namespace weft::cpu {

namespace {

// 16 rows as two halves of 8
struct ymm_pair_ops {
    struct ints {
        __m256i lo, hi;
    };
    struct floats {
        __m256 lo, hi;
    };
    static floats zero_floats() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
    static ints load_ints(const void *p) {
        const auto *q = static_cast<const __m256i *>(p);
        return {_mm256_loadu_si256(q), _mm256_loadu_si256(q + 1)};
    }
    static floats load_floats(const void *p) {
        const auto *q = static_cast<const float *>(p);
        return {_mm256_loadu_ps(q), _mm256_loadu_ps(q + 8)};
    }
    static ints broadcast(uint32_t pair) {
        const __m256i v = _mm256_set1_epi32(int(pair));
        return {v, v};
    }
    static floats broadcast_float(const uint32_t *p) {
        const __m256 v = _mm256_broadcast_ss(reinterpret_cast<const float *>(p));
        return {v, v};
    }
    static ints pair_products(ints w, ints x) {
        return {_mm256_madd_epi16(w.lo, x.lo), _mm256_madd_epi16(w.hi, x.hi)};
    }
    static ints add_pair_products(ints sum, ints w, ints x) {
        return {_mm256_add_epi32(sum.lo, _mm256_madd_epi16(w.lo, x.lo)),
                _mm256_add_epi32(sum.hi, _mm256_madd_epi16(w.hi, x.hi))};
    }
    static ints add_ints(ints a, ints b) {
        return {_mm256_add_epi32(a.lo, b.lo), _mm256_add_epi32(a.hi, b.hi)};
    }
    // 16 exponent bytes as words e << 23
    static ints load_exponents(const void *p) {
        const auto *q = static_cast<const __m128i *>(p);
        const __m128i bytes = _mm_loadu_si128(q);
        return {_mm256_slli_epi32(_mm256_cvtepu8_epi32(bytes), int16_exponent_shift),
                _mm256_slli_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(bytes, 8)), int16_exponent_shift)};
    }
    // ldexp(float(v), e) lane by lane, e given as words e << 23 (as zmm_ops: a zero lane stays +0)
    static __m256 ldexp_half(__m256i v, __m256i exponent_words) {
        const __m256i zero = _mm256_cmpeq_epi32(v, _mm256_setzero_si256());
        const __m256i f = _mm256_castps_si256(_mm256_cvtepi32_ps(v));
        return _mm256_castsi256_ps(_mm256_add_epi32(f, _mm256_andnot_si256(zero, exponent_words)));
    }
    static floats ldexp_of_ints(ints v, ints exponent_words) {
        return {ldexp_half(v.lo, exponent_words.lo), ldexp_half(v.hi, exponent_words.hi)};
    }
    static floats mul(floats a, floats b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
    static floats fma(floats a, floats b, floats c) {
        return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
    }
    static void store(float *p, floats v) {
        _mm256_storeu_ps(p, v.lo);
        _mm256_storeu_ps(p + 8, v.hi);
    }
};

}  // namespace

float quantize_int16_weight_row_avx2(const float *v, int64_t k, int32_t *exponents, uint32_t *pairs) {
    return int16_kernels::quantize_weight_row(v, k, exponents, pairs);
}

void quantize_int16_avx2(const float *x, int64_t k, uint32_t *column) {
    // quantize_int16_block on a block's 4 vectors of 8: the same max, division, product, clamp and
    // rounding (cvtps2dq rounds to nearest even, as nearbyint does), then the 32 values packed to
    // int16 in order (value 2j in the low half of word j)
    const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256i largest_finite = _mm256_set1_epi32(0x7f7fffff);
    const float limit = float(int16_limit);
    const __m256 high = _mm256_set1_ps(limit), low = _mm256_set1_ps(-limit);
    for (int64_t b = 0; b < k / int16_block; ++b) {
        const float *v = x + b * int16_block;
        uint32_t *out = column + b * int16_panel_words;
        __m256 values[4];
        __m256 m = _mm256_setzero_ps();
        __m256i special = _mm256_setzero_si256();  // an infinity or a NaN
        for (int i = 0; i < 4; ++i) {
            values[i] = _mm256_loadu_ps(v + 8 * i);
            const __m256 a = _mm256_and_ps(values[i], magnitude);
            special = _mm256_or_si256(special, _mm256_cmpgt_epi32(_mm256_castps_si256(a), largest_finite));
            m = _mm256_max_ps(m, a);
        }
        m = _mm256_max_ps(m, _mm256_permute2f128_ps(m, m, 1));
        m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4E));
        m = _mm256_max_ps(m, _mm256_permute_ps(m, 0xB1));
        const float max_abs = _mm256_cvtss_f32(m);
        const bool finite = _mm256_testz_si256(special, special) != 0;
        if (!finite || max_abs == 0.0f) {
            const float scale = finite ? 0.0f : std::numeric_limits<float>::quiet_NaN();
            std::memcpy(out, &scale, sizeof scale);
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 1), _mm256_setzero_si256());
            _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 9), _mm256_setzero_si256());
            continue;
        }
        const __m256 inverse = _mm256_set1_ps(limit / max_abs);
        __m256i q[4];
        for (int i = 0; i < 4; ++i) {
            // a NaN product (a zero value times an infinite inverse) clamps to the low end, then the
            // zero values are set to 0
            const __m256 t = _mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(values[i], inverse), low), high);
            const __m256 nonzero = _mm256_cmp_ps(values[i], _mm256_setzero_ps(), _CMP_NEQ_UQ);
            q[i] = _mm256_and_si256(_mm256_cvtps_epi32(t), _mm256_castps_si256(nonzero));
        }
        // packs takes 128-bit lanes in turn: values 0-3, 8-11, 4-7, 12-15, put back in order
        const __m256i low_half = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8);
        const __m256i high_half = _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xD8);
        const float scale = max_abs / limit;
        std::memcpy(out, &scale, sizeof scale);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 1), low_half);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(out + 9), high_half);
    }
}

void int16_groups_avx2(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                       const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    int16_kernels::groups<ymm_pair_ops, 2, 1, 3>(groups, group_stride, n_groups, k, x, width, n_cols, dst,
                                                 dst_stride);
}

}  // namespace weft::cpu
