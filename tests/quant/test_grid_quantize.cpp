// tests/quant/test_grid_quantize.cpp — the quantizers of iq3_xxs, iq3_s, iq1_s and iq1_m: their grid
// lookups, round trips, edge cases (zeros, a huge value, importance all zero or absent) and the
// established quantizer's quirks they reproduce. Byte identity with the established files is in
// test_fixtures.cpp (QuantFixtureGridBytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>

#include "quant/grid_lookup.h"
#include "quant/kernels.h"
#include "quant/quant_testing.h"
#include "weft/core/error.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

const std::vector<dtype> &grid_quantized_types() {
    static const std::vector<dtype> types = {dtype::iq3_xxs, dtype::iq3_s, dtype::iq1_s, dtype::iq1_m};
    return types;
}

std::string name_of(const ::testing::TestParamInfo<dtype> &info) {
    return type_name(info.param);
}

// Importance as an imatrix holds it: positive, spread over two orders of magnitude.
std::vector<float> random_importance(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> exponent(-1.0f, 1.0f);
    std::vector<float> w(n);
    for (float &v : w) v = std::pow(10.0f, exponent(rng));
    return w;
}

std::vector<uint8_t> quantize_with(dtype t, const std::vector<float> &x, int64_t n_per_row,
                                   const float *importance) {
    std::vector<uint8_t> q(row_size(t, n_per_row) * (x.size() / size_t(n_per_row)));
    EXPECT_EQ(quantize_rows(t, x.data(), q.data(), int64_t(x.size()) / n_per_row, n_per_row, importance),
              q.size());
    return q;
}

// The lookups' codes of grid point g, as a pattern, for brute-force checks.
int squared_distance(const quant::grid_lookup &grid, int g, const int8_t *codes) {
    int d2 = 0;
    for (int j = 0; j < grid.elements(); ++j)
        d2 += (grid.code(g, j) - codes[j]) * (grid.code(g, j) - codes[j]);
    return d2;
}

}  // namespace

// ---- the grid lookups

struct lookup_case {
    const char *name;
    const quant::grid_lookup &(*lookup)();
    int size, max_code, n_distances;
    std::vector<uint16_t> first_points;  // the established quantizer's tables start so
};

void PrintTo(const lookup_case &c, std::ostream *os) {
    *os << c.name;
}

class GridLookup : public ::testing::TestWithParam<lookup_case> {};

// The points' codes, derived from the stored grids, are the established quantizer's tables: sorted,
// starting with its first entries. Every pattern maps to its point; every off-grid pattern lists the
// points at exactly the n smallest distances that occur, by distance and then by index.
TEST_P(GridLookup, MapsPatternsAndListsTheNearestPoints) {
    const lookup_case c = GetParam();
    const quant::grid_lookup &grid = c.lookup();
    ASSERT_EQ(grid.size(), c.size);
    std::vector<uint32_t> patterns(size_t(grid.size()));
    for (int g = 0; g < grid.size(); ++g) {
        int8_t codes[8];
        for (int j = 0; j < grid.elements(); ++j) codes[j] = int8_t(grid.code(g, j));
        patterns[size_t(g)] = grid.pattern(codes);
        EXPECT_EQ(grid.find(patterns[size_t(g)]), g);
    }
    EXPECT_TRUE(std::is_sorted(patterns.begin(), patterns.end()));
    EXPECT_EQ(std::adjacent_find(patterns.begin(), patterns.end()), patterns.end());
    for (size_t g = 0; g < c.first_points.size(); ++g) EXPECT_EQ(patterns[g], c.first_points[g]) << g;

    std::mt19937 rng(5);
    std::uniform_int_distribution<int> code(0, c.max_code);
    int off_grid = 0;
    for (int trial = 0; trial < 300; ++trial) {
        int8_t codes[8];
        for (int j = 0; j < grid.elements(); ++j) codes[j] = int8_t(code(rng));
        const uint32_t u = grid.pattern(codes);
        if (grid.find(u) >= 0) continue;
        ++off_grid;
        std::vector<int> distances;
        for (int g = 0; g < grid.size(); ++g) distances.push_back(squared_distance(grid, g, codes));
        std::vector<int> distinct = distances;
        std::sort(distinct.begin(), distinct.end());
        distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
        const int limit = distinct[size_t(c.n_distances - 1)];
        std::vector<uint16_t> want;
        for (int d : distinct)
            for (int g = 0; d <= limit && g < grid.size(); ++g)
                if (distances[size_t(g)] == d) want.push_back(uint16_t(g));
        const auto got = grid.neighbours(u);
        EXPECT_EQ(std::vector<uint16_t>(got.begin(), got.end()), want) << "pattern " << u;
    }
    EXPECT_GT(off_grid, 100);
}

INSTANTIATE_TEST_SUITE_P(
    Grids, GridLookup,
    ::testing::Values(lookup_case{"iq3xxs", quant::iq3xxs_lookup, 256, 7, 2, {0, 2, 4, 9, 11, 15, 16, 18}},
                      lookup_case{"iq3s", quant::iq3s_lookup, 512, 7, 3, {0, 1, 2, 5, 7, 8, 9, 10}},
                      lookup_case{"iq1s", quant::iq1s_lookup, 2048, 2, 3, {0, 2, 5, 8, 10, 17, 21, 32}}),
    [](const auto &info) { return std::string(info.param.name); });

// ---- the quantizers

class GridQuantize : public ::testing::TestWithParam<dtype> {};

// Normal rows of 3 super-blocks, 2 rows, with a random importance (and without, where the type
// allows it) decode to within a bound of the 3- and 1-bit types' usual error; quantizing the rows
// together equals quantizing each alone (the importance is per column).
TEST_P(GridQuantize, RoundTripErrorIsBounded) {
    const dtype t = GetParam();
    const int64_t n = 3 * qk_k;
    const auto x = normal_values(size_t(2 * n), 11, 0.02f);
    const auto importance = random_importance(size_t(n), 12);
    const double bound = t == dtype::iq3_xxs || t == dtype::iq3_s ? 0.25 : 0.65;
    for (const float *imp : {importance.data(), static_cast<const float *>(nullptr)}) {
        if (!imp && t == dtype::iq1_s) continue;
        SCOPED_TRACE(imp ? "with importance" : "without importance");
        const auto q = quantize_with(t, x, n, imp);
        const auto back = dequantize(t, q, 2 * n);
        const double error = relative_rmse(back.data(), x.data(), x.size());
        std::cout << "[ error    ] " << type_name(t) << (imp ? " weighted: " : ": ") << error << "\n";
        EXPECT_LT(error, bound);
        EXPECT_GT(error, 0.01);  // a 1- or 3-bit type cannot be that close
        for (int r = 0; r < 2; ++r) {
            const std::vector<float> row(x.begin() + r * n, x.begin() + (r + 1) * n);
            const auto alone = quantize_with(t, row, n, imp);
            EXPECT_EQ(std::memcmp(alone.data(), q.data() + size_t(r) * alone.size(), alone.size()), 0) << r;
        }
    }
}

// Zero rows give zero blocks (every byte), which decode to zeros.
TEST_P(GridQuantize, ZeroRowsGiveZeroBlocks) {
    const dtype t = GetParam();
    const std::vector<float> x(size_t(2 * qk_k), 0.0f);
    const auto importance = random_importance(x.size(), 3);
    const auto q = quantize_with(t, x, int64_t(x.size()), importance.data());
    EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](uint8_t b) { return b == 0; }));
    for (float v : dequantize(t, q, int64_t(x.size()))) ASSERT_EQ(v, 0.0f);
}

// One value 10^4 times the others stays the largest of its super-block, with its sign and the right
// order of size (the few levels of these types are shared with the small values of its group, so
// not closer than that), and the other super-block of the row is not affected.
TEST_P(GridQuantize, OneHugeValue) {
    const dtype t = GetParam();
    auto x = normal_values(size_t(2 * qk_k), 21, 0.02f);
    const auto importance = random_importance(x.size(), 22);
    const auto plain = quantize_with(t, x, int64_t(x.size()), importance.data());
    x[37] = -200.0f;
    const auto q = quantize_with(t, x, int64_t(x.size()), importance.data());
    const auto back = dequantize(t, q, int64_t(x.size()));
    for (float v : back) ASSERT_TRUE(std::isfinite(v));
    std::cout << "[ huge     ] " << type_name(t) << ": -200 -> " << back[37] << "\n";
    EXPECT_LT(back[37], -80.0f);
    EXPECT_GT(back[37], -300.0f);
    for (int i = 0; i < qk_k; ++i) EXPECT_LE(std::fabs(back[size_t(i)]), std::fabs(back[37])) << i;
    const size_t block = type_traits(t).type_size;
    EXPECT_EQ(std::memcmp(q.data() + block, plain.data() + block, block), 0)
        << "the second super-block changed";
}

// An importance of all zeros leaves no weighted fit to maximize; the quantizer must still finish
// with finite blocks, as the established one does: iq3_s re-rounds at its starting scale max / 15
// (values stay close); iq3_xxs keeps its starting codes, the smallest level for every value (one
// magnitude per sub-block, the signs kept); the iq1 types find no split with a positive fit and
// store zeros.
TEST_P(GridQuantize, AllZeroImportance) {
    const dtype t = GetParam();
    const auto x = normal_values(size_t(qk_k), 31, 0.02f);
    const std::vector<float> zeros(x.size(), 0.0f);
    const auto q = quantize_with(t, x, int64_t(x.size()), zeros.data());
    const auto back = dequantize(t, q, int64_t(x.size()));
    for (float v : back) ASSERT_TRUE(std::isfinite(v));
    if (t == dtype::iq1_s || t == dtype::iq1_m) {
        EXPECT_TRUE(std::all_of(q.begin(), q.end(), [](uint8_t b) { return b == 0; }));
    } else if (t == dtype::iq3_s) {
        EXPECT_LT(relative_rmse(back.data(), x.data(), x.size()), 0.3);
    } else {
        int sign_flips = 0;
        for (int i = 0; i < qk_k; ++i) {
            EXPECT_EQ(std::fabs(back[size_t(i)]), std::fabs(back[size_t(i / 32 * 32)])) << i;
            EXPECT_GT(std::fabs(back[size_t(i)]), 0.0f) << i;
            sign_flips += (back[size_t(i)] < 0) != (x[size_t(i)] < 0);
        }
        EXPECT_LE(sign_flips, qk_k / 8) << "at most one parity flip per group of 8";
    }
}

// The lookups are built on first use: rows quantized from several threads at once (the first use
// in this process when the test runs alone, as under ctest) equal the rows quantized one by one.
TEST_P(GridQuantize, ConcurrentFirstUseGivesTheSameBytes) {
    const dtype t = GetParam();
    const int n_threads = 4;
    const auto x = normal_values(size_t(n_threads * qk_k), 61, 0.02f);
    const auto importance = random_importance(size_t(qk_k), 62);
    const size_t row = row_size(t, qk_k);
    std::vector<uint8_t> together(row * n_threads);
    std::vector<std::thread> threads;
    for (int i = 0; i < n_threads; ++i)
        threads.emplace_back([&, i] {
            quantize_rows(t, x.data() + i * qk_k, together.data() + size_t(i) * row, 1, qk_k,
                          importance.data());
        });
    for (auto &th : threads) th.join();
    EXPECT_EQ(quantize_with(t, x, qk_k, importance.data()), together);
}

// A NaN or an infinity, which quantize_rows refuses, may still reach a quantizer called directly
// (a cpy into the type): it must return, whatever it writes.
TEST_P(GridQuantize, NonFiniteValuesDoNotCrashTheQuantizer) {
    const dtype t = GetParam();
    const auto importance = random_importance(size_t(qk_k), 72);
    for (float bad : {std::nanf(""), std::numeric_limits<float>::infinity(), 3e38f}) {
        auto x = normal_values(size_t(qk_k), 71, 0.02f);
        x[5] = bad;
        x[200] = -bad;
        std::vector<uint8_t> q(row_size(t, qk_k));
        if (t == dtype::iq1_s)
            quant::quantize_row_iq1_s_weighted(x.data(), q.data(), qk_k, importance.data());
        else
            quant_traits_of(t).from_float_ref(x.data(), q.data(), qk_k);
    }
}

INSTANTIATE_TEST_SUITE_P(Types, GridQuantize, ::testing::ValuesIn(grid_quantized_types()), name_of);

// Without importance: iq3_xxs, iq3_s and iq1_m weight by x^2 (their traits quantize); iq1_s, which
// the established quantizer refuses without one, is refused with a message that says so.
TEST(GridQuantizeTraits, Iq1sNeedsImportanceTheOthersDoNot) {
    for (dtype t : {dtype::iq3_xxs, dtype::iq3_s, dtype::iq1_m})
        EXPECT_NE(quant_traits_of(t).from_float_ref, nullptr) << type_name(t);
    EXPECT_EQ(quant_traits_of(dtype::iq1_s).from_float_ref, nullptr);
    const auto x = normal_values(size_t(qk_k), 41);
    std::vector<uint8_t> out(row_size(dtype::iq1_s, qk_k));
    try {
        quantize_rows(dtype::iq1_s, x.data(), out.data(), 1, qk_k);
        ADD_FAILURE() << "iq1_s quantized without importance";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("needs an importance matrix"), std::string::npos) << e.what();
    }
}

// The established iq3_s quantizer moves its index and sign write positions only past sub-blocks it
// quantized, so after an all-zero sub-block the following ones land one slot early (and decode
// wrongly); files made by it hold such blocks, so weft reproduces it. Without importance the
// weights (x^2) do not depend on the rest of the block: the shifted sub-blocks are those of the
// same row with the first sub-block small instead of zero.
TEST(GridQuantizeTraits, Iq3sShiftsSubBlocksAfterAZeroOne) {
    auto x = normal_values(size_t(qk_k), 51, 0.02f);
    for (int i = 0; i < 32; ++i) x[size_t(i)] *= 0.01f;  // not the largest scale either way
    block_iq3_s small, zero;
    quantize_rows(dtype::iq3_s, x.data(), &small, 1, qk_k);
    std::fill(x.begin(), x.begin() + 32, 0.0f);
    quantize_rows(dtype::iq3_s, x.data(), &zero, 1, qk_k);
    EXPECT_EQ(zero.d, small.d);
    EXPECT_EQ(std::memcmp(zero.qs, small.qs + 8, 56), 0);
    EXPECT_TRUE(std::all_of(zero.qs + 56, zero.qs + 64, [](uint8_t b) { return b == 0; }));
    EXPECT_EQ(std::memcmp(zero.signs, small.signs + 4, 28), 0);
    EXPECT_EQ(zero.qh[0], 0);
    EXPECT_EQ(std::memcmp(zero.qh + 1, small.qh + 1, 7), 0);  // the high bits stay in place
    EXPECT_EQ(zero.scales[0] & 0xf, 0);
    EXPECT_EQ(std::memcmp(zero.scales + 1, small.scales + 1, 3), 0);
}
