// tests/quant/quant_testing.h — helpers shared by the quant tests: random rows, round trips, errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "weft/core/fp16.h"
#include "weft/core/type.h"
#include "weft/quant/quant.h"

namespace weft::test {

// The weight types (those with a dot product) and the activation-only types.
inline const std::vector<dtype> &weight_types() {
    static const std::vector<dtype> types = {
        dtype::f32,  dtype::f16,    dtype::bf16,   dtype::q4_0,  dtype::q4_1,  dtype::q5_0,
        dtype::q5_1, dtype::q8_0,   dtype::q2_k,   dtype::q3_k,  dtype::q4_k,  dtype::q5_k,
        dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs, dtype::tq1_0, dtype::tq2_0, dtype::mxfp4};
    return types;
}

// The grid i-quants: tests of their decoding and dot products fill them with random bytes
// (random_grid_blocks); their quantizers have tests of their own.
inline const std::vector<dtype> &grid_types() {
    static const std::vector<dtype> types = {dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s, dtype::iq3_xxs,
                                             dtype::iq3_s,   dtype::iq1_s,  dtype::iq1_m};
    return types;
}

// No from_float: a type quantized only with importance weights (iq2_xxs, iq2_xs, iq1_s).
inline bool needs_importance(dtype t) {
    return has_quant_traits(t) && quant_traits_of(t).vec_dot_ref != nullptr &&
           quant_traits_of(t).from_float_ref == nullptr;
}

// `blocks` blocks of a read-only type: random bytes, with each block's fp16 scale (its first two
// bytes) set to a random value in [scale / 2, scale].
inline std::vector<uint8_t> random_grid_blocks(dtype t, int64_t blocks, uint32_t seed, float scale = 0.004f) {
    const size_t size = type_traits(t).type_size;
    std::vector<uint8_t> q(size * size_t(blocks));
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> factor(0.5f, 1.0f);
    for (auto &b : q) b = uint8_t(byte(rng));
    for (int64_t i = 0; i < blocks; ++i) {
        const fp16_t d = fp32_to_fp16(scale * factor(rng));
        uint8_t *block = q.data() + size_t(i) * size;
        if (t == dtype::iq1_m) {
            // iq1_m keeps d in the top nibbles of its four 16-bit scale words (bytes 48..55)
            for (int k = 0; k < 4; ++k)
                block[48 + 2 * k + 1] =
                    uint8_t((block[48 + 2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 0xf) << 4));
        } else {
            std::memcpy(block, &d, sizeof d);
        }
    }
    return q;
}

// Rows of type t: the quantized `values` (n_per_row a row), or random blocks for a read-only type.
inline void fill_rows(dtype t, const float *values, void *dst, int64_t nrows, int64_t n_per_row,
                      uint32_t seed) {
    if (!needs_importance(t)) {
        quantize_rows(t, values, dst, nrows, n_per_row);
        return;
    }
    const auto q = random_grid_blocks(t, nrows * n_per_row / type_traits(t).block_size, seed);
    std::memcpy(dst, q.data(), q.size());
}

inline std::vector<float> normal_values(size_t n, uint32_t seed, float sigma = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0f, sigma);
    std::vector<float> v(n);
    for (auto &x : v) x = dist(rng);
    return v;
}

// Elements per row for a test: `blocks` blocks of the type (plain types: 32 elements a block).
inline int64_t row_length(dtype t, int64_t blocks) {
    const int64_t bs = type_traits(t).block_size;
    return blocks * (bs == 1 ? 32 : bs);
}

inline std::vector<uint8_t> quantize(dtype t, const std::vector<float> &x, int64_t n_per_row) {
    std::vector<uint8_t> q(row_size(t, n_per_row) * (x.size() / size_t(n_per_row)));
    quantize_rows(t, x.data(), q.data(), int64_t(x.size()) / n_per_row, n_per_row);
    return q;
}

inline std::vector<float> dequantize(dtype t, const std::vector<uint8_t> &q, int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    quant_traits_of(t).to_float(q.data(), x.data(), n);
    return x;
}

// sqrt(sum (a - b)^2 / sum b^2): the RMS error relative to the RMS of the original b.
inline double relative_rmse(const float *a, const float *b, size_t n) {
    double err = 0, ref = 0;
    for (size_t i = 0; i < n; ++i) {
        err += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
        ref += double(b[i]) * b[i];
    }
    return ref > 0 ? std::sqrt(err / ref) : std::sqrt(err);
}

}  // namespace weft::test
