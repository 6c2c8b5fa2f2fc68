// tests/backends/test_cpu_ops.cpp — every CPU kernel but mul_mat against a slow double-precision
// reference, on odd shapes, broadcasts and non-contiguous views, with 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>

#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

using shape = std::array<int64_t, 4>;
const shape odd_shape = {5, 7, 11, 13};

// How an input is laid out in memory: the view the op reads has the same logical shape each time.
enum class layout { contiguous, transposed, permuted };
const char *layout_name(layout l) {
    return l == layout::contiguous ? "contiguous" : l == layout::transposed ? "transposed" : "permuted";
}

// A random tensor of logical shape ne: contiguous, or a transpose of [ne1, ne0, ...] (nb[0] > type
// size), or a permute of [ne0, ne2, ne1, ne3] (contiguous rows, strided dims 1 and 2).
tensor *make_input(context &ctx, dtype t, shape ne, layout l, uint32_t seed, float lo = -1.0f,
                   float hi = 1.0f) {
    tensor *base = nullptr;
    switch (l) {
        case layout::contiguous:
            base = ctx.new_tensor(t, {ne[0], ne[1], ne[2], ne[3]});
            break;
        case layout::transposed:
            base = ctx.new_tensor(t, {ne[1], ne[0], ne[2], ne[3]});
            break;
        case layout::permuted:
            base = ctx.new_tensor(t, {ne[0], ne[2], ne[1], ne[3]});
            break;
    }
    fill_uniform(*base, seed, lo, hi);
    base->set_name("input");
    tensor *view = l == layout::contiguous   ? base
                   : l == layout::transposed ? transpose(ctx, base)
                                             : permute(ctx, base, 0, 2, 1, 3);
    EXPECT_EQ(view->ne[0], ne[0]);
    EXPECT_EQ(view->ne[1], ne[1]);
    EXPECT_EQ(view->ne[2], ne[2]);
    EXPECT_EQ(view->ne[3], ne[3]);
    EXPECT_EQ(view->is_contiguous(), l == layout::contiguous);
    return view;
}

double round_to(dtype t, double v) {
    if (t == dtype::f16) return fp16_to_fp32(fp32_to_fp16(float(v)));
    if (t == dtype::bf16) return bf16_to_fp32(fp32_to_bf16(float(v)));
    return float(v);
}

void set_index(tensor &ids, int64_t v, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
    char *p = static_cast<char *>(ids.data) + i0 * ids.nb[0] + i1 * ids.nb[1] + i2 * ids.nb[2];
    if (ids.type == dtype::i64) {
        std::memcpy(p, &v, sizeof v);
    } else {
        const auto v32 = int32_t(v);
        std::memcpy(p, &v32, sizeof v32);
    }
}

int64_t get_index(const tensor &ids, int64_t i0, int64_t i1 = 0, int64_t i2 = 0) {
    const char *p = static_cast<const char *>(ids.data) + i0 * ids.nb[0] + i1 * ids.nb[1] + i2 * ids.nb[2];
    if (ids.type == dtype::i64) {
        int64_t v;
        std::memcpy(&v, p, sizeof v);
        return v;
    }
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

constexpr double exact = 1e-12;      // same arithmetic in float and double, up to rounding
constexpr double float_ops = 1e-10;  // float kernels against double references

double silu_ref(double x) {
    return x / (1.0 + std::exp(-x));
}
// GELU as the reference engine computes it: 0 at or below -10, x at or above 10, between them the
// tanh approximation at x rounded to f16, rounded to f16.
double gelu_ref(double x) {
    if (x <= -10.0) return 0.0;
    if (x >= 10.0) return x;
    // in float, as the table is built: an f16 rounding boundary must fall the same way
    const float h = fp16_to_fp32(fp32_to_fp16(float(x)));
    const float g =
        0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
    return fp16_to_fp32(fp32_to_fp16(g));
}

}  // namespace

// --- elementwise ------------------------------------------------------------------------------

TEST(CpuOps, BinaryOpsBroadcastOverEveryDim) {
    const std::array<shape, 6> b_shapes = {
        {{5, 7, 11, 13}, {5, 1, 11, 1}, {1, 7, 1, 13}, {1, 1, 1, 1}, {5, 7, 1, 1}, {1, 1, 11, 13}}};
    for (dtype type : {dtype::f32, dtype::f16})
        for (layout la : {layout::contiguous, layout::permuted, layout::transposed})
            for (const shape &bs : b_shapes)
                for (op_kind op : {op_kind::add, op_kind::sub, op_kind::mul, op_kind::div}) {
                    SCOPED_TRACE(std::string(type_name(type)) + " a " + layout_name(la) + ", " + op_name(op) +
                                 ", b [" + std::to_string(bs[0]) + "," + std::to_string(bs[1]) + "," +
                                 std::to_string(bs[2]) + "," + std::to_string(bs[3]) + "]");
                    auto ctx = data_context();
                    tensor *a = make_input(*ctx, type, odd_shape, la, 1);
                    // b transposed when it is a full matrix, so both sources are views somewhere
                    const layout lb = bs[0] > 1 && bs[1] > 1 ? layout::transposed : layout::contiguous;
                    tensor *b = make_input(*ctx, dtype::f32, bs, lb, 2, 0.5f, 1.5f);
                    tensor *out = op == op_kind::add   ? add(*ctx, a, b)
                                  : op == op_kind::sub ? sub(*ctx, a, b)
                                  : op == op_kind::mul ? mul(*ctx, a, b)
                                                       : div(*ctx, a, b);
                    expect_matches_reference(
                        out,
                        [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                            const double x = at(*a, i0, i1, i2, i3);
                            const double y = at(*b, i0 % bs[0], i1 % bs[1], i2 % bs[2], i3 % bs[3]);
                            switch (op) {
                                case op_kind::add:
                                    return x + y;
                                case op_kind::sub:
                                    return x - y;
                                case op_kind::mul:
                                    return x * y;
                                default:
                                    return x / y;
                            }
                        },
                        float_ops);
                }
}

TEST(CpuOps, F16SecondOperand) {
    auto ctx = data_context();
    tensor *a = make_input(*ctx, dtype::f32, odd_shape, layout::contiguous, 3);
    tensor *b = make_input(*ctx, dtype::f16, {5, 1, 11, 1}, layout::contiguous, 4);
    tensor *out = mul(*ctx, a, b);
    expect_matches_reference(
        out,
        [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
            return at(*a, i0, i1, i2, i3) * at(*b, i0, 0, i2, 0);
        },
        float_ops);
}

TEST(CpuOps, UnaryOps) {
    for (dtype type : {dtype::f32, dtype::f16})
        for (layout l : {layout::contiguous, layout::permuted, layout::transposed}) {
            SCOPED_TRACE(std::string(type_name(type)) + " " + layout_name(l));
            auto ctx = data_context();
            tensor *a = make_input(*ctx, type, odd_shape, l, 5, -6.0f, 6.0f);
            auto ref = [&](double (*f)(double)) {
                return [&, f](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    return f(at(*a, i0, i1, i2, i3));
                };
            };
            expect_matches_reference(
                scale(*ctx, a, -0.37f),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    return at(*a, i0, i1, i2, i3) * double(-0.37f);
                },
                float_ops);
            expect_matches_reference(silu(*ctx, a), ref(silu_ref), float_ops);
            expect_matches_reference(gelu(*ctx, a), ref(gelu_ref), float_ops);
            expect_matches_reference(tanh(*ctx, a), ref([](double x) { return std::tanh(x); }), float_ops);
            expect_matches_reference(softplus(*ctx, a), ref([](double x) { return std::log1p(std::exp(x)); }),
                                     float_ops);
        }
}

// softplus is x itself above 20 (the reference engine's cut, where ln(1 + e^x) - x < 2e-9), and stays
// finite far below 0 and far above (no e^x overflow).
TEST(CpuOps, SoftplusAtItsCutAndExtremes) {
    auto ctx = data_context();
    tensor *a = ctx->new_tensor(dtype::f32, {7});
    const float values[7] = {-100.0f, -20.0f, -0.5f, 19.5f, 20.0f, 20.5f, 100.0f};
    std::memcpy(a->data, values, sizeof values);
    expect_matches_reference(
        softplus(*ctx, a),
        [&](int64_t i0, int64_t, int64_t, int64_t) {
            const double x = values[i0];
            return x > 20.0 ? x : std::log1p(std::exp(x));
        },
        1e-6);
}

TEST(CpuOps, GluOnHalvesOfAFusedTensor) {
    for (dtype type : {dtype::f32, dtype::f16})
        for (glu_kind kind : {glu_kind::swiglu, glu_kind::geglu}) {
            SCOPED_TRACE(std::string(type_name(type)) + (kind == glu_kind::swiglu ? " swiglu" : " geglu"));
            auto ctx = data_context();
            // gate and up are the two halves of each row of one [2*ne0, ...] tensor: both non-contiguous
            tensor *fused = ctx->new_tensor(type, {2 * 9, 7, 5});
            fill_uniform(*fused, 6, -4.0f, 4.0f);
            const size_t half = size_t(9) * fused->nb[0];
            tensor *gate = view_3d(*ctx, fused, 9, 7, 5, fused->nb[1], fused->nb[2], 0);
            tensor *up = view_3d(*ctx, fused, 9, 7, 5, fused->nb[1], fused->nb[2], half);
            ASSERT_FALSE(gate->is_contiguous());
            expect_matches_reference(
                glu(*ctx, gate, up, kind),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t) {
                    const double g = at(*gate, i0, i1, i2);
                    const double act = kind == glu_kind::swiglu ? silu_ref(g) : gelu_ref(g);
                    return act * at(*up, i0, i1, i2);
                },
                float_ops);
        }
}

// A decode step's glu (fewer rows than threads) is shared out by values: the same bits with any thread
// count, a row length that is not a multiple of the pieces included.
TEST(CpuOps, GluOfFewerRowsThanThreadsHasTheSameBitsOnAnyThreadCount) {
    for (int64_t rows : {1, 3})
        for (glu_kind kind : {glu_kind::swiglu, glu_kind::geglu, glu_kind::swiglu_oai}) {
            SCOPED_TRACE(std::to_string(rows) + " rows, kind " + std::to_string(int(kind)));
            auto ctx = data_context();
            tensor *gate = ctx->new_tensor(dtype::f32, {5001, rows});
            tensor *up = ctx->new_tensor(dtype::f32, {5001, rows});
            fill_uniform(*gate, 8, -9.0f, 9.0f);
            fill_uniform(*up, 9, -9.0f, 9.0f);
            tensor *out = kind == glu_kind::swiglu_oai ? swiglu_oai(*ctx, gate, up, 1.702f, 7.0f)
                                                       : glu(*ctx, gate, up, kind);
            std::vector<float> first;
            for (int threads : {1, 2, 3, 8}) {
                graph g;
                build_forward_expand(g, out);
                cpu_backend backend(threads);
                ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
                const std::vector<float> got = values_of(*out);
                if (first.empty()) first = got;
                EXPECT_EQ(std::memcmp(got.data(), first.data(), got.size() * sizeof(float)), 0) << threads;
            }
        }
}

// gpt-oss's clamped swiglu: gates and ups on both sides of the limit, strided halves of one tensor;
// every ISA build of the row gives the scalar build's bits.
TEST(CpuOps, SwigluOaiClampsAndMatchesTheReference) {
    const float alpha = 1.702f, limit = 7.0f;
    auto ctx = data_context();
    tensor *fused = ctx->new_tensor(dtype::f32, {2 * 37, 5, 3});
    fill_uniform(*fused, 8, -12.0f, 12.0f);
    const size_t half = size_t(37) * fused->nb[0];
    tensor *gate = view_3d(*ctx, fused, 37, 5, 3, fused->nb[1], fused->nb[2], 0);
    tensor *up = view_3d(*ctx, fused, 37, 5, 3, fused->nb[1], fused->nb[2], half);
    tensor *out = swiglu_oai(*ctx, gate, up, alpha, limit);
    EXPECT_EQ(out->param_i32(0), int32_t(glu_kind::swiglu_oai));
    const std::vector<float> best = expect_matches_reference(
        out,
        [&](int64_t i0, int64_t i1, int64_t i2, int64_t) {
            const double g = std::min(at(*gate, i0, i1, i2), double(limit));
            const double u = std::clamp(at(*up, i0, i1, i2), -double(limit), double(limit));
            return g / (1.0 + std::exp(-double(alpha) * g)) * (u + 1.0);
        },
        float_ops);
    force_scalar(true);
    graph g;
    build_forward_expand(g, out);
    cpu_backend scalar(2);
    EXPECT_EQ(scalar.graph_compute(g, {}), compute_status::ok);
    force_scalar(false);
    EXPECT_EQ(values_of(*out), best) << "the scalar build differs from the best build";
    EXPECT_THROW(glu(*ctx, gate, up, glu_kind::swiglu_oai), error);  // needs alpha and limit
    EXPECT_THROW(swiglu_oai(*ctx, gate, up, alpha, 0.0f), error);
}

// --- normalisation ----------------------------------------------------------------------------

TEST(CpuOps, RmsNormAndNorm) {
    for (dtype type : {dtype::f32, dtype::f16})
        for (layout l : {layout::contiguous, layout::permuted, layout::transposed}) {
            SCOPED_TRACE(std::string(type_name(type)) + " " + layout_name(l));
            auto ctx = data_context();
            const shape ne = {37, 7, 3, 2};
            tensor *a = make_input(*ctx, type, ne, l, 7, -1.0f, 3.0f);
            const float eps = 1e-5f;
            auto row_stats = [&](int64_t i1, int64_t i2, int64_t i3, double &mean, double &var,
                                 double &mean_sq) {
                double s = 0, s2 = 0;
                for (int64_t i = 0; i < ne[0]; ++i) {
                    s += at(*a, i, i1, i2, i3);
                    s2 += at(*a, i, i1, i2, i3) * at(*a, i, i1, i2, i3);
                }
                mean = s / double(ne[0]);
                mean_sq = s2 / double(ne[0]);
                var = mean_sq - mean * mean;
            };
            expect_matches_reference(
                rms_norm(*ctx, a, eps),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    double mean, var, mean_sq;
                    row_stats(i1, i2, i3, mean, var, mean_sq);
                    return at(*a, i0, i1, i2, i3) / std::sqrt(mean_sq + double(eps));
                },
                float_ops);
            expect_matches_reference(
                norm(*ctx, a, eps),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    double mean, var, mean_sq;
                    row_stats(i1, i2, i3, mean, var, mean_sq);
                    return (at(*a, i0, i1, i2, i3) - mean) / std::sqrt(var + double(eps));
                },
                1e-9);
            expect_matches_reference(
                l2_norm(*ctx, a, eps),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    double mean, var, mean_sq;
                    row_stats(i1, i2, i3, mean, var, mean_sq);
                    return at(*a, i0, i1, i2, i3) / std::max(std::sqrt(mean_sq * double(ne[0])), double(eps));
                },
                float_ops);
        }
}

// rms_norm and l2_norm of contiguous f32 rows sum 8 rows side by side; every row's result must be
// the reference engine's formula bit for bit (its squares summed in double, element by element), for
// 8-row blocks and the rows left over, with any thread count.
TEST(CpuOps, NormsOfRowsSideBySideEqualTheSequentialSumBitForBit) {
    auto ctx = data_context();
    const int64_t n = 301, rows = 21;
    tensor *a = ctx->new_tensor(dtype::f32, {n, rows});
    fill_uniform(*a, 11, -3.0f, 3.0f);
    const float eps = 1e-6f;
    auto sum_sq = [&](int64_t r) {
        double s = 0.0;
        for (int64_t i = 0; i < n; ++i) {
            const float x = float(at(*a, i, r));
            s += double(x * x);
        }
        return s;
    };
    expect_matches_reference(
        rms_norm(*ctx, a, eps),
        [&](int64_t i0, int64_t i1, int64_t, int64_t) {
            const float scale = 1.0f / std::sqrt(float(sum_sq(i1) / double(n)) + eps);
            return double(float(at(*a, i0, i1)) * scale);
        },
        0.0);
    expect_matches_reference(
        l2_norm(*ctx, a, eps),
        [&](int64_t i0, int64_t i1, int64_t, int64_t) {
            const float scale = 1.0f / std::max(std::sqrt(float(sum_sq(i1))), eps);
            return double(float(at(*a, i0, i1)) * scale);
        },
        0.0);
}

// l2_norm's eps bounds the divisor: a row of zeros stays zeros, a tiny row is scaled by 1 / eps.
TEST(CpuOps, L2NormOfTinyRowsDividesByEps) {
    auto ctx = data_context();
    tensor *a = ctx->new_tensor(dtype::f32, {4, 2});
    const float values[8] = {0, 0, 0, 0, 1e-9f, 0, 0, 0};
    std::memcpy(a->data, values, sizeof values);
    expect_matches_reference(
        l2_norm(*ctx, a, 1e-6f),
        [&](int64_t i0, int64_t i1, int64_t, int64_t) { return i1 == 1 && i0 == 0 ? 1e-3 : 0.0; }, 1e-12);
}

TEST(CpuOps, SoftMaxWithMaskScaleAndFullyMaskedRows) {
    const shape ne = {11, 7, 5, 3};
    for (dtype type : {dtype::f32, dtype::f16})
        for (layout l : {layout::contiguous, layout::permuted, layout::transposed})
            for (int mask_kind : {0, 1, 2}) {  // none, f32, f16
                SCOPED_TRACE(std::string(type_name(type)) + " " + layout_name(l) + " mask " +
                             std::to_string(mask_kind));
                auto ctx = data_context();
                tensor *a = make_input(*ctx, type, ne, l, 8, -3.0f, 3.0f);
                tensor *mask = nullptr;
                if (mask_kind) {
                    // [ne0, 9 >= ne1, 1, 3]: broadcast over dim 2; causal-like with -inf, row 2 fully masked
                    mask = ctx->new_tensor(mask_kind == 1 ? dtype::f32 : dtype::f16, {11, 9, 1, 3});
                    fill_uniform(*mask, 9, -0.5f, 0.5f);
                    for (int64_t i3 = 0; i3 < 3; ++i3)
                        for (int64_t i1 = 0; i1 < 9; ++i1)
                            for (int64_t i0 = 0; i0 < 11; ++i0)
                                if (i0 > i1 + 3 + i3 || i1 == 2)
                                    tensor_set_f32(*mask, -INFINITY, i0, i1, 0, i3);
                }
                const float s = 0.37f;
                auto logit = [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    return at(*a, i0, i1, i2, i3) * double(s) + (mask ? at(*mask, i0, i1, 0, i3) : 0.0);
                };
                const std::vector<float> got = expect_matches_reference(
                    soft_max(*ctx, a, mask, s),
                    [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                        double max = -INFINITY;
                        for (int64_t i = 0; i < ne[0]; ++i) max = std::max(max, logit(i, i1, i2, i3));
                        if (max == -INFINITY) return 0.0;
                        double sum = 0;
                        for (int64_t i = 0; i < ne[0]; ++i) sum += std::exp(logit(i, i1, i2, i3) - max);
                        return std::exp(logit(i0, i1, i2, i3) - max) / sum;
                    },
                    1e-10);
                if (mask) {
                    // the fully masked row (i1 = 2) is all zeros, not NaN
                    for (int64_t i0 = 0; i0 < ne[0]; ++i0) EXPECT_EQ(got[size_t(2 * ne[0] + i0)], 0.0f);
                }
            }
}

// --- rope -------------------------------------------------------------------------------------

namespace {

// The rotation of pair `pair` at position pos, written from the definition in double precision.
void rope_reference_angle(const rope_params &p, const tensor *factors, double pos, int64_t pair,
                          double &cos_t, double &sin_t) {
    const double theta_extrap = pos * std::pow(double(p.freq_base), -2.0 * double(pair) / double(p.n_dims)) /
                                (factors ? at(*factors, pair) : 1.0);
    const double theta_interp = double(p.freq_scale) * theta_extrap;
    double theta = theta_interp;
    double mscale = p.attn_factor;
    if (p.ext_factor != 0.0f) {
        auto corr_dim = [&](double n_rot) {
            return double(p.n_dims) * std::log(double(p.n_ctx_orig) / (n_rot * 2.0 * std::numbers::pi)) /
                   (2.0 * std::log(double(p.freq_base)));
        };
        const double low = std::max(0.0, std::floor(corr_dim(p.beta_fast)));
        const double high = std::min(double(p.n_dims - 1), std::ceil(corr_dim(p.beta_slow)));
        const double ramp = 1.0 - std::clamp((double(pair) - low) / std::max(0.001, high - low), 0.0, 1.0);
        const double mix = ramp * double(p.ext_factor);
        theta = theta_interp * (1.0 - mix) + theta_extrap * mix;
        mscale *= 1.0 + 0.1 * std::log(1.0 / double(p.freq_scale));
    }
    cos_t = std::cos(theta) * mscale;
    sin_t = std::sin(theta) * mscale;
}

}  // namespace

TEST(CpuOps, RopeNormalNeoxFreqFactorsAndYarn) {
    const int64_t head_dim = 12, n_head = 3, n_tokens = 5;
    for (dtype type : {dtype::f32, dtype::f16})
        for (int32_t mode : {rope_mode_normal, rope_mode_neox})
            for (int32_t n_dims : {8, 12})
                for (bool with_factors : {false, true})
                    for (bool yarn : {false, true})
                        for (layout l : {layout::contiguous, layout::permuted}) {
                            SCOPED_TRACE(std::string(type_name(type)) + " mode " + std::to_string(mode) +
                                         " n_dims " + std::to_string(n_dims) +
                                         (with_factors ? " factors" : "") + (yarn ? " yarn" : "") + " " +
                                         layout_name(l));
                            auto ctx = data_context();
                            tensor *a = make_input(*ctx, type, {head_dim, n_head, n_tokens, 1}, l, 10);
                            tensor *pos = ctx->new_tensor(dtype::i32, {n_tokens});
                            for (int64_t i = 0; i < n_tokens; ++i)
                                tensor_set_f32(*pos, float(7 * i + 3 * (i % 2)), i);
                            tensor *factors = nullptr;
                            if (with_factors) {
                                factors = ctx->new_tensor(dtype::f32, {n_dims / 2});
                                fill_uniform(*factors, 11, 1.0f, 4.0f);
                            }
                            rope_params p;
                            p.n_dims = n_dims;
                            p.mode = mode;
                            p.freq_base = 500.0f;
                            if (yarn) {
                                p.n_ctx_orig = 64;
                                p.freq_scale = 0.25f;
                                p.ext_factor = 1.0f;
                                p.attn_factor = 0.9f;
                            }
                            tensor *out = rope(*ctx, a, pos, p, factors);
                            expect_matches_reference(
                                out,
                                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                                    if (i0 >= n_dims) return at(*a, i0, i1, i2, i3);
                                    const int64_t half = n_dims / 2;
                                    int64_t pair, j0, j1;
                                    if (mode == rope_mode_neox) {
                                        pair = i0 % half;
                                        j0 = pair;
                                        j1 = pair + half;
                                    } else {
                                        pair = i0 / 2;
                                        j0 = 2 * pair;
                                        j1 = 2 * pair + 1;
                                    }
                                    double c, s;
                                    rope_reference_angle(p, factors, at(*pos, i2), pair, c, s);
                                    const double x0 = at(*a, j0, i1, i2, i3), x1 = at(*a, j1, i1, i2, i3);
                                    return i0 == j0 ? x0 * c - x1 * s : x0 * s + x1 * c;
                                },
                                1e-9);
                        }
}

// --- rows -------------------------------------------------------------------------------------

TEST(CpuOps, GetRowsOfFloatTypes) {
    for (dtype type : {dtype::f32, dtype::f16, dtype::bf16}) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        tensor *a = make_input(*ctx, type, {10, 9, 3, 2}, layout::contiguous, 12);
        tensor *ids = ctx->new_tensor(dtype::i32, {5, 3, 2});
        std::mt19937 rng(13);
        for (int64_t i2 = 0; i2 < 2; ++i2)
            for (int64_t i1 = 0; i1 < 3; ++i1)
                for (int64_t i0 = 0; i0 < 5; ++i0) set_index(*ids, int64_t(rng() % 9), i0, i1, i2);
        expect_matches_reference(
            get_rows(*ctx, a, ids),
            [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                return at(*a, i0, get_index(*ids, i1, i2, i3), i2, i3);
            },
            exact);
    }
}

TEST(CpuOps, GetRowsOfQuantizedTypesDequantizes) {
    int tested = 0;
    for (int raw = 0; raw < int(dtype::count); ++raw) {
        const auto type = dtype(raw);
        if (!type_is_known(raw) || !type_traits(type).is_quantized || !has_quant_traits(type)) continue;
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        const int64_t n_embd = 256, n_rows = 6;
        tensor *a = ctx->new_tensor(type, {n_embd, n_rows});
        std::vector<float> values(size_t(n_embd * n_rows));
        std::mt19937 rng(14);
        std::normal_distribution<float> dist;
        for (auto &v : values) v = dist(rng);
        fill_rows(type, values.data(), a->data, n_rows, n_embd, 14);
        tensor *ids = ctx->new_tensor(dtype::i32, {4});
        for (int64_t i = 0; i < 4; ++i) set_index(*ids, (i * 5 + 1) % n_rows, i);
        std::vector<float> dequantized(size_t(n_embd * n_rows));
        for (int64_t r = 0; r < n_rows; ++r)
            quant_traits_of(type).to_float(static_cast<char *>(a->data) + r * a->nb[1],
                                           &dequantized[size_t(r * n_embd)], n_embd);
        expect_matches_reference(
            get_rows(*ctx, a, ids),
            [&](int64_t i0, int64_t i1, int64_t, int64_t) {
                return double(dequantized[size_t(get_index(*ids, i1) * n_embd + i0)]);
            },
            exact);
        ++tested;
    }
    EXPECT_GE(tested, 11) << "every quantized weight type has traits once the quant layer is built";
}

TEST(CpuOps, GetRowsRejectsAnOutOfRangeId) {
    auto ctx = data_context();
    tensor *a = make_input(*ctx, dtype::f32, {4, 3, 1, 1}, layout::contiguous, 15);
    tensor *ids = ctx->new_tensor(dtype::i32, {2});
    set_index(*ids, 1, 0);
    set_index(*ids, 3, 1);  // a has rows 0..2
    tensor *out = get_rows(*ctx, a, ids);
    out->set_name("embd");
    graph g;
    build_forward_expand(g, out);
    cpu_backend backend(2);
    try {
        backend.graph_compute(g, {});
        FAIL() << "expected weft::error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("[get_rows] 'embd': row id 3"), std::string::npos) << e.what();
    }
}

TEST(CpuOps, SetRowsWritesRowsInPlace) {
    for (dtype dst_type : {dtype::f32, dtype::f16, dtype::bf16})
        for (dtype id_type : {dtype::i32, dtype::i64})
            for (layout l : {layout::contiguous, layout::transposed}) {
                SCOPED_TRACE(std::string(type_name(dst_type)) + " ids " + type_name(id_type) + " src " +
                             layout_name(l));
                auto ctx = data_context();
                tensor *dst = make_input(*ctx, dst_type, {6, 10, 3, 2}, layout::contiguous, 16);
                tensor *src = make_input(*ctx, dtype::f32, {6, 4, 3, 2}, l, 17);
                tensor *ids = ctx->new_tensor(id_type, {4, 3, 1});  // broadcast over dim 3
                for (int64_t i1 = 0; i1 < 3; ++i1)
                    for (int64_t i0 = 0; i0 < 4; ++i0) set_index(*ids, (i0 * 3 + i1 * 2 + 1) % 10, i0, i1);
                const std::vector<float> before = values_of(*dst);
                tensor *out = set_rows(*ctx, dst, src, ids);
                expect_matches_reference(
                    out,
                    [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                        for (int64_t j = 0; j < 4; ++j)
                            if (get_index(*ids, j, i2) == i1)
                                return round_to(dst_type, at(*src, i0, j, i2, i3));
                        return double(before[size_t(((i3 * 3 + i2) * 10 + i1) * 6 + i0)]);
                    },
                    exact);
            }
}

// The block types of a KV cache (q8_0, q4_0, q4_1, q5_0, q5_1): each written row holds the bytes of the
// type's reference quantizer applied to its source row (read through any strides), the others keep
// theirs; the same bytes with 1, 2 and 3 threads.
TEST(CpuOps, SetRowsQuantizesRowsOfTheCacheBlockTypes) {
    int tested = 0;
    for (dtype type : attention_kv_types()) {
        if (type_traits(type).block_size == 1) continue;
        for (layout l : {layout::contiguous, layout::transposed}) {
            SCOPED_TRACE(std::string(type_name(type)) + " src " + layout_name(l));
            const int64_t ne0 = 96, n_cells = 10, n_rows = 4;
            auto ctx = data_context();
            tensor *dst = ctx->new_tensor(type, {ne0, n_cells});
            const quant_traits &traits = quant_traits_of(type);
            const std::vector<float> old_values = normal_values(size_t(ne0 * n_cells), 40);
            for (int64_t r = 0; r < n_cells; ++r)
                traits.from_float_ref(&old_values[size_t(r * ne0)],
                                      static_cast<char *>(dst->data) + r * dst->nb[1], ne0);
            const std::vector<char> before(static_cast<char *>(dst->data),
                                           static_cast<char *>(dst->data) + dst->nbytes());
            tensor *src = make_input(*ctx, dtype::f32, {ne0, n_rows, 1, 1}, l, 41);
            tensor *ids = ctx->new_tensor(dtype::i64, {n_rows});
            for (int64_t i = 0; i < n_rows; ++i) set_index(*ids, (i * 3 + 2) % n_cells, i);
            graph g;
            build_forward_expand(g, set_rows(*ctx, dst, src, ids));
            for (int n_threads : {1, 2, 3}) {
                std::memcpy(dst->data, before.data(), before.size());
                cpu_backend backend(n_threads);
                ASSERT_TRUE(backend.supports_op(*g.nodes.back()));
                ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
                std::vector<char> want = before;
                std::vector<float> row(static_cast<size_t>(ne0));
                for (int64_t i = 0; i < n_rows; ++i) {
                    for (int64_t d = 0; d < ne0; ++d) row[size_t(d)] = tensor_get_f32(*src, d, i);
                    traits.from_float_ref(row.data(), want.data() + get_index(*ids, i) * dst->nb[1], ne0);
                }
                EXPECT_EQ(std::memcmp(dst->data, want.data(), want.size()), 0) << n_threads << " threads";
            }
            ++tested;
        }
    }
    EXPECT_EQ(tested, 10);
}

TEST(CpuOps, SetRowsRejectsAnOutOfRangeId) {
    auto ctx = data_context();
    tensor *dst = make_input(*ctx, dtype::f16, {4, 3, 1, 1}, layout::contiguous, 29);
    tensor *src = make_input(*ctx, dtype::f32, {4, 2, 1, 1}, layout::contiguous, 30);
    tensor *ids = ctx->new_tensor(dtype::i64, {2});
    set_index(*ids, 0, 0);
    set_index(*ids, -1, 1);
    graph g;
    build_forward_expand(g, set_rows(*ctx, dst, src, ids));
    cpu_backend backend(3);
    EXPECT_THROW(backend.graph_compute(g, {}), error);
}

// --- copies -----------------------------------------------------------------------------------

TEST(CpuOps, CpyConvertsBetweenFloatTypesThroughStridedViews) {
    const std::array<dtype, 3> types = {dtype::f32, dtype::f16, dtype::bf16};
    for (dtype from : types)
        for (dtype to : types)
            for (layout l : {layout::contiguous, layout::transposed, layout::permuted}) {
                SCOPED_TRACE(std::string(type_name(from)) + " -> " + type_name(to) + " " + layout_name(l));
                auto ctx = data_context();
                tensor *src = make_input(*ctx, from, {5, 7, 11, 1}, l, 18);
                // destination: a strided window (offset, wider rows) of a bigger tensor
                tensor *big = ctx->new_tensor(to, {9, 7, 11});
                fill_uniform(*big, 19);
                tensor *dst = view_3d(*ctx, big, 5, 7, 11, big->nb[1], big->nb[2], 3 * big->nb[0]);
                expect_matches_reference(
                    cpy(*ctx, src, dst),
                    [&](int64_t i0, int64_t i1, int64_t i2, int64_t) {
                        return round_to(to, at(*src, i0, i1, i2));
                    },
                    exact);
            }
}

TEST(CpuOps, CpyBetweenDifferentShapesFollowsLogicalOrder) {
    auto ctx = data_context();
    tensor *src = make_input(*ctx, dtype::f32, {5, 7, 11, 1}, layout::permuted, 20);
    tensor *dst = ctx->new_tensor(dtype::f16, {35, 11});
    expect_matches_reference(
        cpy(*ctx, src, dst),
        [&](int64_t i0, int64_t i1, int64_t, int64_t) {
            const int64_t flat = i1 * 35 + i0;
            return round_to(dtype::f16, at(*src, flat % 5, (flat / 5) % 7, flat / 35));
        },
        exact);
}

TEST(CpuOps, CastAndCont) {
    for (dtype type : {dtype::f32, dtype::f16})
        for (layout l : {layout::transposed, layout::permuted}) {
            SCOPED_TRACE(std::string(type_name(type)) + " " + layout_name(l));
            auto ctx = data_context();
            tensor *a = make_input(*ctx, type, odd_shape, l, 21);
            tensor *c = cont(*ctx, a);
            EXPECT_TRUE(c->is_contiguous());
            expect_matches_reference(
                c, [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) { return at(*a, i0, i1, i2, i3); },
                exact);
            expect_matches_reference(
                cast(*ctx, a, dtype::bf16),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    return round_to(dtype::bf16, at(*a, i0, i1, i2, i3));
                },
                exact);
        }
}

TEST(CpuOps, CpyQuantizesAndDequantizesRows) {
    int tested = 0;
    for (int raw = 0; raw < int(dtype::count); ++raw) {
        const auto type = dtype(raw);
        if (!type_is_known(raw) || !type_traits(type).is_quantized || !has_quant_traits(type)) continue;
        if (needs_importance(type)) continue;  // no from_float (grid i-quants: importance only, or none)
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        const int64_t n = 256, rows = 3, mats = 2;
        // a non-contiguous f32 source: rows are gathered before quantization
        tensor *src = make_input(*ctx, dtype::f32, {n, rows, mats, 1}, layout::permuted, 22);
        tensor *q = ctx->new_tensor(type, {n, rows, mats});
        tensor *quantized = cpy(*ctx, src, q);
        tensor *back = ctx->new_tensor(dtype::f32, {n, rows, mats});
        tensor *dequantized = cpy(*ctx, quantized, back);
        graph g;
        build_forward_expand(g, dequantized);
        for (int n_threads : {1, 3}) {
            cpu_backend backend(n_threads);
            ASSERT_EQ(backend.graph_compute(g, {}), compute_status::ok);
            // the bytes are those of the type's own row quantizer applied to each logical row
            std::vector<float> row(static_cast<size_t>(n));
            std::vector<uint8_t> expected(row_size(type, n));
            for (int64_t i2 = 0; i2 < mats; ++i2)
                for (int64_t i1 = 0; i1 < rows; ++i1) {
                    for (int64_t i0 = 0; i0 < n; ++i0) row[size_t(i0)] = tensor_get_f32(*src, i0, i1, i2);
                    quant_traits_of(type).from_float(row.data(), expected.data(), n);
                    const char *got = static_cast<const char *>(q->data) + i1 * q->nb[1] + i2 * q->nb[2];
                    EXPECT_EQ(std::memcmp(got, expected.data(), expected.size()), 0)
                        << "row " << i1 << "," << i2;
                }
            // and dequantize back close to the source (the 1-bit, ternary, 2- and 3-bit types lose the most;
            // mxfp4's power-of-two scale clamps uniform values above 0.75 x 2^k: 0.021 on this data)
            std::vector<double> ref;
            for (float v : values_of(*src)) ref.push_back(v);
            const bool ternary = type == dtype::tq1_0 || type == dtype::tq2_0;
            const bool grid3 = type == dtype::iq3_xxs || type == dtype::iq3_s;
            const double bound = type == dtype::iq1_m                          ? 0.4
                                 : ternary                                     ? 0.25
                                 : type == dtype::q2_k || type == dtype::iq2_s ? 0.1
                                 : grid3                                       ? 0.06
                                 : type == dtype::q3_k || type == dtype::mxfp4 ? 0.04
                                                                               : 0.02;
            EXPECT_LE(normalized_error(values_of(*back), ref), bound);
        }
        ++tested;
    }
    EXPECT_GE(tested, 11);
}

TEST(CpuOps, ConcatAlongEachDim) {
    for (dtype type : {dtype::f32, dtype::f16})
        for (int dim = 0; dim < 4; ++dim) {
            SCOPED_TRACE(std::string(type_name(type)) + " dim " + std::to_string(dim));
            auto ctx = data_context();
            const shape a_ne = {5, 7, 3, 2};
            shape b_ne = a_ne;
            b_ne[size_t(dim)] = 4;
            tensor *a = make_input(*ctx, type, a_ne, layout::permuted, 23);
            tensor *b = make_input(*ctx, type, b_ne, layout::transposed, 24);
            expect_matches_reference(
                concat(*ctx, a, b, dim),
                [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
                    int64_t i[4] = {i0, i1, i2, i3};
                    if (i[dim] < a_ne[size_t(dim)]) return at(*a, i0, i1, i2, i3);
                    i[dim] -= a_ne[size_t(dim)];
                    return at(*b, i[0], i[1], i[2], i[3]);
                },
                exact);
        }
}

// --- reductions -------------------------------------------------------------------------------

TEST(CpuOps, ArgmaxTakesTheFirstLargest) {
    auto ctx = data_context();
    tensor *a = make_input(*ctx, dtype::f32, {37, 9, 1, 1}, layout::contiguous, 25);
    for (int64_t i = 0; i < 37; ++i) tensor_set_f32(*a, 0.0f, i, 0);  // all equal: index 0
    tensor_set_f32(*a, 5.0f, 4, 1);
    tensor_set_f32(*a, 5.0f, 30, 1);  // a tie: the first wins
    tensor_set_f32(*a, 7.0f, 36, 2);  // the last element
    const std::vector<float> got = expect_matches_reference(
        argmax(*ctx, a),
        [&](int64_t i0, int64_t, int64_t, int64_t) {
            int64_t best = 0;
            for (int64_t i = 1; i < 37; ++i)
                if (at(*a, i, i0) > at(*a, best, i0)) best = i;
            return double(best);
        },
        0.0);
    EXPECT_EQ(got[0], 0.0f);
    EXPECT_EQ(got[1], 4.0f);
    EXPECT_EQ(got[2], 36.0f);
}

TEST(CpuOps, SumRowsAndMean) {
    for (dtype type : {dtype::f32, dtype::f16})
        for (layout l : {layout::contiguous, layout::permuted, layout::transposed}) {
            SCOPED_TRACE(std::string(type_name(type)) + " " + layout_name(l));
            auto ctx = data_context();
            tensor *a = make_input(*ctx, type, odd_shape, l, 26);
            auto row_sum = [&](int64_t i1, int64_t i2, int64_t i3) {
                double s = 0;
                for (int64_t i = 0; i < odd_shape[0]; ++i) s += at(*a, i, i1, i2, i3);
                return s;
            };
            expect_matches_reference(
                sum_rows(*ctx, a),
                [&](int64_t, int64_t i1, int64_t i2, int64_t i3) { return row_sum(i1, i2, i3); }, float_ops);
            expect_matches_reference(
                mean(*ctx, a),
                [&](int64_t, int64_t i1, int64_t i2, int64_t i3) {
                    return row_sum(i1, i2, i3) / double(odd_shape[0]);
                },
                float_ops);
        }
}

TEST(CpuOps, MoreThreadsThanRows) {
    // one row (or one element) of work: the idle threads must still meet at every barrier
    auto ctx = data_context();
    tensor *a = make_input(*ctx, dtype::f32, {3, 1, 1, 1}, layout::contiguous, 27);
    tensor *w = make_input(*ctx, dtype::f16, {3, 1, 1, 1}, layout::contiguous, 28);
    tensor *h = rms_norm(*ctx, add(*ctx, a, w), 1e-6f);
    tensor *out = mul_mat(*ctx, w, h);  // [1, 1]
    expect_matches_reference(
        out,
        [&](int64_t, int64_t, int64_t, int64_t) {
            double x[3], ss = 0;
            for (int i = 0; i < 3; ++i) {
                x[i] = at(*a, i) + at(*w, i);
                ss += x[i] * x[i];
            }
            double dot = 0;
            for (int i = 0; i < 3; ++i) dot += at(*w, i) * x[i] / std::sqrt(ss / 3 + 1e-6);
            return dot;
        },
        1e-5);  // the activations are rounded to f16 for the f16 weights
}
