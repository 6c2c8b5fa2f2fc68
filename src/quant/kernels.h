// src/quant/kernels.h — the reference row kernels of every type, private to quant (the SIMD versions
// belong to the CPU backend: src/backends/cpu/row_kernels.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "weft/quant/quant.h"

namespace weft::quant {

// Round to nearest, ties to even, for |x| < 2^22: adding 1.5 * 2^23 pushes the fraction out of the
// mantissa so the FPU's rounding does the work. Same result as _mm256_round_ps(x, NEAREST_INT).
inline int nearest_int(float x) {
    const float shifted = x + 12582912.f;
    int32_t bits;
    std::memcpy(&bits, &shifted, sizeof bits);
    return (bits & 0x007fffff) - 0x00400000;
}

// The established quantizers' MAX: the second operand unless the first is greater.
inline float max_of(float a, float b) {
    return a > b ? a : b;
}

// The sub-block scale code l in [0, max_code] whose d (1 + 2 l) is nearest to `scale` (inv_d = 1 / d):
// the i-quants' odd multiples of d / 2.
inline int odd_scale_code(float inv_d, float scale, int max_code) {
    const int l = nearest_int(0.5f * (inv_d * scale - 1));
    return l < 0 ? 0 : l > max_code ? max_code : l;
}

// The value of largest magnitude, with its sign (the first one on ties, 0 when all are zero).
inline float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    return max;
}

// ---- the i-quants' importance weights: a value's squared error counts importance * sqrt(sigma2 +
// x^2), sigma2 twice the mean square of its (super-)block; x^2 without importance.

// n is a power of two: the same as the established quantizers' 2 * sum / n (short of overflow).
inline float importance_sigma2(const float *x, int n) {
    float sum = 0;
    for (int j = 0; j < n; ++j) sum += x[j] * x[j];
    return sum * (2.f / float(n));
}

// The weights of the n values x (importance: theirs, or null).
inline void importance_weights(const float *x, int n, const float *importance, float sigma2, float *w) {
    for (int j = 0; j < n; ++j)
        w[j] = importance ? importance[j] * std::sqrt(sigma2 + x[j] * x[j]) : x[j] * x[j];
}

// ---- scale searches (scale_search.cpp), shared by the quantizers; weights may be null where noted

// Groups whose largest magnitude is below this quantize to all zeros.
inline constexpr float k_group_max_eps = 1e-15f;

// Symmetric: levels l in [-nmax, nmax - 1] stored as L = l + nmax; minimizes sum w (x - scale l)^2
// over 19 candidate scales (w = x^2 when weights is null). Returns the scale.
float make_qx_quants(int n, int nmax, const float *x, int8_t *L, const float *weights);
// Symmetric, as above, refined by moving single values between levels (q3_K's search).
float make_q3_quants(int n, int nmax, const float *x, int8_t *L, const float *weights);
// Asymmetric: x ≈ scale * L - the_min with L in [0, nmax]; weighted least squares over nstep + 1
// grids (absolute error when use_mad). weights must not be null; Laux is n bytes of scratch.
float make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                       uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad);
// Unsigned: levels in [0, nmax] for values >= 0, minimizing sum w (x - scale L)^2; weights must
// not be null. Returns the scale (0 when every value is below k_group_max_eps).
float make_qp_quants(int n, int nmax, const float *x, uint8_t *L, const float *weights);

// Every type offers the same three row functions; the macro declares one family.
#define WEFT_DECLARE_ROW_KERNELS(type)                                    \
    void to_float_##type(const void *src, float *dst, int64_t n);         \
    void from_float_##type##_ref(const float *src, void *dst, int64_t n); \
    void vec_dot_##type##_ref(int64_t n, float *s, const void *x, const void *y)

WEFT_DECLARE_ROW_KERNELS(f32);
WEFT_DECLARE_ROW_KERNELS(f16);
WEFT_DECLARE_ROW_KERNELS(bf16);
WEFT_DECLARE_ROW_KERNELS(q4_0);
WEFT_DECLARE_ROW_KERNELS(q4_1);
WEFT_DECLARE_ROW_KERNELS(q5_0);
WEFT_DECLARE_ROW_KERNELS(q5_1);
WEFT_DECLARE_ROW_KERNELS(q8_0);
WEFT_DECLARE_ROW_KERNELS(q2_k);
WEFT_DECLARE_ROW_KERNELS(q3_k);
WEFT_DECLARE_ROW_KERNELS(q4_k);
WEFT_DECLARE_ROW_KERNELS(q5_k);
WEFT_DECLARE_ROW_KERNELS(q6_k);
WEFT_DECLARE_ROW_KERNELS(iq4_nl);
WEFT_DECLARE_ROW_KERNELS(iq4_xs);
WEFT_DECLARE_ROW_KERNELS(tq1_0);
WEFT_DECLARE_ROW_KERNELS(tq2_0);
WEFT_DECLARE_ROW_KERNELS(mxfp4);
#undef WEFT_DECLARE_ROW_KERNELS

// The grid i-quants: decoding and dot products (iq_grid_quants.cpp, iq1_quants.cpp). Their
// quantizers are grid searches (iq2_quantize.cpp, iq3_quantize.cpp, iq1_quantize.cpp); iq2_xxs,
// iq2_xs and iq1_s have no from_float: quantize_rows takes them only with importance.
#define WEFT_DECLARE_DECODE_KERNELS(type)                         \
    void to_float_##type(const void *src, float *dst, int64_t n); \
    void vec_dot_##type##_ref(int64_t n, float *s, const void *x, const void *y)
WEFT_DECLARE_DECODE_KERNELS(iq2_xxs);
WEFT_DECLARE_DECODE_KERNELS(iq2_xs);
WEFT_DECLARE_DECODE_KERNELS(iq2_s);
WEFT_DECLARE_DECODE_KERNELS(iq3_xxs);
WEFT_DECLARE_DECODE_KERNELS(iq3_s);
WEFT_DECLARE_DECODE_KERNELS(iq1_s);
WEFT_DECLARE_DECODE_KERNELS(iq1_m);
#undef WEFT_DECLARE_DECODE_KERNELS
void from_float_iq3_xxs_ref(const float *src, void *dst, int64_t n);
// An iq1_s or iq1_m block as grid_block_ints (its levels in eighths); false for other types.
bool iq1_block_to_ints(dtype t, const void *block, grid_block_ints &out);
void from_float_iq3_s_ref(const float *src, void *dst, int64_t n);
void from_float_iq1_m_ref(const float *src, void *dst, int64_t n);  // iq1_s: only with importance
void from_float_iq2_s_ref(const float *src, void *dst, int64_t n);

// The activation types have no dot product of their own (they are only ever the y side).
void to_float_q8_1(const void *src, float *dst, int64_t n);
void from_float_q8_1_ref(const float *src, void *dst, int64_t n);
void to_float_q8_k(const void *src, float *dst, int64_t n);
void from_float_q8_k_ref(const float *src, void *dst, int64_t n);

// Importance-weighted quantizers (importance: one weight per value of the row).
void quantize_row_q4_0_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q4_1_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q5_0_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q5_1_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q2_k_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q3_k_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q4_k_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q5_k_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_q6_k_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq4_nl_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq4_xs_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq3_xxs_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq3_s_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq1_s_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq1_m_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq2_xxs_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq2_xs_weighted(const float *src, void *dst, int64_t n, const float *importance);
void quantize_row_iq2_s_weighted(const float *src, void *dst, int64_t n, const float *importance);

}  // namespace weft::quant
