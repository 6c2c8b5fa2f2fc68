// src/backends/cpu/rows.h — element and row conversions between f32/f16/bf16 storage and floats, and
// the loop of the kernels that compute their result rows as floats.
#pragma once

#include <cstdint>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/row_kernels.h"
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
    if (stride == size && t == dtype::f16) {  // the ISA's conversion: fp32_to_fp16's bits (a NaN a NaN)
        row_traits_of(dtype::f16).from_float(in, dst, n);
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

// Computes this thread's rows of dst as floats: fill(i1, i2, i3, out) writes the row's ne[0] values
// to out, which is the row itself when dst is contiguous f32, else out_scratch (then stored).
template <class Fill>
void for_each_result_row(const compute_params &p, tensor &dst, float *out_scratch, Fill fill) {
    const bool direct = dst.type == dtype::f32 && dst.nb[0] == sizeof(float);
    for (const auto [i1, i2, i3] : thread_rows(p, dst)) {
        char *row = row_at(dst, i1, i2, i3);
        float *out = direct ? reinterpret_cast<float *>(row) : out_scratch;
        fill(i1, i2, i3, out);
        if (!direct) store_row(dst.type, out, row, dst.nb[0], dst.ne[0]);
    }
}

// The same for kernels that map each row of dst.src[0] to the row of dst at the same indices:
// f(x, out, n, i1, i2, i3, spare) with x the source row as floats, n = ne[0] values, and `spare`
// a scratch row of n floats the kernel may use (the third of the thread's row_scratch_rows).
template <class F>
void map_rows(const compute_params &p, tensor &dst, F f) {
    const tensor &a = *dst.src[0];
    const int64_t ne0 = dst.ne[0];
    float *scratch = thread_scratch(p, row_scratch_rows * ne0);
    for_each_result_row(p, dst, scratch + ne0, [&](int64_t i1, int64_t i2, int64_t i3, float *out) {
        const float *x = row_as_f32(a.type, row_at(a, i1, i2, i3), a.nb[0], ne0, scratch);
        f(x, out, ne0, i1, i2, i3, scratch + 2 * ne0);
    });
}

}  // namespace weft::cpu
