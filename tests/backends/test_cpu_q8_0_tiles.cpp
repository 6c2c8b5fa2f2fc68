// tests/backends/test_cpu_q8_0_tiles.cpp — q8_0 products a tile at a time (dot_tile_q8_0_avx2): every dot
// bit for bit the row kernel's (and so the reference engine's order), for every tile shape and
// remainder, and a whole mul_mat of several columns equal to one row kernel call per element.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "backends/cpu/row_kernels.h"
#include "backends/cpu/simd_level.h"
#include "backends/cpu_testing.h"
#include "weft/quant/blocks.h"

namespace weft {
namespace {

// n_rows rows of k values quantized to q8_0 (the activation quantizer of the AVX2 level).
std::vector<block_q8_0> random_q8_0_rows(int64_t n_rows, int64_t k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> values(size_t(n_rows * k));
    for (float &v : values) v = dist(rng);
    std::vector<block_q8_0> out(size_t(n_rows * k / qk8_0));
    for (int64_t r = 0; r < n_rows; ++r)
        cpu::from_float_q8_0_avx2(&values[size_t(r * k)], &out[size_t(r * k / qk8_0)], k);
    return out;
}

TEST(CpuQ8_0Tiles, EveryDotIsTheRowKernels) {
    if (!cpu::simd_level_supported(cpu::simd_level::avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
    const int64_t k = 320;
    for (int64_t rows : {1, 2, 3, 7}) {
        for (int64_t cols : {1, 2, 3, 4, 5, 9}) {
            const std::vector<block_q8_0> a = random_q8_0_rows(rows, k, uint32_t(rows * 31 + cols));
            const std::vector<block_q8_0> y = random_q8_0_rows(cols, k, uint32_t(rows * 7 + cols + 1000));
            std::vector<const void *> ys;
            std::vector<std::vector<float>> out(size_t(cols), std::vector<float>(static_cast<size_t>(rows)));
            std::vector<float *> outs;
            for (int64_t j = 0; j < cols; ++j) {
                ys.push_back(&y[size_t(j * k / qk8_0)]);
                outs.push_back(out[size_t(j)].data());
            }
            cpu::dot_tile_q8_0_avx2(k, a.data(), size_t(k / qk8_0) * sizeof(block_q8_0), rows, ys.data(),
                                    cols, outs.data());
            for (int64_t j = 0; j < cols; ++j)
                for (int64_t i = 0; i < rows; ++i) {
                    float expected = 0;
                    cpu::vec_dot_q8_0_avx2(k, &expected, &a[size_t(i * k / qk8_0)], ys[size_t(j)]);
                    EXPECT_EQ(out[size_t(j)][size_t(i)], expected)
                        << rows << "x" << cols << " at " << i << ", " << j;
                }
        }
    }
}

// A product of 37 rows and 19 columns in a [k, n, 2] batch over a broadcast weight matrix: every
// element equals the row kernel on the quantized column, whatever the threads.
TEST(CpuQ8_0Tiles, MulMatEqualsTheRowKernelPerElement) {
    auto ctx = test::data_context();
    const int64_t k = 256, m = 37, n = 19;
    std::vector<float> dequantized;
    tensor *a = test::make_weights(*ctx, dtype::q8_0, k, m, 1, 1, 5, dequantized);
    tensor *b = ctx->new_tensor(dtype::f32, {k, n, 2});
    test::fill_uniform(*b, 9);
    tensor *out = mul_mat(*ctx, a, b);
    graph g;
    build_forward_expand(g, out);
    const quant_traits &traits = cpu::row_traits_of(dtype::q8_0);
    std::vector<block_q8_0> column(size_t(k / qk8_0));
    std::vector<float> first;
    for (int n_threads : {1, 2, 3}) {
        cpu_backend be(n_threads);
        ASSERT_EQ(be.graph_compute(g, {}), compute_status::ok);
        const std::vector<float> got = test::values_of(*out);
        if (first.empty()) {
            first = got;
            for (int64_t c = 0; c < n * 2; ++c) {
                traits.from_float(static_cast<const float *>(b->data) + c * k, column.data(), k);
                for (int64_t r = 0; r < m; ++r) {
                    float expected = 0;
                    traits.vec_dot(k, &expected, static_cast<const char *>(a->data) + size_t(r) * a->nb[1],
                                   column.data());
                    EXPECT_EQ(got[size_t(c * m + r)], expected) << "row " << r << ", column " << c;
                }
            }
        } else {
            EXPECT_EQ(got, first) << n_threads << " threads";
        }
    }
}

}  // namespace
}  // namespace weft
