// tests/backends/test_cpu_attention.cpp — the fused attention op: against a double-precision
// softmax(q k^T) v, the same bits with 1, 2, 3 threads and with the scalar build, and a token's
// result independent of the cells hidden from it and of the other tokens of its batch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"

using namespace weft;
using namespace weft::test;

namespace {

constexpr float hidden = -std::numeric_limits<float>::infinity();

struct attention_case {
    tensor *q, *k, *v, *mask, *out;
    float softcap = 0.0f;
};

// q [head_k, n_tokens, n_head] as attention's permuted view of [head_k, n_head, n_tokens]; k, v
// f16 [head, n_kv, n_head_kv]; token t sees cells j <= visible_until[t], except every fifth.
attention_case make_case(context &ctx, int64_t head_k, int64_t head_v, int64_t n_tokens, int64_t n_head,
                         int64_t n_head_kv, int64_t n_kv, uint32_t seed, float softcap = 0.0f) {
    attention_case c;
    c.softcap = softcap;
    tensor *q_rows = ctx.new_tensor(dtype::f32, {head_k, n_head, n_tokens});
    fill_uniform(*q_rows, seed);
    c.q = permute(ctx, q_rows, 0, 2, 1, 3);
    c.k = ctx.new_tensor(dtype::f16, {head_k, n_kv, n_head_kv});
    c.v = ctx.new_tensor(dtype::f16, {head_v, n_kv, n_head_kv});
    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (tensor *t : {c.k, c.v}) {
        auto *h = static_cast<fp16_t *>(t->data);
        for (int64_t i = 0; i < t->nelements(); ++i) h[i] = fp32_to_fp16(dist(rng));
    }
    c.mask = ctx.new_tensor(dtype::f32, {n_kv, n_tokens});
    auto *m = static_cast<float *>(c.mask->data);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t j = 0; j < n_kv; ++j)
            m[t * n_kv + j] = (j <= t + n_kv / 2 && j % 5 != 3) ? 0.0f : hidden;
    c.out = attention(ctx, c.q, c.k, c.v, c.mask, softcap > 0.0f ? 0.125f / softcap : 0.125f, softcap);
    return c;
}

double reference(const attention_case &c, int64_t d, int64_t h, int64_t t) {
    const int64_t head_k = c.k->ne[0], n_kv = c.k->ne[1], g = h / (c.q->ne[2] / c.k->ne[2]);
    const auto *m = static_cast<const float *>(c.mask->data) + t * n_kv;
    std::vector<double> s(size_t(n_kv), -INFINITY);
    double max = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (m[j] == hidden) continue;
        double dot = 0;
        for (int64_t i = 0; i < head_k; ++i) dot += at(*c.q, i, t, h) * at(*c.k, i, j, g);
        s[size_t(j)] =
            (c.softcap > 0.0f ? c.softcap * std::tanh(dot * 0.125 / c.softcap) : dot * 0.125) + m[j];
        max = std::max(max, s[size_t(j)]);
    }
    double sum = 0, acc = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (m[j] == hidden) continue;
        const double p = std::exp(s[size_t(j)] - max);
        sum += p;
        acc += p * at(*c.v, d, j, g);
    }
    return sum > 0 ? acc / sum : 0.0;
}

std::vector<float> run(tensor *out, int threads = 2) {
    graph g;
    build_forward_expand(g, out);
    cpu_backend backend(threads);
    EXPECT_EQ(backend.graph_compute(g, {}), compute_status::ok);
    return values_of(*out);
}

TEST(CpuAttention, MatchesSoftmaxReferenceOnOddShapes) {
    for (int64_t head : {40, 64, 128}) {
        SCOPED_TRACE("head " + std::to_string(head));
        auto ctx = data_context();
        const attention_case c = make_case(*ctx, head, head == 40 ? 24 : head, 7, 6, 2, 23, 5);
        const std::vector<float> simd = expect_matches_reference(
            c.out, [&](int64_t d, int64_t h, int64_t t, int64_t) { return reference(c, d, h, t); }, 1e-6);
        force_scalar(true);
        const std::vector<float> scalar = run(c.out);
        force_scalar(false);
        EXPECT_EQ(simd, scalar) << "the scalar build differs from the SIMD build";
        limit_to_avx2(true);
        const std::vector<float> avx2 = run(c.out);
        limit_to_avx2(false);
        EXPECT_EQ(avx2, scalar) << "the AVX2 build differs from the scalar build";
    }
}

// Gemma 2's soft cap of the scores: softcap * tanh(q . k * scale / softcap), a cap low enough to act.
TEST(CpuAttention, SoftCapMatchesTheReference) {
    auto ctx = data_context();
    const attention_case c = make_case(*ctx, 64, 64, 9, 4, 2, 31, 11, 0.5f);
    const std::vector<float> simd = expect_matches_reference(
        c.out, [&](int64_t d, int64_t h, int64_t t, int64_t) { return reference(c, d, h, t); }, 1e-6);
    force_scalar(true);
    EXPECT_EQ(simd, run(c.out)) << "the scalar build differs from the SIMD build";
    force_scalar(false);
}

TEST(CpuAttention, TokenWithNothingVisibleGetsZeros) {
    auto ctx = data_context();
    attention_case c = make_case(*ctx, 32, 32, 2, 2, 1, 9, 8);
    auto *m = static_cast<float *>(c.mask->data);
    for (int64_t j = 0; j < 9; ++j) m[9 + j] = hidden;  // token 1 sees nothing
    const auto out = run(c.out);
    for (int64_t i = 2 * 32; i < 4 * 32; ++i) EXPECT_EQ(out[size_t(i)], 0.0f);
}

// Token t of `batch` alone: a cache of n_total cells whose first cells are the batch's `cells` (K, V
// and the token's mask value copied, in order) and the rest NaN and hidden. Returns its output.
std::vector<float> run_alone(context &ctx, const attention_case &batch, int64_t t,
                             const std::vector<int64_t> &cells, int64_t n_total) {
    const int64_t head = batch.k->ne[0], n_head = batch.q->ne[2], n_head_kv = batch.k->ne[2];
    tensor *q1 = ctx.new_tensor(dtype::f32, {head, n_head, 1});
    for (int64_t h = 0; h < n_head; ++h)
        for (int64_t i = 0; i < head; ++i) tensor_set_f32(*q1, float(at(*batch.q, i, t, h)), i, h, 0);
    tensor *k1 = ctx.new_tensor(dtype::f16, {head, n_total, n_head_kv});
    tensor *v1 = ctx.new_tensor(dtype::f16, {head, n_total, n_head_kv});
    tensor *m1 = ctx.new_tensor(dtype::f32, {n_total, 1});
    const int64_t n = int64_t(cells.size());
    for (int64_t g = 0; g < n_head_kv; ++g)
        for (int64_t c = 0; c < n_total; ++c)
            for (int64_t i = 0; i < head; ++i) {
                tensor_set_f32(*k1, c < n ? float(at(*batch.k, i, cells[size_t(c)], g)) : NAN, i, c, g);
                tensor_set_f32(*v1, c < n ? float(at(*batch.v, i, cells[size_t(c)], g)) : NAN, i, c, g);
            }
    for (int64_t c = 0; c < n_total; ++c)
        tensor_set_f32(*m1, c < n ? tensor_get_f32(*batch.mask, cells[size_t(c)], t) : hidden, c, 0);
    return run(attention(ctx, permute(ctx, q1, 0, 2, 1, 3), k1, v1, m1, 0.125f), 1);
}

// A token's output does not depend on cells hidden from it (more cells, garbage in them) nor on the
// other tokens of the batch.
TEST(CpuAttention, TokenResultIsBatchInvariant) {
    const int64_t head = 64, n_head = 4, n_head_kv = 2, n_kv = 19;
    auto ctx = data_context();
    attention_case batch = make_case(*ctx, head, head, 9, n_head, n_head_kv, n_kv, 11);
    const auto batched = run(batch.out);
    const int64_t t = 4;
    // the same token alone, with a cache of 40 cells whose extra cells hold NaN and are hidden
    std::vector<int64_t> cells(static_cast<size_t>(n_kv));
    for (int64_t j = 0; j < n_kv; ++j) cells[size_t(j)] = j;
    const auto single = run_alone(*ctx, batch, t, cells, 40);
    EXPECT_EQ(std::memcmp(single.data(), &batched[size_t(t * n_head * head)], size_t(n_head * head) * 4), 0);
}

// Tokens of 8 sequences decoded side by side, their cells interleaved in the cache (cell j belongs to
// sequence j % 8): each token gets exactly the bits it gets alone over a cache holding only its own
// sequence's cells, in order (the kernel gathers each token's cells instead of scoring every cell).
TEST(CpuAttention, SequencesSideBySideMatchTheirSoloResults) {
    const int64_t head = 64, n_head = 4, n_head_kv = 2, n_seq = 8, n_kv = 8 * 37;
    auto ctx = data_context();
    attention_case batch = make_case(*ctx, head, head, n_seq, n_head, n_head_kv, n_kv, 21);
    auto *m = static_cast<float *>(batch.mask->data);
    for (int64_t t = 0; t < n_seq; ++t)
        for (int64_t j = 0; j < n_kv; ++j)
            m[t * n_kv + j] = j % n_seq == t && j < n_kv - 3 * t ? 0.0f : hidden;
    const auto batched = expect_matches_reference(
        batch.out, [&](int64_t d, int64_t h, int64_t t, int64_t) { return reference(batch, d, h, t); }, 1e-6);
    force_scalar(true);
    EXPECT_EQ(run(batch.out), batched) << "the scalar build differs";
    force_scalar(false);
    for (int64_t t = 0; t < n_seq; ++t) {
        std::vector<int64_t> cells;
        for (int64_t j = 0; j < n_kv; ++j)
            if (m[t * n_kv + j] == 0.0f) cells.push_back(j);
        const auto alone = run_alone(*ctx, batch, t, cells, int64_t(cells.size()));
        EXPECT_EQ(std::memcmp(alone.data(), &batched[size_t(t * n_head * head)], size_t(n_head * head) * 4),
                  0)
            << "token " << t;
    }
}

TEST(CpuAttention, ShapesAreChecked) {
    auto ctx = data_context();
    tensor *q = ctx->new_tensor(dtype::f32, {16, 3, 4});
    tensor *k = ctx->new_tensor(dtype::f16, {16, 8, 3});
    tensor *v = ctx->new_tensor(dtype::f16, {16, 8, 3});
    tensor *mask = ctx->new_tensor(dtype::f32, {8, 3});
    EXPECT_THROW(attention(*ctx, q, k, v, mask, 1.0f), error);  // 3 KV heads do not divide 4
    tensor *k2 = ctx->new_tensor(dtype::f16, {16, 8, 2});
    tensor *v2 = ctx->new_tensor(dtype::f16, {16, 9, 2});
    EXPECT_THROW(attention(*ctx, q, k2, v2, mask, 1.0f), error);  // cells differ
}

}  // namespace
