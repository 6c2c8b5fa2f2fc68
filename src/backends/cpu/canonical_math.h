// src/backends/cpu/canonical_math.h — float functions written once in plain C++ so that every ISA
// build of a kernel computes them with the same operations (the compiler vectorizes the loops but
// may not reorder float arithmetic: no fast-math, no contraction in ISO C++ mode, fma explicit).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

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
