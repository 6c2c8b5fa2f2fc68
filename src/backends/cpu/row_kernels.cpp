// src/backends/cpu/row_kernels.cpp — the traits table of each ISA level and the run-time choice.
#include "backends/cpu/row_kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"

namespace weft::cpu {

namespace {

using traits_table = std::array<quant_traits, size_t(dtype::count)>;

// The activation quantizers of q8_0 and q8_1 (the y side of the 32-value types' products, and a
// q8_0 KV cache). The reference engine's CPU backend quantizes activations with its x86 kernel,
// which differs from the file quantizer (quant_traits::from_float_ref: id = 1 / d, ties away from
// zero) in two ways that matter on rare values: the multiplier is 127 / amax, and x * id is rounded
// to nearest with ties to even. A different integer on one element of one row is enough to move a
// random-weight model's logits by NMSE 1e-4 a few layers later, so every level quantizes this way
// (row_kernels_avx2.cpp has the same arithmetic in SIMD).
template <class Block>
void quantize_activations_32(const float *src, Block *y, int64_t n) {
    for (int64_t i = 0; i < n / 32; ++i, src += 32) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(src[j]));
        const float d = amax / 127.0f;
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        y[i].d = fp32_to_fp16(d);
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
            y[i].qs[j] = int8_t(std::nearbyint(src[j] * id));  // the default mode: nearest, ties to even
            sum += y[i].qs[j];
        }
        if constexpr (std::is_same_v<Block, block_q8_1>) y[i].s = fp32_to_fp16(float(sum) * d);
    }
}

void from_float_q8_0_activations(const float *src, void *dst, int64_t n) {
    quantize_activations_32(src, static_cast<block_q8_0 *>(dst), n);
}

void from_float_q8_1_activations(const float *src, void *dst, int64_t n) {
    quantize_activations_32(src, static_cast<block_q8_1 *>(dst), n);
}

traits_table make_scalar_table() {
    traits_table t{};
    for (size_t i = 0; i < t.size(); ++i)
        if (has_quant_traits(dtype(i))) t[i] = quant_traits_of(dtype(i));
    t[size_t(dtype::q8_0)].from_float = from_float_q8_0_activations;
    t[size_t(dtype::q8_1)].from_float = from_float_q8_1_activations;
    return t;
}

// AVX2 + FMA + F16C: the dot products and the activation quantizers of the hot path.
traits_table make_avx2_table() {
    traits_table t = make_scalar_table();
    auto dot = [&](dtype type, vec_dot_fn fn) { t[size_t(type)].vec_dot = fn; };
    dot(dtype::f32, vec_dot_f32_avx2);
    dot(dtype::f16, vec_dot_f16_avx2);
    dot(dtype::bf16, vec_dot_bf16_avx2);
    dot(dtype::q4_0, vec_dot_q4_0_avx2);
    dot(dtype::q4_1, vec_dot_q4_1_avx2);
    dot(dtype::q5_0, vec_dot_q5_0_avx2);
    dot(dtype::q5_1, vec_dot_q5_1_avx2);
    dot(dtype::q8_0, vec_dot_q8_0_avx2);
    dot(dtype::q2_k, vec_dot_q2_k_avx2);
    dot(dtype::q3_k, vec_dot_q3_k_avx2);
    dot(dtype::q4_k, vec_dot_q4_k_avx2);
    dot(dtype::q5_k, vec_dot_q5_k_avx2);
    dot(dtype::q6_k, vec_dot_q6_k_avx2);
    dot(dtype::iq4_nl, vec_dot_iq4_nl_avx2);
    dot(dtype::mxfp4, vec_dot_mxfp4_avx2);
    dot(dtype::iq4_xs, vec_dot_iq4_xs_avx2);
    dot(dtype::tq1_0, vec_dot_tq1_0_avx2);
    dot(dtype::tq2_0, vec_dot_tq2_0_avx2);
    t[size_t(dtype::f16)].to_float = to_float_f16_avx2;
    t[size_t(dtype::f16)].from_float = from_float_f16_avx2;
    t[size_t(dtype::q8_0)].from_float = from_float_q8_0_avx2;
    t[size_t(dtype::q8_1)].from_float = from_float_q8_1_avx2;
    t[size_t(dtype::q8_k)].from_float = from_float_q8_k_avx2;
    return t;
}

}  // namespace

const quant_traits &row_traits_at(dtype t, simd_level level) {
    WEFT_ASSERT(has_quant_traits(t));
    static const traits_table scalar_table = make_scalar_table();
    static const traits_table avx2_table = make_avx2_table();
    return (level >= simd_level::avx2 ? avx2_table : scalar_table)[size_t(t)];
}

const quant_traits &row_traits_of(dtype t) {
    return row_traits_at(t, best_simd_level());
}

}  // namespace weft::cpu
