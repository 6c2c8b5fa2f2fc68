// src/backends/cpu/rows.h — element and row conversions between f32/f16/bf16 storage and floats.
#pragma once

#include <cstdint>
#include <cstring>

#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/core/type.h"

namespace weft::cpu {

// The types kernels read and write element by element (everything else goes through the quant
// traits' row functions).
inline bool is_float_type(dtype t) {
    return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16;
}

inline float load_element(dtype t, const char *p) {
    switch (t) {
        case dtype::f32: {
            float v;
            std::memcpy(&v, p, sizeof v);
            return v;
        }
        case dtype::f16: {
            fp16_t h;
            std::memcpy(&h, p, sizeof h);
            return fp16_to_fp32(h);
        }
        case dtype::bf16: {
            bf16_t h;
            std::memcpy(&h, p, sizeof h);
            return bf16_to_fp32(h);
        }
        default:
            WEFT_ASSERT(!"load_element: not a float type");
    }
    return 0.0f;
}

inline void store_element(dtype t, char *p, float v) {
    switch (t) {
        case dtype::f32:
            std::memcpy(p, &v, sizeof v);
            return;
        case dtype::f16: {
            const fp16_t h = fp32_to_fp16(v);
            std::memcpy(p, &h, sizeof h);
            return;
        }
        case dtype::bf16: {
            const bf16_t h = fp32_to_bf16(v);
            std::memcpy(p, &h, sizeof h);
            return;
        }
        default:
            WEFT_ASSERT(!"store_element: not a float type");
    }
}

// n elements of type t spaced `stride` bytes apart, as floats in out[0..n).
inline void load_row(dtype t, const char *src, size_t stride, int64_t n, float *out) {
    const size_t size = type_traits(t).type_size;
    if (stride == size) {
        if (t == dtype::f32) {
            std::memcpy(out, src, size_t(n) * sizeof(float));
            return;
        }
        if (t == dtype::f16) {
            const auto *h = reinterpret_cast<const fp16_t *>(src);
            for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_fp32(h[i]);
            return;
        }
    }
    for (int64_t i = 0; i < n; ++i) out[i] = load_element(t, src + size_t(i) * stride);
}

// floats in[0..n) stored as type t, spaced `stride` bytes apart.
inline void store_row(dtype t, const float *in, char *dst, size_t stride, int64_t n) {
    const size_t size = type_traits(t).type_size;
    if (stride == size && t == dtype::f32) {
        std::memmove(dst, in, size_t(n) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < n; ++i) store_element(t, dst + size_t(i) * stride, in[i]);
}

// A contiguous f32 row is read where it lies; any other row is converted into scratch.
inline const float *row_as_f32(dtype t, const char *src, size_t stride, int64_t n, float *scratch) {
    if (t == dtype::f32 && stride == sizeof(float)) return reinterpret_cast<const float *>(src);
    load_row(t, src, stride, n, scratch);
    return scratch;
}

}  // namespace weft::cpu
