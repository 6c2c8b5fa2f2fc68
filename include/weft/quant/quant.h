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
    from_float_fn from_float = nullptr;      // fast path (may be SIMD); equals the reference bits
                                             // for the types whose reference is bit-exact
    from_float_fn from_float_ref = nullptr;  // scalar reference quantization
    vec_dot_fn vec_dot = nullptr;            // best for this CPU (runtime ISA choice)
    vec_dot_fn vec_dot_ref = nullptr;        // scalar oracle
};

// Traits of any known type (f32, f16, bf16, the q* types); asserts on types without traits.
const quant_traits &quant_traits_of(dtype t);
bool has_quant_traits(dtype t);

// Quantizes nrows rows of n_per_row floats to t; returns bytes written. The quantizer may use the
// importance weights (one per column, may be null) as the established one does.
size_t quantize_rows(dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                     const float *importance = nullptr);

}  // namespace weft
