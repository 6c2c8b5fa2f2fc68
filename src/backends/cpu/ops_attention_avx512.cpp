// src/backends/cpu/ops_attention_avx512.cpp — attention_impl.h compiled for AVX-512.
#include <immintrin.h>

#include "backends/cpu/attention_simd.h"

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
    static type widen_fp16(const char *p) {
        return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(p)));
    }
    static float fp16_to_float(uint16_t h) { return _cvtsh_ss(h); }
};
}  // namespace

void attention_task_avx512(const attention_task &a) {
    run_attention_task<simd_attention_loops<zmm>>(a);
}

}  // namespace weft::cpu
