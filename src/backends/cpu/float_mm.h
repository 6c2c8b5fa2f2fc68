// src/backends/cpu/float_mm.h — matrix products of float weights (f32, f16, bf16) against f32
// activations, tile by tile, with one fixed order of operations per output element.
//
// The canonical order (every ISA, tile shape, thread count and batch composition): 16 lanes; value
// i of the dot product goes to lane i % 16, each lane accumulates acc = fma(w_i, x_i, acc) in order
// of i (a lane without a value in the last, partial step is left as it is); then the lanes are
// summed as a tree: s8[l] = a[l] + a[l + 8], s4[l] = s8[l] + s8[l + 4], s2[l] = s4[l] + s4[l + 2],
// result = s2[0] + s2[1]. The scalar kernel is the oracle; the SIMD kernels equal it bit for bit.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/core/type.h"

namespace weft::cpu {

// n_rows x n_cols dot products of length k: rows of weights a (of type wtype, row r at
// a + r * a_stride bytes) against f32 columns x (column c at x + c * x_stride floats); result (r, c)
// at dst[c * dst_stride + r].
using float_tile_fn = void (*)(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                               size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);

void float_tile_scalar(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                       size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);
void float_tile_avx2(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                     size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);
void float_tile_avx512(dtype wtype, const char *a, size_t a_stride, int64_t n_rows, const float *x,
                       size_t x_stride, int64_t n_cols, int64_t k, float *dst, size_t dst_stride);

enum class float_mm_isa { scalar, avx2, avx512 };
bool float_mm_isa_supported(float_mm_isa isa);
float_tile_fn float_tile_at(float_mm_isa isa);
float_tile_fn best_float_tile();  // scalar under WEFT_FORCE_SCALAR

inline bool is_float_weight(dtype t) {
    return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16;
}

// The canonical lane tree of 16 partial sums.
inline float sum_lanes_16(const float a[16]) {
    float s8[8], s4[4], s2[2];
    for (int l = 0; l < 8; ++l) s8[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
    for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
    return s2[0] + s2[1];
}

}  // namespace weft::cpu
