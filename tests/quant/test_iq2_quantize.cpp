// tests/quant/test_iq2_quantize.cpp — the iq2_xxs / iq2_xs / iq2_s quantizers on their own: round
// trips, odd inputs, the signs (iq2_xxs and iq2_xs store 7 of 8), importance weights, and the search
// tables built lazily under concurrent first use. (test_fixtures.cpp checks them against the
// established quantizer's files byte for byte.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "quant/quant_testing.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

// Importance weights with a heavy tail, as real ones have (a few columns matter much more).
std::vector<float> heavy_importance(int64_t n, uint32_t seed) {
    std::vector<float> w(static_cast<size_t>(n));
    std::mt19937 rng(seed);
    std::exponential_distribution<float> heavy(0.5f);
    for (auto &v : w) v = 0.05f + heavy(rng) * heavy(rng);
    return w;
}

std::vector<uint8_t> quantize_with(dtype t, const std::vector<float> &x, int64_t n_per_row,
                                   const std::vector<float> *importance) {
    std::vector<uint8_t> q(row_size(t, n_per_row) * (x.size() / size_t(n_per_row)));
    quantize_rows(t, x.data(), q.data(), int64_t(x.size()) / n_per_row, n_per_row,
                  importance ? importance->data() : nullptr);
    return q;
}

// sum w (a - b)^2 over rows of n_per_row, w per column.
double weighted_error(const std::vector<float> &a, const std::vector<float> &b, const std::vector<float> &w) {
    double e = 0;
    for (size_t i = 0; i < a.size(); ++i) e += w[i % w.size()] * std::pow(double(a[i]) - b[i], 2);
    return e;
}

std::string param_name(const ::testing::TestParamInfo<dtype> &info) {
    return type_name(info.param);
}

class Iq2Quantize : public ::testing::TestWithParam<dtype> {};

// The first test to quantize (the plain tests below only check arguments), so the search tables
// are built here: threads that all start at once must get the same bytes as a later single run.
TEST_P(Iq2Quantize, FirstUseFromManyThreadsGivesTheSameBytes) {
    const dtype t = GetParam();
    const int64_t n = 2 * qk_k;
    const auto x = normal_values(size_t(n) * 3, 11, 0.02f);
    const auto importance = heavy_importance(n, 12);
    std::vector<std::vector<uint8_t>> results(4);
    std::vector<std::thread> threads;
    for (auto &r : results) threads.emplace_back([&] { r = quantize_with(t, x, n, &importance); });
    for (auto &th : threads) th.join();
    const auto again = quantize_with(t, x, n, &importance);
    for (const auto &r : results) EXPECT_EQ(r, again);
}

// Normally distributed weights: the relative RMS error stays near what 2 bits a value give (the
// bounds are about 1.1x the measured values), and every decoded value is finite.
TEST_P(Iq2Quantize, RoundTripErrorIsBounded) {
    const dtype t = GetParam();
    const double bound = t == dtype::iq2_xxs  ? 0.42
                         : t == dtype::iq2_xs ? 0.37
                                              : 0.31;  // measured 0.38, 0.34, 0.28
    const int64_t n = 4 * qk_k, rows = 8;
    const auto x = normal_values(size_t(n * rows), 1234, 0.02f);
    const auto importance = heavy_importance(n, 5);
    const auto q = quantize_with(t, x, n, &importance);
    ASSERT_EQ(q.size(), row_size(t, n) * size_t(rows));
    const auto back = dequantize(t, q, n * rows);
    for (float v : back) ASSERT_TRUE(std::isfinite(v));
    const double err = relative_rmse(back.data(), x.data(), x.size());
    RecordProperty("relative_rmse", std::to_string(err));
    EXPECT_LE(err, bound) << type_name(t);
    EXPECT_GT(err, 0.05) << "2 bits a value cannot be this close: is the row quantized at all?";
}

// The importance-weighted error is what the quantizer minimizes: with the real importance it is
// lower than with a flat one (or, for iq2_s, none).
TEST_P(Iq2Quantize, ImportanceLowersTheWeightedError) {
    const dtype t = GetParam();
    const int64_t n = 4 * qk_k, rows = 8;
    const auto x = normal_values(size_t(n * rows), 77, 0.02f);
    const auto importance = heavy_importance(n, 78);
    const std::vector<float> flat(size_t(n), 1.0f);
    const auto with = dequantize(t, quantize_with(t, x, n, &importance), n * rows);
    const auto without = dequantize(t, quantize_with(t, x, n, t == dtype::iq2_s ? nullptr : &flat), n * rows);
    const double ratio = weighted_error(with, x, importance) / weighted_error(without, x, importance);
    RecordProperty("weighted_error_ratio", std::to_string(ratio));
    EXPECT_LT(ratio, 0.75) << type_name(t);  // measured 0.61 - 0.65
}

// Rows are independent, and so are the blocks of a row.
TEST_P(Iq2Quantize, RowsAndBlocksAreQuantizedIndependently) {
    const dtype t = GetParam();
    const int64_t n = 3 * qk_k;
    const auto x = normal_values(size_t(n) * 3, 21, 0.02f);
    const auto importance = heavy_importance(n, 22);
    const auto all = quantize_with(t, x, n, &importance);
    const size_t block_bytes = type_traits(t).type_size;
    for (int64_t r = 0; r < 3; ++r)
        for (int64_t b = 0; b < 3; ++b) {
            const std::vector<float> block(x.begin() + r * n + b * qk_k, x.begin() + r * n + (b + 1) * qk_k);
            const std::vector<float> block_importance(importance.begin() + b * qk_k,
                                                      importance.begin() + (b + 1) * qk_k);
            const auto alone = quantize_with(t, block, qk_k, &block_importance);
            const size_t at = size_t(r * 3 + b) * block_bytes;
            EXPECT_TRUE(std::equal(alone.begin(), alone.end(), all.begin() + long(at))) << r << ", " << b;
        }
}

// All-zero rows (also of negative zeros) are stored as zeros: d = 0, every value decodes to 0; a
// negative zero among other values is a zero (the same bytes as +0).
TEST_P(Iq2Quantize, ZerosAndNegativeZerosAreZero) {
    const dtype t = GetParam();
    const int64_t n = 2 * qk_k;
    const auto importance = heavy_importance(n, 3);
    const std::vector<float> zeros(size_t(n), 0.0f), negative_zeros(size_t(n), -0.0f);
    const auto qz = quantize_with(t, zeros, n, &importance);
    EXPECT_EQ(qz, quantize_with(t, negative_zeros, n, &importance));
    for (float v : dequantize(t, qz, n)) ASSERT_EQ(v, 0.0f);
    for (size_t b = 0; b < 2; ++b) {
        fp16_t d;
        std::memcpy(&d, qz.data() + b * type_traits(t).type_size, sizeof d);
        EXPECT_EQ(fp16_to_fp32(d), 0.0f);
    }

    auto x = normal_values(size_t(n), 4, 0.02f);
    for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0f;
    auto y = x;
    for (size_t i = 0; i < y.size(); i += 5) y[i] = -0.0f;
    EXPECT_EQ(quantize_with(t, x, n, &importance), quantize_with(t, y, n, &importance));
}

// One value far larger than the rest: it keeps its sign and most of its size, nothing overflows,
// and the other block of the row is untouched by it.
TEST_P(Iq2Quantize, OneHugeValueIsKeptAndContained) {
    const dtype t = GetParam();
    const int64_t n = 2 * qk_k;
    const std::vector<float> flat(size_t(n), 1.0f);
    auto x = normal_values(size_t(n), 9, 0.02f);
    x[3] = -3.0e4f;
    const auto back = dequantize(t, quantize_with(t, x, n, &flat), n);
    for (float v : back) ASSERT_TRUE(std::isfinite(v));
    EXPECT_LT(back[3], 0.0f);
    EXPECT_NEAR(back[3], x[3], 0.35 * 3.0e4) << type_name(t);
    const std::vector<float> second(x.begin() + qk_k, x.end()), flat_block(size_t(qk_k), 1.0f);
    const auto second_back = dequantize(t, quantize_with(t, second, qk_k, &flat_block), qk_k);
    for (int64_t i = 0; i < qk_k; ++i) ASSERT_EQ(back[size_t(qk_k + i)], second_back[size_t(i)]) << i;

    // alone in a block of zeros: the values beside it cannot be zero (the smallest grid magnitude
    // is 8 of 43), but they stay below it
    std::vector<float> spike(size_t(qk_k), 0.0f);
    spike[100] = 1.0e3f;
    const auto spike_back = dequantize(t, quantize_with(t, spike, qk_k, &flat_block), qk_k);
    EXPECT_NEAR(spike_back[100], 1.0e3f, 350.0f) << type_name(t);
    for (float v : spike_back) ASSERT_LE(std::fabs(v), std::fabs(spike_back[100]));
}

// Importance weights that are all zero give no information; the quantizer must still produce a
// valid block (finite values), and zero weights on part of the row leave the rest well fitted.
TEST_P(Iq2Quantize, ZeroImportanceStillGivesFiniteBlocks) {
    const dtype t = GetParam();
    const int64_t n = 2 * qk_k;
    const auto x = normal_values(size_t(n), 31, 0.02f);
    const std::vector<float> zero(size_t(n), 0.0f);
    for (float v : dequantize(t, quantize_with(t, x, n, &zero), n)) ASSERT_TRUE(std::isfinite(v));
    std::vector<float> half(size_t(n), 1.0f);
    for (size_t i = 0; i < half.size(); i += 2) half[i] = 0.0f;
    const auto back = dequantize(t, quantize_with(t, x, n, &half), n);
    double err = 0, ref = 0;
    for (size_t i = 1; i < x.size(); i += 2) err += std::pow(back[i] - x[i], 2), ref += double(x[i]) * x[i];
    EXPECT_LT(std::sqrt(err / ref), 0.6) << "the weighted half of the values";
}

// Decoded signs follow the values. iq2_xxs and iq2_xs store 7 signs per group of 8 and imply the
// eighth (an even number of negatives): in a group with an odd number of negatives exactly one
// value comes back with the wrong sign, the one whose error costs least (smallest w x^2, here the
// smallest magnitude). iq2_s stores all 8.
TEST_P(Iq2Quantize, SignsFollowTheValuesButForTheParityFlip) {
    const dtype t = GetParam();
    const bool seven_signs = t != dtype::iq2_s;
    const int64_t n = qk_k;
    std::mt19937 rng(41);
    std::uniform_real_distribution<float> magnitude(0.01f, 0.05f);
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = (rng() % 2 ? -1.0f : 1.0f) * magnitude(rng);
    const std::vector<float> flat(size_t(n), 1.0f);
    const auto back = dequantize(t, quantize_with(t, x, n, &flat), n);
    int odd_groups = 0;
    for (int g = 0; g < n / 8; ++g) {
        int negatives = 0, smallest = 0;
        for (int j = 0; j < 8; ++j) {
            negatives += x[size_t(8 * g + j)] < 0;
            if (std::fabs(x[size_t(8 * g + j)]) < std::fabs(x[size_t(8 * g + smallest)])) smallest = j;
        }
        const bool flip = seven_signs && negatives % 2;
        odd_groups += negatives % 2;
        for (int j = 0; j < 8; ++j) {
            const size_t i = size_t(8 * g + j);
            ASSERT_NE(back[i], 0.0f);
            const bool same_sign = (back[i] < 0) == (x[i] < 0);
            EXPECT_EQ(same_sign, !(flip && j == smallest)) << "group " << g << ", element " << j;
        }
    }
    EXPECT_GT(odd_groups, 5) << "the data should exercise the parity rule";
}

INSTANTIATE_TEST_SUITE_P(Types, Iq2Quantize, ::testing::Values(dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s),
                         param_name);

// As in the established library, iq2_xxs and iq2_xs are only made with importance weights (their
// search has no fallback weighting); iq2_s falls back to sigma^2 / 4 + x^2.
TEST(Iq2QuantizeRows, Iq2XxsAndXsNeedImportance) {
    const auto x = normal_values(qk_k, 1, 0.02f);
    std::vector<uint8_t> out(row_size(dtype::iq2_s, qk_k));
    for (dtype t : {dtype::iq2_xxs, dtype::iq2_xs}) {
        try {
            quantize_rows(t, x.data(), out.data(), 1, qk_k);
            ADD_FAILURE() << type_name(t) << " quantized without importance";
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find(type_name(t)), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find("importance"), std::string::npos) << e.what();
        }
        // the zero-row check says the same without touching anything
        EXPECT_THROW(quantize_rows(t, nullptr, nullptr, 0, qk_k), error);
        const float one = 1;
        EXPECT_EQ(quantize_rows(t, nullptr, nullptr, 0, qk_k, &one), 0u);
    }
    // (a zero-row check: the iq2_s search table is built by the threads of the test above)
    EXPECT_EQ(quantize_rows(dtype::iq2_s, nullptr, nullptr, 0, qk_k), 0u);
    EXPECT_NE(quant_traits_of(dtype::iq2_s).from_float_ref, nullptr);
    // rows must hold whole blocks of 256
    EXPECT_THROW(quantize_rows(dtype::iq2_s, x.data(), out.data(), 1, 128), error);
}

}  // namespace
