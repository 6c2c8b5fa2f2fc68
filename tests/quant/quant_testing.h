// tests/quant/quant_testing.h — helpers shared by the quant tests: random rows, round trips, errors.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "weft/core/type.h"
#include "weft/quant/quant.h"

namespace weft::test {

// The weight types (those with a dot product) and the activation-only types.
inline const std::vector<dtype> &weight_types() {
    static const std::vector<dtype> types = {
        dtype::f32,  dtype::f16,    dtype::bf16,   dtype::q4_0,  dtype::q4_1, dtype::q5_0,
        dtype::q5_1, dtype::q8_0,   dtype::q2_k,   dtype::q3_k,  dtype::q4_k, dtype::q5_k,
        dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs, dtype::tq1_0, dtype::tq2_0};
    return types;
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
