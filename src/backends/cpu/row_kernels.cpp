// src/backends/cpu/row_kernels.cpp — the traits table of each ISA level and the run-time choice.
#include "backends/cpu/row_kernels.h"

#include <array>

#include "weft/core/error.h"

namespace weft::cpu {

namespace {

using traits_table = std::array<quant_traits, size_t(dtype::count)>;

traits_table make_scalar_table() {
    traits_table t{};
    for (size_t i = 0; i < t.size(); ++i)
        if (has_quant_traits(dtype(i))) t[i] = quant_traits_of(dtype(i));
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
