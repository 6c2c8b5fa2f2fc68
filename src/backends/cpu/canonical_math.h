// src/backends/cpu/canonical_math.h — float functions written once in plain C++ so that every ISA
// build of a kernel computes them with the same operations (the compiler vectorizes the loops but
// may not reorder float arithmetic: no fast-math, no contraction in ISO C++ mode, fma explicit).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace weft::cpu {
// Internal linkage on purpose: every ISA build of a kernel gets its own copy (one shared inline
// definition could be the AVX-512 build, run on a CPU without AVX-512).
namespace {

// e^x to about 1 ulp (Cephes' polynomial after reduction by ln 2); 0 below -87.3, and inputs above
// 88.3 are taken as 88.3. Branch-free, so loops over it vectorize.
inline float exp_canonical(float x) {
    const float clamped = x > 88.3f ? 88.3f : (x < -87.3f ? -87.3f : x);
    const float n = (clamped * 1.44269504088896341f + 12582912.f) - 12582912.f;  // nearest integer
    float r = std::fma(n, -0.693145751953125f, clamped);
    r = std::fma(n, -1.428606765330187045e-06f, r);
    float p = 1.9875691500e-4f;
    p = std::fma(p, r, 1.3981999507e-3f);
    p = std::fma(p, r, 8.3334519073e-3f);
    p = std::fma(p, r, 4.1665795894e-2f);
    p = std::fma(p, r, 1.6666665459e-1f);
    p = std::fma(p, r, 5.0000001201e-1f);
    p = std::fma(p, r * r, r) + 1.0f;
    const int32_t bits = (int32_t(n) + 127) << 23;
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return x < -87.3f ? 0.0f : p * scale;
}

// e^x as the reference engine's vectorized softmax computes it (ARM's optimized-routines
// polynomial: reduction by ln 2 in two parts, a degree-5 polynomial, scaling by 2^n; about 1.5 ulp):
// 0 when n < -192, +INF when n > 192, and the exact scaling j * 2^n otherwise (two steps where the
// result is subnormal, so it is rounded once). exp_reference(-INF) = 0. Branch-free.
inline float exp_reference(float x) {
    constexpr float shifter = 0x1.8p23f;
    const float z = std::fma(x, 0x1.715476p+0f, shifter);
    const float n = z - shifter;  // x / ln 2 rounded to an integer
    const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
    const float u = b * b;
    const float j = std::fma(
        std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
        u, std::fma(0x1.ffffecp-1f, b, 1.0f));
    // j * 2^n: 2^n as one factor where j * 2^n is normal, else as 2^(n + 100) then 2^-100
    const float nc = !(n >= -192.0f) ? -192.0f : (n > 192.0f ? 192.0f : n);  // no NaN in the bit tricks
    const bool low = nc < -125.0f;
    const int32_t e1 = int32_t(low ? nc + 100.0f : (nc > 127.0f ? 127.0f : nc)) + 127;
    const int32_t e2 = low ? 27 : (nc > 127.0f ? int32_t(nc - 127.0f) + 127 : 127);  // 2^-100 or 2^(n-127)
    const uint32_t b1 = uint32_t(e1) << 23, b2 = uint32_t(e2) << 23;
    float f1, f2;
    std::memcpy(&f1, &b1, sizeof f1);
    std::memcpy(&f2, &b2, sizeof f2);
    const float scaled = (j * f1) * f2;
    const float big = n <= 0.0f ? 0.0f : std::numeric_limits<float>::infinity();
    return std::fabs(n) > 192.0f ? big : scaled;
}

// The lane tree of 16 partial sums: s8[l] = a[l] + a[l + 8], s4[l] = s8[l] + s8[l + 4], then
// (s4[0] + s4[2]) + (s4[1] + s4[3]) — the order of the float tiles (float_mm.h) and of the sums here.
inline float sum_lanes_16(const float a[16]) {
    float s8[8], s4[4];
    for (int l = 0; l < 8; ++l) s8[l] = a[l] + a[l + 8];
    for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
    return (s4[0] + s4[2]) + (s4[1] + s4[3]);
}

// Sum in 16 lanes (value i to lane i % 16, added in order), then the lane tree.
inline float sum_canonical(const float *a, int64_t n) {
    float lanes[16] = {};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int l = 0; l < 16; ++l) lanes[l] += a[i + l];
    for (int l = 0; i + l < n; ++l) lanes[l] += a[i + l];
    return sum_lanes_16(lanes);
}

}  // namespace
}  // namespace weft::cpu
