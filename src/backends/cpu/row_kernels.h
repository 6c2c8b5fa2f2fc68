// src/backends/cpu/row_kernels.h — the row functions of every type (to/from float, dot products)
// as the CPU backend runs them: the quant layer's reference functions, with the SIMD versions of
// this backend where the CPU has the ISA.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backends/cpu/simd_level.h"
#include "weft/quant/quant.h"

namespace weft::cpu {

// The traits of type t at one level (levels above AVX2 use the AVX2 kernels; entries without a
// kernel of their own are the reference); only call its functions when simd_level_supported.
const quant_traits &row_traits_at(dtype t, simd_level level);
// The best level this CPU supports (the reference under WEFT_FORCE_SCALAR).
const quant_traits &row_traits_of(dtype t);

// AVX2 + FMA + F16C kernels (row_kernels_avx2.cpp); only called when the CPU has all three.
void vec_dot_f32_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_f16_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_bf16_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q4_0_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q4_1_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q5_0_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q5_1_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q8_0_avx2(int64_t n, float *s, const void *x, const void *y);
// q8_0 dots a tile at a time (prompts, batches of sequences): out[j][i] = dot of weight row i (a + i *
// a_stride, k values) with activation row y[j], for i < rows and j < cols, each bit for bit
// vec_dot_q8_0_avx2 (one integer sum and one fma per block, as the interleaved q8_0 kernels: for
// weights left plain, e.g. rows not in 16s); a tile reads each weight block once for several columns
// and each activation block once for several rows.
void dot_tile_q8_0_avx2(int64_t k, const void *a, size_t a_stride, int64_t rows, const void *const *y,
                        int64_t cols, float *const *out);
void vec_dot_q2_k_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q3_k_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q4_k_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q5_k_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_q6_k_avx2(int64_t n, float *s, const void *x, const void *y);
void vec_dot_iq4_nl_avx2(int64_t n, float *s, const void *x, const void *y);  // same bits as the reference
void vec_dot_mxfp4_avx2(int64_t n, float *s, const void *x, const void *y);   // same bits as the reference
void vec_dot_iq4_xs_avx2(int64_t n, float *s, const void *x, const void *y);  // same bits as the reference
void vec_dot_tq1_0_avx2(int64_t n, float *s, const void *x, const void *y);   // same bits as the reference
void vec_dot_tq2_0_avx2(int64_t n, float *s, const void *x, const void *y);   // same bits as the reference
void to_float_f16_avx2(const void *src, float *dst, int64_t n);
void from_float_f16_avx2(const float *src, void *dst, int64_t n);
void from_float_q8_0_avx2(const float *src, void *dst, int64_t n);
void from_float_q8_1_avx2(const float *src, void *dst, int64_t n);
void from_float_q8_k_avx2(const float *src, void *dst, int64_t n);

}  // namespace weft::cpu
