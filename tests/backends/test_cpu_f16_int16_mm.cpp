// tests/backends/test_cpu_f16_int16_mm.cpp — f16 weights as int16 blocks (f16_int16_mm.h): the
// quantizers' ranges and special blocks, the extreme blocks that reach the overflow bound, every ISA
// equal to the scalar oracle bit for bit, and through mul_mat a column alone equal to it in a batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/float_mm.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/fp16.h"

using namespace weft;
using namespace weft::test;

namespace {

int32_t value_of(const uint32_t *pairs, int64_t i) {
    const uint32_t w = pairs[i / 2];
    return int16_t(uint16_t(i % 2 == 0 ? w & 0xFFFFu : w >> 16));
}

// The ISA builds of the kernel and the quantizer this CPU runs (scalar always; AVX-512 without VNNI
// has its own quantizer and the AVX2 kernel).
std::vector<cpu::simd_level> levels_here() {
    std::vector<cpu::simd_level> levels = {cpu::simd_level::scalar};
    for (auto l : {cpu::simd_level::avx2, cpu::simd_level::avx512, cpu::simd_level::avx512_vnni})
        if (cpu::simd_level_supported(l)) levels.push_back(l);
    return levels;
}

TEST(CpuF16Int16Mm, QuantizerKeepsTheRangeAndMarksSpecialBlocks) {
    std::mt19937 rng(3);
    std::normal_distribution<float> dist(0, 1);
    float v[cpu::int16_block];
    uint32_t pairs[cpu::int16_pairs];
    for (int trial = 0; trial < 200; ++trial) {
        const float magnitude = std::ldexp(1.0f, trial % 40 - 20);
        for (float &x : v) x = dist(rng) * magnitude;
        if (trial % 7 == 0) v[trial % cpu::int16_block] *= 1000;  // an outlier
        const float scale = cpu::quantize_int16_block(v, pairs);
        float m = 0;
        for (float x : v) m = std::max(m, std::fabs(x));
        int32_t q_max = 0;
        for (int64_t i = 0; i < cpu::int16_block; ++i) {
            const int32_t q = value_of(pairs, i);
            EXPECT_LE(std::abs(q), cpu::int16_limit);
            q_max = std::max(q_max, std::abs(q));
            EXPECT_LE(std::fabs(double(q) * scale - v[i]), 0.501 * scale) << "value " << i;
        }
        EXPECT_EQ(q_max, cpu::int16_limit);
        EXPECT_FLOAT_EQ(scale, m / float(cpu::int16_limit));
    }
    std::fill(std::begin(v), std::end(v), 0.0f);
    EXPECT_EQ(cpu::quantize_int16_block(v, pairs), 0.0f);
    for (uint32_t p : pairs) EXPECT_EQ(p, 0u);
    for (float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        for (float &x : v) x = 1.0f;
        v[5] = special;
        EXPECT_TRUE(std::isnan(cpu::quantize_int16_block(v, pairs)));
        for (uint32_t p : pairs) EXPECT_EQ(p, 0u);
    }
}

// The weights' quantizer: a power-of-two step per block (the block's largest q in [4096, 8191]), every
// value within half a step and exact within two binades of its block's maximum, the row's scale the
// least step, exponents in [0, 39] over the f16 range; zero blocks, an all-zero row, and infinite or
// NaN rows; every ISA's build the same bits.
TEST(CpuF16Int16Mm, WeightQuantizerTakesPowerOfTwoSteps) {
    std::mt19937 rng(17);
    std::normal_distribution<float> dist(0, 1);
    const int64_t n_blocks = 8, k = n_blocks * cpu::int16_block;
    std::vector<float> v(static_cast<size_t>(k));
    std::vector<int32_t> e(static_cast<size_t>(n_blocks));
    std::vector<uint32_t> pairs(static_cast<size_t>(n_blocks * cpu::int16_pairs));
    auto f16 = [](float x) { return fp16_to_fp32(fp32_to_fp16(x)); };
    for (int trial = 0; trial < 100; ++trial) {
        for (int64_t i = 0; i < k; ++i)
            v[size_t(i)] = f16(dist(rng) * std::ldexp(1.0f, int(i / 32) * 3 - 12));
        if (trial % 3 == 0) v[size_t(trial % k)] = f16(v[size_t(trial % k)] * 300);  // an outlier
        if (trial % 4 == 0) std::fill(v.begin() + 64, v.begin() + 96, 0.0f);         // a zero block
        if (trial % 5 == 0) {  // the f16 range's ends in one row: exponents 39 and 0
            v[0] = 65504.0f;
            std::fill(v.begin() + 32, v.begin() + 64, 0.0f);
            v[40] = std::ldexp(1.0f, -24);
        }
        const float scale = cpu::quantize_int16_weight_row(v.data(), k, e.data(), pairs.data());
        int32_t least = 1000;
        for (int64_t b = 0; b < n_blocks; ++b) {
            float block_max = 0;
            int32_t q_max = 0;
            for (int64_t i = b * 32; i < b * 32 + 32; ++i)
                block_max = std::max(block_max, std::fabs(v[size_t(i)]));
            EXPECT_GE(e[size_t(b)], 0);
            EXPECT_LE(e[size_t(b)], cpu::int16_max_exponent);
            const float step = std::ldexp(scale, e[size_t(b)]);
            for (int64_t i = b * 32; i < b * 32 + 32; ++i) {
                const int32_t q = value_of(pairs.data(), i);
                q_max = std::max(q_max, std::abs(q));
                EXPECT_LE(std::fabs(double(q) * step - v[size_t(i)]), 0.5 * step) << "value " << i;
                if (std::fabs(v[size_t(i)]) >= std::ldexp(block_max, -2) && block_max > 0) {
                    EXPECT_EQ(double(q) * step, double(v[size_t(i)])) << "value " << i;
                }
            }
            if (block_max == 0) {
                EXPECT_EQ(q_max, 0);
                EXPECT_EQ(e[size_t(b)], 0);
            } else {
                EXPECT_GE(q_max, 4096);
                EXPECT_LE(q_max, cpu::int16_limit);
                least = std::min(least, e[size_t(b)]);
            }
        }
        EXPECT_EQ(least, 0) << "the scale is the least step";
        if (trial % 5 == 0) {
            EXPECT_EQ(e[0], cpu::int16_max_exponent);
            EXPECT_EQ(e[1], 0);
        }
        for (auto level : levels_here()) {
            const cpu::quantize_weight_row_fn f =
                level == cpu::simd_level::scalar ? cpu::quantize_int16_weight_row
                : level == cpu::simd_level::avx2 ? cpu::quantize_int16_weight_row_avx2
                                                 : cpu::quantize_int16_weight_row_avx512;
            std::vector<int32_t> e2(e.size(), -1);
            std::vector<uint32_t> pairs2(pairs.size(), 0xDEADBEEFu);
            EXPECT_EQ(f(v.data(), k, e2.data(), pairs2.data()), scale);
            EXPECT_EQ(e2, e);
            EXPECT_EQ(pairs2, pairs);
        }
    }
    std::fill(v.begin(), v.end(), 0.0f);
    EXPECT_EQ(cpu::quantize_int16_weight_row(v.data(), k, e.data(), pairs.data()), 0.0f);
    for (uint32_t p : pairs) EXPECT_EQ(p, 0u);
    for (int32_t x : e) EXPECT_EQ(x, 0);
    for (float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
        std::fill(v.begin(), v.end(), 1.0f);
        v[70] = special;
        EXPECT_TRUE(std::isnan(cpu::quantize_int16_weight_row(v.data(), k, e.data(), pairs.data())));
        for (uint32_t p : pairs) EXPECT_EQ(p, 0u);
    }
}

// The ISA quantizers write the scalar definition's bits (quantize_int16_column) on ordinary, tiny,
// huge, zero, infinite and NaN blocks, and pack_int16_panel puts a panel's columns where it does.
TEST(CpuF16Int16Mm, QuantizersEqualTheScalarDefinition) {
    std::mt19937 rng(11);
    std::normal_distribution<float> dist(0, 1);
    const int64_t n_blocks = 12, k = n_blocks * cpu::int16_block;
    std::vector<float> x(static_cast<size_t>(k));
    for (int trial = 0; trial < 40; ++trial) {
        for (int64_t b = 0; b < n_blocks; ++b) {
            // block b's magnitude from 2^-149 (a subnormal maximum: 8191 / m is infinite) to 2^100
            const float magnitude = b == 0 ? std::ldexp(1.0f, -149) : std::ldexp(1.0f, int(b * 25 - 140));
            for (int64_t i = 0; i < cpu::int16_block; ++i)
                x[size_t(b * cpu::int16_block + i)] = (i % 5 == trial % 5) ? 0.0f : dist(rng) * magnitude;
        }
        x[size_t(trial % cpu::int16_block)] = std::ldexp(1.0f, -149);  // block 0 at the subnormal maximum
        if (trial % 4 == 1) x[size_t(2 * cpu::int16_block + trial)] = std::numeric_limits<float>::infinity();
        if (trial % 4 == 2) x[size_t(3 * cpu::int16_block + trial)] = std::numeric_limits<float>::quiet_NaN();
        if (trial % 4 == 3)
            std::fill(x.begin() + 4 * cpu::int16_block, x.begin() + 5 * cpu::int16_block, -0.0f);
        // ties: halves of the scale after the block's maximum
        if (trial % 2 == 0)
            for (int64_t i = 0; i < cpu::int16_block; ++i)
                x[size_t(6 * cpu::int16_block + i)] = i == 0 ? float(cpu::int16_limit) : float(i) + 0.5f;
        std::vector<uint32_t> want(size_t(n_blocks * cpu::int16_panel_words));
        cpu::quantize_int16_column(x.data(), k, 0, 1, want.data());
        for (auto level : levels_here()) {
            std::vector<uint32_t> got(want.size(), 0xDEADBEEFu);
            cpu::quantize_int16_at(level)(x.data(), k, got.data());
            EXPECT_EQ(got, want) << "trial " << trial << " level " << int(level);
        }
    }
    // a panel of 5 columns of width 24 from the columns' own words
    const int64_t n = 5, width = 24;
    std::vector<float> columns(size_t(n * k));
    for (auto &v : columns) v = dist(rng);
    std::vector<uint32_t> want(cpu::int16_panel_bytes(k, width) / 4), got(want.size());
    std::vector<uint32_t> alone(size_t(n) * cpu::int16_panel_bytes(k, 1) / 4);
    const uint32_t *column_words[n];
    for (int64_t c = 0; c < n; ++c) {
        cpu::quantize_int16_column(columns.data() + c * k, k, c, width, want.data());
        uint32_t *own = alone.data() + size_t(c) * cpu::int16_panel_bytes(k, 1) / 4;
        cpu::best_quantize_int16()(columns.data() + c * k, k, own);
        column_words[c] = own;
    }
    cpu::pack_int16_panel(column_words, n, k, width, got.data());
    for (int64_t w = 0; w < int64_t(want.size()); ++w) {
        if (w % width < n) {
            ASSERT_EQ(got[size_t(w)], want[size_t(w)]) << "word " << w;
        }
    }
}

// 16 rows of f16 weights (rows x k) grouped by group_f16_int16.
std::vector<char> grouped_weights(const std::vector<fp16_t> &w, int64_t m, int64_t k) {
    auto ctx = data_context(1 << 20);
    tensor *t = ctx->new_tensor(dtype::f16, {k, m});
    EXPECT_TRUE(cpu::can_group_f16_int16(*t));
    std::vector<char> out(cpu::f16_int16_size(*t));
    cpu::group_f16_int16(*t, w.data(), out.data());
    return out;
}

// n columns of k floats (column c at x + c * k) as panels of `width`.
std::vector<uint32_t> panels_of(const std::vector<float> &x, int64_t k, int64_t n, int64_t width) {
    const int64_t panels = (n + width - 1) / width;
    std::vector<uint32_t> out(size_t(panels) * cpu::int16_panel_bytes(k, width) / 4);
    for (int64_t c = 0; c < n; ++c)
        cpu::quantize_int16_column(x.data() + c * k, k, c % width, width,
                                   out.data() + size_t(c / width) * cpu::int16_panel_bytes(k, width) / 4);
    return out;
}

// Weights repacked at load take the ISA's quantizer: the same bytes as the scalar one's, zeros,
// infinities and NaNs among them.
TEST(CpuF16Int16Mm, WeightsGroupTheSameOnEveryIsa) {
    std::mt19937 rng(13);
    std::normal_distribution<float> dist(0, 1);
    const int64_t k = 96, m = 32;
    std::vector<fp16_t> w(size_t(m * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = fp32_to_fp16(dist(rng) * (i % 41 == 0 ? 30.0f : 1.0f));
    for (int64_t i = 0; i < 32; ++i) w[size_t(5 * k + i)] = fp32_to_fp16(0.0f);  // a zero block
    w[size_t(7 * k + 40)] = fp32_to_fp16(std::numeric_limits<float>::infinity());
    w[size_t(20 * k + 3)] = fp32_to_fp16(std::numeric_limits<float>::quiet_NaN());
    const std::vector<char> best = grouped_weights(w, m, k);
    force_scalar(true);
    const std::vector<char> scalar = grouped_weights(w, m, k);
    force_scalar(false);
    EXPECT_EQ(best, scalar);
}

// The largest blocks the overflow bound allows (every weight and activation at ±8191; an f16 block's
// largest q is 8188, 2047 · 4, so the grouped weights' pairs are set to ±8191 by hand): the int32 sum
// 32 · 8191² = 2,146,959,392 is exact on every ISA, positive and negative, block after block.
TEST(CpuF16Int16Mm, ExtremeBlocksSumExactly) {
    const int64_t k = 64, m = 16;
    const float nearly_one = 2047.0f / 2048.0f;  // q 8188 at step 2^-13
    std::vector<fp16_t> w(size_t(m * k));
    for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < k; ++i)
            w[size_t(r * k + i)] = fp32_to_fp16(r % 2 == 0 ? nearly_one : -4.0f * nearly_one);
    std::vector<char> groups = grouped_weights(w, m, k);
    for (int64_t b = 0; b < k / cpu::int16_block; ++b) {
        char *pairs =
            groups.data() + cpu::f16_int16_pairs_at(k / cpu::int16_block) + b * cpu::f16_int16_pair_bytes;
        for (int64_t j = 0; j < cpu::int16_pairs; ++j)
            for (int64_t r = 0; r < m; ++r) {
                auto *q = reinterpret_cast<int16_t *>(pairs + (j * m + r) * 4);
                ASSERT_EQ(q[0], r % 2 == 0 ? 8188 : -8188);
                q[0] = q[1] = int16_t(r % 2 == 0 ? cpu::int16_limit : -cpu::int16_limit);
            }
    }
    std::vector<float> x(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) x[size_t(i)] = i < 32 ? 3.0f : -0.25f;  // block 0 positive, 1 negative
    const std::vector<uint32_t> panel = panels_of(x, k, 1, 1);
    const int32_t extreme = 32 * cpu::int16_limit * cpu::int16_limit;
    ASSERT_EQ(extreme, 2146959392);
    for (auto level : levels_here()) {
        std::vector<float> got(static_cast<size_t>(m));
        cpu::int16_groups_at(level)(groups.data(), groups.size(), 1, k, panel.data(), 1, 1, got.data(),
                                    size_t(m));
        for (int64_t r = 0; r < m; ++r) {
            const float scale = r % 2 == 0 ? std::ldexp(1.0f, -13) : std::ldexp(1.0f, -11);
            const float sign = r % 2 == 0 ? 1.0f : -1.0f;
            const float first = std::fma(float(extreme) * sign, 3.0f / cpu::int16_limit, 0.0f);
            const float want = std::fma(-float(extreme) * sign, 0.25f / cpu::int16_limit, first) * scale;
            EXPECT_EQ(got[size_t(r)], want) << "row " << r << " level " << int(level);
        }
    }
}

TEST(CpuF16Int16Mm, EveryIsaEqualsScalarBitForBit) {
    std::mt19937 rng(9);
    std::normal_distribution<float> dist(0, 1);
    const int64_t k = 96, m = 80;  // 5 groups: tiles of 2 and the one left
    std::vector<fp16_t> w(size_t(m * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = fp32_to_fp16(dist(rng) * (i % 37 == 0 ? 8.0f : 0.05f));
    const std::vector<char> groups = grouped_weights(w, m, k);
    const size_t group_stride = groups.size() / size_t(m / 16);
    for (int64_t n : {1, 2, 5, 6, 7, 13, 24, 25, 49}) {
        std::vector<float> x(size_t(n * k));
        for (size_t i = 0; i < x.size(); ++i) x[i] = dist(rng) * (i % 29 == 0 ? 20.0f : 1.0f);
        const int64_t width = n == 1 ? 1 : 24;
        const std::vector<uint32_t> panels = panels_of(x, k, n, width);
        std::vector<float> want(size_t(n * m));
        cpu::int16_groups_scalar(groups.data(), group_stride, m / 16, k, panels.data(), width, n, want.data(),
                                 size_t(m));
        for (auto level : levels_here()) {
            std::vector<float> got(size_t(n * m), -1.0f);
            cpu::int16_groups_at(level)(groups.data(), group_stride, m / 16, k, panels.data(), width, n,
                                        got.data(), size_t(m));
            EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
                << n << " columns, level " << int(level);
        }
        // close to the exact product of the f16 weights and f32 activations
        for (int64_t c = 0; c < n; ++c) {
            double err = 0, norm = 0;
            for (int64_t r = 0; r < m; ++r) {
                double s = 0;
                for (int64_t i = 0; i < k; ++i)
                    s += double(fp16_to_fp32(w[size_t(r * k + i)])) * x[size_t(c * k + i)];
                err += (want[size_t(c * m + r)] - s) * (want[size_t(c * m + r)] - s);
                norm += s * s;
            }
            EXPECT_LE(err / norm, 1e-6) << "column " << c;
        }
    }
}

// k longer than a kernel's slice (int16_slice_blocks): the columns of a batch take k in slices, the
// accumulators kept in dst between them, one column alone takes it in one go; the same bits.
TEST(CpuF16Int16Mm, SlicesOfKGiveTheSameBits) {
    std::mt19937 rng(21);
    std::normal_distribution<float> dist(0, 1);
    const int64_t k = (2 * cpu::int16_slice_blocks + 3) * cpu::int16_block, m = 48;
    std::vector<fp16_t> w(size_t(m * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = fp32_to_fp16(dist(rng) * (i % 53 == 0 ? 6.0f : 0.1f));
    const std::vector<char> groups = grouped_weights(w, m, k);
    const size_t group_stride = cpu::f16_int16_group_bytes(k);
    const int64_t n = 31;
    std::vector<float> x(size_t(n * k));
    for (auto &v : x) v = dist(rng);
    const std::vector<uint32_t> panels = panels_of(x, k, n, cpu::int16_panel_width);
    std::vector<float> want(size_t(n * m));
    cpu::int16_groups_scalar(groups.data(), group_stride, m / 16, k, panels.data(), cpu::int16_panel_width, n,
                             want.data(), size_t(m));
    for (auto level : levels_here()) {
        std::vector<float> got(size_t(n * m), -1.0f);
        cpu::int16_groups_at(level)(groups.data(), group_stride, m / 16, k, panels.data(),
                                    cpu::int16_panel_width, n, got.data(), size_t(m));
        EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "level " << int(level);
        // each column alone (a panel of width 1: k in one go)
        for (int64_t c : {int64_t(0), int64_t(17), n - 1}) {
            const std::vector<uint32_t> alone =
                panels_of(std::vector<float>(x.begin() + c * k, x.begin() + (c + 1) * k), k, 1, 1);
            std::vector<float> one(static_cast<size_t>(m));
            cpu::int16_groups_at(level)(groups.data(), group_stride, m / 16, k, alone.data(), 1, 1,
                                        one.data(), size_t(m));
            EXPECT_EQ(std::memcmp(one.data(), want.data() + c * m, size_t(m) * 4), 0)
                << "column " << c << " alone, level " << int(level);
        }
    }
}

// Through mul_mat, weights grouped as at load: the same bits for every thread count, ISA and batch.
TEST(CpuF16Int16Mm, MulMatIsExactAcrossIsasAndBatches) {
    auto ctx = data_context();
    const int64_t k = 128, m = 48, n = 37;
    tensor *a = ctx->new_tensor(dtype::f16, {k, m});
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0, 1);
    std::vector<fp16_t> w(size_t(m * k));
    for (auto &h : w) h = fp32_to_fp16(dist(rng));
    ASSERT_TRUE(cpu::takes_f16_int16(*a));
    std::vector<char> grouped(cpu::grouped_float_size(*a));
    cpu::group_float_tensor(*a, w.data(), grouped.data());
    a->data = grouped.data();
    ASSERT_TRUE(cpu::is_grouped_float(*a) && cpu::is_grouped_f16_int16(*a));
    tensor *b = ctx->new_tensor(dtype::f32, {k, n});
    fill_uniform(*b, 6);
    auto reference = [&](int64_t r, int64_t c, int64_t, int64_t) {
        double s = 0;
        for (int64_t i = 0; i < k; ++i) s += double(fp16_to_fp32(w[size_t(r * k + i)])) * at(*b, i, c);
        return s;
    };
    const std::vector<float> batched = expect_matches_reference(mul_mat(*ctx, a, b), reference, 1e-6);
    expect_same_bits_alone_and_on_every_isa(*ctx, a, b, batched);
}

// A layer's products of one input (Q, K, V) in int16 blocks computed as one node: the activations
// quantized once, each product's bits as alone, at any thread count.
TEST(CpuF16Int16Mm, SharedProductsEqualEachProductAlone) {
    auto ctx = data_context(size_t(64) << 20);
    const int64_t k = 160;
    std::vector<std::vector<char>> memory;
    std::vector<tensor *> weights;
    std::mt19937 rng(7);
    std::normal_distribution<float> dist(0, 1);
    for (const int64_t m : {int64_t(96), int64_t(32), int64_t(16)}) {
        tensor *a = ctx->new_tensor(dtype::f16, {k, m});
        std::vector<fp16_t> w(size_t(m * k));
        for (auto &h : w) h = fp32_to_fp16(dist(rng));
        ASSERT_TRUE(cpu::takes_f16_int16(*a));
        memory.emplace_back(cpu::grouped_float_size(*a));
        cpu::group_float_tensor(*a, w.data(), memory.back().data());
        a->data = memory.back().data();
        weights.push_back(a);
    }
    // the backend computes them as one node
    tensor *b = ctx->new_tensor(dtype::f32, {k, 4});
    EXPECT_TRUE(cpu::shares_activations(*mul_mat(*ctx, weights[0], b), *mul_mat(*ctx, weights[1], b)));
    expect_shared_products_equal_each_alone(*ctx, weights);
}

}  // namespace
