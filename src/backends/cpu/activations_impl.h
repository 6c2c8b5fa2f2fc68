// src/backends/cpu/activations_impl.h — the bodies of activations.h, included once per ISA build.
#pragma once

#include <algorithm>

#include "backends/cpu/activations.h"
#include "backends/cpu/canonical_math.h"

namespace weft::cpu {
namespace {  // internal linkage: one copy per ISA build

inline float silu_canonical(float x) {
    return x / (1.0f + exp_canonical(-x));
}

inline void swiglu_row_impl(const float *gate, const float *up, float *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = silu_canonical(gate[i]) * up[i];
}

// (up + 1) as the reference adds it, after the clamp; the sigmoid as x / (1 + e^-ax) like silu's
inline void swiglu_oai_row_impl(const float *gate, const float *up, float *out, int64_t n, float alpha,
                                float limit) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], limit);
        const float u = std::min(std::max(up[i], -limit), limit);
        out[i] = g / (1.0f + exp_canonical(-alpha * g)) * (u + 1.0f);
    }
}

inline void silu_row_impl(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = silu_canonical(x[i]);
}

// ln x for normal x >= 1 (about 1 ulp): x = m 2^e with m in [sqrt(1/2), sqrt(2)), ln m by the series
// of atanh in s = (m - 1) / (m + 1). Branch-free.
inline float log_canonical(float x) {
    int32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    int32_t e = ((bits >> 23) & 0xff) - 127;
    int32_t mbits = (bits & 0x7fffff) | 0x3f800000;  // m in [1, 2)
    float m;
    std::memcpy(&m, &mbits, sizeof m);
    const bool high = m > 1.41421356f;
    m = high ? m * 0.5f : m;
    e = high ? e + 1 : e;
    const float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float p = 0.11111111f;  // 1/9
    p = std::fma(p, s2, 0.14285715f);
    p = std::fma(p, s2, 0.2f);
    p = std::fma(p, s2, 0.33333334f);
    p = std::fma(p, s2, 1.0f);
    return std::fma(float(e), 0.693147182f, 2.0f * s * p);
}

// softplus(x) = ln(1 + e^x), x itself above 20 (where they agree to float precision); ln(1 + u) as
// ln(y) u / (y - 1) with y = 1 + u (exact where y rounds to 1: u itself).
inline float softplus_canonical(float x) {
    const float u = exp_canonical(x > 20.0f ? 20.0f : x);
    const float y = 1.0f + u;
    const float d = y - 1.0f;
    const float log1p_u = d == 0.0f ? u : log_canonical(y) * (u / (d == 0.0f ? 1.0f : d));
    return x > 20.0f ? x : log1p_u;
}

inline void softplus_row_impl(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = softplus_canonical(x[i]);
}

// fma explicit: an ISA build with FMA must not contract the products differently from the others
inline float ssm_scan_step_impl(float *h, const float *a, const float *b, const float *c, float delta,
                                float x_delta, int64_t n) {
    constexpr int lanes = 8;
    float lane_sum[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int k = 0; k < lanes; ++k) {
            const float updated = std::fma(h[i + k], exp_canonical(delta * a[i + k]), b[i + k] * x_delta);
            h[i + k] = updated;
            lane_sum[k] = std::fma(updated, c[i + k], lane_sum[k]);
        }
    float sum = ((lane_sum[0] + lane_sum[4]) + (lane_sum[2] + lane_sum[6])) +
                ((lane_sum[1] + lane_sum[5]) + (lane_sum[3] + lane_sum[7]));
    for (; i < n; ++i) {
        h[i] = std::fma(h[i], exp_canonical(delta * a[i]), b[i] * x_delta);
        sum = std::fma(h[i], c[i], sum);
    }
    return sum;
}

// 16 lanes (state i in lane i % 16, a full vector of AVX-512, two of AVX2), joined by the lane tree:
// from h_in into h_out, or in place (in_place: h_in is h_out and never read, the state reached
// through h_out alone). restrict (the state never overlaps b or c, nor h_in h_out) keeps the stores
// and the lane sums in vectors.
template <bool in_place>
inline float mamba2_step(const float *__restrict__ h_in, float *__restrict__ h_out,
                         const float *__restrict__ b, const float *__restrict__ c, float decay, float x_delta,
                         int64_t n) {
    constexpr int lanes = 16;
    float lane_sum[lanes] = {};
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes)
        for (int k = 0; k < lanes; ++k) {
            const float updated = std::fma(in_place ? h_out[i + k] : h_in[i + k], decay, b[i + k] * x_delta);
            h_out[i + k] = updated;
            lane_sum[k] = std::fma(updated, c[i + k], lane_sum[k]);
        }
    for (int k = 0; i + k < n; ++k) {  // the last block's states
        const float updated = std::fma(in_place ? h_out[i + k] : h_in[i + k], decay, b[i + k] * x_delta);
        h_out[i + k] = updated;
        lane_sum[k] = std::fma(updated, c[i + k], lane_sum[k]);
    }
    return sum_lanes_16(lane_sum);
}

inline float ssm_scan_mamba2_step_impl(const float *h_in, float *h_out, const float *b, const float *c,
                                       float decay, float x_delta, int64_t n) {
    return h_in == h_out ? mamba2_step<true>(h_in, h_out, b, c, decay, x_delta, n)
                         : mamba2_step<false>(h_in, h_out, b, c, decay, x_delta, n);
}

}  // namespace
}  // namespace weft::cpu

// Defines the entry points of one ISA build.
#define WEFT_DEFINE_ACTIVATIONS(isa)                                                                     \
    void weft::cpu::swiglu_row_##isa(const float *gate, const float *up, float *out, int64_t n) {        \
        swiglu_row_impl(gate, up, out, n);                                                               \
    }                                                                                                    \
    void weft::cpu::swiglu_oai_row_##isa(const float *gate, const float *up, float *out, int64_t n,      \
                                         float alpha, float limit) {                                     \
        swiglu_oai_row_impl(gate, up, out, n, alpha, limit);                                             \
    }                                                                                                    \
    void weft::cpu::silu_row_##isa(const float *x, float *out, int64_t n) {                              \
        silu_row_impl(x, out, n);                                                                        \
    }                                                                                                    \
    void weft::cpu::softplus_row_##isa(const float *x, float *out, int64_t n) {                          \
        softplus_row_impl(x, out, n);                                                                    \
    }                                                                                                    \
    float weft::cpu::ssm_scan_step_##isa(float *h, const float *a, const float *b, const float *c,       \
                                         float delta, float x_delta, int64_t n) {                        \
        return ssm_scan_step_impl(h, a, b, c, delta, x_delta, n);                                        \
    }                                                                                                    \
    float weft::cpu::ssm_scan_mamba2_step_##isa(const float *h_in, float *h_out, const float *b,         \
                                                const float *c, float decay, float x_delta, int64_t n) { \
        return ssm_scan_mamba2_step_impl(h_in, h_out, b, c, decay, x_delta, n);                          \
    }
