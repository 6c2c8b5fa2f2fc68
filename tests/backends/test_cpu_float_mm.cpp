// tests/backends/test_cpu_float_mm.cpp — float-weight tiles (f32, f16, bf16): every ISA equals the
// scalar oracle bit for bit on odd shapes, and through mul_mat a column computed alone equals the
// same column in a batch.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cpu/float_mm.h"
#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/fp16.h"

using namespace weft;
using namespace weft::test;

namespace {

// rows x k weights of type t (row stride `stride` bytes) with random values.
std::vector<char> random_weights(dtype t, int64_t rows, int64_t k, size_t stride, uint32_t seed) {
    std::vector<char> w(size_t(rows) * stride);
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < k; ++i) {
            const float v = dist(rng);
            char *p = w.data() + size_t(r) * stride;
            if (t == dtype::f16) {
                const fp16_t h = fp32_to_fp16(v);
                std::memcpy(p + i * 2, &h, 2);
            } else if (t == dtype::bf16) {
                const bf16_t h = fp32_to_bf16(v);
                std::memcpy(p + i * 2, &h, 2);
            } else {
                std::memcpy(p + i * 4, &v, 4);
            }
        }
    return w;
}

TEST(CpuFloatMm, EveryIsaEqualsScalarBitForBit) {
    int isas_run = 0;
    for (auto isa : {cpu::simd_level::avx2, cpu::simd_level::avx512}) {
        if (!cpu::simd_level_supported(isa)) continue;
        ++isas_run;
        for (dtype t : {dtype::f32, dtype::f16, dtype::bf16})
            for (int64_t k : {1, 15, 16, 17, 67, 200}) {
                SCOPED_TRACE(std::string(type_name(t)) + " k " + std::to_string(k) + " isa " +
                             std::to_string(int(isa)));
                const int64_t rows = 9, cols = 13;
                const size_t stride = size_t(k) * (t == dtype::f32 ? 4 : 2) + 6;  // rows not aligned
                const auto w = random_weights(t, rows, k, stride, uint32_t(k));
                std::vector<float> x(size_t(cols) * size_t(k + 3));
                std::mt19937 rng(7);
                std::uniform_real_distribution<float> dist(-1, 1);
                for (auto &v : x) v = dist(rng);
                for (int64_t nr : {1, 3, 4, 9})
                    for (int64_t nc : {1, 2, 6, 7, 13}) {
                        std::vector<float> want(size_t(nc * nr)), got(size_t(nc * nr), -1.f);
                        cpu::float_tile_scalar(t, w.data(), stride, nr, x.data(), size_t(k + 3), nc, k,
                                               want.data(), size_t(nr));
                        cpu::float_tile_at(isa)(t, w.data(), stride, nr, x.data(), size_t(k + 3), nc, k,
                                                got.data(), size_t(nr));
                        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                            << nr << " rows, " << nc << " columns";
                    }
            }
    }
    if (isas_run == 0) GTEST_SKIP() << "this CPU has no SIMD float tile";
}

// The SIMD pack writes the scalar pack's panel: every column count up to the panel width, values
// not a multiple of 8 or of the 64-value step, columns unaligned; the padding is left untouched.
TEST(CpuFloatMm, PanelPackEqualsScalar) {
    if (!cpu::simd_level_supported(cpu::simd_level::avx2)) GTEST_SKIP() << "this CPU has no AVX2";
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (int64_t k : {1, 7, 8, 9, 64, 67, 130})
        for (int64_t n = 1; n <= cpu::float_panel_width; ++n) {
            SCOPED_TRACE("k " + std::to_string(k) + " columns " + std::to_string(n));
            std::vector<float> x(size_t(n * (k + 1) + 1));
            for (auto &v : x) v = dist(rng);
            std::vector<const float *> columns;
            for (int64_t j = 0; j < n; ++j) columns.push_back(x.data() + 1 + j * (k + 1));
            const size_t size = size_t(k * cpu::float_panel_width);
            std::vector<float> want(size, -7.f), got(size, -7.f);
            cpu::pack_panel_scalar(columns.data(), n, k, cpu::float_panel_width, want.data());
            cpu::pack_panel_at(cpu::simd_level::avx2)(columns.data(), n, k, cpu::float_panel_width,
                                                      got.data());
            EXPECT_EQ(std::memcmp(want.data(), got.data(), size * sizeof(float)), 0);
            EXPECT_EQ(want[size_t(k - 1) * cpu::float_panel_width], columns[0][k - 1]);
            if (n < cpu::float_panel_width) {
                EXPECT_EQ(want[size_t(n)], -7.f);
            }
        }
}

// A column alone, in a batch of 29, and with the scalar path: the same bits.
TEST(CpuFloatMm, MulMatColumnsAreBatchInvariant) {
    for (dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
        SCOPED_TRACE(type_name(t));
        auto ctx = data_context();
        const int64_t k = 83, m = 70, n = 29;
        tensor *a = ctx->new_tensor(t, {k, m});
        const auto w = random_weights(t, m, k, a->nb[1], 3);
        std::memcpy(a->data, w.data(), w.size());
        tensor *b = ctx->new_tensor(dtype::f32, {k, n});
        fill_uniform(*b, 4);
        tensor *batched = mul_mat(*ctx, a, b);
        graph g;
        build_forward_expand(g, batched);
        cpu_backend backend(2);
        ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
        for (int64_t c : {int64_t(0), int64_t(11), n - 1}) {
            tensor *alone = mul_mat(*ctx, a, view_2d(*ctx, b, k, 1, b->nb[1], size_t(c) * b->nb[1]));
            graph g1;
            build_forward_expand(g1, alone);
            ASSERT_EQ(backend.graph_compute(g1, {}), compute_status::ok);
            EXPECT_EQ(std::memcmp(alone->data, static_cast<float *>(batched->data) + c * m, size_t(m) * 4), 0)
                << "column " << c;
        }
        force_scalar(true);
        tensor *scalar = mul_mat(*ctx, a, b);
        graph gs;
        build_forward_expand(gs, scalar);
        ASSERT_EQ(backend.graph_compute(gs, {}), compute_status::ok);
        force_scalar(false);
        EXPECT_EQ(values_of(*scalar), values_of(*batched));
        limit_to_avx2(true);
        tensor *avx2 = mul_mat(*ctx, a, b);
        graph ga;
        build_forward_expand(ga, avx2);
        ASSERT_EQ(backend.graph_compute(ga, {}), compute_status::ok);
        limit_to_avx2(false);
        EXPECT_EQ(values_of(*avx2), values_of(*batched));
    }
}

}  // namespace

namespace {

// Float weights regrouped 16 rows at a time (as at load): every ISA and the scalar oracle give the
// same bits, a column alone equals it in a batch, and the result is close to a double reference.
TEST(CpuFloatMm, GroupedWeightsAreExactAcrossIsasAndBatches) {
    {
        // f32 weights keep their rows and the tiles' order: the reference engine's
        auto ctx = data_context();
        EXPECT_FALSE(cpu::can_group_float(*ctx->new_tensor(dtype::f32, {64, 32})));
    }
    {
        // bf16 groups hold value pairs: an odd k keeps its rows
        auto ctx = data_context();
        EXPECT_FALSE(cpu::can_group_float(*ctx->new_tensor(dtype::bf16, {77, 32})));
    }
    for (dtype t : {dtype::f16, dtype::bf16}) {
        SCOPED_TRACE(type_name(t));
        auto ctx = data_context();
        const int64_t k = t == dtype::bf16 ? 78 : 77, m = 48, n = 37;
        tensor *a = ctx->new_tensor(t, {k, m});
        const auto w = random_weights(t, m, k, a->nb[1], 5);
        std::vector<char> grouped(w.size());
        ASSERT_TRUE(cpu::can_group_float(*a));
        cpu::group_float_tensor(*a, w.data(), grouped.data());
        a->data = grouped.data();
        tensor *b = ctx->new_tensor(dtype::f32, {k, n});
        fill_uniform(*b, 6);
        auto reference = [&](int64_t r, int64_t c, int64_t, int64_t) {
            double s = 0;
            for (int64_t i = 0; i < k; ++i) {
                float wv;
                if (t == dtype::f32)
                    std::memcpy(&wv, w.data() + size_t(r) * a->nb[1] + size_t(i) * 4, 4);
                else {
                    uint16_t h;
                    std::memcpy(&h, w.data() + size_t(r) * a->nb[1] + size_t(i) * 2, 2);
                    wv = t == dtype::f16 ? fp16_to_fp32(h) : bf16_to_fp32(h);
                }
                // bf16 products take the activations rounded to bf16 (float_mm.h)
                const float xv =
                    t == dtype::bf16 ? bf16_to_fp32(cpu::round_to_bf16(at(*b, i, c))) : at(*b, i, c);
                s += double(wv) * xv;
            }
            return s;
        };
        const std::vector<float> batched = expect_matches_reference(mul_mat(*ctx, a, b), reference, 1e-6);
        expect_same_bits_alone_and_on_every_isa(*ctx, a, b, batched);
    }
}

}  // namespace

namespace {

// The bf16 pair products (float_mm.h) on values that reach every corner of vdpbf16ps's definition —
// exponents over a wide range, subnormal weights and activations, sums that fall below the smallest
// normal — give the same bits on every ISA (AVX-512 BF16's instruction, two FMAs under MXCSR's
// flush-to-zero, the scalar oracle), and the AVX2 rounding of activations equals the scalar one.
TEST(CpuFloatMm, Bf16PairProductsAreExactAcrossIsas) {
    std::mt19937 rng(11);
    auto wide_float = [&](int min_exp, int max_exp) {
        const float mantissa = std::uniform_real_distribution<float>(-1, 1)(rng);
        return std::ldexp(mantissa, std::uniform_int_distribution<int>(min_exp, max_exp)(rng));
    };
    {
        std::vector<float> x(4099);
        for (size_t i = 0; i < x.size(); ++i) {
            const uint32_t bits = rng();
            std::memcpy(&x[i], &bits, 4);  // every bit pattern: NaNs, infinities, subnormals
            if (i % 3 == 0) x[i] = wide_float(-140, 20);
        }
        for (int64_t k : {int64_t(2), int64_t(16), int64_t(30), int64_t(4098)}) {
            std::vector<uint32_t> want(static_cast<size_t>(k / 2)), got(static_cast<size_t>(k / 2));
            cpu::round_to_bf16_pairs_scalar(x.data(), k, want.data());
            if (!cpu::simd_level_supported(cpu::simd_level::avx2)) continue;
            cpu::round_to_bf16_pairs_avx2(x.data(), k, got.data());
            EXPECT_EQ(got, want) << "k " << k;
        }
    }
    const int64_t k = 96, kp = k / 2, m = 64, width = cpu::float_panel_width;
    std::vector<uint16_t> w(static_cast<size_t>(m * k));
    for (size_t i = 0; i < w.size(); ++i)
        w[i] = i % 17 == 0                ? uint16_t(rng() & 0x807F)  // subnormal
               : (i / size_t(k)) % 3 == 0 ? cpu::round_to_bf16(wide_float(-70, -58))
                                          : cpu::round_to_bf16(wide_float(-20, 10));
    auto ctx = data_context();
    tensor *a = ctx->new_tensor(dtype::bf16, {k, m});
    ASSERT_TRUE(cpu::can_group_float(*a));
    std::vector<uint16_t> grouped(w.size());
    cpu::group_float_tensor(*a, w.data(), grouped.data());
    const size_t group_bytes = size_t(k) * cpu::float_group_rows * 2;
    for (int64_t n : {int64_t(1), int64_t(5), int64_t(24), int64_t(37)}) {
        SCOPED_TRACE("columns " + std::to_string(n));
        const int64_t pw = n == 1 ? 1 : width, n_panels = (n + pw - 1) / pw;
        std::vector<uint32_t> panels(size_t(n_panels * pw * kp));
        for (int64_t c = 0; c < n; ++c) {
            std::vector<float> column(static_cast<size_t>(k));
            for (auto &v : column) v = c % 2 == 0 ? wide_float(-80, -60) : wide_float(-20, 10);
            std::vector<uint32_t> pairs(static_cast<size_t>(kp));
            cpu::round_to_bf16_pairs_scalar(column.data(), k, pairs.data());
            for (int64_t j = 0; j < kp; ++j) panels[cpu::panel_index(j, c, kp, pw)] = pairs[size_t(j)];
        }
        const auto *x = reinterpret_cast<const float *>(panels.data());
        std::vector<float> want(size_t(n * m));
        cpu::float_groups_scalar(dtype::bf16, reinterpret_cast<const char *>(grouped.data()), group_bytes,
                                 m / cpu::float_group_rows, k, x, pw, n, want.data(), size_t(m));
        int flushed = 0;
        for (float v : want) flushed += v == 0.0f;
        for (auto isa : {cpu::simd_level::avx2, cpu::simd_level::avx512}) {
            if (!cpu::simd_level_supported(isa)) continue;
            std::vector<float> got(want.size(), -1.0f);
            cpu::float_groups_at(isa)(dtype::bf16, reinterpret_cast<const char *>(grouped.data()),
                                      group_bytes, m / cpu::float_group_rows, k, x, pw, n, got.data(),
                                      size_t(m));
            EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "isa " << int(isa);
        }
        EXPECT_GT(flushed, 0) << "no sum fell below the smallest normal: the flush is untested";
    }
}

// A layer's q, k and v of grouped bf16 weights share one activation matrix: the backend computes
// them as one node (the activations rounded and packed once, one chunk dispenser over every
// product's groups). Each product must equal itself computed alone, bit for bit, at any thread
// count, with one column (decode), a few, and more than two panels.
TEST(CpuFloatMm, SharedBf16ProductsEqualEachProductAlone) {
    auto ctx = data_context(size_t(64) << 20);
    const int64_t k = 130;
    std::vector<std::vector<char>> memory;
    std::vector<tensor *> weights;
    for (const int64_t m : {int64_t(96), int64_t(32), int64_t(16)}) {
        tensor *a = ctx->new_tensor(dtype::bf16, {k, m});
        const auto w = random_weights(dtype::bf16, m, k, a->nb[1], uint32_t(m));
        memory.emplace_back(w.size());
        ASSERT_TRUE(cpu::can_group_float(*a));
        cpu::group_float_tensor(*a, w.data(), memory.back().data());
        a->data = memory.back().data();
        weights.push_back(a);
    }
    expect_shared_products_equal_each_alone(*ctx, weights);
}

}  // namespace
