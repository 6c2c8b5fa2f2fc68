// tests/quant/test_quant_types.cpp — block layouts, traits, round trips and reference dot products.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "quant/quant_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

TEST(QuantBlocks, StructSizesMatchTheTypeTable) {
    EXPECT_EQ(sizeof(block_q4_0), type_traits(dtype::q4_0).type_size);
    EXPECT_EQ(sizeof(block_q4_1), type_traits(dtype::q4_1).type_size);
    EXPECT_EQ(sizeof(block_q5_0), type_traits(dtype::q5_0).type_size);
    EXPECT_EQ(sizeof(block_q5_1), type_traits(dtype::q5_1).type_size);
    EXPECT_EQ(sizeof(block_q8_0), type_traits(dtype::q8_0).type_size);
    EXPECT_EQ(sizeof(block_q8_1), type_traits(dtype::q8_1).type_size);
    EXPECT_EQ(sizeof(block_q2_k), type_traits(dtype::q2_k).type_size);
    EXPECT_EQ(sizeof(block_q3_k), type_traits(dtype::q3_k).type_size);
    EXPECT_EQ(sizeof(block_q4_k), type_traits(dtype::q4_k).type_size);
    EXPECT_EQ(sizeof(block_q5_k), type_traits(dtype::q5_k).type_size);
    EXPECT_EQ(sizeof(block_q6_k), type_traits(dtype::q6_k).type_size);
    EXPECT_EQ(sizeof(block_q8_k), type_traits(dtype::q8_k).type_size);
    EXPECT_EQ(sizeof(block_iq4_nl), type_traits(dtype::iq4_nl).type_size);
    EXPECT_EQ(sizeof(block_iq4_xs), type_traits(dtype::iq4_xs).type_size);
    EXPECT_EQ(qk4_nl, type_traits(dtype::iq4_nl).block_size);
    EXPECT_EQ(qk_k, type_traits(dtype::iq4_xs).block_size);
    EXPECT_EQ(sizeof(block_tq1_0), type_traits(dtype::tq1_0).type_size);
    EXPECT_EQ(sizeof(block_tq2_0), type_traits(dtype::tq2_0).type_size);
    EXPECT_EQ(qk_k, type_traits(dtype::tq1_0).block_size);
    EXPECT_EQ(qk_k, type_traits(dtype::tq2_0).block_size);
    EXPECT_EQ(sizeof(block_mxfp4), type_traits(dtype::mxfp4).type_size);
    EXPECT_EQ(qk_mxfp4, type_traits(dtype::mxfp4).block_size);
    EXPECT_EQ(sizeof(block_iq3_s), type_traits(dtype::iq3_s).type_size);
    EXPECT_EQ(sizeof(block_iq2_xxs), type_traits(dtype::iq2_xxs).type_size);
    EXPECT_EQ(sizeof(block_iq2_xs), type_traits(dtype::iq2_xs).type_size);
    EXPECT_EQ(sizeof(block_iq2_s), type_traits(dtype::iq2_s).type_size);
    EXPECT_EQ(sizeof(block_iq3_xxs), type_traits(dtype::iq3_xxs).type_size);
    EXPECT_EQ(sizeof(block_iq1_s), type_traits(dtype::iq1_s).type_size);
    EXPECT_EQ(sizeof(block_iq1_m), type_traits(dtype::iq1_m).type_size);
    EXPECT_EQ(qk_k, type_traits(dtype::q4_k).block_size);
    EXPECT_EQ(qk4_0, type_traits(dtype::q4_0).block_size);
}

TEST(QuantTraits, EveryWeightTypeHasCompleteTraits) {
    const std::map<dtype, dtype> expected_vec_dot_type = {
        {dtype::f32, dtype::f32},    {dtype::f16, dtype::f16},     {dtype::bf16, dtype::bf16},
        {dtype::q4_0, dtype::q8_0},  {dtype::q4_1, dtype::q8_1},   {dtype::q5_0, dtype::q8_0},
        {dtype::q5_1, dtype::q8_1},  {dtype::q8_0, dtype::q8_0},   {dtype::q2_k, dtype::q8_k},
        {dtype::q3_k, dtype::q8_k},  {dtype::q4_k, dtype::q8_k},   {dtype::q5_k, dtype::q8_k},
        {dtype::q6_k, dtype::q8_k},  {dtype::iq4_nl, dtype::q8_0}, {dtype::iq4_xs, dtype::q8_k},
        {dtype::tq1_0, dtype::q8_k}, {dtype::tq2_0, dtype::q8_k},  {dtype::mxfp4, dtype::q8_0}};
    for (dtype t : weight_types()) {
        SCOPED_TRACE(type_name(t));
        ASSERT_TRUE(has_quant_traits(t));
        const quant_traits &tr = quant_traits_of(t);
        EXPECT_EQ(tr.type, t);
        EXPECT_EQ(tr.vec_dot_type, expected_vec_dot_type.at(t));
        EXPECT_NE(tr.to_float, nullptr);
        EXPECT_NE(tr.from_float, nullptr);
        EXPECT_NE(tr.from_float_ref, nullptr);
        EXPECT_NE(tr.vec_dot, nullptr);
        EXPECT_NE(tr.vec_dot_ref, nullptr);
    }
    for (dtype t : {dtype::q8_1, dtype::q8_k}) {
        SCOPED_TRACE(type_name(t));
        ASSERT_TRUE(has_quant_traits(t));
        EXPECT_NE(quant_traits_of(t).from_float, nullptr);
        EXPECT_NE(quant_traits_of(t).to_float, nullptr);
    }
    EXPECT_FALSE(has_quant_traits(dtype::i32));
    EXPECT_FALSE(has_quant_traits(dtype(4)));  // a hole in the id space
    EXPECT_FALSE(has_quant_traits(dtype::count));
}

// The quant layer holds block formats and reference code only: its fast paths are the references
// (the SIMD versions belong to the CPU backend, tests/backends/test_cpu_row_kernels.cpp).
TEST(QuantTraits, TheQuantLayerServesTheReferenceKernels) {
    for (dtype t : weight_types()) {
        EXPECT_EQ(quant_traits_of(t).vec_dot, quant_traits_of(t).vec_dot_ref) << type_name(t);
        EXPECT_EQ(quant_traits_of(t).from_float, quant_traits_of(t).from_float_ref) << type_name(t);
    }
}

// Hand-computed q4_0 block: values j - 16 (j < 32). The largest magnitude is -16, so d = 2 and
// q = min(15, trunc(x / 2 + 8.5)).
TEST(QuantReference, Q4_0BlockByHand) {
    std::vector<float> x(32);
    for (int j = 0; j < 32; ++j) x[size_t(j)] = float(j - 16);
    const auto q = quantize(dtype::q4_0, x, 32);
    block_q4_0 b;
    std::memcpy(&b, q.data(), sizeof b);
    EXPECT_EQ(b.d, fp32_to_fp16(2.0f));
    for (int j = 0; j < 16; ++j) {
        const int lo = std::min(15, int(float(j - 16) * 0.5f + 8.5f));
        const int hi = std::min(15, int(float(j) * 0.5f + 8.5f));
        EXPECT_EQ(b.qs[j], lo | (hi << 4)) << j;
    }
    EXPECT_EQ(b.qs[0], 0x80);  // -16 -> 0, 0 -> 8
}

// Hand-computed q8_0 block: roundf rounds the halves away from zero.
TEST(QuantReference, Q8_0RoundsHalvesAwayFromZero) {
    std::vector<float> x(32, 0.0f);
    x[0] = 127.0f;  // d = 1
    x[1] = 2.5f;
    x[2] = -2.5f;
    x[3] = 0.5f;
    x[4] = -126.5f;
    const auto q = quantize(dtype::q8_0, x, 32);
    block_q8_0 b;
    std::memcpy(&b, q.data(), sizeof b);
    EXPECT_EQ(fp16_to_fp32(b.d), 1.0f);
    EXPECT_EQ(b.qs[0], 127);
    EXPECT_EQ(b.qs[1], 3);
    EXPECT_EQ(b.qs[2], -3);
    EXPECT_EQ(b.qs[3], 1);
    EXPECT_EQ(b.qs[4], -127);
    for (dtype t : {dtype::q8_0, dtype::q8_1}) {
        std::vector<uint8_t> fast(row_size(t, 32));
        quant_traits_of(t).from_float(x.data(), fast.data(), 32);
        std::vector<uint8_t> ref(row_size(t, 32));
        quant_traits_of(t).from_float_ref(x.data(), ref.data(), 32);
        EXPECT_EQ(fast, ref) << type_name(t);
    }
}

TEST(QuantReference, Q8_KBlockSumsAreSumsOfSixteenQuants) {
    const auto x = normal_values(3 * qk_k, 11);
    for (bool scalar : {true, false}) {
        std::vector<block_q8_k> y(3);
        const quant_traits &tr = quant_traits_of(dtype::q8_k);
        (scalar ? tr.from_float_ref : tr.from_float)(x.data(), y.data(), 3 * qk_k);
        for (const auto &b : y)
            for (int g = 0; g < qk_k / 16; ++g) {
                int sum = 0;
                for (int l = 0; l < 16; ++l) sum += b.qs[16 * g + l];
                EXPECT_EQ(b.bsums[g], sum);
            }
        std::vector<float> back(3 * qk_k);
        tr.to_float(y.data(), back.data(), 3 * qk_k);
        EXPECT_LT(relative_rmse(back.data(), x.data(), x.size()), 0.01);
    }
}

// Round trips of normally distributed data. The bounds are a little above what the established
// quantizer reaches on the same distribution (about 1.1x the measured value); test_fixtures
// compares against the established quantizer's own output on real files.
class QuantRoundTrip : public ::testing::TestWithParam<dtype> {};

TEST_P(QuantRoundTrip, NormalDataStaysWithinTheTypesError) {
    const dtype t = GetParam();
    const std::map<dtype, double> bound = {{dtype::f32, 0.0},    {dtype::f16, 2.4e-4},  {dtype::bf16, 1.9e-3},
                                           {dtype::q4_0, 0.099}, {dtype::q4_1, 0.087},  {dtype::q5_0, 0.048},
                                           {dtype::q5_1, 0.042}, {dtype::q8_0, 0.006},  {dtype::q8_1, 0.006},
                                           {dtype::q2_k, 0.33},  {dtype::q3_k, 0.17},   {dtype::q4_k, 0.079},
                                           {dtype::q5_k, 0.040}, {dtype::q6_k, 0.0196}, {dtype::q8_k, 0.008},
                                           {dtype::iq4_nl, 1.0}, {dtype::iq4_xs, 1.0},  {dtype::tq1_0, 0.90},
                                           {dtype::tq2_0, 0.90}};  // ternary: made for ternary weights
    const int64_t n_per_row = row_length(t, 5);
    const auto x = normal_values(size_t(n_per_row) * 7, 1234, 0.02f);
    const auto q = quantize(t, x, n_per_row);
    EXPECT_EQ(q.size(), row_size(t, n_per_row) * 7);
    const auto back = dequantize(t, q, int64_t(x.size()));
    const double err = relative_rmse(back.data(), x.data(), x.size());
    RecordProperty("relative_rmse", std::to_string(err));
    EXPECT_LE(err, bound.at(t)) << type_name(t);
    for (float v : back) ASSERT_TRUE(std::isfinite(v));
}

TEST_P(QuantRoundTrip, ZeroAndConstantRowsDecodeExactlyOrClosely) {
    const dtype t = GetParam();
    const int64_t n = row_length(t, 2);
    const std::vector<float> zeros(size_t(n), 0.0f);
    for (float v : dequantize(t, quantize(t, zeros, n), n)) ASSERT_EQ(v, 0.0f) << type_name(t);
    // A constant row and a row that is zero but for one large value: nothing NaN, the large value
    // is kept within its type's resolution.
    const std::vector<float> constant(size_t(n), -0.75f);
    for (float v : dequantize(t, quantize(t, constant, n), n)) ASSERT_NEAR(v, -0.75f, 0.1f) << type_name(t);
    std::vector<float> spike(size_t(n), 0.0f);
    spike[3] = 100.0f;
    const auto back = dequantize(t, quantize(t, spike, n), n);
    EXPECT_NEAR(back[3], 100.0f, 2.0f) << type_name(t);
    for (size_t i = 0; i < back.size(); ++i) {
        if (i == 3) continue;
        ASSERT_NEAR(back[i], 0.0f, 1.0f) << type_name(t) << " at " << i;
    }
}

std::string type_param_name(const ::testing::TestParamInfo<dtype> &info) {
    return type_name(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllTypes, QuantRoundTrip,
                         ::testing::Values(dtype::f32, dtype::f16, dtype::bf16, dtype::q4_0, dtype::q4_1,
                                           dtype::q5_0, dtype::q5_1, dtype::q8_0, dtype::q8_1, dtype::q2_k,
                                           dtype::q3_k, dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::q8_k,
                                           dtype::iq4_nl, dtype::iq4_xs, dtype::tq1_0, dtype::tq2_0),
                         type_param_name);

// The reference dot product equals the dot product of the dequantized rows: it is exact integer
// arithmetic inside a block, then float scaling. q4_1 / q5_1 use the activations' sum s, which is
// stored as fp16, so they get an extra allowance of half an fp16 ulp of each |m * s|.
class QuantVecDotRef : public ::testing::TestWithParam<dtype> {};

TEST_P(QuantVecDotRef, EqualsTheDotOfDequantizedRows) {
    const dtype t = GetParam();
    const quant_traits &tr = quant_traits_of(t);
    for (int64_t blocks : {1, 3, 8}) {
        const int64_t n = row_length(t, blocks);
        const auto xf = normal_values(size_t(n), uint32_t(7 + blocks));
        const auto yf = normal_values(size_t(n), uint32_t(99 + blocks), 3.0f);
        std::vector<uint8_t> xq(row_size(t, n)), yq(row_size(tr.vec_dot_type, n));
        if (needs_importance(t))
            xq = random_grid_blocks(t, blocks, uint32_t(7 + blocks));
        else
            tr.from_float_ref(xf.data(), xq.data(), n);
        quant_traits_of(tr.vec_dot_type).from_float_ref(yf.data(), yq.data(), n);
        const auto xd = dequantize(t, xq, n);
        const auto yd = dequantize(tr.vec_dot_type, yq, n);
        double exact = 0, magnitude = 0;
        for (int64_t i = 0; i < n; ++i) {
            exact += double(xd[size_t(i)]) * yd[size_t(i)];
            magnitude += std::fabs(double(xd[size_t(i)]) * yd[size_t(i)]);
        }
        double tolerance = 1e-5 * magnitude;
        if (t == dtype::q4_1 || t == dtype::q5_1) {
            const size_t xs = type_traits(t).type_size;
            for (int64_t b = 0; b < blocks; ++b) {
                fp16_t m;  // the second half of either block is m
                std::memcpy(&m, xq.data() + size_t(b) * xs + 2, sizeof m);
                block_q8_1 yb;
                std::memcpy(&yb, yq.data() + size_t(b) * sizeof yb, sizeof yb);
                tolerance += std::fabs(fp16_to_fp32(m) * fp16_to_fp32(yb.s)) / 2048.0;
            }
        }
        float got = 0;
        tr.vec_dot_ref(n, &got, xq.data(), yq.data());
        EXPECT_NEAR(got, exact, tolerance) << type_name(t) << ", " << blocks << " blocks";
    }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, QuantVecDotRef, ::testing::ValuesIn(weight_types()),
                         type_param_name);
INSTANTIATE_TEST_SUITE_P(GridTypes, QuantVecDotRef, ::testing::ValuesIn(grid_types()), type_param_name);

// The grid i-quants are read (to-float, dot products against q8_K); iq2_s, iq3_xxs, iq3_s and iq1_m
// are also written without importance (from_float). quantize_rows refuses the others (iq2_xxs,
// iq2_xs, iq1_s) without one, with a message that says why.
TEST(QuantTraits, GridTypesDecodeAndSayWhyTheyRefuseQuantization) {
    for (dtype t : grid_types()) {
        SCOPED_TRACE(type_name(t));
        ASSERT_TRUE(has_quant_traits(t));
        const quant_traits &tr = quant_traits_of(t);
        EXPECT_EQ(tr.vec_dot_type, dtype::q8_k);
        EXPECT_NE(tr.to_float, nullptr);
        EXPECT_NE(tr.vec_dot_ref, nullptr);
        const bool writable =
            t == dtype::iq2_s || t == dtype::iq3_xxs || t == dtype::iq3_s || t == dtype::iq1_m;
        EXPECT_EQ(tr.from_float_ref != nullptr, writable);
        if (writable) continue;
        const int64_t n = type_traits(t).block_size;
        std::vector<float> x(size_t(n), 1.0f);
        std::vector<uint8_t> out(type_traits(t).type_size);
        try {
            quantize_rows(t, x.data(), out.data(), 1, n);
            ADD_FAILURE() << "quantized to a read-only type";
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find("needs an importance matrix"), std::string::npos)
                << e.what();
        }
    }
}

// Hand-built iq3_s block: d = 0.5; sub-block 0 has scale nibble 1 (x 3), sub-block 1 nibble 2 (x 5).
// The first group of 8 is index 0 (grid point 1,1,1,1), then index 511 through the high bit (bit 1
// of qh[0]; the last grid point, bytes 1,1,15,15), with signs 0b0110'0001: elements 0, 5, 6 negative.
TEST(QuantReference, Iq3sBlockByHand) {
    block_iq3_s b{};
    b.d = fp32_to_fp16(0.5f);
    b.scales[0] = 0x21;
    b.qs[0] = 0;
    b.qs[1] = 255;
    b.qh[0] = 0x02;
    b.signs[0] = 0x61;
    std::vector<float> y(qk_k);
    quant_traits_of(dtype::iq3_s).to_float(&b, y.data(), qk_k);
    const float want[8] = {-1.5f, 1.5f, 1.5f, 1.5f, 1.5f, -1.5f, -22.5f, 22.5f};
    for (int j = 0; j < 8; ++j) EXPECT_EQ(y[size_t(j)], want[j]) << j;
    // every other group of sub-block 0 is index 0, unsigned: 1.5; sub-block 1 (scale 5): 2.5
    for (int j = 8; j < 32; ++j) EXPECT_EQ(y[size_t(j)], 1.5f) << j;
    for (int j = 32; j < 64; ++j) EXPECT_EQ(y[size_t(j)], 2.5f) << j;
    // sub-blocks 2..7: scale nibbles 0 (x 1), index 0: 0.5
    for (int j = 64; j < qk_k; ++j) EXPECT_EQ(y[size_t(j)], 0.5f) << j;
    // the dot product with all-ones q8_K activations (d = 1) is the sum of the values
    block_q8_k ones{};
    ones.d = 1.0f;
    for (auto &q : ones.qs) q = 1;
    float dot = 0;
    quant_traits_of(dtype::iq3_s).vec_dot_ref(qk_k, &dot, &b, &ones);
    float sum = 0;
    for (float v : y) sum += v;
    EXPECT_EQ(dot, sum);
}

TEST(QuantizeRows, RejectsRowsThatAreNotWholeBlocks) {
    std::vector<float> x(300, 1.0f);
    std::vector<uint8_t> out(4096);
    EXPECT_THROW(quantize_rows(dtype::q4_k, x.data(), out.data(), 1, 300), error);
    EXPECT_THROW(quantize_rows(dtype::q4_0, x.data(), out.data(), 1, 33), error);
    EXPECT_THROW(quantize_rows(dtype::i32, x.data(), out.data(), 1, 32), error);
    try {
        quantize_rows(dtype::q4_0, x.data(), out.data(), 2, 33);
        FAIL() << "no error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("q4_0"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
    }
    EXPECT_EQ(quantize_rows(dtype::q4_0, x.data(), out.data(), 3, 64), 3 * row_size(dtype::q4_0, 64));
}

TEST(QuantizeRows, RejectsValuesThatAreNotFinite) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
        std::vector<float> x(512, 0.5f);
        x[256 + 17] = bad;
        std::vector<uint8_t> out(row_size(dtype::q4_k, 256) * 2);
        try {
            quantize_rows(dtype::q4_k, x.data(), out.data(), 2, 256);
            FAIL() << "no error for " << bad;
        } catch (const error &e) {
            EXPECT_NE(std::string(e.what()).find("row 1, column 17"), std::string::npos) << e.what();
        }
        // The float types represent them.
        std::vector<uint8_t> halves(row_size(dtype::f16, 256) * 2);
        EXPECT_NO_THROW(quantize_rows(dtype::f16, x.data(), halves.data(), 2, 256));
    }
}

// With importance weights, the quantizers lower the importance-weighted error (the error the
// model sees when some columns matter more than others).
TEST(QuantizeRows, ImportanceLowersTheWeightedError) {
    const int64_t n = 4 * qk_k, rows = 16;
    const auto x = normal_values(size_t(n * rows), 5);
    std::vector<float> importance(static_cast<size_t>(n));
    std::mt19937 rng(17);
    std::exponential_distribution<float> heavy(0.2f);
    for (auto &w : importance) w = 0.01f + heavy(rng) * heavy(rng);
    for (dtype t : {dtype::q4_0, dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q2_k, dtype::q3_k, dtype::q4_k,
                    dtype::q5_k, dtype::q6_k, dtype::iq4_nl, dtype::iq4_xs}) {
        std::vector<uint8_t> plain(row_size(t, n) * rows), weighted(row_size(t, n) * rows);
        quantize_rows(t, x.data(), plain.data(), rows, n);
        quantize_rows(t, x.data(), weighted.data(), rows, n, importance.data());
        const auto plain_back = dequantize(t, plain, n * rows);
        const auto weighted_back = dequantize(t, weighted, n * rows);
        double plain_err = 0, weighted_err = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double w = importance[i % size_t(n)];
            plain_err += w * std::pow(plain_back[i] - x[i], 2);
            weighted_err += w * std::pow(weighted_back[i] - x[i], 2);
        }
        RecordProperty(std::string("weighted_over_plain_") + type_name(t),
                       std::to_string(weighted_err / plain_err));
        EXPECT_LT(weighted_err, plain_err) << type_name(t);
        EXPECT_NE(plain, weighted) << type_name(t);
    }
}

// ---- iq4_nl / iq4_xs: the layouts decoded by hand, independently of the quant layer's code

namespace {

// The codebook as published with the format (ggml-common.h's kvalues_iq4nl).
constexpr int iq4_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Reads byte-level fields of a row of blocks: little-endian fp16 at `at`.
float half_at(const std::vector<uint8_t> &bytes, size_t at) {
    return fp16_to_fp32(fp16_t(bytes[at] | (bytes[at + 1] << 8)));
}

// iq4_nl: 18-byte blocks of fp16 d then 16 bytes; value j (< 16) is the low nibble of byte j,
// value j + 16 its high nibble; x = d * level.
std::vector<float> decode_iq4_nl_by_hand(const std::vector<uint8_t> &bytes) {
    std::vector<float> out;
    for (size_t b = 0; b + 18 <= bytes.size(); b += 18) {
        const float d = half_at(bytes, b);
        float block[32];
        for (int j = 0; j < 16; ++j) {
            const uint8_t q = bytes[b + 2 + size_t(j)];
            block[j] = d * float(iq4_levels[q & 15]);
            block[j + 16] = d * float(iq4_levels[q >> 4]);
        }
        out.insert(out.end(), block, block + 32);
    }
    return out;
}

// iq4_xs: 136-byte super-blocks: fp16 d, uint16 scales_h, 4 bytes scales_l, 128 bytes of nibbles.
// Sub-block s (< 8) has scale (low nibble s%2 of scales_l[s/2] | bits 2s..2s+1 of scales_h << 4)
// - 32 and quants in bytes 16s..16s+15 (nibble order as iq4_nl); x = d * scale * level.
std::vector<float> decode_iq4_xs_by_hand(const std::vector<uint8_t> &bytes) {
    std::vector<float> out;
    for (size_t b = 0; b + 136 <= bytes.size(); b += 136) {
        const float d = half_at(bytes, b);
        const unsigned scales_h = bytes[b + 2] | (bytes[b + 3] << 8);
        for (int s = 0; s < 8; ++s) {
            const unsigned low = (bytes[b + 4 + size_t(s / 2)] >> (4 * (s % 2))) & 15;
            const unsigned high = (scales_h >> (2 * s)) & 3;
            const int scale = int(low | (high << 4)) - 32;
            float block[32];
            for (int j = 0; j < 16; ++j) {
                const uint8_t q = bytes[b + 8 + size_t(16 * s + j)];
                block[j] = d * float(scale) * float(iq4_levels[q & 15]);
                block[j + 16] = d * float(scale) * float(iq4_levels[q >> 4]);
            }
            out.insert(out.end(), block, block + 32);
        }
    }
    return out;
}

// Random block bytes with a finite, moderate fp16 scale at byte scale_at of each block.
std::vector<uint8_t> random_blocks(dtype t, int64_t blocks, uint32_t seed, size_t scale_at = 0) {
    const size_t bs = type_traits(t).type_size;
    std::vector<uint8_t> bytes(bs * size_t(blocks));
    std::mt19937 rng(seed);
    for (auto &b : bytes) b = uint8_t(rng());
    std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
    for (int64_t i = 0; i < blocks; ++i) {
        const fp16_t d = fp32_to_fp16(scale(rng));
        bytes[size_t(i) * bs + scale_at] = uint8_t(d & 0xFF);
        bytes[size_t(i) * bs + scale_at + 1] = uint8_t(d >> 8);
    }
    return bytes;
}

}  // namespace

TEST(QuantReference, Iq4CodebookIsThePublishedOne) {
    for (int i = 0; i < 16; ++i) EXPECT_EQ(kvalues_iq4nl[i], iq4_levels[i]) << i;
}

// Known blocks: the quant layer's to_float against the decoders above, on odd numbers of blocks.
TEST(QuantReference, Iq4NlAndXsDecodeAsTheLayoutSays) {
    for (int64_t blocks : {1, 3, 7}) {
        const auto nl = random_blocks(dtype::iq4_nl, blocks, uint32_t(blocks));
        EXPECT_EQ(dequantize(dtype::iq4_nl, nl, blocks * 32), decode_iq4_nl_by_hand(nl)) << blocks;
        const auto xs = random_blocks(dtype::iq4_xs, blocks, uint32_t(100 + blocks));
        EXPECT_EQ(dequantize(dtype::iq4_xs, xs, blocks * 256), decode_iq4_xs_by_hand(xs)) << blocks;
    }
}

// A block built by hand: d = 0.5, element j takes level j % 16 (low nibbles) and 15 - j % 16
// (high nibbles); sub-block scales of iq4_xs spanning the whole six-bit range.
TEST(QuantReference, Iq4BlocksByHand) {
    block_iq4_nl nl;
    nl.d = fp32_to_fp16(0.5f);
    for (int j = 0; j < 16; ++j) nl.qs[j] = uint8_t(j | ((15 - j) << 4));
    std::vector<float> got(32);
    quant_traits_of(dtype::iq4_nl).to_float(&nl, got.data(), 32);
    for (int j = 0; j < 16; ++j) {
        EXPECT_EQ(got[size_t(j)], 0.5f * float(iq4_levels[j])) << j;
        EXPECT_EQ(got[size_t(j + 16)], 0.5f * float(iq4_levels[15 - j])) << j;
    }

    block_iq4_xs xs{};
    xs.d = fp32_to_fp16(0.25f);
    const int scales[8] = {-32, -1, 0, 1, 31, 17, -16, 5};  // stored as scale + 32 in six bits
    for (int s = 0; s < 8; ++s) {
        const int u = scales[s] + 32;
        xs.scales_l[s / 2] = uint8_t(xs.scales_l[s / 2] | ((u & 15) << (4 * (s % 2))));
        xs.scales_h = uint16_t(xs.scales_h | ((u >> 4) << (2 * s)));
    }
    for (int i = 0; i < 128; ++i) xs.qs[i] = uint8_t((i % 16) | ((i * 7 % 16) << 4));
    got.resize(256);
    quant_traits_of(dtype::iq4_xs).to_float(&xs, got.data(), 256);
    for (int s = 0; s < 8; ++s)
        for (int j = 0; j < 16; ++j) {
            const int i = 16 * s + j;
            EXPECT_EQ(got[size_t(32 * s + j)], 0.25f * float(scales[s]) * float(iq4_levels[i % 16])) << i;
            EXPECT_EQ(got[size_t(32 * s + j + 16)], 0.25f * float(scales[s]) * float(iq4_levels[i * 7 % 16]))
                << i;
        }
}

// Values that lie exactly on the codebook times a power-of-two scale come back exactly; the
// extreme value takes the lowest level (-127) as in the established quantizer.
TEST(QuantReference, Iq4ValuesOnTheCodebookRoundTripExactly) {
    std::vector<float> x(3 * 256);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.125f * float(iq4_levels[(i * 5 + i / 32) % 16]);
    for (size_t b = 0; b < x.size(); b += 32) x[b + 3] = -0.125f * 127;  // every block reaches -127
    for (dtype t : {dtype::iq4_nl, dtype::iq4_xs}) {
        const auto q = quantize(t, x, int64_t(x.size()));
        EXPECT_EQ(dequantize(t, q, int64_t(x.size())), x) << type_name(t);
    }
    block_iq4_nl b;
    std::memcpy(&b, quantize(dtype::iq4_nl, x, 32).data(), sizeof b);
    EXPECT_EQ(b.d, fp32_to_fp16(0.125f));
}

// Odd shapes (rows of 1, 3 and 5 blocks, 3 rows) go through quantize_rows and back within the
// type's error, and rows are independent of each other; the ternary types' decoded values quantize
// again to the same bytes.
TEST(QuantReference, Iq4AndTernaryOddShapesRoundTrip) {
    for (dtype t : {dtype::iq4_nl, dtype::iq4_xs, dtype::tq1_0, dtype::tq2_0}) {
        const bool ternary = t == dtype::tq1_0 || t == dtype::tq2_0;
        for (int64_t blocks : {1, 3, 5}) {
            const int64_t n = row_length(t, blocks);
            const auto x = normal_values(size_t(3 * n), uint32_t(blocks), 0.02f);
            const auto q = quantize(t, x, n);
            ASSERT_EQ(q.size(), 3 * row_size(t, n));
            const auto back = dequantize(t, q, 3 * n);
            EXPECT_LT(relative_rmse(back.data(), x.data(), x.size()), ternary ? 0.9 : 0.12)
                << type_name(t) << " " << blocks;
            const std::vector<float> row1(x.begin() + n, x.begin() + 2 * n);
            const auto q1 = quantize(t, row1, n);
            EXPECT_EQ(0, std::memcmp(q1.data(), q.data() + row_size(t, n), q1.size())) << type_name(t);
            if (ternary) {
                EXPECT_EQ(quantize(t, back, n), q) << type_name(t) << " " << blocks;
            }
        }
    }
}

// ---- tq1_0 / tq2_0: the layouts decoded by hand, independently of the quant layer's code

namespace {

// tq2_0: 66-byte blocks of 64 bytes of 2-bit codes then fp16 d; element 128 h + 32 l + m is bits
// 2l..2l+1 of byte 32 h + m; x = d * (code - 1).
std::vector<float> decode_tq2_0_by_hand(const std::vector<uint8_t> &bytes) {
    std::vector<float> out;
    for (size_t b = 0; b + 66 <= bytes.size(); b += 66) {
        const float d = half_at(bytes, b + 64);
        float block[256];
        for (int e = 0; e < 256; ++e) {
            const int code = (bytes[b + size_t(32 * (e / 128) + e % 32)] >> (2 * (e % 128 / 32))) & 3;
            block[e] = d * float(code - 1);
        }
        out.insert(out.end(), block, block + 256);
    }
    return out;
}

// tq1_0: 54-byte blocks: 48 bytes of five codes, 4 bytes of four codes, fp16 d. Code k of a byte
// is the k-th base-3 digit after the point of byte / 256 read as a fraction: floor(byte 3^(k+1) / 256)
// mod 3. Bytes 0..31: element 32 k + m of byte m; bytes 32..47: element 160 + 16 k + m of byte
// 32 + m; bytes 48..51: element 240 + 4 k + j of byte 48 + j.
std::vector<float> decode_tq1_0_by_hand(const std::vector<uint8_t> &bytes) {
    auto digit = [](unsigned byte, int k) {
        unsigned p = 3;
        for (int i = 0; i < k; ++i) p *= 3;
        return int(byte * p / 256 % 3);
    };
    std::vector<float> out;
    for (size_t b = 0; b + 54 <= bytes.size(); b += 54) {
        const float d = half_at(bytes, b + 52);
        float block[256];
        for (int e = 0; e < 256; ++e) {
            int byte, k;
            if (e < 160) {
                byte = e % 32, k = e / 32;
            } else if (e < 240) {
                byte = 32 + (e - 160) % 16, k = (e - 160) / 16;
            } else {
                byte = 48 + (e - 240) % 4, k = (e - 240) / 4;
            }
            block[e] = d * float(digit(bytes[b + size_t(byte)], k) - 1);
        }
        out.insert(out.end(), block, block + 256);
    }
    return out;
}

}  // namespace

TEST(QuantReference, TqDecodeAsTheLayoutSays) {
    for (int64_t blocks : {1, 3, 7}) {
        const auto tq1 = random_blocks(dtype::tq1_0, blocks, uint32_t(200 + blocks), 52);
        EXPECT_EQ(dequantize(dtype::tq1_0, tq1, blocks * 256), decode_tq1_0_by_hand(tq1)) << blocks;
        const auto tq2 = random_blocks(dtype::tq2_0, blocks, uint32_t(300 + blocks), 64);
        EXPECT_EQ(dequantize(dtype::tq2_0, tq2, blocks * 256), decode_tq2_0_by_hand(tq2)) << blocks;
    }
}

// Known bytes of the base-3 packing: five codes c0..c4 (c0 leading) are stored as
// ceil(256 v / 243) with v their base-3 value, the four codes of a qh byte with a zero fifth one.
TEST(QuantReference, Tq1PacksFiveCodesAByteRoundingUp) {
    std::vector<float> x(256, 0.0f);  // all codes 1 (value 0) but a few
    x[0] = 1.0f;                      // byte 0: codes 2 1 1 1 1 -> v = 162 + 27 + 9 + 3 + 1 = 202
    x[32 * 4 + 1] = -1.0f;            // byte 1: codes 1 1 1 1 0 -> v = 81 + 27 + 9 + 3 = 120
    x[240 + 4 * 3 + 2] = 1.0f;        // qh byte 2: codes 1 1 1 2 (0) -> v = 3 (27 + 9 + 3 + 2) = 123
    const auto q = quantize(dtype::tq1_0, x, 256);
    block_tq1_0 b;
    std::memcpy(&b, q.data(), sizeof b);
    EXPECT_EQ(b.qs[0], (202 * 256 + 242) / 243);
    EXPECT_EQ(b.qs[1], (120 * 256 + 242) / 243);
    EXPECT_EQ(b.qs[2], (121 * 256 + 242) / 243);  // all ones: v = 121
    EXPECT_EQ(b.qh[2], (123 * 256 + 242) / 243);
    EXPECT_EQ(b.qh[0], (120 * 256 + 242) / 243);  // 1 1 1 1 (0): v = 120
    EXPECT_EQ(b.d, fp32_to_fp16(1.0f));
    EXPECT_EQ(dequantize(dtype::tq1_0, q, 256), x);
}

// Values at -d, 0, +d come back exactly; x / d rounds half away from zero (lroundf), and both
// types hold the same ternary values for any input.
TEST(QuantReference, TqRoundToTheNearestTernaryValue) {
    std::vector<float> x(3 * 256);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.25f * float(int((i * 7 + i / 256) % 3) - 1);
    for (size_t b = 0; b < x.size(); b += 256) x[b + 5] = -0.25f;  // every block reaches -d
    for (dtype t : {dtype::tq1_0, dtype::tq2_0}) {
        EXPECT_EQ(dequantize(t, quantize(t, x, 256), int64_t(x.size())), x) << type_name(t);
        std::vector<float> halves(256, 0.0f);
        halves[0] = 2.0f;      // d = 2
        halves[1] = 1.0f;      // x / d = 0.5 -> +1
        halves[2] = -1.0f;     // -0.5 -> -1
        halves[3] = 0.99f;     // 0.495 -> 0
        halves[255] = -1.01f;  // -0.505 -> -1
        const auto back = dequantize(t, quantize(t, halves, 256), 256);
        EXPECT_EQ(back[1], 2.0f) << type_name(t);
        EXPECT_EQ(back[2], -2.0f) << type_name(t);
        EXPECT_EQ(back[3], 0.0f) << type_name(t);
        EXPECT_EQ(back[255], -2.0f) << type_name(t);
    }
    const auto y = normal_values(5 * 256, 77, 0.02f);
    EXPECT_EQ(dequantize(dtype::tq1_0, quantize(dtype::tq1_0, y, 256), 5 * 256),
              dequantize(dtype::tq2_0, quantize(dtype::tq2_0, y, 256), 5 * 256));
}
