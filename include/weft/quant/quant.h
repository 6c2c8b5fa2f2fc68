// weft/quant/quant.h — block formats' traits: to/from float, reference quantization, dot products.
#pragma once

#include <cstddef>
#include <cstdint>

#include "weft/core/type.h"

namespace weft {

// Row functions; n is a multiple of the type's block size.
using to_float_fn = void (*)(const void *src, float *dst, int64_t n);
using from_float_fn = void (*)(const float *src, void *dst, int64_t n);
// s = dot(x, y): x a row of the weight type, y a row of its vec_dot_type, n elements.
using vec_dot_fn = void (*)(int64_t n, float *s, const void *x, const void *y);

struct quant_traits {
    dtype type = dtype::f32;
    dtype vec_dot_type = dtype::f32;  // what activations are converted to for the dot product
    to_float_fn to_float = nullptr;
    from_float_fn from_float = nullptr;      // the fast path: here the reference; a backend's
                                             // table may put a SIMD version (same bits) here
    from_float_fn from_float_ref = nullptr;  // scalar reference quantization
    vec_dot_fn vec_dot = nullptr;            // here the reference; a backend's table may put its
                                             // SIMD version here (see cpu::row_traits_of)
    vec_dot_fn vec_dot_ref = nullptr;        // scalar oracle
};

// Traits of any known type (f32, f16, bf16, the q* and iq4_* types); asserts on types without traits.
const quant_traits &quant_traits_of(dtype t);
bool has_quant_traits(dtype t);

// One K-quant super-block (q2_K ... q6_K) as integers: value i = d * scale[j] * q[i] - dmin * min[j]
// with j = i / (256 / n_sub). For kernels that repack blocks into layouts of their own.
struct k_block_ints {
    int8_t q[256];      // the quants, signed for the symmetric types (q3_K, q6_K)
    int8_t scale[16];   // sub-block scales (signed for q3_K, q6_K)
    uint8_t min[16];    // sub-block mins (q2_K, q4_K, q5_K; zero otherwise)
    int n_sub = 0;      // 16 sub-blocks of 16 values (q2_K, q3_K, q6_K) or 8 of 32 (q4_K, q5_K)
    uint16_t d = 0;     // fp16 bits of the super-scale
    uint16_t dmin = 0;  // fp16 bits of the min scale (0 for the symmetric types)
};
// Decodes one block of type t (a K-quant); false for other types.
bool k_block_to_ints(dtype t, const void *block, k_block_ints &out);

// One grid i-quant block (iq2_xxs, iq2_xs, iq2_s, iq3_xxs, iq3_s, iq1_s, iq1_m) as integers: value
// i = (d * ls[i / 16]) * unit * q[i], q a signed grid level (iq2: +-8, 25, 43; iq3_xxs: +-4, 12 .. 62;
// iq3_s: +-1, 3 .. 15; iq1: level + delta in eighths, +-1, 7, 9), ls in 1..31, unit 1/8 (iq2, iq1),
// 1/4 (iq3_xxs) or 1 (iq3_s). For kernels that repack blocks into layouts of their own.
struct grid_block_ints {
    int8_t q[256];
    uint8_t ls[16];
    uint16_t d = 0;  // fp16 bits
    float unit = 1.0f;
};
// Decodes one block of type t (a grid i-quant, iq1 included); false for other types.
bool grid_block_to_ints(dtype t, const void *block, grid_block_ints &out);

// Quantizes nrows rows of n_per_row floats to t; returns bytes written. The quantizer may use the
// importance weights (one per column, may be null) as the established one does; iq2_xxs and iq2_xs
// need them. With nrows 0 it only checks that t can be made (with or without importance): it
// throws the same weft::error as for real rows and reads and writes nothing.
size_t quantize_rows(dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                     const float *importance = nullptr);

}  // namespace weft
