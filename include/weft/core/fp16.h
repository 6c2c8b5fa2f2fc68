// weft/core/fp16.h — IEEE half and bfloat16 conversions (round to nearest even), bit exact.
#pragma once

#include <cstdint>
#include <cstring>

namespace weft {

using fp16_t = uint16_t;
using bf16_t = uint16_t;

inline float fp32_from_bits(uint32_t w) {
    float f;
    std::memcpy(&f, &w, sizeof f);
    return f;
}
inline uint32_t fp32_to_bits(float f) {
    uint32_t w;
    std::memcpy(&w, &f, sizeof w);
    return w;
}

// Branch-light conversions after the well-known FP16 library formulation (exponent re-biasing by
// float multiplication); identical results to the hardware F16C instructions.
inline float fp16_to_fp32(fp16_t h) {
    const uint32_t w = uint32_t(h) << 16;
    const uint32_t sign = w & 0x80000000u;
    const uint32_t two_w = w + w;
    const uint32_t exp_offset = 0xE0u << 23;
    const float exp_scale = fp32_from_bits(0x7800000u);
    const float normalized = fp32_from_bits((two_w >> 4) + exp_offset) * exp_scale;
    const uint32_t magic_mask = 126u << 23;
    const float magic_bias = 0.5f;
    const float denormalized = fp32_from_bits((two_w >> 17) | magic_mask) - magic_bias;
    const uint32_t denormalized_cutoff = 1u << 27;
    const uint32_t result =
        sign | (two_w < denormalized_cutoff ? fp32_to_bits(denormalized) : fp32_to_bits(normalized));
    return fp32_from_bits(result);
}

inline fp16_t fp32_to_fp16(float f) {
    const float scale_to_inf = fp32_from_bits(0x77800000u);
    const float scale_to_zero = fp32_from_bits(0x08800000u);
    float base = (f < 0 ? -f : f) * scale_to_inf * scale_to_zero;
    const uint32_t w = fp32_to_bits(f);
    const uint32_t shl1_w = w + w;
    const uint32_t sign = w & 0x80000000u;
    uint32_t bias = shl1_w & 0xFF000000u;
    if (bias < 0x71000000u) bias = 0x71000000u;
    base = fp32_from_bits((bias >> 1) + 0x07800000u) + base;
    const uint32_t bits = fp32_to_bits(base);
    const uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
    const uint32_t mantissa_bits = bits & 0x00000FFFu;
    const uint32_t nonsign = exp_bits + mantissa_bits;
    return fp16_t((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

inline float bf16_to_fp32(bf16_t h) {
    return fp32_from_bits(uint32_t(h) << 16);
}

inline bf16_t fp32_to_bf16(float f) {
    uint32_t w = fp32_to_bits(f);
    if ((w & 0x7fffffffu) > 0x7f800000u) return bf16_t((w >> 16) | 64);  // quiet NaN
    return bf16_t((w + (0x7fffu + ((w >> 16) & 1))) >> 16);
}

}  // namespace weft
