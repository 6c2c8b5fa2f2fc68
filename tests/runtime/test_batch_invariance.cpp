// tests/runtime/test_batch_invariance.cpp — a sequence's logits are the same bits however it is
// computed: its tokens decoded one at a time, in one ubatch, in ubatches of 3, or beside another
// sequence in the same ubatches; with 1, 2 or 3 threads. For every weight type (the interleaved
// q4_0 / q8_0 / q4_K / q6_K products, the float tiles, the other quant types' dot products), for
// the fused attention over every KV cache type, and for mixtures of experts.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common/decode_helpers.h"
#include "model/model_test_util.h"
#include "runtime/family_table.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::synth_file;

// The KV cache's K and V types.
struct cache_types {
    dtype k = dtype::f16, v = dtype::f16;
};

inference_params params(uint32_t n_ubatch, int threads, cache_types cache, uint32_t n_seq = 2) {
    inference_params p;
    p.type_k = cache.k;
    p.type_v = cache.v;
    p.n_ctx = 64;
    p.n_batch = 64;
    p.n_ubatch = n_ubatch;
    p.n_seq_max = n_seq;
    p.n_threads = p.n_threads_batch = threads;
    return p;
}

using rows = std::vector<std::vector<float>>;

rows decode_together(const model &m, const std::vector<token> &a, uint32_t n_ubatch, int threads,
                     cache_types cache, const std::vector<token> *other = nullptr) {
    inference_context ctx(m, params(n_ubatch, threads, cache));
    batch b;
    std::vector<int32_t> index_of_a;
    for (size_t i = 0; i < a.size(); ++i) {
        index_of_a.push_back(int32_t(b.n_tokens()));
        b.add(a[i], llm_pos(i), {0}, true);
        if (other && i < other->size()) b.add((*other)[i], llm_pos(i), {1}, true);
    }
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    rows r;
    for (int32_t i : index_of_a) r.emplace_back(ctx.get_logits_ith(i), ctx.get_logits_ith(i) + ctx.n_vocab());
    return r;
}

rows decode_one_by_one(const model &m, const std::vector<token> &a, int threads, cache_types cache) {
    inference_context ctx(m, params(512, threads, cache));
    rows r;
    for (const token t : a) {
        EXPECT_EQ(ctx.decode(batch::from_tokens({t})), decode_ok) << ctx.last_error();
        r.emplace_back(ctx.get_logits_ith(-1), ctx.get_logits_ith(-1) + ctx.n_vocab());
    }
    return r;
}

void expect_same_bits(const rows &want, const rows &got, const std::string &how) {
    ASSERT_EQ(want.size(), got.size()) << how;
    for (size_t i = 0; i < want.size(); ++i)
        EXPECT_EQ(std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)), 0)
            << how << ": logits of position " << i << " differ";
}

synth_spec spec_of(dtype type) {
    synth_spec s;
    s.n_embd = 256;  // a K-quant super-block per row
    s.n_layer = 2;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.n_ff = 512;
    s.n_vocab = 300;
    s.type = type;
    return s;
}

void expect_batch_and_thread_invariant(const synth_spec &s, const std::string &stem, cache_types cache = {}) {
    synth_file f(stem, s);
    auto m = model::load(f.path());
    const auto a = test::spread_tokens(13, 300, 1), other = test::spread_tokens(9, 300, 2);

    const rows alone = decode_one_by_one(*m, a, 2, cache);
    expect_same_bits(alone, decode_together(*m, a, 512, 2, cache), "one ubatch");
    expect_same_bits(alone, decode_together(*m, a, 3, 2, cache), "ubatches of 3");
    expect_same_bits(alone, decode_together(*m, a, 512, 2, cache, &other), "beside another sequence");
    expect_same_bits(alone, decode_together(*m, a, 5, 3, cache, &other),
                     "beside another sequence, ubatches of 5, 3 threads");
    expect_same_bits(alone, decode_one_by_one(*m, a, 1, cache), "one thread");
}

class EveryWeightType : public ::testing::TestWithParam<dtype> {};

TEST_P(EveryWeightType, LogitsAreBatchAndThreadInvariant) {
    expect_batch_and_thread_invariant(spec_of(GetParam()),
                                      std::string("batch-invariance-") + type_name(GetParam()));
}

// Mixtures of experts: which tokens share an expert changes with the batch, each token's products
// must not (llama with 8 experts, 3 used; qwen2moe with its shared expert; qwen3moe with renormalized
// weights; deepseek2 with latent attention and sigmoid gating with a selection bias).
TEST(MixtureOfExperts, LogitsAreBatchAndThreadInvariant) {
    for (const char *arch : {"llama", "qwen2moe", "qwen3moe", "deepseek2"})
        for (dtype type : {dtype::f32, dtype::q8_0, dtype::q4_k}) {
            // deepseek2's latent ranks (embd / 2) are rows shorter than a K-quant super-block
            if (std::string(arch) == "deepseek2" && type == dtype::q4_k) continue;
            SCOPED_TRACE(std::string(arch) + " " + type_name(type));
            synth_spec s = spec_of(type);
            s.arch = arch;
            s.n_ff = 256;
            s.n_expert = 8;
            s.n_expert_used = 3;
            expect_batch_and_thread_invariant(
                s, std::string("batch-invariance-moe-") + arch + "-" + type_name(type));
        }
}

// Gemma 3: six layers, five of them with windows of 4 (shorter than the sequences) and a RoPE base
// of their own, one global with linearly scaled RoPE.
TEST(SlidingWindows, Gemma3LogitsAreBatchAndThreadInvariant) {
    for (dtype type : {dtype::f32, dtype::q8_0}) {
        SCOPED_TRACE(type_name(type));
        synth_spec s = spec_of(type);
        s.arch = "gemma3";
        s.n_layer = 6;
        expect_batch_and_thread_invariant(s, std::string("batch-invariance-gemma3-") + type_name(type));
    }
}

// Every family checked against the 2026 reference engine (family_table.h), at its tiny shape, F32 and
// Q8_0: each architecture's own graph (windows, NoPE layers, routers, state-space scans) in every split.
TEST(FamilyTable, LogitsAreBatchAndThreadInvariant) {
    for (const test::family_case &f : test::families())
        for (dtype type : {dtype::f32, dtype::q8_0}) {
            SCOPED_TRACE(f.name() + " " + type_name(type));
            expect_batch_and_thread_invariant(f.spec(type),
                                              "batch-invariance-family-" + f.name() + "-" + type_name(type));
        }
}

// Every KV cache type (heads of 64: whole blocks), and K and V of different types: a row's quantized
// bytes depend on that row alone, and attention widens them the same way in every split.
class EveryCacheType : public ::testing::TestWithParam<std::pair<dtype, dtype>> {};

TEST_P(EveryCacheType, LogitsAreBatchAndThreadInvariant) {
    const auto [k, v] = GetParam();
    expect_batch_and_thread_invariant(
        spec_of(dtype::q8_0), std::string("batch-invariance-cache-") + type_name(k) + "-" + type_name(v),
        {k, v});
}

INSTANTIATE_TEST_SUITE_P(
    Caches, EveryCacheType,
    ::testing::Values(std::pair{dtype::f32, dtype::f32}, std::pair{dtype::bf16, dtype::bf16},
                      std::pair{dtype::q8_0, dtype::q8_0}, std::pair{dtype::q4_0, dtype::q4_0},
                      std::pair{dtype::q4_1, dtype::q4_1}, std::pair{dtype::q5_0, dtype::q5_0},
                      std::pair{dtype::q5_1, dtype::q5_1}, std::pair{dtype::q8_0, dtype::q4_0},
                      std::pair{dtype::f16, dtype::q5_1}),
    [](const auto &info) {
        return std::string("K_") + type_name(info.param.first) + "_V_" + type_name(info.param.second);
    });

INSTANTIATE_TEST_SUITE_P(Types, EveryWeightType,
                         ::testing::Values(dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0,
                                           dtype::q4_1, dtype::q5_0, dtype::q5_1, dtype::q2_k, dtype::q3_k,
                                           dtype::q4_k, dtype::q5_k, dtype::q6_k, dtype::iq4_nl,
                                           dtype::iq4_xs, dtype::tq1_0, dtype::tq2_0),
                         [](const auto &info) { return std::string(type_name(info.param)); });

}  // namespace
}  // namespace weft
