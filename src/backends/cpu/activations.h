// src/backends/cpu/activations.h — row functions of the activations, written once in plain C++
// (canonical_math.h) and compiled per ISA: the same float operations on every CPU, vectorized
// where the ISA allows.
#pragma once

#include <cstdint>

namespace weft::cpu {

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x)
using swiglu_row_fn = void (*)(const float *gate, const float *up, float *out, int64_t n);
// out[i] = silu(x[i])
using silu_row_fn = void (*)(const float *x, float *out, int64_t n);

void swiglu_row_scalar(const float *gate, const float *up, float *out, int64_t n);
void swiglu_row_avx2(const float *gate, const float *up, float *out, int64_t n);
void swiglu_row_avx512(const float *gate, const float *up, float *out, int64_t n);
void silu_row_scalar(const float *x, float *out, int64_t n);
void silu_row_avx2(const float *x, float *out, int64_t n);
void silu_row_avx512(const float *x, float *out, int64_t n);

// The builds this CPU runs (scalar under WEFT_FORCE_SCALAR).
swiglu_row_fn best_swiglu_row();
silu_row_fn best_silu_row();

}  // namespace weft::cpu
