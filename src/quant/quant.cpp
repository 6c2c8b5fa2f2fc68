// src/quant/quant.cpp — the traits table of the types (reference functions) and quantize_rows.
#include "weft/quant/quant.h"

#include <array>
#include <cmath>
#include <string>

#include "quant/kernels.h"
#include "weft/core/error.h"

namespace weft {
namespace {

using traits_table = std::array<quant_traits, size_t(dtype::count)>;

// The portable table: every entry's fast path is its reference.
traits_table make_scalar_table() {
    using namespace quant;
    traits_table t{};
    auto set = [&](dtype type, dtype vec_dot_type, to_float_fn to_float, from_float_fn from_float_ref,
                   vec_dot_fn vec_dot_ref) {
        t[size_t(type)] = quant_traits{type,           vec_dot_type, to_float,   from_float_ref,
                                       from_float_ref, vec_dot_ref,  vec_dot_ref};
    };
    set(dtype::f32, dtype::f32, to_float_f32, from_float_f32_ref, vec_dot_f32_ref);
    set(dtype::f16, dtype::f16, to_float_f16, from_float_f16_ref, vec_dot_f16_ref);
    set(dtype::bf16, dtype::bf16, to_float_bf16, from_float_bf16_ref, vec_dot_bf16_ref);
    set(dtype::q4_0, dtype::q8_0, to_float_q4_0, from_float_q4_0_ref, vec_dot_q4_0_ref);
    set(dtype::q4_1, dtype::q8_1, to_float_q4_1, from_float_q4_1_ref, vec_dot_q4_1_ref);
    set(dtype::q5_0, dtype::q8_0, to_float_q5_0, from_float_q5_0_ref, vec_dot_q5_0_ref);
    set(dtype::q5_1, dtype::q8_1, to_float_q5_1, from_float_q5_1_ref, vec_dot_q5_1_ref);
    set(dtype::q8_0, dtype::q8_0, to_float_q8_0, from_float_q8_0_ref, vec_dot_q8_0_ref);
    set(dtype::q2_k, dtype::q8_k, to_float_q2_k, from_float_q2_k_ref, vec_dot_q2_k_ref);
    set(dtype::q3_k, dtype::q8_k, to_float_q3_k, from_float_q3_k_ref, vec_dot_q3_k_ref);
    set(dtype::q4_k, dtype::q8_k, to_float_q4_k, from_float_q4_k_ref, vec_dot_q4_k_ref);
    set(dtype::q5_k, dtype::q8_k, to_float_q5_k, from_float_q5_k_ref, vec_dot_q5_k_ref);
    set(dtype::q6_k, dtype::q8_k, to_float_q6_k, from_float_q6_k_ref, vec_dot_q6_k_ref);
    set(dtype::iq4_nl, dtype::q8_0, to_float_iq4_nl, from_float_iq4_nl_ref, vec_dot_iq4_nl_ref);
    set(dtype::iq4_xs, dtype::q8_k, to_float_iq4_xs, from_float_iq4_xs_ref, vec_dot_iq4_xs_ref);
    set(dtype::tq1_0, dtype::q8_k, to_float_tq1_0, from_float_tq1_0_ref, vec_dot_tq1_0_ref);
    set(dtype::tq2_0, dtype::q8_k, to_float_tq2_0, from_float_tq2_0_ref, vec_dot_tq2_0_ref);
    set(dtype::mxfp4, dtype::q8_0, to_float_mxfp4, from_float_mxfp4_ref, vec_dot_mxfp4_ref);
    set(dtype::iq2_xxs, dtype::q8_k, to_float_iq2_xxs, nullptr, vec_dot_iq2_xxs_ref);  // importance only
    set(dtype::iq2_xs, dtype::q8_k, to_float_iq2_xs, nullptr, vec_dot_iq2_xs_ref);     // importance only
    set(dtype::iq2_s, dtype::q8_k, to_float_iq2_s, from_float_iq2_s_ref, vec_dot_iq2_s_ref);
    set(dtype::iq3_xxs, dtype::q8_k, to_float_iq3_xxs, from_float_iq3_xxs_ref, vec_dot_iq3_xxs_ref);
    set(dtype::iq3_s, dtype::q8_k, to_float_iq3_s, from_float_iq3_s_ref, vec_dot_iq3_s_ref);
    set(dtype::iq1_s, dtype::q8_k, to_float_iq1_s, nullptr, vec_dot_iq1_s_ref);  // importance only
    set(dtype::iq1_m, dtype::q8_k, to_float_iq1_m, from_float_iq1_m_ref, vec_dot_iq1_m_ref);
    // Activation types: only ever the y side of a dot product, so they have none of their own.
    set(dtype::q8_1, dtype::q8_1, to_float_q8_1, from_float_q8_1_ref, nullptr);
    set(dtype::q8_k, dtype::q8_k, to_float_q8_k, from_float_q8_k_ref, nullptr);
    return t;
}

const traits_table &scalar_table() {
    static const traits_table table = make_scalar_table();
    return table;
}

}  // namespace

bool has_quant_traits(dtype t) {
    const auto i = size_t(t);
    return i < size_t(dtype::count) && scalar_table()[i].to_float != nullptr;
}

const quant_traits &quant_traits_of(dtype t) {
    WEFT_ASSERT(has_quant_traits(t));
    return scalar_table()[size_t(t)];
}

size_t quantize_rows(dtype t, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                     const float *importance) {
    if (!has_quant_traits(t))
        throw error(std::string("[quantize_rows] type ") + type_name(t) + " cannot be quantized to");
    const type_info &info = type_traits(t);
    if (nrows < 0 || n_per_row <= 0 || n_per_row % info.block_size != 0)
        throw error("[quantize_rows] " + std::to_string(nrows) + " rows of " + std::to_string(n_per_row) +
                    " values: a " + type_name(t) + " row must hold a positive multiple of " +
                    std::to_string(info.block_size) + " values");
    WEFT_ASSERT(nrows == 0 || (src != nullptr && dst != nullptr));

    using weighted_fn = void (*)(const float *, void *, int64_t, const float *);
    weighted_fn weighted = nullptr;
    switch (t) {
        case dtype::q4_0:
            weighted = quant::quantize_row_q4_0_weighted;
            break;
        case dtype::q4_1:
            weighted = quant::quantize_row_q4_1_weighted;
            break;
        case dtype::q5_0:
            weighted = quant::quantize_row_q5_0_weighted;
            break;
        case dtype::q5_1:
            weighted = quant::quantize_row_q5_1_weighted;
            break;
        case dtype::q2_k:
            weighted = quant::quantize_row_q2_k_weighted;
            break;
        case dtype::q3_k:
            weighted = quant::quantize_row_q3_k_weighted;
            break;
        case dtype::q4_k:
            weighted = quant::quantize_row_q4_k_weighted;
            break;
        case dtype::q5_k:
            weighted = quant::quantize_row_q5_k_weighted;
            break;
        case dtype::q6_k:
            weighted = quant::quantize_row_q6_k_weighted;
            break;
        case dtype::iq4_nl:
            weighted = quant::quantize_row_iq4_nl_weighted;
            break;
        case dtype::iq4_xs:
            weighted = quant::quantize_row_iq4_xs_weighted;
            break;
        case dtype::iq3_xxs:
            weighted = quant::quantize_row_iq3_xxs_weighted;
            break;
        case dtype::iq3_s:
            weighted = quant::quantize_row_iq3_s_weighted;
            break;
        case dtype::iq1_s:
            weighted = quant::quantize_row_iq1_s_weighted;
            break;
        case dtype::iq1_m:
            weighted = quant::quantize_row_iq1_m_weighted;
            break;
        case dtype::iq2_xxs:
            weighted = quant::quantize_row_iq2_xxs_weighted;
            break;
        case dtype::iq2_xs:
            weighted = quant::quantize_row_iq2_xs_weighted;
            break;
        case dtype::iq2_s:
            weighted = quant::quantize_row_iq2_s_weighted;
            break;
        default:
            break;  // q8_0, tq1_0, tq2_0, mxfp4 and the float types ignore importance
    }

    // Weights are stored with the reference quantizer so files do not depend on the CPU.
    const quant_traits &traits = quant_traits_of(t);
    if (!traits.from_float_ref && !weighted)  // an activation-only or storage type
        throw error(std::string("[quantize_rows] ") + type_name(t) +
                    " is not a type weights are quantized to");
    // As in the established quantizer, some types are only made with importance weights.
    if (!traits.from_float_ref && !importance)
        throw error(std::string("[quantize_rows] weft cannot quantize to ") + type_name(t) +
                    " without an importance matrix: it needs an importance matrix (per-column importance), "
                    "as the established quantizer does");
    const size_t row_bytes = row_size(t, n_per_row);
    auto *out = static_cast<uint8_t *>(dst);
    for (int64_t r = 0; r < nrows; ++r) {
        const float *row = src + r * n_per_row;
        // A NaN or infinity would silently poison a whole block (its scale) and the conversions
        // to integers would be undefined; refuse it and say where it is. (The float types carry
        // them as they are.)
        for (int64_t c = 0; info.is_quantized && c < n_per_row; ++c) {
            if (!std::isfinite(row[c]))
                throw error("[quantize_rows] row " + std::to_string(r) + ", column " + std::to_string(c) +
                            ": value " + std::to_string(row[c]) +
                            " is not finite and cannot be quantized to " + type_name(t));
        }
        if (importance && weighted)
            weighted(row, out + size_t(r) * row_bytes, n_per_row, importance);
        else
            traits.from_float_ref(row, out + size_t(r) * row_bytes, n_per_row);
    }
    return size_t(nrows) * row_bytes;
}

}  // namespace weft
