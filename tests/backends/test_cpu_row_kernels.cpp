// tests/backends/test_cpu_row_kernels.cpp — every SIMD row kernel of the CPU backend against its
// scalar reference in the quant layer, on random data; force_scalar selects the references.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <string>

#include "backends/cpu/row_kernels.h"
#include "quant/quant_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

using cpu::simd_level;

bool simd_available() {
    return cpu::simd_level_supported(simd_level::avx2);
}

// The AVX2 table's entry, whatever row_traits_of() currently serves.
const quant_traits &avx2_traits(dtype t) {
    return cpu::row_traits_at(t, simd_level::avx2);
}

#define REQUIRE_SIMD()                                                                                \
    do {                                                                                              \
        if (!simd_available()) GTEST_SKIP() << "no AVX2/FMA/F16C on this CPU (or WEFT_FORCE_SCALAR)"; \
    } while (0)

std::string name_of(const ::testing::TestParamInfo<dtype> &info) {
    return type_name(info.param);
}

}  // namespace

class SimdVecDot : public ::testing::TestWithParam<dtype> {};

// The fast dot product and the reference see the same quantized rows; they differ only in the
// order of float additions, so the difference is bounded by a few ulps of sum |x_i y_i|.
TEST_P(SimdVecDot, MatchesTheReferenceOnRandomRows) {
    REQUIRE_SIMD();
    const dtype t = GetParam();
    const quant_traits &tr = quant_traits_of(t);
    const vec_dot_fn vec_dot = avx2_traits(t).vec_dot;
    ASSERT_NE(vec_dot, tr.vec_dot_ref) << type_name(t) << " has no SIMD dot product";
    const bool plain = type_traits(t).block_size == 1;
    // Odd block counts, and for the plain types lengths that exercise the vector tails.
    std::vector<int64_t> lengths;
    for (int64_t blocks : {1, 2, 3, 5, 7, 13}) lengths.push_back(row_length(t, blocks));
    if (plain) lengths.insert(lengths.end(), {1, 7, 9, 31, 33, 100, 257});
    uint32_t seed = 1;
    for (int64_t n : lengths) {
        for (int rep = 0; rep < 5; ++rep, ++seed) {
            // Mixed scales between rows so that both large and small blocks appear.
            const float sigma = rep % 2 ? 0.02f : 3.0f;
            const auto xf = normal_values(size_t(n), seed, sigma);
            const auto yf = normal_values(size_t(n), seed + 1000, 1.0f);
            std::vector<uint8_t> xq(row_size(t, n)), yq(row_size(tr.vec_dot_type, n));
            tr.from_float_ref(xf.data(), xq.data(), n);
            quant_traits_of(tr.vec_dot_type).from_float_ref(yf.data(), yq.data(), n);
            const auto xd = dequantize(t, xq, n);
            const auto yd = dequantize(tr.vec_dot_type, yq, n);
            double magnitude = 0;
            for (int64_t i = 0; i < n; ++i) magnitude += std::fabs(double(xd[size_t(i)]) * yd[size_t(i)]);
            float fast = 0, ref = 0;
            vec_dot(n, &fast, xq.data(), yq.data());
            tr.vec_dot_ref(n, &ref, xq.data(), yq.data());
            ASSERT_TRUE(std::isfinite(fast));
            EXPECT_NEAR(fast, ref, 2e-6 * magnitude + 1e-30)
                << type_name(t) << ", n = " << n << ", rep " << rep;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllWeightTypes, SimdVecDot, ::testing::ValuesIn(weight_types()), name_of);

// The iq4, ternary and mxfp4 kernels keep the reference's operations (exact integer sums, then one
// std::fma per block in block order), so they must give its bits, not only its value within rounding.
TEST(SimdVecDot, Iq4AndTernaryKernelsGiveTheReferenceBits) {
    REQUIRE_SIMD();
    for (dtype t : {dtype::iq4_nl, dtype::iq4_xs, dtype::tq1_0, dtype::tq2_0, dtype::mxfp4}) {
        const quant_traits &tr = quant_traits_of(t);
        const vec_dot_fn vec_dot = avx2_traits(t).vec_dot;
        ASSERT_NE(vec_dot, tr.vec_dot_ref) << type_name(t);
        uint32_t seed = 7;
        for (int64_t blocks : {1, 2, 3, 5, 7, 13}) {
            const int64_t n = row_length(t, blocks);
            for (int rep = 0; rep < 5; ++rep, ++seed) {
                const auto xf = normal_values(size_t(n), seed, rep % 2 ? 0.02f : 3.0f);
                const auto yf = normal_values(size_t(n), seed + 1000, 1.0f);
                std::vector<uint8_t> xq(row_size(t, n)), yq(row_size(tr.vec_dot_type, n));
                tr.from_float_ref(xf.data(), xq.data(), n);
                quant_traits_of(tr.vec_dot_type).from_float_ref(yf.data(), yq.data(), n);
                float fast = 0, ref = 0;
                vec_dot(n, &fast, xq.data(), yq.data());
                tr.vec_dot_ref(n, &ref, xq.data(), yq.data());
                EXPECT_EQ(std::memcmp(&fast, &ref, sizeof fast), 0)
                    << type_name(t) << ", n = " << n << ": " << fast << " vs " << ref;
            }
        }
    }
}

class SimdFromFloat : public ::testing::TestWithParam<dtype> {};

// The fast activation quantizers produce the reference's bytes exactly, including on values
// that sit exactly on rounding ties and on all-zero blocks.
TEST_P(SimdFromFloat, ProducesTheReferenceBytes) {
    REQUIRE_SIMD();
    const dtype t = GetParam();
    const quant_traits &tr = quant_traits_of(t);
    const from_float_fn from_float = avx2_traits(t).from_float;
    ASSERT_NE(from_float, tr.from_float_ref) << type_name(t) << " has no SIMD quantizer";
    for (int64_t blocks : {1, 3, 6}) {
        const int64_t n = row_length(t, blocks);
        auto x = normal_values(size_t(n), uint32_t(blocks) * 31, 2.0f);
        // Ties: with the block maximum at 127 the scale is 1, so k + 0.5 lands on a tie.
        for (int64_t i = 0; i < std::min<int64_t>(n, 32); ++i) x[size_t(i)] = float(i % 2 ? i : -i) + 0.5f;
        x[0] = 127.0f;
        if (n > 64)
            for (int64_t i = n - 32; i < n; ++i) x[size_t(i)] = 0.0f;  // an all-zero block
        std::vector<uint8_t> ref(row_size(t, n));
        // q8_0 / q8_1 activations: the backend's scalar activation quantizer (ties to even, 127 / amax),
        // not the file quantizer; the others: the reference
        cpu::row_traits_at(t, simd_level::scalar).from_float(x.data(), ref.data(), n);
        std::vector<uint8_t> fast(row_size(t, n));
        from_float(x.data(), fast.data(), n);
        EXPECT_EQ(fast, ref) << type_name(t) << ", " << blocks << " blocks";
    }
}

// The activation quantizer of q8_0 / q8_1 at every level rounds as the reference engine's x86 kernel:
// x * (127 / amax) to nearest, ties to even (the file quantizer, from_float_ref, rounds them away
// from zero); a block whose maximum is 127 has the multiplier 1, so k + 0.5 is a tie.
TEST(ActivationQuantizer, RoundsTiesToEvenAsTheReferenceEngine) {
    for (simd_level level : {simd_level::scalar, simd_level::avx2}) {
        if (!cpu::simd_level_supported(level)) continue;
        for (dtype t : {dtype::q8_0, dtype::q8_1}) {
            std::vector<float> x(32);
            for (int i = 0; i < 32; ++i) x[size_t(i)] = float(i % 2 ? i : -i) + 0.5f;
            x[0] = 127.0f;
            std::vector<uint8_t> q(row_size(t, 32));
            cpu::row_traits_at(t, level).from_float(x.data(), q.data(), 32);
            const auto *qs = reinterpret_cast<const int8_t *>(q.data() + (t == dtype::q8_0 ? 2 : 4));
            EXPECT_EQ(qs[0], 127);
            for (int i = 1; i < 32; ++i) {
                const float v = x[size_t(i)];  // +-(k + 0.5): the even one of k and k + 1
                const int want = int(std::nearbyint(v));
                EXPECT_EQ(want % 2, 0);
                EXPECT_EQ(qs[i], want) << type_name(t) << " level " << int(level) << " value " << v;
            }
        }
    }
}

INSTANTIATE_TEST_SUITE_P(ActivationTypes, SimdFromFloat,
                         ::testing::Values(dtype::f16, dtype::q8_0, dtype::q8_1, dtype::q8_k), name_of);

TEST(SimdToFloat, HalfConversionMatchesTheReference) {
    REQUIRE_SIMD();
    const to_float_fn to_float = avx2_traits(dtype::f16).to_float;
    ASSERT_NE(to_float, cpu::row_traits_at(dtype::f16, simd_level::scalar).to_float)
        << "f16 has no SIMD conversion";
    std::vector<fp16_t> every(0x10000);
    for (uint32_t h = 0; h < 0x10000; ++h) every[h] = fp16_t(h);
    std::vector<float> out(every.size());
    to_float(every.data(), out.data(), int64_t(every.size()) - 3);  // a tail too
    for (size_t h = 0; h + 3 < every.size(); ++h) {
        const float want = fp16_to_fp32(fp16_t(h));
        if (std::isnan(want)) {
            ASSERT_TRUE(std::isnan(out[h])) << std::hex << h;
        } else {
            ASSERT_EQ(out[h], want) << std::hex << h;
        }
    }
}

// Contiguous f16 rows are stored by the ISA's conversion (rows.h store_row: set_rows into the cache,
// cpy, f16 results): the same bits as the scalar fp32_to_fp16 for every float that is not a NaN (a NaN
// stays a NaN) — every exponent, with mantissas that land on ties, just beside them, and at the ends,
// so rounding to even, the subnormal halves, overflow to infinity and the underflow to zero are all
// crossed.
TEST(SimdFromFloat, HalfConversionMatchesTheReferenceOnEveryExponent) {
    REQUIRE_SIMD();
    const auto from_float = avx2_traits(dtype::f16).from_float;
    ASSERT_NE(from_float, cpu::row_traits_at(dtype::f16, simd_level::scalar).from_float)
        << "f16 has no SIMD conversion";
    std::vector<float> x;
    for (uint32_t sign : {0u, 0x80000000u})
        for (uint32_t e = 0; e < 256; ++e)
            for (uint32_t m : {0u, 1u, 0xfffu, 0x1000u, 0x1001u, 0x2000u, 0x3000u, 0x5000u, 0x7fe000u,
                               0x7ff000u, 0x7fefffu, 0x7fffffu, 0x400000u, 0x401000u, 0x123456u})
                x.push_back(std::bit_cast<float>(sign | e << 23 | m));
    std::vector<fp16_t> got(x.size());
    from_float(x.data(), got.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
        if (std::isnan(x[i])) {
            EXPECT_TRUE(std::isnan(fp16_to_fp32(got[i]))) << std::hex << std::bit_cast<uint32_t>(x[i]);
            continue;
        }
        EXPECT_EQ(got[i], fp32_to_fp16(x[i])) << std::hex << std::bit_cast<uint32_t>(x[i]);
    }
}

TEST(CpuRowKernels, ForceScalarSelectsTheReferenceKernels) {
    const bool was_forced = scalar_forced();
    force_scalar(true);
    for (dtype t : weight_types()) {
        EXPECT_EQ(cpu::row_traits_of(t).vec_dot, cpu::row_traits_of(t).vec_dot_ref) << type_name(t);
        EXPECT_EQ(cpu::row_traits_of(t).from_float, cpu::row_traits_at(t, simd_level::scalar).from_float)
            << type_name(t);
    }
    force_scalar(false);
    if (simd_available()) {
        EXPECT_NE(cpu::row_traits_of(dtype::q4_0).vec_dot, cpu::row_traits_of(dtype::q4_0).vec_dot_ref);
        EXPECT_NE(cpu::row_traits_of(dtype::q8_k).from_float, cpu::row_traits_of(dtype::q8_k).from_float_ref);
    }
    force_scalar(was_forced);
}
