// src/quant/float_types.cpp — the scalar row kernels of the plain float types f32, f16 and bf16.
#include <cstring>

#include "quant/kernels.h"
#include "weft/core/fp16.h"

namespace weft::quant {

// The reference dot products accumulate in double so they can serve as the oracle for the SIMD
// versions, whose float partial sums differ from each other only by rounding.

void to_float_f32(const void *src, float *dst, int64_t n) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void from_float_f32_ref(const float *src, void *dst, int64_t n) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void vec_dot_f32_ref(int64_t n, float *s, const void *x, const void *y) {
    const auto *a = static_cast<const float *>(x);
    const auto *b = static_cast<const float *>(y);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(a[i]) * double(b[i]);
    *s = float(sum);
}

void to_float_f16(const void *src, float *dst, int64_t n) {
    const auto *h = static_cast<const fp16_t *>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_fp32(h[i]);
}

void from_float_f16_ref(const float *src, void *dst, int64_t n) {
    auto *h = static_cast<fp16_t *>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_fp16(src[i]);
}

void vec_dot_f16_ref(int64_t n, float *s, const void *x, const void *y) {
    const auto *a = static_cast<const fp16_t *>(x);
    const auto *b = static_cast<const fp16_t *>(y);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(fp16_to_fp32(a[i])) * double(fp16_to_fp32(b[i]));
    *s = float(sum);
}

void to_float_bf16(const void *src, float *dst, int64_t n) {
    const auto *h = static_cast<const bf16_t *>(src);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_fp32(h[i]);
}

void from_float_bf16_ref(const float *src, void *dst, int64_t n) {
    auto *h = static_cast<bf16_t *>(dst);
    for (int64_t i = 0; i < n; ++i) h[i] = fp32_to_bf16(src[i]);
}

void vec_dot_bf16_ref(int64_t n, float *s, const void *x, const void *y) {
    const auto *a = static_cast<const bf16_t *>(x);
    const auto *b = static_cast<const bf16_t *>(y);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(bf16_to_fp32(a[i])) * double(bf16_to_fp32(b[i]));
    *s = float(sum);
}

}  // namespace weft::quant
