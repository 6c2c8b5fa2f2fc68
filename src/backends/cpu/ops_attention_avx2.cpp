// src/backends/cpu/ops_attention_avx2.cpp — attention_impl.h compiled for AVX2 + FMA + F16C.
#include <immintrin.h>

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
    static type round_f16(type x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT)); }
    static type widen_fp16(const char *p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p)));
    }
    static float fp16_to_float(uint16_t h) { return _cvtsh_ss(h); }
    static constexpr bool can_transpose16 = false;
    static void transpose16(const type *, float *, int64_t) {}
};
}  // namespace

void attention_task_avx2(const attention_task &a) {
    run_attention_task<simd_attention_loops<ymm>>(a);
}

}  // namespace weft::cpu
