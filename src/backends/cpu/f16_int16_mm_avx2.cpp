// src/backends/cpu/f16_int16_mm_avx2.cpp — the int16 group kernel with AVX2: the 16 rows of a group in
// two ymm, vpmaddwd's pair products added with vpaddd. Bit-identical to the scalar kernel
// (f16_int16_mm.h).
#include <immintrin.h>

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
    static floats to_floats(ints v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
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

void int16_groups_avx2(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                       const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    int16_kernels::groups<ymm_pair_ops, 2, 1, 3>(groups, group_stride, n_groups, k, x, width, n_cols, dst,
                                                 dst_stride);
}

}  // namespace weft::cpu
