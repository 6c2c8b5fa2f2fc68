// src/backends/cpu/activations.h — row functions of the activations, written once in plain C++
// (canonical_math.h) and compiled per ISA: the same float operations on every CPU, vectorized
// where the ISA allows.
#pragma once

#include <cstdint>

namespace weft::cpu {

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x)
using swiglu_row_fn = void (*)(const float *gate, const float *up, float *out, int64_t n);
// gpt-oss's: g = min(gate[i], limit), u = clamp(up[i], -limit, limit), out[i] = g * sigmoid(alpha g) * (u +
// 1)
using swiglu_oai_row_fn = void (*)(const float *gate, const float *up, float *out, int64_t n, float alpha,
                                   float limit);
void swiglu_oai_row_scalar(const float *gate, const float *up, float *out, int64_t n, float alpha,
                           float limit);
void swiglu_oai_row_avx2(const float *gate, const float *up, float *out, int64_t n, float alpha, float limit);
void swiglu_oai_row_avx512(const float *gate, const float *up, float *out, int64_t n, float alpha,
                           float limit);
// out[i] = silu(x[i])
using silu_row_fn = void (*)(const float *x, float *out, int64_t n);

void swiglu_row_scalar(const float *gate, const float *up, float *out, int64_t n);
void swiglu_row_avx2(const float *gate, const float *up, float *out, int64_t n);
void swiglu_row_avx512(const float *gate, const float *up, float *out, int64_t n);
void silu_row_scalar(const float *x, float *out, int64_t n);
void silu_row_avx2(const float *x, float *out, int64_t n);
void silu_row_avx512(const float *x, float *out, int64_t n);

// out[i] = softplus(x[i]) = ln(1 + e^x[i]) (x[i] itself above 20)
using softplus_row_fn = void (*)(const float *x, float *out, int64_t n);
void softplus_row_scalar(const float *x, float *out, int64_t n);
void softplus_row_avx2(const float *x, float *out, int64_t n);
void softplus_row_avx512(const float *x, float *out, int64_t n);
// One token of a selective scan over a channel's state h[0, n): h[i] = h[i] * e^(delta * a[i]) +
// b[i] * x_delta; returns sum_i c[i] * h[i], summed in 8 lanes joined in a fixed tree (the same bits
// in every build).
using ssm_scan_step_fn = float (*)(float *h, const float *a, const float *b, const float *c, float delta,
                                   float x_delta, int64_t n);
float ssm_scan_step_scalar(float *h, const float *a, const float *b, const float *c, float delta,
                           float x_delta, int64_t n);
float ssm_scan_step_avx2(float *h, const float *a, const float *b, const float *c, float delta, float x_delta,
                         int64_t n);
float ssm_scan_step_avx512(float *h, const float *a, const float *b, const float *c, float delta,
                           float x_delta, int64_t n);
// One token of Mamba-2's scan over one channel's state (the head's decay shared by every state):
// h_out[i] = h_in[i] * decay + b[i] * x_delta; returns sum_i c[i] * h_out[i], summed in 16 lanes
// joined by sum_lanes_16 (the same bits in every build). h_in may be h_out (in place).
using ssm_scan_mamba2_step_fn = float (*)(const float *h_in, float *h_out, const float *b, const float *c,
                                          float decay, float x_delta, int64_t n);
float ssm_scan_mamba2_step_scalar(const float *h_in, float *h_out, const float *b, const float *c,
                                  float decay, float x_delta, int64_t n);
float ssm_scan_mamba2_step_avx2(const float *h_in, float *h_out, const float *b, const float *c, float decay,
                                float x_delta, int64_t n);
float ssm_scan_mamba2_step_avx512(const float *h_in, float *h_out, const float *b, const float *c,
                                  float decay, float x_delta, int64_t n);

// The builds this CPU runs (scalar under WEFT_FORCE_SCALAR).
swiglu_row_fn best_swiglu_row();
swiglu_oai_row_fn best_swiglu_oai_row();
silu_row_fn best_silu_row();
softplus_row_fn best_softplus_row();
ssm_scan_step_fn best_ssm_scan_step();
ssm_scan_mamba2_step_fn best_ssm_scan_mamba2_step();

}  // namespace weft::cpu
