// src/backends/cpu/rope_rotate_impl.h — the rotation of rope's pairs, written once in plain C++ and
// compiled per ISA (rope_rotate*.cpp): the same float operations on every CPU. Each output is one
// fma and one product, as the reference engine's compiler contracts x0*c - x1*s and x0*s + x1*c:
//   out0 = fma(x0, c, -(x1 * s)),  out1 = fma(x0, s, x1 * c)
// (an FMA instruction where the ISA has one; the C library's exact fma in the scalar build).
#pragma once

#include <cmath>
#include <cstdint>

namespace weft::cpu {

// Rotates the pairs of x by cos_sin (cos and sin of pair i at 2i, 2i + 1): normal pairs (x[2i],
// x[2i+1]), NeoX pairs (x[i], x[i + half]).
using rope_rotate_fn = void (*)(const float *x, const float *cos_sin, float *out, int64_t half, bool neox);

void rope_rotate_scalar(const float *x, const float *cos_sin, float *out, int64_t half, bool neox);
void rope_rotate_avx2(const float *x, const float *cos_sin, float *out, int64_t half, bool neox);
void rope_rotate_avx512(const float *x, const float *cos_sin, float *out, int64_t half, bool neox);

namespace {  // internal linkage: one copy per ISA build

inline void rope_rotate_impl(const float *x, const float *cos_sin, float *out, int64_t half, bool neox) {
    for (int64_t i = 0; i < half; ++i) {
        const int64_t j0 = neox ? i : 2 * i;
        const int64_t j1 = neox ? i + half : 2 * i + 1;
        const float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        const float x0 = x[j0], x1 = x[j1];
        out[j0] = std::fma(x0, c, -(x1 * s));
        out[j1] = std::fma(x0, s, x1 * c);
    }
}

}  // namespace
}  // namespace weft::cpu

// Defines the entry point of one ISA build.
#define WEFT_DEFINE_ROPE_ROTATE(isa)                                                                  \
    void weft::cpu::rope_rotate_##isa(const float *x, const float *cos_sin, float *out, int64_t half, \
                                      bool neox) {                                                    \
        rope_rotate_impl(x, cos_sin, out, half, neox);                                                \
    }
