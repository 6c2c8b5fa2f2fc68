// tests/backends/cpu_testing.h — helpers of the CPU backend tests: random tensors and weights, element
// readers, running one graph with 1, 2 and 3 threads, and the normalized error against a reference.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "quant/quant_testing.h"
#include "weft/backends/cpu.h"
#include "weft/core/context.h"
#include "weft/core/cpu_features.h"
#include "weft/core/device.h"
#include "weft/core/graph.h"
#include "weft/core/ops.h"
#include "weft/core/tensor.h"
#include "weft/quant/quant.h"

namespace weft::test {

// An arena that allocates data for every tensor: op results get memory too, so a graph built in it
// runs without a planner ("unplanned execution").
inline std::unique_ptr<context> data_context(size_t bytes = size_t(64) << 20) {
    return std::make_unique<context>(context_params{bytes, false});
}

// Fills every element (through the tensor's strides) with uniform values in [lo, hi).
inline void fill_uniform(tensor &t, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) tensor_set_f32(t, dist(rng), i0, i1, i2, i3);
}

// a [k, m, a2, a3] of `type` from normal random values; `dequantized` receives its rows as floats.
inline tensor *make_weights(context &ctx, dtype type, int64_t k, int64_t m, int64_t a2, int64_t a3,
                            uint32_t seed, std::vector<float> &dequantized) {
    tensor *a = ctx.new_tensor(type, {k, m, a2, a3});
    const int64_t rows = m * a2 * a3;
    std::vector<float> values(size_t(k * rows));
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    for (auto &v : values) v = dist(rng);
    fill_rows(type, values.data(), a->data, rows, k, seed);
    dequantized.resize(values.size());
    for (int64_t r = 0; r < rows; ++r)
        quant_traits_of(type).to_float(static_cast<const char *>(a->data) + size_t(r) * a->nb[1],
                                       &dequantized[size_t(r * k)], k);
    return a;
}

inline double at(const tensor &t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
    return double(tensor_get_f32(t, i0, i1, i2, i3));
}

// All elements in logical order (ne[0] fastest).
inline std::vector<float> values_of(const tensor &t) {
    std::vector<float> v;
    v.reserve(size_t(t.nelements()));
    for (int64_t i3 = 0; i3 < t.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < t.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < t.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < t.ne[0]; ++i0) v.push_back(tensor_get_f32(t, i0, i1, i2, i3));
    return v;
}

// sum (x - ref)^2 / sum ref^2 (the plain squared error when the reference is all zeros)
inline double normalized_error(const std::vector<float> &x, const std::vector<double> &ref) {
    double err = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        err += (double(x[i]) - ref[i]) * (double(x[i]) - ref[i]);
        norm += ref[i] * ref[i];
    }
    return norm > 0 ? err / norm : err;
}

inline int count_non_finite(const std::vector<float> &x) {
    int n = 0;
    for (float v : x) n += std::isfinite(v) ? 0 : 1;
    return n;
}

// The expected value of element (i0, i1, i2, i3) of the result.
using reference_fn = std::function<double(int64_t i0, int64_t i1, int64_t i2, int64_t i3)>;

inline std::vector<double> reference_values(const tensor &out, const reference_fn &ref) {
    std::vector<double> v;
    v.reserve(size_t(out.nelements()));
    for (int64_t i3 = 0; i3 < out.ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < out.ne[2]; ++i2)
            for (int64_t i1 = 0; i1 < out.ne[1]; ++i1)
                for (int64_t i0 = 0; i0 < out.ne[0]; ++i0) v.push_back(ref(i0, i1, i2, i3));
    return v;
}

// The backends the op tests run on: one per registered device whose memory the test can hand the
// graph directly (host memory, as the CPU's). The registry is the only way in: a device that
// registers itself is tested by every op test without the tests naming it.
inline std::vector<device *> host_memory_devices() {
    register_cpu_device();
    std::vector<device *> out;
    for (device *d : devices())
        if (d->default_buffer_type().is_host()) out.push_back(d);
    return out;
}

// Computes the graph of `out` on every such device with 1, 2 and 3 threads; each run must match
// the reference within `bound` (normalized error), contain no NaN/Inf, and equal the first run
// exactly (every kernel computes each element the same way whatever the split, and every device
// the same as the CPU). `check` is what is read back (out itself unless the op writes elsewhere,
// e.g. set_rows). Returns the first run's values.
inline std::vector<float> expect_matches_reference(tensor *out, const reference_fn &ref, double bound,
                                                   tensor *check = nullptr) {
    if (!check) check = out;
    graph g;
    build_forward_expand(g, out);
    const std::vector<double> expected = reference_values(*check, ref);
    std::vector<float> first;
    for (device *d : host_memory_devices())
        for (int n_threads : {1, 2, 3}) {
            std::unique_ptr<backend> b = d->make_backend(n_threads);
            EXPECT_TRUE(b->supports_op(*out)) << op_name(out->op) << " on " << d->name();
            EXPECT_EQ(b->graph_compute(g, {}), compute_status::ok);
            const std::vector<float> got = values_of(*check);
            EXPECT_EQ(count_non_finite(got), 0) << d->name() << ", " << n_threads << " threads";
            const double err = normalized_error(got, expected);
            EXPECT_LE(err, bound) << op_name(out->op) << " '" << out->name << "' " << out->shape_str()
                                  << " on " << d->name() << " with " << n_threads << " threads";
            if (first.empty())
                first = got;
            else
                EXPECT_EQ(got, first) << op_name(out->op) << " on " << d->name() << ", " << n_threads
                                      << " threads, differs from the first run";
        }
    return first;
}

// A product a·b ([k, m] weights, n columns) whose batched result is `batched`: each of columns 0, 17
// and n - 1 computed alone, and the whole product with the scalar and the AVX2 kernels, must give
// the same bits (one order of operations per output element, whatever the batch or the ISA).
inline void expect_same_bits_alone_and_on_every_isa(context &ctx, tensor *a, tensor *b,
                                                    const std::vector<float> &batched) {
    const int64_t k = a->ne[0], m = a->ne[1], n = b->ne[1];
    cpu_backend backend(2);
    for (int64_t c : {int64_t(0), int64_t(17), n - 1}) {
        tensor *alone = mul_mat(ctx, a, view_2d(ctx, b, k, 1, b->nb[1], size_t(c) * b->nb[1]));
        graph g1;
        build_forward_expand(g1, alone);
        ASSERT_EQ(backend.graph_compute(g1, {}), compute_status::ok);
        EXPECT_EQ(std::memcmp(alone->data, &batched[size_t(c * m)], size_t(m) * 4), 0) << "column " << c;
    }
    for (int level : {0, 1}) {
        force_scalar(level == 0);
        limit_to_avx2(level == 1);
        tensor *again = mul_mat(ctx, a, b);
        graph g2;
        build_forward_expand(g2, again);
        ASSERT_EQ(backend.graph_compute(g2, {}), compute_status::ok);
        force_scalar(false);
        limit_to_avx2(false);
        EXPECT_EQ(values_of(*again), batched) << (level == 0 ? "scalar" : "avx2") << " differs";
    }
}

// The products of b by each of `weights` (grouped at load, one k) built into one graph, so the
// backend computes them as one node (compute_mul_mat_shared: one quantization or packing of b, one
// dispenser of chunks), at 1, 2, 3 and 5 threads: each the same bits as the product computed alone.
inline void expect_shared_products_equal_each_alone(context &ctx, const std::vector<tensor *> &weights) {
    const int64_t k = weights[0]->ne[0];
    for (const int64_t n : {int64_t(1), int64_t(7), int64_t(53)}) {
        tensor *b = ctx.new_tensor(dtype::f32, {k, n});
        fill_uniform(*b, uint32_t(n));
        std::vector<std::vector<float>> alone;
        for (tensor *a : weights) {
            tensor *out = mul_mat(ctx, a, b);
            graph g;
            build_forward_expand(g, out);
            cpu_backend backend(1);
            ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
            alone.push_back(values_of(*out));
        }
        std::vector<tensor *> outs;
        graph together;
        for (tensor *a : weights) {
            outs.push_back(mul_mat(ctx, a, b));
            build_forward_expand(together, outs.back());
        }
        for (const int nth : {1, 2, 3, 5}) {
            cpu_backend backend(nth);
            ASSERT_EQ(backend.graph_compute(together, {}), compute_status::ok);
            for (size_t j = 0; j < outs.size(); ++j)
                EXPECT_EQ(values_of(*outs[j]), alone[j])
                    << "product " << j << ", " << n << " columns, " << nth << " threads";
        }
    }
}

}  // namespace weft::test
