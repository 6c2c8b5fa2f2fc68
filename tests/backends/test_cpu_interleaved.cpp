// tests/backends/test_cpu_interleaved.cpp — weights repacked into 16-row interleaved groups: the
// layout round-trips, every ISA's group kernel equals the scalar one bit for bit, the products match
// a double-precision reference, and each output element is the same whatever the batch around it
// (one column alone, many columns, any thread count).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backends/cpu/interleaved.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu_testing.h"
#include "backends/interleaved_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

// a [k, m] of `type` from normal random values; `plain` keeps a copy of its bytes, `dequantized`
// its rows as floats.
tensor *make_matrix(context &ctx, dtype type, int64_t k, int64_t m, uint32_t seed,
                    std::vector<uint8_t> &plain, std::vector<float> &dequantized) {
    tensor *a = ctx.new_tensor(type, {k, m});
    std::vector<float> values(size_t(k * m));
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    for (auto &v : values) v = dist(rng);
    // iq2_xxs, iq2_xs and iq1_s are only made with importance weights (any positive ones do)
    std::vector<float> importance(static_cast<size_t>(k));
    for (size_t i = 0; i < importance.size(); ++i) importance[i] = 1.0f + float(i % 7);
    quantize_rows(type, values.data(), a->data, m, k, importance.data());
    plain.assign(static_cast<const uint8_t *>(a->data), static_cast<const uint8_t *>(a->data) + a->nbytes());
    dequantized.resize(values.size());
    for (int64_t r = 0; r < m; ++r)
        quant_traits_of(type).to_float(plain.data() + size_t(r) * a->nb[1], &dequantized[size_t(r * k)], k);
    return a;
}

// Repacks a into memory of its own (it may be larger than the plain layout), kept alive by the
// returned holder.
std::shared_ptr<std::vector<uint8_t>> interleave_in_place(tensor &a) {
    auto memory = std::make_shared<std::vector<uint8_t>>(cpu::interleaved_size(a));
    cpu::interleave_tensor(a, a.data, memory->data());
    a.data = memory->data();
    return memory;
}

// n columns of k values quantized as the products of `type` want them.
test::quantized_columns quantize_columns(dtype type, int64_t k, int64_t n, uint32_t seed) {
    const cpu::q8_format format =
        type_traits(type).block_size == 256 ? cpu::q8_format::q8_k : cpu::q8_format::q8_0_block_sums;
    return test::quantize_columns(format, k, n, seed);
}

const dtype interleaved_types[] = {
    dtype::q4_0,  dtype::q4_1,    dtype::q5_0,  dtype::q5_1,   dtype::q8_0,   dtype::q2_k,    dtype::q3_k,
    dtype::q4_k,  dtype::q5_k,    dtype::q6_k,  dtype::iq4_nl, dtype::iq4_xs, dtype::iq2_xxs, dtype::iq2_xs,
    dtype::iq2_s, dtype::iq3_xxs, dtype::iq3_s, dtype::iq1_s,  dtype::iq1_m,  dtype::mxfp4};

TEST(CpuInterleaved, WhichWeightsQualify) {
    auto ctx = data_context();
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q4_0, {64, 32})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q8_0, {32, 16})));
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::q4_0, {64, 24})));  // rows not in 16s
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q4_k, {256, 16})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q6_k, {512, 48})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q5_k, {256, 16})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q3_k, {256, 16})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::iq4_nl, {64, 32})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::iq4_xs, {512, 16})));
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::iq4_nl, {64, 40})));   // rows not in 16s
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::iq4_xs, {256, 24})));  // rows not in 16s
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::bf16, {256, 16})));
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::f16, {64, 16})));
    EXPECT_TRUE(cpu::can_interleave(*ctx->new_tensor(dtype::q8_0, {64, 16, 2})));  // a stack (experts)
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::q8_0, {64, 8, 2})));  // 8 rows per matrix
    EXPECT_FALSE(cpu::can_interleave(*ctx->new_tensor(dtype::q8_0, {64, 16, 2, 2})));
}

TEST(CpuInterleaved, LayoutRoundTrips) {
    for (dtype type : {dtype::q4_0, dtype::iq4_nl, dtype::q8_0, dtype::mxfp4}) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        std::vector<uint8_t> plain;
        std::vector<float> values;
        tensor *a = make_matrix(*ctx, type, 96, 48, 5, plain, values);
        const auto repacked = interleave_in_place(*a);
        ASSERT_NE(cpu::interleaved_layout_of(*a), nullptr);
        std::vector<uint8_t> row(a->nb[1]);
        for (int64_t r = 0; r < a->ne[1]; ++r) {
            cpu::deinterleave_row(*a, r, row.data());
            EXPECT_EQ(std::memcmp(row.data(), plain.data() + size_t(r) * a->nb[1], row.size()), 0)
                << "row " << r;
        }
    }
}

// The scalar kernel against a double-precision dot of the dequantized weights with the q8
// activations (both exact inputs: only the float accumulation differs).
TEST(CpuInterleaved, ScalarKernelMatchesDoublePrecision) {
    const int64_t k = 512, m = 32, n = 3;
    for (dtype type : interleaved_types) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        std::vector<uint8_t> plain;
        std::vector<float> w;
        tensor *a = make_matrix(*ctx, type, k, m, 7, plain, w);
        const auto repacked = interleave_in_place(*a);
        const auto q = quantize_columns(type, k, n, 8);
        std::vector<float> out(size_t(m * n));
        const auto &layout = *cpu::interleaved_layout_of(*a);
        const size_t group_bytes = size_t(k / layout.block) * layout.block_bytes;
        for (int64_t g = 0; g < m / 16; ++g)
            cpu::group_kernel_scalar(layout, static_cast<const uint8_t *>(a->data) + size_t(g) * group_bytes,
                                     q.rows, 0, n, &out[size_t(g * 16)], m);
        for (int64_t c = 0; c < n; ++c)
            for (int64_t r = 0; r < m; ++r) {
                double ref = 0;
                for (int64_t i = 0; i < k; ++i)
                    ref += double(w[size_t(r * k + i)]) * q.d[size_t(c * q.rows.nb() + i / q.rows.d_block)] *
                           q.qs[size_t(c * k + i)];
                EXPECT_NEAR(out[size_t(c * m + r)], ref, 1e-4 * (1 + std::fabs(ref)))
                    << "row " << r << " col " << c;
            }
    }
}

// Every ISA build (AVX2's maddubs, AVX-VNNI, AVX-512 VNNI) gives the scalar kernel's bits, for every
// tile remainder (1..19 columns) and a column offset.
TEST(CpuInterleaved, EveryIsaEqualsScalarBitForBit) {
    const int64_t k = 768, m = 32;
    struct build {
        const char *name;
        bool supported;
        cpu::group_kernel_fn kernel;
    };
    const build builds[] = {
        {"avx2", cpu::simd_level_supported(cpu::simd_level::avx2), cpu::group_kernel_avx2},
        {"avxvnni", cpu::simd_level_supported(cpu::simd_level::avx2) && host_cpu_features().avxvnni,
         cpu::group_kernel_avxvnni},
        {"avx512_vnni", cpu::simd_level_supported(cpu::simd_level::avx512_vnni),
         cpu::group_kernel_avx512vnni}};
    int isas_run = 0;
    for (const build &isa : builds) {
        if (!isa.supported) continue;
        ++isas_run;
        for (dtype type : interleaved_types) {
            SCOPED_TRACE(std::string(type_name(type)) + " isa " + isa.name);
            auto ctx = data_context();
            std::vector<uint8_t> plain;
            std::vector<float> w;
            tensor *a = make_matrix(*ctx, type, k, m, 11, plain, w);
            const auto repacked = interleave_in_place(*a);
            const auto &layout = *cpu::interleaved_layout_of(*a);
            const size_t group_bytes = size_t(k / layout.block) * layout.block_bytes;
            // the activations as this kernel takes them (the scalar kernel takes every format)
            const auto q = test::quantize_columns(cpu::activation_format(layout), k, 21, 12);
            for (int64_t n = 1; n <= 19; ++n) {
                std::vector<float> want(size_t(m * n)), got(size_t(m * n), -1.0f);
                for (int64_t g = 0; g < m / 16; ++g) {
                    const auto *group = static_cast<const uint8_t *>(a->data) + size_t(g) * group_bytes;
                    cpu::group_kernel_scalar(layout, group, q.rows, 2, n, &want[size_t(g * 16)], m);
                    isa.kernel(layout, group, q.rows, 2, n, &got[size_t(g * 16)], m);
                }
                EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
                    << n << " columns";
            }
        }
    }
    if (isas_run == 0) GTEST_SKIP() << "this CPU has no SIMD kernel of the interleaved layout";
}

// The groups kernel of every ISA (the SIMD ones read q8_0's groups side by side for one column) gives
// the scalar group kernel's bits on each group: runs of 1..11 groups from any first group (tiles of 4
// and 2 and a last one; the pair tiles' two groups and an odd one left), one column and several,
// block counts even and odd, q8_0's extreme quants.
TEST(CpuInterleaved, GroupsKernelEqualsTheGroupKernelOnEveryGroup) {
    const int64_t m = 16 * 11;
    const std::tuple<dtype, int64_t> cases[] = {{dtype::q8_0, 768},  {dtype::q8_0, 96},  {dtype::q4_0, 768},
                                                {dtype::q4_1, 96},   {dtype::q4_k, 768}, {dtype::iq4_nl, 768},
                                                {dtype::mxfp4, 768}, {dtype::q5_0, 96}};
    const std::tuple<int64_t, int64_t> runs[] = {{0, 11}, {1, 4}, {3, 2}, {5, 1}, {2, 7}, {4, 6}};
    struct build {
        const char *name;
        bool supported;
        cpu::groups_kernel_fn kernel;
    };
    const build builds[] = {
        {"scalar", true, cpu::groups_kernel_at(cpu::simd_level::scalar)},
        {"avx2", cpu::simd_level_supported(cpu::simd_level::avx2), cpu::groups_kernel_avx2},
        {"avxvnni", cpu::simd_level_supported(cpu::simd_level::avx2) && host_cpu_features().avxvnni,
         cpu::groups_kernel_avxvnni},
        {"avx512_vnni", cpu::simd_level_supported(cpu::simd_level::avx512_vnni),
         cpu::groups_kernel_avx512vnni}};
    for (const build &isa : builds) {
        if (!isa.supported) continue;
        const cpu::groups_kernel_fn kernel = isa.kernel;
        for (const auto &[type, k] : cases) {
            SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " isa " + isa.name);
            auto ctx = data_context();
            std::vector<uint8_t> plain;
            std::vector<float> w;
            tensor *a = make_matrix(*ctx, type, k, m, 41, plain, w);
            if (type == dtype::q8_0) {  // the ends of the range, in a group of each tile
                auto *blocks = static_cast<block_q8_0 *>(a->data);
                const int64_t nb = k / 32;
                for (int i = 0; i < 32; ++i) blocks[nb * 16 * 1 + 1].qs[i] = -128;
                for (int i = 0; i < 32; ++i) blocks[nb * 16 * 9].qs[i] = 127;
                blocks[nb * 16 * 5 + nb - 1].qs[31] = -128;
            }
            const auto repacked = interleave_in_place(*a);
            const auto &layout = *cpu::interleaved_layout_of(*a);
            const size_t group_bytes = size_t(k / layout.block) * layout.block_bytes;
            const auto *weights = static_cast<const uint8_t *>(a->data);
            const auto q = test::quantize_columns(cpu::activation_format(layout), k, 6, 42);
            for (const int64_t n : {int64_t(1), int64_t(2), int64_t(5)}) {
                std::vector<float> want(size_t(m * n));
                for (int64_t g = 0; g < m / 16; ++g)
                    cpu::group_kernel_scalar(layout, weights + size_t(g) * group_bytes, q.rows, 1, n,
                                             &want[size_t(g * 16)], m);
                for (const auto &[first, count] : runs) {
                    std::vector<float> got(size_t(m * n), -1.0f);
                    kernel(layout, weights + size_t(first) * group_bytes, group_bytes, count, q.rows, 1, n,
                           &got[size_t(first * 16)], m);
                    for (int64_t c = 0; c < n; ++c)
                        for (int64_t r = first * 16; r < (first + count) * 16; ++r)
                            ASSERT_EQ(
                                std::memcmp(&got[size_t(c * m + r)], &want[size_t(c * m + r)], sizeof(float)),
                                0)
                                << n << " columns, groups " << first << ".." << first + count << ": row " << r
                                << " column " << c;
                }
            }
        }
    }
}

// q8_0's weights at the ends of their range (-128 only a foreign quantizer writes): every kernel, the
// VNNI ones (the stored quant + 128 unsigned, the activation sums taking the offset off) and AVX2's
// (the signed quants by the sign trick), gives the scalar kernel's bits, for 1 to 8 columns.
TEST(CpuInterleaved, Q8_0ExtremeQuantsGiveTheSameBitsAtEveryLevel) {
    const int64_t k = 512, m = 32;
    auto ctx = data_context();
    std::vector<uint8_t> plain;
    std::vector<float> w;
    tensor *a = make_matrix(*ctx, dtype::q8_0, k, m, 31, plain, w);
    auto *blocks = reinterpret_cast<block_q8_0 *>(plain.data());
    blocks[0].qs[0] = -128;
    blocks[0].qs[1] = 127;
    blocks[3].qs[5] = -127;
    for (int i = 0; i < 32; ++i) blocks[5].qs[i] = -128;  // a whole block at the bottom, and one at the top
    for (int i = 0; i < 32; ++i) blocks[6].qs[i] = 127;
    std::memcpy(a->data, plain.data(), plain.size());
    const auto repacked = interleave_in_place(*a);
    const auto &layout = *cpu::interleaved_layout_of(*a);
    const size_t group_bytes = size_t(k / layout.block) * layout.block_bytes;
    const auto columns = test::quantize_columns(cpu::q8_format::q8_0_block_sums, k, 9, 3);
    auto run = [&](cpu::group_kernel_fn kernel, const cpu::q8_rows &rows, int64_t n) {
        std::vector<float> out(size_t(m * n), -1.0f);
        for (int64_t g = 0; g < m / 16; ++g)
            kernel(layout, static_cast<const uint8_t *>(a->data) + size_t(g) * group_bytes, rows, 1, n,
                   &out[size_t(g * 16)], m);
        return out;
    };
    for (int64_t n = 1; n <= 8; ++n) {
        SCOPED_TRACE(std::to_string(n) + " columns");
        const std::vector<float> want = run(cpu::group_kernel_scalar, columns.rows, n);
        if (cpu::simd_level_supported(cpu::simd_level::avx512_vnni)) {
            EXPECT_EQ(run(cpu::group_kernel_avx512vnni, columns.rows, n), want);
        }
        if (cpu::simd_level_supported(cpu::simd_level::avx2)) {
            EXPECT_EQ(run(cpu::group_kernel_avx2, columns.rows, n), want);
        }
        if (cpu::simd_level_supported(cpu::simd_level::avx2) && host_cpu_features().avxvnni) {
            EXPECT_EQ(run(cpu::group_kernel_avxvnni, columns.rows, n), want);
        }
    }
}

// Through the backend: interleaved weights agree with the plain layout's product (a different
// summation order, so closely but not bitwise); every column equals the same column computed alone
// (batch invariance); 1, 2 and 3 threads agree bit for bit; SIMD equals scalar bit for bit.
TEST(CpuInterleaved, MulMatIsBatchAndThreadInvariant) {
    const int64_t k = 512, m = 48, n = 37;
    for (dtype type : interleaved_types) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        std::vector<uint8_t> plain;
        std::vector<float> w;
        tensor *a = make_matrix(*ctx, type, k, m, 21, plain, w);
        tensor *plain_a = ctx->new_tensor(type, {k, m});
        std::memcpy(plain_a->data, plain.data(), plain.size());
        const auto repacked = interleave_in_place(*a);
        tensor *b = ctx->new_tensor(dtype::f32, {k, n});
        fill_uniform(*b, 22);

        auto reference = [&](int64_t i0, int64_t i1, int64_t, int64_t) {
            double sum = 0;
            for (int64_t i = 0; i < k; ++i) sum += double(w[size_t(i0 * k + i)]) * at(*b, i, i1);
            return sum;
        };
        const std::vector<float> batched = expect_matches_reference(mul_mat(*ctx, a, b), reference, 5e-4);
        const std::vector<float> plain_result =
            expect_matches_reference(mul_mat(*ctx, plain_a, b), reference, 5e-4);
        EXPECT_LE(normalized_error(batched, std::vector<double>(plain_result.begin(), plain_result.end())),
                  1e-5);

        for (int64_t c : {int64_t(0), int64_t(5), n - 1}) {
            tensor *col = view_2d(*ctx, b, k, 1, b->nb[1], size_t(c) * b->nb[1]);
            tensor *alone = mul_mat(*ctx, a, col);
            graph g;
            build_forward_expand(g, alone);
            cpu_backend backend(2);
            ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
            EXPECT_EQ(std::memcmp(alone->data, &batched[size_t(c * m)], size_t(m) * sizeof(float)), 0)
                << "column " << c << " alone differs from the same column in a batch of " << n;
        }

        // the same product with the CPU's features limited by `limit` (then restored)
        auto computed_with = [&](void (*limit)(bool)) {
            limit(true);
            tensor *out = mul_mat(*ctx, a, b);
            graph g;
            build_forward_expand(g, out);
            cpu_backend backend(2);
            const compute_status status = backend.graph_compute(g, {});
            limit(false);
            EXPECT_EQ(status, compute_status::ok);
            return values_of(*out);
        };
        EXPECT_EQ(computed_with(force_scalar), batched) << "the scalar path differs from the SIMD path";
        EXPECT_EQ(computed_with(limit_to_avx2), batched) << "the AVX2 path differs from the SIMD path";
        EXPECT_EQ(computed_with(limit_to_avxvnni), batched) << "the AVX-VNNI path differs from the SIMD path";
    }
}

// Consecutive products (a decode step's chain of projections) take their chunks from counters that
// no barrier of their own resets (alternating_counters: thread 0 zeroes the next node's set while a
// node runs): with 1 to 4 threads, run after run with new inputs, every chunk of every node is
// computed (a chunk left out keeps the last run's values), and the thread counts agree bit for bit.
TEST(CpuInterleaved, ChainedProductsComputeEveryChunk) {
    const int64_t k = 256, n_steps = 5;
    auto ctx = data_context();
    std::vector<uint8_t> plain;
    std::vector<float> w;
    tensor *a = make_matrix(*ctx, dtype::q4_0, k, k, 31, plain, w);
    const auto repacked = interleave_in_place(*a);
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(4), int64_t(7)}) {  // few columns, then shared ones
        SCOPED_TRACE(n);
        tensor *x = ctx->new_tensor(dtype::f32, {k, n});
        std::vector<tensor *> steps;
        for (tensor *in = x; int64_t(steps.size()) < n_steps; in = steps.back())
            steps.push_back(mul_mat(*ctx, a, in));
        graph g;
        build_forward_expand(g, steps.back());
        std::vector<float> first;
        for (int threads : {1, 2, 3, 4}) {
            for (uint32_t seed : {1u, 2u}) {
                SCOPED_TRACE(threads);
                fill_uniform(*x, seed + 10 * uint32_t(n));
                cpu_backend backend(threads);
                ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
                for (size_t s = 0; s < steps.size(); ++s) {  // each against the product of the one before
                    const std::vector<float> in = values_of(s == 0 ? *x : *steps[s - 1]);
                    std::vector<double> want(size_t(k * n));
                    for (int64_t c = 0; c < n; ++c)
                        for (int64_t r = 0; r < k; ++r)
                            for (int64_t i = 0; i < k; ++i)
                                want[size_t(c * k + r)] +=
                                    double(w[size_t(r * k + i)]) * in[size_t(c * k + i)];
                    EXPECT_LE(normalized_error(values_of(*steps[s]), want), 5e-4) << "step " << s;
                }
                if (seed != 1) continue;
                if (threads == 1)
                    first = values_of(*steps.back());
                else
                    EXPECT_EQ(values_of(*steps.back()), first);
            }
        }
    }
}

// The activations of the interleaved products, quantized by the SIMD path (the AVX2 split quantizer
// where the CPU has it) and by the reference quantizer (force_scalar), are the same bytes: values,
// scales and sums, on rows with an all-zero block, tiny and huge values and exact halves.
TEST(CpuInterleaved, ActivationsQuantizeAsTheReference) {
    const int64_t k = 256;
    std::vector<float> x(static_cast<size_t>(k));
    std::mt19937 rng(7);
    std::normal_distribution<float> dist;
    for (auto &v : x) v = dist(rng);
    for (int64_t i = 0; i < 32; ++i) x[size_t(i)] = 0.0f;                     // a block of zeros
    for (int64_t i = 32; i < 64; ++i) x[size_t(i)] = 1e-30f * float(i - 40);  // tiny
    for (int64_t i = 64; i < 96; ++i) x[size_t(i)] = 3e30f * float(i % 5 - 2);
    for (int64_t i = 96; i < 128; ++i) x[size_t(i)] = float(i - 110) + 0.5f;  // scale 1: ties to round
    x[127] = 127.0f;
    for (cpu::q8_format format : {cpu::q8_format::q8_0_block_sums, cpu::q8_format::q8_k}) {
        SCOPED_TRACE(int(format));
        auto quantized = [&](bool scalar) {
            force_scalar(scalar);
            const int64_t nd = k / cpu::values_per_scale(format), ns = k / cpu::values_per_sum(format);
            std::vector<int8_t> qs(static_cast<size_t>(k));
            std::vector<float> d(static_cast<size_t>(nd));
            std::vector<int32_t> sum(static_cast<size_t>(ns));
            std::vector<uint8_t> blocks(size_t(k) * 2);
            cpu::quantize_q8_row(x.data(), k, format, qs.data(), d.data(), sum.data(), blocks.data());
            force_scalar(false);
            return std::make_tuple(qs, d, sum);
        };
        const auto [qs, d, sum] = quantized(false);
        const auto [ref_qs, ref_d, ref_sum] = quantized(true);
        EXPECT_EQ(qs, ref_qs);
        EXPECT_EQ(std::memcmp(d.data(), ref_d.data(), d.size() * sizeof(float)), 0);
        EXPECT_EQ(sum, ref_sum);
    }
}

// Products of one input consecutive in a graph (a layer's Q, K and V; its gate and up) are computed
// as one node when their weights take the activations in one format: one quantization, one
// dispenser of chunks over all their rows. Each result must equal the same product computed alone,
// bit for bit, for few columns and many, 1 to 4 threads, run after run with new inputs (a chunk left
// out keeps the last run's values); products of another input or format are not joined.
TEST(CpuInterleaved, ProductsOfOneInputComputedTogetherEqualEachAlone) {
    const int64_t k = 256;
    auto ctx = data_context();
    struct weight {
        dtype type;
        int64_t m;
    };
    // q4_K and q6_K take q8_K activations; q4_0, iq4_nl and q8_0 q8_0 blocks with block sums
    const weight weights[] = {{dtype::q4_k, 80}, {dtype::q6_k, 48},   {dtype::q4_k, 16},
                              {dtype::q4_0, 64}, {dtype::iq4_nl, 32}, {dtype::q8_0, 48}};
    std::vector<tensor *> as;
    std::vector<std::shared_ptr<std::vector<uint8_t>>> repacked;
    for (const weight &w : weights) {
        std::vector<uint8_t> plain;
        std::vector<float> values;
        as.push_back(make_matrix(*ctx, w.type, k, w.m, uint32_t(40 + as.size()), plain, values));
        repacked.push_back(interleave_in_place(*as.back()));
    }
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(4), int64_t(7), int64_t(33)}) {
        SCOPED_TRACE(n);
        tensor *x = ctx->new_tensor(dtype::f32, {k, n});
        tensor *other = ctx->new_tensor(dtype::f32, {k, n});
        graph g;
        std::vector<tensor *> products;
        for (tensor *a : as) {
            products.push_back(mul_mat(*ctx, a, x));
            build_forward_expand(g, products.back());
        }
        products.push_back(mul_mat(*ctx, as[0], other));  // another input: a product of its own
        build_forward_expand(g, products.back());
        EXPECT_TRUE(cpu::shares_activations(*products[0], *products[1]));   // q4_K, q6_K
        EXPECT_TRUE(cpu::shares_activations(*products[0], *products[2]));   // q4_K, q4_K
        EXPECT_FALSE(cpu::shares_activations(*products[2], *products[3]));  // q8_K, q8_0 blocks
        EXPECT_TRUE(cpu::shares_activations(*products[3], *products[4]));   // q4_0, iq4_nl
        EXPECT_TRUE(cpu::shares_activations(*products[4], *products[5]));   // iq4_nl, q8_0
        EXPECT_FALSE(cpu::shares_activations(*products[5], *products[6]));  // another input
        for (int threads : {1, 2, 3, 4}) {
            SCOPED_TRACE(threads);
            for (uint32_t seed : {1u, 2u}) {
                fill_uniform(*x, seed + 10 * uint32_t(n));
                fill_uniform(*other, seed + 20 * uint32_t(n));
                cpu_backend backend(threads);
                ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
                for (size_t j = 0; j < products.size(); ++j) {
                    tensor *alone = mul_mat(*ctx, products[j]->src[0], products[j]->src[1]);
                    graph one;
                    build_forward_expand(one, alone);
                    ASSERT_EQ(backend.graph_compute(one, {}), compute_status::ok);
                    EXPECT_EQ(values_of(*products[j]), values_of(*alone)) << "product " << j;
                }
            }
        }
    }
}

// The codebook types' and q8_0's repacked products are the per-row kernels' (vec_dot_iq4_nl / iq4_xs,
// vec_dot_q8_0 and the grid i-quants': one exact integer sum and one fma per block, in block order, the
// grid types then times their unit) bit for bit. For
// several widths, row counts in 16s and column counts (tile remainders and more than a pass of 16), at
// whatever level the run allows (the ctest _scalar / _avx2 variants lower it: scalar kernel against
// vec_dot_*_ref, the AVX2 builds against the AVX2 row kernels).
TEST(CpuInterleaved, CodebookTypesAndQ8_0EqualTheRowKernelsBitForBit) {
    struct shape {
        int64_t k, m;
    };
    for (dtype type : {dtype::iq4_nl, dtype::iq4_xs, dtype::q8_0, dtype::iq2_xxs, dtype::iq2_xs, dtype::iq2_s,
                       dtype::iq3_xxs, dtype::iq3_s, dtype::iq1_s, dtype::iq1_m, dtype::mxfp4}) {
        for (const shape s : {shape{256, 16}, shape{512, 48}, shape{768, 80}, shape{2048, 32}}) {
            // 32-value types: any 32s
            const int64_t k = type_traits(type).block_size == 32 && s.k == 256 ? 96 : s.k;
            auto ctx = data_context();
            std::vector<uint8_t> plain;
            std::vector<float> w;
            tensor *a = make_matrix(*ctx, type, k, s.m, uint32_t(31 + k + s.m), plain, w);
            tensor *plain_a = ctx->new_tensor(type, {k, s.m});
            std::memcpy(plain_a->data, plain.data(), plain.size());
            const auto repacked = interleave_in_place(*a);
            ASSERT_NE(cpu::interleaved_layout_of(*a), nullptr);
            for (int64_t n : {1, 2, 3, 5, 8, 17, 37}) {
                SCOPED_TRACE(std::string(type_name(type)) + " k " + std::to_string(k) + " m " +
                             std::to_string(s.m) + " n " + std::to_string(n));
                tensor *b = ctx->new_tensor(dtype::f32, {k, n});
                fill_uniform(*b, uint32_t(40 + n));
                auto computed = [&](tensor *weights) {
                    tensor *out = mul_mat(*ctx, weights, b);
                    graph g;
                    build_forward_expand(g, out);
                    cpu_backend backend(2);
                    EXPECT_EQ(backend.graph_compute(g, {}), compute_status::ok);
                    return values_of(*out);
                };
                const std::vector<float> got = computed(a), want = computed(plain_a);
                ASSERT_EQ(got.size(), want.size());
                EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
            }
        }
    }
}

// Row counts not in 16s stay in the plain layout (and its per-row kernels) when a model is repacked.
TEST(CpuInterleaved, CodebookTypesWithRowsNotIn16sStayPlain) {
    for (dtype type : {dtype::iq4_nl, dtype::iq4_xs, dtype::mxfp4}) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        std::vector<uint8_t> plain;
        std::vector<float> w;
        tensor *odd = make_matrix(*ctx, type, 256, 17, 3, plain, w);
        tensor *even = make_matrix(*ctx, type, 256, 32, 4, plain, w);
        tensor *weights[] = {odd, even};
        const void *odd_data = odd->data;
        const auto buffer = cpu_repack_weights(weights, {});
        EXPECT_EQ(odd->data, odd_data);
        EXPECT_EQ(cpu::interleaved_layout_of(*odd), nullptr);
        EXPECT_NE(cpu::interleaved_layout_of(*even), nullptr);
    }
}

TEST(CpuInterleaved, OtherOpsRefuseAnInterleavedSource) {
    auto ctx = data_context();
    std::vector<uint8_t> plain;
    std::vector<float> w;
    tensor *a = make_matrix(*ctx, dtype::q8_0, 64, 16, 3, plain, w);
    const auto repacked = interleave_in_place(*a);
    tensor *ids = ctx->new_tensor(dtype::i32, {2});
    static_cast<int32_t *>(ids->data)[0] = 1;
    static_cast<int32_t *>(ids->data)[1] = 3;
    tensor *rows = get_rows(*ctx, a, ids);
    graph g;
    build_forward_expand(g, rows);
    cpu_backend backend(1);
    try {
        backend.graph_compute(g, {});
        ADD_FAILURE() << "get_rows read an interleaved weight";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("repacked for mul_mat"), std::string::npos) << e.what();
    }
}

}  // namespace
