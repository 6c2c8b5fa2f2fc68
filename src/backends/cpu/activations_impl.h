// src/backends/cpu/activations_impl.h — the bodies of activations.h, included once per ISA build.
#pragma once

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

inline void silu_row_impl(const float *x, float *out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out[i] = silu_canonical(x[i]);
}

}  // namespace
}  // namespace weft::cpu

// Defines the entry points of one ISA build.
#define WEFT_DEFINE_ACTIVATIONS(isa)                                                              \
    void weft::cpu::swiglu_row_##isa(const float *gate, const float *up, float *out, int64_t n) { \
        swiglu_row_impl(gate, up, out, n);                                                        \
    }                                                                                             \
    void weft::cpu::silu_row_##isa(const float *x, float *out, int64_t n) {                       \
        silu_row_impl(x, out, n);                                                                 \
    }
