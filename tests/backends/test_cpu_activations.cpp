// tests/backends/test_cpu_activations.cpp — the activation rows: every ISA build gives the scalar
// build's bits, and the canonical exp stays within a few ulp of std::exp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backends/cpu/activations.h"
#include "backends/cpu/canonical_math.h"
#include "weft/core/cpu_features.h"

using namespace weft;

namespace {

std::vector<float> inputs() {
    std::vector<float> x = {0.0f, -0.0f, 1.0f, -1.0f, 88.0f, -88.0f, 100.0f, -100.0f, 1e-30f, -1e-30f, 20.5f};
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
    for (int i = 0; i < 1000; ++i) x.push_back(dist(rng));
    return x;
}

TEST(CpuActivations, EveryIsaEqualsScalarBitForBit) {
    const cpu_features &f = host_cpu_features();
    const auto g = inputs();
    std::vector<float> u(g.size());
    for (size_t i = 0; i < u.size(); ++i) u[i] = float(i % 7) - 3.0f;
    std::vector<float> want(g.size()), got(g.size());
    cpu::swiglu_row_scalar(g.data(), u.data(), want.data(), int64_t(g.size()));
    int run = 0;
    if (f.avx2 && f.fma) {
        cpu::swiglu_row_avx2(g.data(), u.data(), got.data(), int64_t(g.size()));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << "avx2 swiglu";
        cpu::silu_row_avx2(g.data(), got.data(), int64_t(g.size()));
        cpu::silu_row_scalar(g.data(), want.data(), int64_t(g.size()));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << "avx2 silu";
        ++run;
    }
    if (f.avx512f && f.avx512bw && f.avx512vl && f.fma) {
        cpu::swiglu_row_scalar(g.data(), u.data(), want.data(), int64_t(g.size()));
        cpu::swiglu_row_avx512(g.data(), u.data(), got.data(), int64_t(g.size()));
        EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0) << "avx512 swiglu";
        ++run;
    }
    if (run == 0) GTEST_SKIP() << "no SIMD build of the activations for this CPU";
}

TEST(CpuActivations, CanonicalExpIsCloseToStdExp) {
    for (float x : inputs()) {
        const double want = std::exp(double(x));
        const float got = cpu::exp_canonical(x);
        if (x < -87.3f) {
            EXPECT_EQ(got, 0.0f) << x;
        } else if (x <= 88.3f) {
            EXPECT_NEAR(got, want, 4e-7 * want) << x;
        }
    }
    EXPECT_TRUE(std::isnan(cpu::exp_canonical(NAN)));
}

}  // namespace
