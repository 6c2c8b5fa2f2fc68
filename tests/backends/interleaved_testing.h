// tests/backends/interleaved_testing.h — activations quantized as the interleaved products want them,
// for the group kernel's tests and its benchmark (bench_group_kernel.cpp).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "backends/cpu/interleaved.h"

namespace weft::test {

struct quantized_columns {
    std::vector<int8_t> qs;
    std::vector<float> d;
    std::vector<int32_t> sum;
    cpu::q8_rows rows;
};

// n columns of k uniform values in [-1, 1) (std::mt19937(seed)) quantized in `format`.
inline quantized_columns quantize_columns(cpu::q8_format format, int64_t k, int64_t n, uint32_t seed) {
    quantized_columns q;
    const int64_t nd = k / cpu::values_per_scale(format), ns = k / cpu::values_per_sum(format);
    q.qs.resize(size_t(k * n));
    q.d.resize(size_t(nd * n));
    q.sum.resize(size_t(ns * n));
    std::vector<float> x(static_cast<size_t>(k));
    std::vector<uint8_t> blocks(size_t(k) * 2);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (int64_t c = 0; c < n; ++c) {
        for (auto &v : x) v = dist(rng);
        cpu::quantize_q8_row(x.data(), k, format, &q.qs[size_t(c * k)], &q.d[size_t(c * nd)],
                             &q.sum[size_t(c * ns)], blocks.data());
    }
    q.rows = cpu::make_q8_rows(q.qs.data(), q.d.data(), q.sum.data(), k, format);
    return q;
}

}  // namespace weft::test
