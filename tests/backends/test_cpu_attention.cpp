// tests/backends/test_cpu_attention.cpp — the fused attention op: against a double-precision
// softmax(q k^T) v, the same bits with 1, 2, 3 threads and with the scalar build, and a token's
// result independent of the cells hidden from it and of the other tokens of its batch; for K and V
// of every KV cache type (f32, f16, bf16 and the block types q8_0 ... q5_1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backends/cpu/canonical_math.h"
#include "backends/cpu/row_kernels.h"
#include "backends/cpu_testing.h"
#include "weft/core/cpu_features.h"
#include "weft/core/error.h"
#include "weft/core/fp16.h"
#include "weft/quant/blocks.h"
#include "weft/quant/quant.h"

using namespace weft;
using namespace weft::test;

namespace {

constexpr float hidden = -std::numeric_limits<float>::infinity();

struct attention_case {
    tensor *q, *k, *v, *mask, *out;
    float softcap = 0.0f;
    const float *sinks = nullptr;  // each query head's sink logit (the op's sinks), or none
    // K and V as the kernel sees them: the cache rows widened to floats by their type's to_float
    std::vector<float> k_values, v_values;
    float k_at(int64_t i, int64_t j, int64_t g) const {
        return k_values[size_t((g * k->ne[1] + j) * k->ne[0] + i)];
    }
    float v_at(int64_t i, int64_t j, int64_t g) const {
        return v_values[size_t((g * v->ne[1] + j) * v->ne[0] + i)];
    }
};

// A contiguous K or V tensor of `type` holding `values` (each row converted by the type's own
// from_float); returns the values its rows widen back to.
std::vector<float> store_rows(tensor &t, const std::vector<float> &values) {
    const quant_traits &traits = quant_traits_of(t.type);
    const int64_t n = t.ne[0], rows = t.nelements() / n;
    std::vector<float> widened(values.size());
    for (int64_t r = 0; r < rows; ++r) {
        char *row = static_cast<char *>(t.data) + r * int64_t(t.nb[1]);
        traits.from_float(&values[size_t(r * n)], row, n);
        traits.to_float(row, &widened[size_t(r * n)], n);
    }
    return widened;
}

// q [head_k, n_tokens, n_head] as attention's permuted view of [head_k, n_head, n_tokens]; k, v
// [head, n_kv, n_head_kv] of k_type and v_type (f16 unless given); token t sees cells j <= visible_until[t],
// except every fifth.
attention_case make_case(context &ctx, int64_t head_k, int64_t head_v, int64_t n_tokens, int64_t n_head,
                         int64_t n_head_kv, int64_t n_kv, uint32_t seed, float softcap = 0.0f,
                         dtype k_type = dtype::f16, dtype v_type = dtype::f16) {
    attention_case c;
    c.softcap = softcap;
    tensor *q_rows = ctx.new_tensor(dtype::f32, {head_k, n_head, n_tokens});
    fill_uniform(*q_rows, seed);
    c.q = permute(ctx, q_rows, 0, 2, 1, 3);
    c.k = ctx.new_tensor(k_type, {head_k, n_kv, n_head_kv});
    c.v = ctx.new_tensor(v_type, {head_v, n_kv, n_head_kv});
    std::mt19937 rng(seed + 1);
    std::uniform_real_distribution<float> dist(-1, 1);
    for (tensor *t : {c.k, c.v}) {
        std::vector<float> values(size_t(t->nelements()));
        for (float &x : values) x = dist(rng);
        (t == c.k ? c.k_values : c.v_values) = store_rows(*t, values);
    }
    c.mask = ctx.new_tensor(dtype::f32, {n_kv, n_tokens});
    auto *m = static_cast<float *>(c.mask->data);
    for (int64_t t = 0; t < n_tokens; ++t)
        for (int64_t j = 0; j < n_kv; ++j)
            m[t * n_kv + j] = (j <= t + n_kv / 2 && j % 5 != 3) ? 0.0f : hidden;
    c.out = attention(ctx, c.q, c.k, c.v, c.mask, softcap > 0.0f ? 0.125f / softcap : 0.125f, softcap);
    return c;
}

// The op again with cell positions (i32, one per cell).
void set_positions(context &ctx, attention_case &c, const std::vector<int32_t> &positions) {
    tensor *pos = ctx.new_tensor(dtype::i32, {int64_t(positions.size())});
    std::memcpy(pos->data, positions.data(), positions.size() * sizeof(int32_t));
    c.out =
        attention(ctx, c.q, c.k, c.v, c.mask, c.softcap > 0.0f ? 0.125f / c.softcap : 0.125f, c.softcap, pos);
}

// The op again with a sink logit per query head (and the positions, when given).
void set_sinks(context &ctx, attention_case &c, const std::vector<float> &values,
               tensor *positions = nullptr) {
    tensor *sinks = ctx.new_tensor(dtype::f32, {int64_t(values.size())});
    std::memcpy(sinks->data, values.data(), values.size() * sizeof(float));
    c.sinks = static_cast<const float *>(sinks->data);
    c.out = attention(ctx, c.q, c.k, c.v, c.mask, c.softcap > 0.0f ? 0.125f / c.softcap : 0.125f, c.softcap,
                      positions, sinks);
}

float round_f16(float x) {
    return fp16_to_fp32(fp32_to_fp16(x));
}

// Whether the kernel dots K in integers against a q8_0 query (a q8_0 or q4_0 K of whole blocks).
bool k_in_integers(const attention_case &c) {
    return (c.k->type == dtype::q8_0 || c.k->type == dtype::q4_0) && c.k->ne[0] % qk8_0 == 0;
}

// Token t's query head h quantized to q8_0 blocks as the kernel does (for a K in integers).
std::vector<block_q8_0> quantized_query(const attention_case &c, int64_t t, int64_t h) {
    const int64_t head_k = c.k->ne[0];
    std::vector<float> q(static_cast<size_t>(head_k));
    for (int64_t d = 0; d < head_k; ++d) q[size_t(d)] = float(at(*c.q, d, t, h));
    std::vector<block_q8_0> blocks(size_t(head_k / qk8_0));
    cpu::row_traits_of(dtype::q8_0).from_float(q.data(), blocks.data(), head_k);
    return blocks;
}

// Token t's query head h as the kernel computes with it: a K in integers sees it quantized to q8_0.
std::vector<double> query_row(const attention_case &c, int64_t t, int64_t h) {
    const int64_t head_k = c.k->ne[0];
    std::vector<double> q(static_cast<size_t>(head_k));
    const std::vector<block_q8_0> q8 =
        k_in_integers(c) ? quantized_query(c, t, h) : std::vector<block_q8_0>{};
    for (int64_t d = 0; d < head_k; ++d) {
        const block_q8_0 *b = q8.empty() ? nullptr : &q8[size_t(d / qk8_0)];
        q[size_t(d)] = b ? double(fp16_to_fp32(b->d)) * b->qs[d % qk8_0] : at(*c.q, d, t, h);
    }
    return q;
}

// The integer dot of a q8_0 or q4_0 K row (cell j, KV head g) with a quantized query
// (attention_impl.h): per block the exact sum of the quants' products (a q4_0 nibble less 8), one fma.
float integer_dot(const attention_case &c, const std::vector<block_q8_0> &q, int64_t j, int64_t g) {
    const char *row =
        static_cast<const char *>(c.k->data) + g * int64_t(c.k->nb[2]) + j * int64_t(c.k->nb[1]);
    float acc = 0.0f;
    for (size_t b = 0; b < q.size(); ++b) {
        int32_t sum = 0;
        fp16_t dk;
        if (c.k->type == dtype::q8_0) {
            const auto &k = reinterpret_cast<const block_q8_0 *>(row)[b];
            for (int i = 0; i < qk8_0; ++i) sum += int32_t(k.qs[i]) * q[b].qs[i];
            dk = k.d;
        } else {
            const auto &k = reinterpret_cast<const block_q4_0 *>(row)[b];
            for (int i = 0; i < qk8_0; ++i)
                sum += (int32_t(i < 16 ? k.qs[i] & 0x0F : k.qs[i - 16] >> 4) - 8) * q[b].qs[i];
            dk = k.d;
        }
        acc = std::fma(float(sum), fp16_to_fp32(dk) * fp16_to_fp32(q[b].d), acc);
    }
    return acc;
}

// The canonical order of attention_impl.h's header comment written out directly, token by token and
// head by head (positions: each cell's, or null for the cell index).
std::vector<float> canonical(const attention_case &c, const std::vector<int32_t> *positions) {
    using cpu::sum_lanes_16;
    const int64_t head_k = c.k->ne[0], head_v = c.v->ne[0], n_kv = c.k->ne[1];
    const int64_t n_tokens = c.q->ne[1], n_head = c.q->ne[2], group = n_head / c.k->ne[2];
    const int64_t padded = (head_k + 15) / 16 * 16;
    const float scale = c.softcap > 0.0f ? 0.125f / c.softcap : 0.125f;
    std::vector<float> out(size_t(head_v * n_head * n_tokens), 0.0f);
    for (int64_t t = 0; t < n_tokens; ++t) {
        const auto *m = static_cast<const float *>(c.mask->data) + t * n_kv;
        std::vector<std::pair<int64_t, int64_t>> seen;  // (position, cell)
        for (int64_t j = 0; j < n_kv; ++j)
            if (m[j] != hidden) seen.emplace_back(positions ? (*positions)[size_t(j)] : j, j);
        std::sort(seen.begin(), seen.end());
        const int64_t n = int64_t(seen.size());
        if (n == 0) continue;
        bool shared = false;
        int64_t chunks = 0;
        auto chunk_of = [](int64_t p) { return p >= 0 ? p / 16 : -((-p + 15) / 16); };
        for (int64_t i = 0; i < n; ++i) {
            shared = shared || (i > 0 && seen[size_t(i)].first == seen[size_t(i - 1)].first);
            chunks += i == 0 || chunk_of(seen[size_t(i)].first) != chunk_of(seen[size_t(i - 1)].first);
        }
        const bool by_position = !shared && chunks * 16 <= n + 64;
        const int64_t n_slots = by_position ? chunks * 16 : (n + 15) / 16 * 16;
        std::vector<int64_t> cell(size_t(n_slots), -1);
        for (int64_t i = 0, rank = -1; i < n; ++i) {
            const int64_t p = seen[size_t(i)].first;
            if (i == 0 || chunk_of(p) != chunk_of(seen[size_t(i - 1)].first)) ++rank;
            cell[size_t(by_position ? rank * 16 + (p - chunk_of(p) * 16) : i)] = seen[size_t(i)].second;
        }
        for (int64_t h = 0; h < n_head; ++h) {
            const int64_t g = h / group;
            std::vector<float> q(size_t(padded), 0.0f), x(size_t(n_slots), hidden), e(size_t(n_slots), 0.0f);
            for (int64_t d = 0; d < head_k; ++d) {
                q[size_t(d)] = float(at(*c.q, d, t, h));
                if (c.k->type == dtype::f16) q[size_t(d)] = round_f16(q[size_t(d)]);
            }
            float max = hidden;
            const std::vector<block_q8_0> q8 =
                k_in_integers(c) ? quantized_query(c, t, h) : std::vector<block_q8_0>{};
            for (int64_t s = 0; s < n_slots; ++s) {
                const int64_t j = cell[size_t(s)];
                if (j < 0) continue;
                float lanes[16] = {};
                for (int64_t d = 0; d < padded; ++d)
                    lanes[d % 16] =
                        std::fma(q[size_t(d)], d < head_k ? c.k_at(d, j, g) : 0.0f, lanes[d % 16]);
                const float dot = k_in_integers(c) ? integer_dot(c, q8, j, g) : sum_lanes_16(lanes);
                x[size_t(s)] = (c.softcap > 0.0f ? c.softcap * std::tanh(dot * scale) : dot * scale) + m[j];
                max = std::max(max, x[size_t(s)]);
            }
            double sum = 0;
            if (c.sinks) max = std::max(max, c.sinks[h]);
            for (int64_t s = 0; s < n_slots; ++s)
                if (cell[size_t(s)] >= 0) e[size_t(s)] = cpu::exp_reference(x[size_t(s)] - max);
            for (int64_t s = 0; s < n_slots; s += 16) sum += double(sum_lanes_16(&e[size_t(s)]));
            if (c.sinks) sum += double(std::exp(c.sinks[h] - max));
            const float inv = float(1.0 / sum);
            for (float &p : e) {
                p *= inv;
                if (c.v->type == dtype::f16) p = round_f16(p);
            }
            for (int64_t d = 0; d < head_v; ++d) {
                float lanes[16] = {};
                for (int64_t s = 0; s < n_slots; ++s) {
                    const int64_t j = cell[size_t(s)];
                    lanes[s % 16] = std::fma(e[size_t(s)], j < 0 ? 0.0f : c.v_at(d, j, g), lanes[s % 16]);
                }
                out[size_t((t * n_head + h) * head_v + d)] = sum_lanes_16(lanes);
            }
        }
    }
    return out;
}

// softmax(q k^T) v in double over the widened K and V values (and q as the kernel sees it)
double reference(const attention_case &c, int64_t d, int64_t h, int64_t t) {
    const int64_t head_k = c.k->ne[0], n_kv = c.k->ne[1], g = h / (c.q->ne[2] / c.k->ne[2]);
    const auto *m = static_cast<const float *>(c.mask->data) + t * n_kv;
    const std::vector<double> q = query_row(c, t, h);
    std::vector<double> s(size_t(n_kv), -INFINITY);
    double max = -INFINITY;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (m[j] == hidden) continue;
        double dot = 0;
        for (int64_t i = 0; i < head_k; ++i) dot += q[size_t(i)] * c.k_at(i, j, g);
        s[size_t(j)] =
            (c.softcap > 0.0f ? c.softcap * std::tanh(dot * 0.125 / c.softcap) : dot * 0.125) + m[j];
        max = std::max(max, s[size_t(j)]);
    }
    if (max == -INFINITY) return 0.0;  // nothing visible: zeros, sink or not
    if (c.sinks) max = std::max(max, double(c.sinks[h]));
    double sum = c.sinks ? std::exp(double(c.sinks[h]) - max) : 0.0, acc = 0;
    for (int64_t j = 0; j < n_kv; ++j) {
        if (m[j] == hidden) continue;
        const double p = std::exp(s[size_t(j)] - max);
        sum += p;
        acc += p * c.v_at(d, j, g);
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

// The scalar build (on 1 thread) and the AVX2 build (on 2) give `expected`'s bits.
void expect_scalar_and_avx2_give(tensor *out, const std::vector<float> &expected) {
    force_scalar(true);
    EXPECT_EQ(run(out, 1), expected) << "the scalar build differs";
    force_scalar(false);
    limit_to_avx2(true);
    EXPECT_EQ(run(out, 2), expected) << "the AVX2 build differs";
    limit_to_avx2(false);
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
// rows and the token's mask value copied, in order) and the rest garbage (all bits set: NaN in every
// type's values or scales) and hidden. Returns its output.
std::vector<float> run_alone(context &ctx, const attention_case &batch, int64_t t,
                             const std::vector<int64_t> &cells, int64_t n_total) {
    const int64_t head = batch.k->ne[0], n_head = batch.q->ne[2], n_head_kv = batch.k->ne[2];
    tensor *q1 = ctx.new_tensor(dtype::f32, {head, n_head, 1});
    for (int64_t h = 0; h < n_head; ++h)
        for (int64_t i = 0; i < head; ++i) tensor_set_f32(*q1, float(at(*batch.q, i, t, h)), i, h, 0);
    tensor *k1 = ctx.new_tensor(batch.k->type, {head, n_total, n_head_kv});
    tensor *v1 = ctx.new_tensor(batch.v->type, {head, n_total, n_head_kv});
    tensor *m1 = ctx.new_tensor(dtype::f32, {n_total, 1});
    const int64_t n = int64_t(cells.size());
    for (int64_t g = 0; g < n_head_kv; ++g)
        for (int64_t c = 0; c < n_total; ++c)
            for (auto [from, to] : {std::pair{batch.k, k1}, std::pair{batch.v, v1}}) {
                char *row = static_cast<char *>(to->data) + c * to->nb[1] + g * to->nb[2];
                if (c < n)
                    std::memcpy(row,
                                static_cast<const char *>(from->data) + cells[size_t(c)] * from->nb[1] +
                                    g * from->nb[2],
                                to->nb[1]);
                else
                    std::memset(row, 0xFF, to->nb[1]);
            }
    for (int64_t c = 0; c < n_total; ++c)
        tensor_set_f32(*m1, c < n ? tensor_get_f32(*batch.mask, cells[size_t(c)], t) : hidden, c, 0);
    return run(attention(ctx, permute(ctx, q1, 0, 2, 1, 3), k1, v1, m1, 0.125f), 1);
}

// A token's output does not depend on cells hidden from it (more cells, garbage in them) nor on the
// other tokens of the batch, whatever the cache type.
TEST(CpuAttention, TokenResultIsBatchInvariant) {
    const int64_t head = 64, n_head = 4, n_head_kv = 2, n_kv = 19;
    for (dtype type : attention_kv_types()) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        attention_case batch = make_case(*ctx, head, head, 9, n_head, n_head_kv, n_kv, 11, 0.0f, type, type);
        const auto batched = run(batch.out);
        const int64_t t = 4;
        // the same token alone, with a cache of 40 cells whose extra cells hold NaN and are hidden
        std::vector<int64_t> cells(static_cast<size_t>(n_kv));
        for (int64_t j = 0; j < n_kv; ++j) cells[size_t(j)] = j;
        const auto single = run_alone(*ctx, batch, t, cells, 40);
        EXPECT_EQ(std::memcmp(single.data(), &batched[size_t(t * n_head * head)], size_t(n_head * head) * 4),
                  0);
    }
}

// Tokens of 8 sequences decoded side by side, their cells interleaved in the cache (cell j belongs to
// sequence j % 8): each token gets exactly the bits it gets alone over a cache holding only its own
// sequence's cells, in order (the positions, not the cells, fix the order of the sums).
TEST(CpuAttention, SequencesSideBySideMatchTheirSoloResults) {
    const int64_t head = 64, n_head = 4, n_head_kv = 2, n_seq = 8, n_kv = 8 * 37;
    for (dtype type : attention_kv_types()) {
        SCOPED_TRACE(type_name(type));
        auto ctx = data_context();
        attention_case batch =
            make_case(*ctx, head, head, n_seq, n_head, n_head_kv, n_kv, 21, 0.0f, type, type);
        auto *m = static_cast<float *>(batch.mask->data);
        for (int64_t t = 0; t < n_seq; ++t)
            for (int64_t j = 0; j < n_kv; ++j)
                m[t * n_kv + j] = j % n_seq == t && j < n_kv - 3 * t ? 0.0f : hidden;
        // cell j holds position j / 8 of its sequence: alone, the sequence's cells are 0, 1, 2 ...
        std::vector<int32_t> pos(static_cast<size_t>(n_kv));
        for (int64_t j = 0; j < n_kv; ++j) pos[size_t(j)] = int32_t(j / n_seq);
        set_positions(*ctx, batch, pos);
        const auto batched = expect_matches_reference(
            batch.out, [&](int64_t d, int64_t h, int64_t t, int64_t) { return reference(batch, d, h, t); },
            1e-6);
        force_scalar(true);
        EXPECT_EQ(run(batch.out), batched) << "the scalar build differs";
        force_scalar(false);
        for (int64_t t = 0; t < n_seq; ++t) {
            std::vector<int64_t> cells;
            for (int64_t j = 0; j < n_kv; ++j)
                if (m[t * n_kv + j] == 0.0f) cells.push_back(j);
            const auto alone = run_alone(*ctx, batch, t, cells, int64_t(cells.size()));
            EXPECT_EQ(
                std::memcmp(alone.data(), &batched[size_t(t * n_head * head)], size_t(n_head * head) * 4), 0)
                << "token " << t;
        }
    }
}

// K and V of every cache type, alone and mixed (K and V may differ), for a block of tokens and for
// one: against the softmax of the widened values, and the same bits in the scalar, AVX2 and best
// builds.
TEST(CpuAttention, EveryCacheTypeMatchesTheReference) {
    std::vector<std::pair<dtype, dtype>> pairs;
    for (dtype t : attention_kv_types()) pairs.emplace_back(t, t);
    pairs.emplace_back(dtype::q8_0, dtype::q4_0);
    pairs.emplace_back(dtype::f16, dtype::q5_1);
    pairs.emplace_back(dtype::bf16, dtype::f32);
    for (const auto &[k_type, v_type] : pairs)
        for (int64_t n_tokens : {7, 1}) {  // one token: K and V read from the rows where the build can
            SCOPED_TRACE(std::string("K ") + type_name(k_type) + ", V " + type_name(v_type) + ", " +
                         std::to_string(n_tokens) + " tokens");
            auto ctx = data_context();
            // head_k 96 (three blocks), head_v 32; grouped heads
            const attention_case c = make_case(*ctx, 96, 32, n_tokens, 6, 2, 23, 5, 0.0f, k_type, v_type);
            const std::vector<float> best = expect_matches_reference(
                c.out, [&](int64_t d, int64_t h, int64_t t, int64_t) { return reference(c, d, h, t); }, 1e-6);
            force_scalar(true);
            const std::vector<float> scalar = run(c.out);
            force_scalar(false);
            EXPECT_EQ(best, scalar) << "the scalar build differs from the best build";
            limit_to_avx2(true);
            const std::vector<float> avx2 = run(c.out);
            limit_to_avx2(false);
            EXPECT_EQ(avx2, scalar) << "the AVX2 build differs from the scalar build";
        }
}

// gpt-oss's attention sinks: one more term per query head in the softmax's denominator, on every
// cache type, for a block of tokens and for one (read from the rows), sinks below, among and above
// the scores; the canonical order's bits in every build, the softmax with the sink in double.
TEST(CpuAttention, SinksMatchTheReferenceOnEveryCacheTypeAndBuild) {
    for (dtype type : attention_kv_types())
        for (int64_t n_tokens : {9, 1}) {
            SCOPED_TRACE(std::string(type_name(type)) + ", " + std::to_string(n_tokens) + " tokens");
            auto ctx = data_context();
            attention_case c = make_case(*ctx, 64, 32, n_tokens, 6, 2, 37, 17, 0.0f, type, type);
            std::vector<int32_t> pos(37);
            for (int32_t j = 0; j < 37; ++j) pos[size_t(j)] = (j * 17 + 5) % 37;
            tensor *positions = ctx->new_tensor(dtype::i32, {37});
            std::memcpy(positions->data, pos.data(), pos.size() * sizeof(int32_t));
            set_sinks(*ctx, c, {-3.0f, 0.0f, 0.4f, 2.5f, 8.0f, -0.7f}, positions);
            const std::vector<float> best = expect_matches_reference(
                c.out, [&](int64_t d, int64_t h, int64_t t, int64_t) { return reference(c, d, h, t); }, 1e-6);
            const std::vector<float> expected = canonical(c, &pos);
            EXPECT_EQ(std::memcmp(best.data(), expected.data(), expected.size() * sizeof(float)), 0);
            expect_scalar_and_avx2_give(c.out, best);
            // a sink far above every score takes nearly all the weight: the output nears zero
            set_sinks(*ctx, c, std::vector<float>(6, 60.0f), positions);
            for (float x : run(c.out)) EXPECT_LT(std::fabs(x), 1e-12f);
        }
}

TEST(CpuAttention, SinksOfTheWrongShapeAreRefused) {
    auto ctx = data_context();
    attention_case c = make_case(*ctx, 32, 32, 2, 4, 2, 9, 8);
    tensor *sinks = ctx->new_tensor(dtype::f32, {3});
    try {
        attention(*ctx, c.q, c.k, c.v, c.mask, 0.125f, 0.0f, nullptr, sinks);
        FAIL() << "expected an error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("sinks must be"), std::string::npos) << e.what();
    }
}

// Every build computes exactly the canonical order written out above: cells in cache order and
// shuffled (positions decide), sliding windows, cells far apart and positions shared (slots by
// rank), heads not a multiple of 16, a soft cap, one token (its scores and weighted sum read from the
// f16, q8_0 or q4_0 rows), prompts of several 64-token blocks, other cache types.
TEST(CpuAttention, EveryBuildFollowsTheCanonicalOrder) {
    struct variant {
        const char *name;
        int64_t head_k, head_v, n_tokens, n_kv;
        float softcap;
        dtype type;
        int layout;  // 0 cell index, 1 shuffled, 2 window, 3 far apart, 4 shared positions, 5 causal
    };
    const variant variants[] = {
        {"cell index", 64, 64, 9, 40, 0.0f, dtype::f16, 0},
        {"shuffled", 64, 64, 9, 40, 0.0f, dtype::f16, 1},
        {"window", 32, 32, 12, 48, 0.0f, dtype::f16, 2},
        {"far apart", 64, 64, 5, 90, 0.0f, dtype::f16, 3},
        {"shared", 64, 64, 5, 40, 0.0f, dtype::f16, 4},
        {"head 40", 40, 24, 7, 23, 0.0f, dtype::f16, 1},
        {"soft cap", 64, 64, 9, 31, 0.5f, dtype::f16, 1},
        {"two blocks", 64, 64, 150, 150, 0.0f, dtype::f16, 5},
        {"decode", 128, 64, 1, 90, 0.0f, dtype::f16, 1},
        {"f32 cache", 64, 64, 9, 40, 0.0f, dtype::f32, 1},
        {"q8_0 cache", 64, 64, 9, 40, 0.0f, dtype::q8_0, 2},
        // one token over K and V read from the q8_0 and q4_0 rows (several blocks of slots)
        {"decode q8_0", 128, 64, 1, 300, 0.0f, dtype::q8_0, 1},
        {"decode q4_0", 64, 128, 1, 200, 0.0f, dtype::q4_0, 0},
        {"decode q8_0, window", 64, 64, 1, 90, 0.0f, dtype::q8_0, 2},
        {"decode f16, far apart", 64, 32, 1, 90, 0.0f, dtype::f16, 3},
        {"q4_0 cache", 32, 64, 12, 70, 0.0f, dtype::q4_0, 1},
    };
    for (const variant &vr : variants) {
        SCOPED_TRACE(vr.name);
        auto ctx = data_context();
        attention_case c = make_case(*ctx, vr.head_k, vr.head_v, vr.n_tokens, 4, 2, vr.n_kv, 31, vr.softcap,
                                     vr.type, vr.type);
        std::vector<int32_t> pos(size_t(vr.n_kv));
        for (int64_t j = 0; j < vr.n_kv; ++j) {
            const int64_t shuffled = (j * 17 + 5) % vr.n_kv;  // 17 is prime to every n_kv here
            pos[size_t(j)] = int32_t(vr.layout == 1 || vr.layout == 2 || vr.layout == 5 ? shuffled
                                     : vr.layout == 3                                   ? 37 * j
                                     : vr.layout == 4                                   ? j / 2
                                                                                        : j);
        }
        auto *m = static_cast<float *>(c.mask->data);
        for (int64_t t = 0; t < vr.n_tokens; ++t)
            for (int64_t j = 0; j < vr.n_kv; ++j) {
                const int64_t at_pos = t + vr.n_kv / 2, p = pos[size_t(j)];
                if (vr.layout == 2) m[t * vr.n_kv + j] = p <= at_pos && at_pos - p < 8 ? 0.0f : hidden;
                if (vr.layout == 5) m[t * vr.n_kv + j] = p <= t ? 0.0f : hidden;
            }
        const bool with_positions = vr.layout != 0;
        if (with_positions) set_positions(*ctx, c, pos);
        const std::vector<float> expected = canonical(c, with_positions ? &pos : nullptr);
        const std::vector<float> best = run(c.out, 3);
        EXPECT_EQ(std::memcmp(best.data(), expected.data(), expected.size() * sizeof(float)), 0);
        expect_scalar_and_avx2_give(c.out, best);
        // and close to the exact softmax
        for (int64_t t = 0; t < vr.n_tokens; ++t)
            for (int64_t h = 0; h < 4; ++h)
                for (int64_t d = 0; d < vr.head_v; ++d)
                    EXPECT_NEAR(best[size_t((t * 4 + h) * vr.head_v + d)], reference(c, d, h, t), 2e-3);
    }
}

// One token over a long cache (decode at depth) is shared by all the threads of the node, each KV
// head's scores in pieces, its softmax by query head and its weighted sums by 32 values: the canonical
// order's bits whatever the thread count, for groups of 8 query heads (two passes) and of 3, cells in
// order and shuffled, f16 and the caches read in integers.
TEST(CpuAttention, OneTokenOverALongCacheHasTheSameBitsOnAnyThreadCount) {
    struct variant {
        const char *name;
        int64_t head_k, head_v, n_head, n_kv;
        dtype k_type, v_type;
        bool shuffled;
    };
    const variant variants[] = {
        {"f16, group 8", 64, 64, 16, 1000, dtype::f16, dtype::f16, false},
        {"f16, group 3, shuffled", 128, 64, 6, 700, dtype::f16, dtype::f16, true},
        {"q8_0, group 8", 64, 64, 16, 600, dtype::q8_0, dtype::q8_0, false},
        {"q4_0 K, f16 V, shuffled", 64, 32, 16, 400, dtype::q4_0, dtype::f16, true},
        {"head_v 48", 64, 48, 4, 300, dtype::f16, dtype::f16, false},
    };
    for (const variant &vr : variants) {
        SCOPED_TRACE(vr.name);
        auto ctx = data_context();
        attention_case c =
            make_case(*ctx, vr.head_k, vr.head_v, 1, vr.n_head, 2, vr.n_kv, 43, 0.0f, vr.k_type, vr.v_type);
        std::vector<int32_t> pos(size_t(vr.n_kv));
        for (int64_t j = 0; j < vr.n_kv; ++j)
            pos[size_t(j)] = int32_t(vr.shuffled ? (j * 17 + 5) % vr.n_kv : j);
        if (vr.shuffled) set_positions(*ctx, c, pos);
        const std::vector<float> expected = canonical(c, vr.shuffled ? &pos : nullptr);
        for (int threads : {1, 2, 3, 4, 7}) {
            const std::vector<float> got = run(c.out, threads);
            EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0)
                << threads << " threads";
        }
    }
}

// A prompt after a filled cache (prefill at depth) goes through the slots in tiles, its tokens' query
// rows together: the canonical order's bits for groups of 1, 4 and 8 query heads per KV head, cell
// counts and windows that are not multiples of the tiles, f16 and q8_0 caches, a head of 40 values,
// sinks, a soft cap; the same bits on 1 to 7 threads (the blocks shrink with more threads, and grow to
// 256 and 128 tokens on 1 and 2 over the deep cache), in the scalar and AVX2 builds, and with the
// prompt split in two batches (each batch's tokens, alone, get the same bits).
TEST(CpuAttention, PrefillAtDepthHasTheCanonicalBitsOnAnyThreadCountAndSplit) {
    struct variant {
        const char *name;
        int64_t head, n_head, n_tokens, depth, window;  // window 0: causal only
        dtype type;
        bool sinks;
        float softcap;
    };
    const variant variants[] = {
        {"group 8, f16", 64, 16, 70, 1100, 0, dtype::f16, false, 0.0f},
        {"group 4, q8_0, sinks", 64, 8, 37, 1300, 0, dtype::q8_0, true, 0.0f},
        {"group 1, head 40, window", 40, 2, 45, 1200, 700, dtype::f16, false, 0.0f},
        {"group 8, window, q8_0", 64, 16, 21, 1500, 1030, dtype::q8_0, false, 0.0f},
        {"group 4, head 16, deep, soft cap", 16, 8, 530, 4200, 0, dtype::f16, false, 0.5f},
    };
    for (const variant &vr : variants) {
        SCOPED_TRACE(vr.name);
        auto ctx = data_context(size_t(256) << 20);
        const int64_t n_kv = vr.depth + vr.n_tokens;
        attention_case c = make_case(*ctx, vr.head, vr.head, vr.n_tokens, vr.n_head, 2, n_kv, 53, vr.softcap,
                                     vr.type, vr.type);
        auto *m = static_cast<float *>(c.mask->data);
        for (int64_t t = 0; t < vr.n_tokens; ++t)
            for (int64_t j = 0; j < n_kv; ++j) {
                const int64_t at_pos = vr.depth + t;
                const bool seen = j <= at_pos && (vr.window == 0 || at_pos - j < vr.window);
                m[t * n_kv + j] = seen ? (j % 7 == 0 ? -0.5f : 0.0f) : hidden;
            }
        if (vr.sinks) {
            std::vector<float> sink_values(size_t(vr.n_head));
            for (int64_t h = 0; h < vr.n_head; ++h) sink_values[size_t(h)] = float(h % 3) - 1.0f;
            set_sinks(*ctx, c, sink_values);
        }
        const std::vector<float> expected = canonical(c, nullptr);
        for (int threads = 1; threads <= 7; ++threads) {
            const std::vector<float> got = run(c.out, threads);
            EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0)
                << threads << " threads";
        }
        expect_scalar_and_avx2_give(c.out, expected);
        // the prompt in two batches, split off the tiles' and blocks' boundaries
        const int64_t split = vr.n_tokens / 3 + 1, row = vr.head * vr.n_head;
        for (auto [t0, n] : {std::pair{int64_t(0), split}, std::pair{split, vr.n_tokens - split}}) {
            tensor *q =
                view_3d(*ctx, c.q, vr.head, n, vr.n_head, c.q->nb[1], c.q->nb[2], size_t(t0) * c.q->nb[1]);
            tensor *mask = view_2d(*ctx, c.mask, n_kv, n, c.mask->nb[1], size_t(t0) * c.mask->nb[1]);
            tensor *sinks = c.out->src[5];
            const std::vector<float> part = run(
                attention(*ctx, q, c.k, c.v, mask, c.out->param_f32(0), c.out->param_f32(1), nullptr, sinks),
                2);
            EXPECT_EQ(std::memcmp(part.data(), &expected[size_t(t0 * row)], part.size() * sizeof(float)), 0)
                << "tokens from " << t0;
        }
    }
}

// Scores spread far below their max (q scaled up: the weights' exp arguments from 0 to below -125 ln 2,
// where exp_reference's vector form leaves its short path for the subnormal and zero cases), token by
// token (few cells) and in tiles (beyond attention_untiled_slots): the canonical bits in every build.
TEST(CpuAttention, WidelySpreadScoresKeepTheCanonicalBits) {
    for (const int64_t n_kv : {int64_t(90), int64_t(1100)}) {
        SCOPED_TRACE(n_kv);
        auto ctx = data_context(size_t(64) << 20);
        attention_case c = make_case(*ctx, 64, 64, 20, 8, 1, n_kv, 71);
        auto *q = static_cast<float *>(c.q->data);
        for (int64_t i = 0; i < c.q->nelements(); ++i) q[i] *= 60.0f;
        const std::vector<float> expected = canonical(c, nullptr);
        for (int threads : {1, 2}) {
            const std::vector<float> got = run(c.out, threads);
            EXPECT_EQ(std::memcmp(got.data(), expected.data(), expected.size() * sizeof(float)), 0)
                << threads << " threads";
        }
        expect_scalar_and_avx2_give(c.out, expected);
    }
}

// exp_reference: within 2.5 ulp of e^x (its polynomial: 1.45 ulp + 0.5) where the result is normal, 0 for
// -INF and far below, +INF above 88.73, and subnormal results rounded from the exact scaling.
TEST(CpuAttention, ExpReferenceIsAccurate) {
    for (float x = -87.0f; x < 88.5f; x += 0.01234f) {
        const double exact = std::exp(double(x));
        const float got = cpu::exp_reference(x);
        EXPECT_LE(std::fabs(got - exact), 2.5 * std::ldexp(1.0, std::ilogb(exact) - 23)) << x;
    }
    for (float x = -103.0f; x < -87.5f; x += 0.137f)
        EXPECT_NEAR(cpu::exp_reference(x), std::exp(double(x)), 2e-7 * std::exp(double(x)) + 0x1p-149) << x;
    EXPECT_EQ(cpu::exp_reference(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_EQ(cpu::exp_reference(-200.0f), 0.0f);
    EXPECT_EQ(cpu::exp_reference(0.0f), 1.0f);
    EXPECT_EQ(cpu::exp_reference(89.0f), std::numeric_limits<float>::infinity());
    EXPECT_EQ(cpu::exp_reference(200.0f), std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(cpu::exp_reference(std::numeric_limits<float>::quiet_NaN())));
}

// A block type's head must hold whole blocks; the op's other types are refused by name.
TEST(CpuAttention, CacheTypesAreChecked) {
    auto ctx = data_context();
    tensor *q = ctx->new_tensor(dtype::f32, {32, 3, 4});
    tensor *mask = ctx->new_tensor(dtype::f32, {8, 3});
    tensor *k = ctx->new_tensor(dtype::q4_k, {256, 8, 2});
    tensor *q256 = ctx->new_tensor(dtype::f32, {256, 3, 4});
    tensor *v = ctx->new_tensor(dtype::f16, {32, 8, 2});
    try {
        attention(*ctx, q256, k, v, mask, 1.0f);
        FAIL() << "q4_K K accepted";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("q5_1"), std::string::npos) << e.what();  // lists the types
    }
    // a q8_0 cache [64 x 8 cells] seen as heads of 16 values: not whole blocks
    tensor *cache = ctx->new_tensor(dtype::q8_0, {64, 8});
    EXPECT_THROW(view_3d(*ctx, cache, 16, 8, 4, cache->nb[1], row_size(dtype::f16, 16), 0), error);
    EXPECT_FALSE(is_attention_kv_type(dtype::q4_k));
    EXPECT_TRUE(is_attention_kv_type(dtype::q5_1));
    EXPECT_NO_THROW(attention(*ctx, q, ctx->new_tensor(dtype::q8_0, {32, 8, 2}), v, mask, 1.0f));
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
