// tests/backends/test_cpu_mul_mat.cpp — mul_mat for every weight type against a dequantize-then-
// double reference: broadcasting over dims 2 and 3, permuted and transposed activations, SIMD and
// scalar paths, 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

// Error left by converting the activations to the weight type's vec_dot_type (the reference uses
// the f32 activations): none for f32, the rounding of f16 / bf16, 8-bit block quantization.
double bound_for(dtype vec_dot_type) {
    switch (vec_dot_type) {
        case dtype::f32:
            return 1e-10;
        case dtype::f16:
            return 1e-5;
        case dtype::bf16:
            return 1e-4;
        default:
            return 5e-4;
    }
}

// Turns force_scalar on for the scope (and back off at its end).
struct scalar_scope {
    explicit scalar_scope(bool on) { force_scalar(on); }
    ~scalar_scope() { force_scalar(false); }
};

enum class b_layout { contiguous, permuted, transposed };

// b [k, n, b2, b3] f32 laid out as asked: permuted is attention's q (heads and tokens swapped),
// transposed has nb[0] > 4 (the gather path of the activation conversion).
tensor *make_activations(context &ctx, int64_t k, int64_t n, int64_t b2, int64_t b3, b_layout l,
                         uint32_t seed) {
    tensor *base = nullptr;
    tensor *b = nullptr;
    switch (l) {
        case b_layout::contiguous:
            b = base = ctx.new_tensor(dtype::f32, {k, n, b2, b3});
            break;
        case b_layout::permuted:
            base = ctx.new_tensor(dtype::f32, {k, b2, n, b3});
            b = permute(ctx, base, 0, 2, 1, 3);
            break;
        case b_layout::transposed:
            base = ctx.new_tensor(dtype::f32, {n, k, b2, b3});
            b = transpose(ctx, base);
            break;
    }
    fill_uniform(*base, seed);
    return b;
}

void check_mul_mat(dtype type, int64_t k, int64_t m, int64_t n, int64_t a2, int64_t a3, int64_t b2,
                   int64_t b3, b_layout l) {
    auto ctx = data_context();
    std::vector<float> w;
    tensor *a = make_weights(*ctx, type, k, m, a2, a3, 30, w);
    tensor *b = make_activations(*ctx, k, n, b2, b3, l, 31);
    tensor *out = mul_mat(*ctx, a, b);
    ASSERT_EQ(out->ne[0], m);
    ASSERT_EQ(out->ne[1], n);
    const double bound = bound_for(quant_traits_of(type).vec_dot_type);
    auto reference = [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
        const int64_t j2 = i2 / (b2 / a2), j3 = i3 / (b3 / a3);
        const float *row = &w[size_t(((j3 * a2 + j2) * m + i0) * k)];
        double sum = 0;
        for (int64_t i = 0; i < k; ++i) sum += double(row[i]) * at(*b, i, i1, i2, i3);
        return sum;
    };
    std::vector<float> simd, scalar;
    {
        scalar_scope s(false);
        simd = expect_matches_reference(out, reference, bound);
    }
    {
        scalar_scope s(true);
        scalar = expect_matches_reference(out, reference, bound);
    }
    // the SIMD and scalar paths agree closely with each other too
    std::vector<double> scalar_d(scalar.begin(), scalar.end());
    EXPECT_LE(normalized_error(simd, scalar_d), bound);
}

}  // namespace

TEST(CpuMulMat, FloatWeightsBroadcastAndStridedActivations) {
    for (dtype type : {dtype::f32, dtype::f16, dtype::bf16})
        for (b_layout l : {b_layout::contiguous, b_layout::permuted, b_layout::transposed}) {
            SCOPED_TRACE(std::string(type_name(type)) + " layout " + std::to_string(int(l)));
            // a [67, 13, 2, 3] broadcast over b [67, 5, 4, 3]: each a matrix serves two b matrices
            check_mul_mat(type, 67, 13, 5, 2, 3, 4, 3, l);
        }
}

TEST(CpuMulMat, SingleColumnDecodeShape) {
    for (dtype type : {dtype::f32, dtype::f16}) {
        SCOPED_TRACE(type_name(type));
        check_mul_mat(type, 96, 70, 1, 1, 1, 1, 1, b_layout::contiguous);
    }
}

TEST(CpuMulMat, EveryQuantizedWeightType) {
    int tested = 0;
    for (int raw = 0; raw < int(dtype::count); ++raw) {
        const auto type = dtype(raw);
        if (!type_is_known(raw) || !type_traits(type).is_quantized || !has_quant_traits(type) ||
            quant_traits_of(type).vec_dot == nullptr)
            continue;
        for (b_layout l : {b_layout::contiguous, b_layout::permuted}) {
            SCOPED_TRACE(std::string(type_name(type)) + " layout " + std::to_string(int(l)));
            check_mul_mat(type, 512, 7, 5, 1, 1, 2, 1, l);
        }
        ++tested;
    }
    // q4_0 q4_1 q5_0 q5_1 q8_0 q2_K q3_K q4_K q5_K q6_K
    EXPECT_GE(tested, 10) << "the quant layer provides a dot product for every quantized weight type";
}

TEST(CpuMulMat, UnsupportedLayoutsAreRefused) {
    auto ctx = data_context();
    tensor *a = ctx->new_tensor(dtype::f32, {8, 4});
    tensor *b = ctx->new_tensor(dtype::f32, {8, 3});
    tensor *out = mul_mat(*ctx, a, b);
    cpu_backend backend(1);
    EXPECT_TRUE(backend.supports_op(*out));
    // weights whose rows are not contiguous (built by hand: the op constructor refuses them)
    tensor *base = ctx->new_tensor(dtype::f32, {4, 8});
    tensor *strided = transpose(*ctx, base);
    tensor bad = *out;
    bad.src[0] = strided;
    EXPECT_FALSE(backend.supports_op(bad));
    // integer activations
    tensor *ints = ctx->new_tensor(dtype::i32, {8, 3});
    bad = *out;
    bad.src[1] = ints;
    EXPECT_FALSE(backend.supports_op(bad));
}
