// src/backends/cpu/f16_int16_mm_avx512.cpp — the int16 group kernel with AVX-512 VNNI: one zmm holds
// the 16 rows of a group, vpdpwssd adds two int16 products per row and instruction (32 in all).
// Bit-identical to the scalar kernel (f16_int16_mm.h); chosen only where the CPU has VNNI.
#include <immintrin.h>

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
    static floats to_floats(ints v) { return _mm512_cvtepi32_ps(v); }
    static floats mul(floats a, floats b) { return _mm512_mul_ps(a, b); }
    static floats fma(floats a, floats b, floats c) { return _mm512_fmadd_ps(a, b, c); }
    static void store(float *p, floats v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

void int16_groups_avx512(const char *groups, size_t group_stride, int64_t n_groups, int64_t k,
                         const uint32_t *x, int64_t width, int64_t n_cols, float *dst, size_t dst_stride) {
    int16_kernels::groups<zmm_ops, 4, 2, 6>(groups, group_stride, n_groups, k, x, width, n_cols, dst,
                                            dst_stride);
}

}  // namespace weft::cpu
