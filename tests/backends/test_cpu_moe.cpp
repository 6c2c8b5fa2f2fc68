// tests/backends/test_cpu_moe.cpp — the mixture-of-experts ops on the CPU: mul_mat_id against a
// dequantize-then-double reference and bit for bit against mul_mat of the picked expert (whatever
// the batch), top_k against a stable sort, sigmoid; 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "backends/cpu/f16_int16_mm.h"
#include "backends/cpu/float_mm.h"
#include "backends/cpu/interleaved.h"
#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

// ids i32 [n_used, n_tokens]: for each token n_used distinct experts of the first n_pickable, in a
// random order.
tensor *make_ids(context &ctx, int64_t n_pickable, int64_t n_used, int64_t n_tokens, uint32_t seed) {
    tensor *ids = ctx.new_tensor(dtype::i32, {n_used, n_tokens});
    std::mt19937 rng(seed);
    std::vector<int32_t> experts(static_cast<size_t>(n_pickable));
    for (int64_t t = 0; t < n_tokens; ++t) {
        std::iota(experts.begin(), experts.end(), 0);
        std::shuffle(experts.begin(), experts.end(), rng);
        std::memcpy(static_cast<char *>(ids->data) + size_t(t) * ids->nb[1], experts.data(),
                    size_t(n_used) * sizeof(int32_t));
    }
    return ids;
}

int32_t id_at(const tensor &ids, int64_t i, int64_t t) {
    return static_cast<const int32_t *>(ids.data)[t * ids.ne[0] + i];
}

double moe_bound_for(dtype type) {
    return type == dtype::f32 ? 1e-10 : 5e-4;  // the activations' conversion to q8 for the others
}

std::vector<float> compute(tensor *out, int n_threads = 2) {
    graph g;
    build_forward_expand(g, out);
    cpu_backend backend(n_threads);
    EXPECT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    return values_of(*out);
}

// The bits of mul_mat(expert e, column) for one f32 column [k].
std::vector<float> single_product(const tensor &experts, int64_t e, const float *column) {
    auto ctx = data_context();
    const int64_t k = experts.ne[0], m = experts.ne[1];
    tensor *a = ctx->new_tensor(experts.type, {k, m});
    std::memcpy(a->data, static_cast<const char *>(experts.data) + size_t(e) * experts.nb[2], a->nbytes());
    tensor *b = ctx->new_tensor(dtype::f32, {k, 1});
    std::memcpy(b->data, column, size_t(k) * sizeof(float));
    return compute(mul_mat(*ctx, a, b), 1);
}

struct moe_case {
    dtype type;
    int64_t k, m, n_expert, n_used, n_tokens;
    bool column_per_pick;  // b [k, n_used, n_tokens] rather than [k, 1, n_tokens]
    int64_t n_unused = 0;  // the last experts, never picked
};

void check_mul_mat_id(const moe_case &c) {
    auto ctx = data_context();
    std::vector<float> w;
    tensor *experts = make_weights(*ctx, c.type, c.k, c.m, c.n_expert, 1, 40, w);
    tensor *b = ctx->new_tensor(dtype::f32, {c.k, c.column_per_pick ? c.n_used : 1, c.n_tokens});
    fill_uniform(*b, 41);
    tensor *ids = make_ids(*ctx, c.n_expert - c.n_unused, c.n_used, c.n_tokens, 42);
    tensor *out = mul_mat_id(*ctx, experts, b, ids);
    ASSERT_EQ(out->ne[0], c.m);
    ASSERT_EQ(out->ne[1], c.n_used);
    ASSERT_EQ(out->ne[2], c.n_tokens);
    auto column = [&](int64_t i, int64_t) { return c.column_per_pick ? i : 0; };
    auto reference = [&](int64_t i0, int64_t i1, int64_t i2, int64_t) {
        const float *row = &w[size_t((id_at(*ids, i1, i2) * c.m + i0) * c.k)];
        double sum = 0;
        for (int64_t i = 0; i < c.k; ++i) sum += double(row[i]) * at(*b, i, column(i1, i2), i2);
        return sum;
    };
    const std::vector<float> got = expect_matches_reference(out, reference, moe_bound_for(c.type));

    // every pick equals, bit for bit, the ordinary product of its expert with its column
    for (int64_t t = 0; t < c.n_tokens; ++t)
        for (int64_t i = 0; i < c.n_used; ++i) {
            const float *x = reinterpret_cast<const float *>(
                static_cast<const char *>(b->data) + size_t(t) * b->nb[2] + size_t(column(i, t)) * b->nb[1]);
            const std::vector<float> single = single_product(*experts, id_at(*ids, i, t), x);
            const std::vector<float> pick(got.begin() + (t * c.n_used + i) * c.m,
                                          got.begin() + (t * c.n_used + i + 1) * c.m);
            ASSERT_EQ(pick, single) << type_name(c.type) << " pick " << i << " of token " << t;
        }
}

}  // namespace

TEST(CpuMoe, MulMatIdFloatAndQuantizedExperts) {
    for (dtype type : {dtype::f32, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::mxfp4}) {
        const int64_t k = type == dtype::f32 ? 67 : 256;
        for (bool per_pick : {false, true}) {
            SCOPED_TRACE(std::string(type_name(type)) + (per_pick ? " column per pick" : " one column"));
            check_mul_mat_id({type, k, 13, 5, 3, 7, per_pick});
        }
    }
}

TEST(CpuMoe, MulMatIdLargerTilesAndUnusedExperts) {
    // more columns than one tile, 17 rows, experts 6 and 7 never picked
    for (dtype type : {dtype::f32, dtype::q8_0}) {
        SCOPED_TRACE(type_name(type));
        check_mul_mat_id({type, 64, 17, 8, 2, 40, false, 2});
    }
}

TEST(CpuMoe, MulMatIdIsBatchInvariant) {
    for (dtype type : {dtype::f32, dtype::q8_0, dtype::mxfp4}) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        std::vector<float> w;
        const int64_t k = 64, m = 24, n_expert = 4, n_used = 2, n_tokens = 9;
        tensor *experts = make_weights(*ctx, type, k, m, n_expert, 1, 50, w);
        tensor *b = ctx->new_tensor(dtype::f32, {k, 1, n_tokens});
        fill_uniform(*b, 51);
        tensor *ids = make_ids(*ctx, n_expert, n_used, n_tokens, 52);
        const std::vector<float> batch = compute(mul_mat_id(*ctx, experts, b, ids), 3);
        // each token alone (its own ids and column): the same bits
        for (int64_t t = 0; t < n_tokens; ++t) {
            tensor *b1 = view_3d(*ctx, b, k, 1, 1, b->nb[1], b->nb[2], size_t(t) * b->nb[2]);
            tensor *ids1 = view_2d(*ctx, ids, n_used, 1, ids->nb[1], size_t(t) * ids->nb[1]);
            const std::vector<float> alone = compute(mul_mat_id(*ctx, experts, b1, ids1), 2);
            const std::vector<float> in_batch(batch.begin() + t * n_used * m,
                                              batch.begin() + (t + 1) * n_used * m);
            EXPECT_EQ(alone, in_batch) << "token " << t;
        }
    }
}

namespace {

// Repacks t as the model loader does (interleaved quants, grouped floats) into memory of its own,
// kept alive by the returned holder.
std::shared_ptr<std::vector<uint8_t>> repack(tensor &t) {
    const bool quant = cpu::can_interleave(t);
    EXPECT_TRUE(quant || cpu::can_group_float(t)) << type_name(t.type) << " " << t.shape_str();
    auto memory =
        std::make_shared<std::vector<uint8_t>>(quant ? cpu::interleaved_size(t) : cpu::grouped_float_size(t));
    if (quant)
        cpu::interleave_tensor(t, t.data, memory->data());
    else
        cpu::group_float_tensor(t, t.data, memory->data());
    t.data = memory->data();
    return memory;
}

}  // namespace

// Experts repacked at load, a stack of repacked matrices: each pick equals, bit for bit, the
// product of its expert repacked on its own, and stays close to the plain layout's result.
TEST(CpuMoe, RepackedExpertsEqualTheirRepackedMatrices) {
    // (f32 experts are not repacked: see float_mm.cpp)
    for (dtype type :
         {dtype::bf16, dtype::f16, dtype::q8_0, dtype::q4_0, dtype::q4_k, dtype::q6_k, dtype::mxfp4}) {
        SCOPED_TRACE(type_name(type));
        const int64_t k = 256, m = 32, n_expert = 3, n_used = 2, n_tokens = 5;
        auto ctx = data_context();
        std::vector<float> w;
        tensor *experts = make_weights(*ctx, type, k, m, n_expert, 1, 60, w);
        const std::vector<uint8_t> plain(static_cast<uint8_t *>(experts->data),
                                         static_cast<uint8_t *>(experts->data) + experts->nbytes());
        tensor *b = ctx->new_tensor(dtype::f32, {k, 1, n_tokens});
        fill_uniform(*b, 61);
        tensor *ids = make_ids(*ctx, n_expert, n_used, n_tokens, 62);
        tensor *out = mul_mat_id(*ctx, experts, b, ids);
        const std::vector<float> from_plain = compute(out, 2);
        const auto holder = repack(*experts);
        const std::vector<float> got = compute(out, 3);
        EXPECT_EQ(got, compute(out, 1));
        const std::vector<double> plain_d(from_plain.begin(), from_plain.end());
        EXPECT_LE(normalized_error(got, plain_d), moe_bound_for(type));
        for (int64_t t = 0; t < n_tokens; ++t)
            for (int64_t i = 0; i < n_used; ++i) {
                auto one = data_context();
                tensor *a = one->new_tensor(type, {k, m});
                std::memcpy(a->data, plain.data() + size_t(id_at(*ids, i, t)) * experts->nb[2], a->nbytes());
                const auto a_holder = repack(*a);
                tensor *x = one->new_tensor(dtype::f32, {k, 1});
                std::memcpy(x->data, static_cast<const char *>(b->data) + size_t(t) * b->nb[2],
                            size_t(k) * sizeof(float));
                const std::vector<float> single = compute(mul_mat(*one, a, x), 1);
                const std::vector<float> pick(got.begin() + (t * n_used + i) * m,
                                              got.begin() + (t * n_used + i + 1) * m);
                if (cpu::is_grouped_f16_int16(*a) == cpu::is_grouped_f16_int16(*experts)) {
                    ASSERT_EQ(pick, single) << "pick " << i << " of token " << t;
                } else {
                    // an f16 matrix alone takes the int16 products (f16_int16_mm.h), a stack of
                    // experts keeps the float groups: close, not the same bits
                    const std::vector<double> single_d(single.begin(), single.end());
                    EXPECT_LE(normalized_error(pick, single_d), moe_bound_for(type))
                        << "pick " << i << " of token " << t;
                }
            }
    }
}

// Repacked experts take two paths: products of few (pick, token) pairs (a decode step) deal every
// used expert's rows from one dispenser, larger ones go expert by expert. A token alone (few pairs)
// gets the bits it gets in a batch of many, with one column or a column per pick (the down
// product), at any thread count, through the SIMD and the scalar kernels alike.
TEST(CpuMoe, RepackedExpertsFewPairsEqualTheBatch) {
    for (dtype type : {dtype::q4_k, dtype::q6_k, dtype::q8_0, dtype::mxfp4})
        for (bool per_pick : {false, true}) {
            SCOPED_TRACE(std::string(type_name(type)) + (per_pick ? " column per pick" : " one column"));
            // 7 groups of 16 rows: a chunk can hold 4 + 2 + 1, every tile of q8_0's side-by-side decode
            const int64_t k = 256, m = 112, n_expert = 6, n_used = 3, n_tokens = 8;  // 24 pairs in the batch
            auto ctx = data_context();
            std::vector<float> w;
            tensor *experts = make_weights(*ctx, type, k, m, n_expert, 1, 70, w);
            const auto holder = repack(*experts);
            tensor *b = ctx->new_tensor(dtype::f32, {k, per_pick ? n_used : 1, n_tokens});
            fill_uniform(*b, 71);
            tensor *ids = make_ids(*ctx, n_expert, n_used, n_tokens, 72);
            const std::vector<float> batch = compute(mul_mat_id(*ctx, experts, b, ids), 2);
            for (int64_t t = 0; t < n_tokens; ++t) {
                tensor *b1 = view_3d(*ctx, b, k, b->ne[1], 1, b->nb[1], b->nb[2], size_t(t) * b->nb[2]);
                tensor *ids1 = view_2d(*ctx, ids, n_used, 1, ids->nb[1], size_t(t) * ids->nb[1]);
                tensor *alone = mul_mat_id(*ctx, experts, b1, ids1);
                const std::vector<float> in_batch(batch.begin() + t * n_used * m,
                                                  batch.begin() + (t + 1) * n_used * m);
                for (int n_threads : {1, 2, 3})
                    EXPECT_EQ(compute(alone, n_threads), in_batch) << "token " << t;
                force_scalar(true);
                EXPECT_EQ(compute(alone, 2), in_batch) << "token " << t << ", scalar kernels";
                force_scalar(false);
            }
        }
}

TEST(CpuMoe, MulMatIdRejectsBadIdsAndShapes) {
    auto ctx = data_context();
    tensor *experts = ctx->new_tensor(dtype::f32, {8, 4, 3});
    tensor *b = ctx->new_tensor(dtype::f32, {8, 1, 2});
    fill_uniform(*experts, 1);
    fill_uniform(*b, 2);
    tensor *ids = ctx->new_tensor(dtype::i32, {2, 2});
    const int32_t bad[] = {0, 1, 2, 3};  // 3 is not an expert
    std::memcpy(ids->data, bad, sizeof bad);
    tensor *out = mul_mat_id(*ctx, experts, b, ids);
    graph g;
    build_forward_expand(g, out);
    cpu_backend backend(2);
    try {
        backend.graph_compute(g, {});
        FAIL() << "expected weft::error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("[mul_mat_id] ids[1, 1] is 3"), std::string::npos) << e.what();
    }

    EXPECT_THROW(mul_mat_id(*ctx, experts, ctx->new_tensor(dtype::f32, {7, 1, 2}), ids), error);  // k
    EXPECT_THROW(mul_mat_id(*ctx, experts, ctx->new_tensor(dtype::f32, {8, 3, 2}), ids), error);  // columns
    EXPECT_THROW(mul_mat_id(*ctx, experts, ctx->new_tensor(dtype::f32, {8, 1, 3}), ids), error);  // tokens
    EXPECT_THROW(mul_mat_id(*ctx, experts, b, ctx->new_tensor(dtype::f32, {2, 2})), error);       // id type
    try {
        mul_mat_id(*ctx, experts, ctx->new_tensor(dtype::f32, {7, 1, 2}), ids);
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("[mul_mat_id] experts is [8, 4, 3], b is [7, 1, 2]"),
                  std::string::npos)
            << e.what();
    }
}

// --- top_k -------------------------------------------------------------------------------------

namespace {

// The indices of a row sorted by value, descending, ties by index (NaN as -infinity).
std::vector<int32_t> sorted_indices(const std::vector<float> &row) {
    std::vector<int32_t> idx(row.size());
    std::iota(idx.begin(), idx.end(), 0);
    auto rank = [](float v) { return std::isnan(v) ? -INFINITY : v; };
    std::stable_sort(idx.begin(), idx.end(),
                     [&](int32_t l, int32_t r) { return rank(row[size_t(l)]) > rank(row[size_t(r)]); });
    return idx;
}

}  // namespace

// gpt-oss's per-expert biases after mul_mat_id: each pick's row plus its expert's bias row, a strided
// view for a; ids outside the experts fail the graph.
TEST(CpuMoe, AddIdAddsThePickedExpertsBias) {
    auto ctx = data_context();
    const int64_t m = 13, n_used = 3, n_tokens = 5, n_expert = 7;
    tensor *wide = ctx->new_tensor(dtype::f32, {m + 2, n_used, n_tokens});
    tensor *bias = ctx->new_tensor(dtype::f32, {m, n_expert});
    fill_uniform(*wide, 61);
    fill_uniform(*bias, 62);
    tensor *a = view_3d(*ctx, wide, m, n_used, n_tokens, wide->nb[1], wide->nb[2], sizeof(float));
    tensor *ids = make_ids(*ctx, n_expert, n_used, n_tokens, 63);
    tensor *out = add_id(*ctx, a, bias, ids);
    expect_matches_reference(
        out,
        [&](int64_t i0, int64_t i, int64_t t, int64_t) {
            return double(float(at(*a, i0, i, t) + at(*bias, i0, id_at(*ids, i, t))));
        },
        0.0);
    static_cast<int32_t *>(ids->data)[4] = int32_t(n_expert);
    graph g;
    build_forward_expand(g, out);
    cpu_backend backend(2);
    EXPECT_THROW(backend.graph_compute(g, {}), error);
    tensor *ids_short = ctx->new_tensor(dtype::i32, {n_used, n_tokens - 1});
    EXPECT_THROW(add_id(*ctx, a, bias, ids_short), error);
}

TEST(CpuMoe, TopKAndArgsortAreStableAndDescending) {
    auto ctx = data_context();
    const int64_t n = 37, rows = 11;
    // a transposed view: the rows are strided, and few distinct values make many ties
    tensor *base = ctx->new_tensor(dtype::f32, {rows, n});
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> dist(-4, 4);
    for (int64_t i = 0; i < rows * n; ++i) static_cast<float *>(base->data)[i] = float(dist(rng)) * 0.5f;
    static_cast<float *>(base->data)[3] = NAN;  // row 3, value 0
    tensor *a = transpose(*ctx, base);
    std::vector<std::vector<int32_t>> expected(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<float> row(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) row[size_t(i)] = tensor_get_f32(*a, i, r);
        expected[size_t(r)] = sorted_indices(row);
    }
    for (int64_t k : {int64_t(1), int64_t(2), int64_t(5), n}) {
        SCOPED_TRACE("k " + std::to_string(k));
        tensor *out = k == n ? argsort_desc(*ctx, a) : top_k(*ctx, a, k);
        ASSERT_EQ(out->type, dtype::i32);
        ASSERT_EQ(out->ne[0], k);
        ASSERT_EQ(out->ne[1], rows);
        expect_matches_reference(
            out,
            [&](int64_t i0, int64_t i1, int64_t, int64_t) {
                return double(expected[size_t(i1)][size_t(i0)]);
            },
            0.0);
    }
    EXPECT_THROW(top_k(*ctx, a, 0), error);
    EXPECT_THROW(top_k(*ctx, a, n + 1), error);
    EXPECT_THROW(top_k(*ctx, ctx->new_tensor(dtype::f16, {4, 2}), 2), error);
}

// --- sigmoid -----------------------------------------------------------------------------------

TEST(CpuMoe, SigmoidMatchesReference) {
    auto ctx = data_context();
    tensor *a = ctx->new_tensor(dtype::f32, {13, 5, 3});
    fill_uniform(*a, 9, -12.0f, 12.0f);
    tensor_set_f32(*a, 200.0f, 0, 0, 0);
    tensor_set_f32(*a, -200.0f, 1, 0, 0);
    tensor *out = sigmoid(*ctx, a);
    expect_matches_reference(
        out,
        [&](int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
            return 1.0 / (1.0 + std::exp(-at(*a, i0, i1, i2, i3)));
        },
        1e-12);
}
