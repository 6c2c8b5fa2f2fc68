// tests/runtime/test_context.cpp — decode on synthetic models: splits, sequences, KV, reuse, errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "weft/core/profile.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace {

using test::decoder_architectures;

using test::synth_file;

using test::all_logits;
using test::max_rel_diff;
using test::params_with;
using test::same_logits;
using test::small_spec;
using test::some_tokens;

class EveryArchitecture : public ::testing::TestWithParam<std::string> {};

// One batch, ubatches of 1, 3 and 7 tokens, and one decode call per token give the same logits.
TEST_P(EveryArchitecture, UbatchSplitsAndTokenByTokenAgree) {
    synth_file f("ctx-split-" + GetParam(), small_spec(GetParam()));
    auto m = model::load(f.path());
    const auto toks = some_tokens(20, 300);

    inference_context whole(*m, params_with(64, 512));
    const auto ref = all_logits(whole, toks);

    for (uint32_t ub : {1u, 3u, 7u}) {
        SCOPED_TRACE("n_ubatch " + std::to_string(ub));
        inference_context ctx(*m, params_with(64, ub));
        const auto got = all_logits(ctx, toks);
        for (size_t i = 0; i < toks.size(); ++i)
            EXPECT_LT(max_rel_diff(ref[i], got[i].data()), same_logits) << "pos " << i;
    }

    inference_context one_by_one(*m, params_with(64, 512));
    for (size_t i = 0; i < toks.size(); ++i) {
        ASSERT_EQ(one_by_one.decode(batch::from_tokens({toks[i]})), decode_ok) << one_by_one.last_error();
        EXPECT_LT(max_rel_diff(ref[i], one_by_one.get_logits_ith(-1)), same_logits) << "pos " << i;
    }
    EXPECT_EQ(one_by_one.kv_seq_pos_max(0), 19);
}

TEST_P(EveryArchitecture, F32CacheAgreesWithF16Cache) {
    synth_file f("ctx-kvtype-" + GetParam(), small_spec(GetParam()));
    auto m = model::load(f.path());
    const auto toks = some_tokens(9, 300);
    inference_context a(*m, params_with(32, 512));
    inference_params p = params_with(32, 512);
    p.type_k = p.type_v = dtype::f32;
    inference_context b(*m, p);
    const auto ra = all_logits(a, toks), rb = all_logits(b, toks);
    for (size_t i = 0; i < toks.size(); ++i) EXPECT_LT(max_rel_diff(ra[i], rb[i].data()), 1e-2);
}

// The generative architectures (the encoder, bert, is checked against its fixture).

INSTANTIATE_TEST_SUITE_P(Registered, EveryArchitecture, ::testing::ValuesIn(decoder_architectures()));

TEST(Context, TwoSequencesInOneBatchEqualEachAlone) {
    synth_file f("ctx-two-seqs", small_spec());
    auto m = model::load(f.path());
    const auto a = some_tokens(6, 300, 1), b = some_tokens(9, 300, 2);

    inference_context alone_a(*m, params_with(64, 512)), alone_b(*m, params_with(64, 512));
    const auto ra = all_logits(alone_a, a), rb = all_logits(alone_b, b);

    inference_context both(*m, params_with(64, 4, 2));  // ubatches of 4 mix the two sequences
    batch mixed;
    size_t ia = 0, ib = 0;
    std::vector<std::pair<int, size_t>> order;
    while (ia < a.size() || ib < b.size()) {
        if (ia < a.size()) mixed.add(a[ia], llm_pos(ia), {0}, true), order.push_back({0, ia++});
        if (ib < b.size()) mixed.add(b[ib], llm_pos(ib), {1}, true), order.push_back({1, ib++});
    }
    ASSERT_EQ(both.decode(mixed), decode_ok) << both.last_error();
    for (size_t i = 0; i < order.size(); ++i) {
        const auto &[seq, pos] = order[i];
        const auto &ref = seq == 0 ? ra[pos] : rb[pos];
        EXPECT_LT(max_rel_diff(ref, both.get_logits_ith(int32_t(i))), same_logits)
            << "seq " << seq << " pos " << pos;
    }
    EXPECT_EQ(both.kv_seq_pos_max(0), 5);
    EXPECT_EQ(both.kv_seq_pos_max(1), 8);
}

TEST(Context, SeqRmThenRedecodeGivesTheSameLogits) {
    synth_file f("ctx-seq-rm", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(64, 512));
    const auto prompt = some_tokens(10, 300, 3);
    const auto tail = some_tokens(4, 300, 4);
    ASSERT_EQ(ctx.decode(batch::from_tokens(prompt)), decode_ok);
    ASSERT_EQ(ctx.decode(batch::from_tokens(tail)), decode_ok);
    const std::vector<float> first(ctx.get_logits_ith(-1), ctx.get_logits_ith(-1) + ctx.n_vocab());

    // something else after the prompt, then take it back
    ASSERT_TRUE(ctx.kv_seq_rm(0, 10, -1));
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 9);
    ASSERT_EQ(ctx.decode(batch::from_tokens(some_tokens(7, 300, 5))), decode_ok);
    ASSERT_TRUE(ctx.kv_seq_rm(0, 10, -1));
    EXPECT_EQ(ctx.kv_used_cells(), 10u);

    ASSERT_EQ(ctx.decode(batch::from_tokens(tail)), decode_ok);
    EXPECT_LT(max_rel_diff(first, ctx.get_logits_ith(-1)), same_logits);
}

TEST(Context, SeqCpSharesAPrefixAndSeqKeepDropsTheRest) {
    synth_file f("ctx-seq-cp", small_spec());
    auto m = model::load(f.path());
    const auto prompt = some_tokens(8, 300, 6);
    const auto tail = some_tokens(3, 300, 7);

    inference_context ref_ctx(*m, params_with(64, 512));
    ASSERT_EQ(ref_ctx.decode(batch::from_tokens(prompt)), decode_ok);
    ASSERT_EQ(ref_ctx.decode(batch::from_tokens(tail)), decode_ok);
    const std::vector<float> ref(ref_ctx.get_logits_ith(-1), ref_ctx.get_logits_ith(-1) + ref_ctx.n_vocab());

    inference_context ctx(*m, params_with(64, 512, 2));
    ASSERT_EQ(ctx.decode(batch::from_tokens(prompt)), decode_ok);
    ctx.kv_seq_cp(0, 1, -1, -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(1), 7);
    EXPECT_EQ(ctx.kv_used_cells(), 8u);  // shared cells, not copies
    batch b;
    for (size_t i = 0; i < tail.size(); ++i) b.add(tail[i], llm_pos(8 + i), {1}, i + 1 == tail.size());
    ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    EXPECT_LT(max_rel_diff(ref, ctx.get_logits_ith(-1)), same_logits);

    ctx.kv_seq_keep(1);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), -1);
    EXPECT_EQ(ctx.kv_seq_pos_min(1), 0);
    EXPECT_EQ(ctx.kv_seq_pos_max(1), 10);
    ctx.kv_clear();
    EXPECT_EQ(ctx.kv_used_cells(), 0u);
}

TEST(Context, InvalidBatchesAreRejectedWithoutChanges) {
    synth_file f("ctx-invalid", small_spec());
    auto m = model::load(f.path());
    inference_params p = params_with(64, 512, 2);
    p.n_batch = 16;
    inference_context ctx(*m, p);
    ASSERT_EQ(ctx.decode(batch::from_tokens({1, 5, 9})), decode_ok);

    auto expect_invalid = [&](const batch &b, const std::string &fragment) {
        EXPECT_EQ(ctx.decode(b), decode_invalid);
        EXPECT_NE(ctx.last_error().find(fragment), std::string::npos) << ctx.last_error();
        EXPECT_EQ(ctx.kv_used_cells(), 3u);
        EXPECT_EQ(ctx.kv_seq_pos_max(0), 2);
    };
    expect_invalid(batch{}, "no tokens");
    expect_invalid(batch::from_tokens({4, 300}), "outside the vocabulary");
    expect_invalid(batch::from_tokens({4, -1}), "outside the vocabulary");
    batch bad_seq;
    bad_seq.add(4, 3, {2}, true);
    expect_invalid(bad_seq, "sequence id 2");
    batch backwards;
    backwards.add(4, 2, {0}, true);  // position 2 is already in sequence 0
    expect_invalid(backwards, "not after");
    batch unordered;
    unordered.add(4, 5, {0}, false);
    unordered.add(5, 4, {0}, true);
    expect_invalid(unordered, "not after");
    batch sizes = batch::from_tokens({4, 5});
    sizes.pos = {3};
    expect_invalid(sizes, "pos has 1 entries");
    expect_invalid(batch::from_tokens(some_tokens(17, 300)), "exceed n_batch");
    batch both = batch::from_tokens({4});
    both.embd.assign(64, 0.0f);
    expect_invalid(both, "both tokens and embeddings");

    // and the context still works
    ASSERT_EQ(ctx.decode(batch::from_tokens({4})), decode_ok);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 3);
}

TEST(Context, ABatchThatDoesNotFitChangesNothing) {
    synth_file f("ctx-full", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(16, 4));
    ASSERT_EQ(ctx.decode(batch::from_tokens(some_tokens(10, 300))), decode_ok);
    const std::vector<float> before(ctx.get_logits_ith(-1), ctx.get_logits_ith(-1) + ctx.n_vocab());
    EXPECT_EQ(ctx.decode(batch::from_tokens(some_tokens(7, 300))), decode_no_kv_space);
    EXPECT_NE(ctx.last_error().find("KV cache"), std::string::npos);
    EXPECT_EQ(ctx.kv_used_cells(), 10u);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 9);
    EXPECT_EQ(ctx.decode(batch::from_tokens(some_tokens(6, 300))), decode_ok);  // exactly fills it
    EXPECT_EQ(ctx.kv_used_cells(), 16u);
}

TEST(Context, DecodeReusesTheGraphAndNeverGrowsMemory) {
    synth_file f("ctx-reuse", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(128, 16));
    const size_t reserved = ctx.compute_buffer_bytes();
    EXPECT_GT(reserved, 0u);
    ASSERT_EQ(ctx.decode(batch::from_tokens(some_tokens(40, 300))), decode_ok);  // 16 + 16 + 8
    token t = 3;
    for (int i = 0; i < 10; ++i) {
        ASSERT_EQ(ctx.decode(batch::from_tokens({t})), decode_ok);
        t = token(std::max_element(ctx.get_logits_ith(-1), ctx.get_logits_ith(-1) + ctx.n_vocab()) -
                  ctx.get_logits_ith(-1));
    }
    const inference_perf p = ctx.perf();
    EXPECT_EQ(p.n_p_eval, 40);
    EXPECT_EQ(p.n_eval, 10);
    EXPECT_GE(p.n_graph_reuses, 10);  // the second 16-token ubatch and 9 of the single tokens
    EXPECT_LE(p.n_graph_builds, 3);
    EXPECT_EQ(ctx.compute_grow_count(), 0);
    EXPECT_EQ(ctx.compute_buffer_bytes(), reserved);
}

TEST(Context, LogitsOnlyForTokensThatAskedForThem) {
    synth_file f("ctx-logits", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(64, 512));
    ASSERT_EQ(ctx.decode(batch::from_tokens({1, 2, 3, 4})), decode_ok);
    EXPECT_EQ(ctx.n_outputs(), 1);
    EXPECT_EQ(ctx.get_logits_ith(3), ctx.get_logits_ith(-1));
    EXPECT_THROW(ctx.get_logits_ith(0), error);
    EXPECT_THROW(ctx.get_logits_ith(4), error);
    EXPECT_THROW(ctx.get_logits_ith(-2), error);

    batch b;  // no output at all
    b.add(5, 4, {0}, false);
    b.add(6, 5, {0}, false);
    ASSERT_EQ(ctx.decode(b), decode_ok);
    EXPECT_EQ(ctx.n_outputs(), 0);
    EXPECT_THROW(ctx.get_logits_ith(-1), error);
}

TEST(Context, EmbeddingInputEqualsTokenInput) {
    synth_file f("ctx-embd", small_spec());
    auto m = model::load(f.path());
    const auto toks = some_tokens(5, 300, 9);
    const tensor *tok_embd = m->weights().tok_embd;  // f32 [n_embd, n_vocab]
    ASSERT_EQ(tok_embd->type, dtype::f32);
    std::vector<float> embd;
    for (token t : toks) {
        const float *row = static_cast<const float *>(tok_embd->data) + size_t(t) * 64;
        embd.insert(embd.end(), row, row + 64);
    }
    inference_context a(*m, params_with(32, 512)), b(*m, params_with(32, 512));
    ASSERT_EQ(a.decode(batch::from_tokens(toks)), decode_ok);
    ASSERT_EQ(b.decode(batch::from_embeddings(embd, 5)), decode_ok) << b.last_error();
    const std::vector<float> ra(a.get_logits_ith(-1), a.get_logits_ith(-1) + a.n_vocab());
    EXPECT_LT(max_rel_diff(ra, b.get_logits_ith(-1)), same_logits);
}

TEST(Context, AbortRollsTheBatchBack) {
    synth_file f("ctx-abort", small_spec());
    auto m = model::load(f.path());
    bool stop = false;
    inference_params p = params_with(32, 4);
    p.abort_callback = [&] { return stop; };
    inference_context ctx(*m, p);
    ASSERT_EQ(ctx.decode(batch::from_tokens({1, 2, 3})), decode_ok);
    const std::vector<kv_cell> before = ctx.kv().cells();
    stop = true;
    EXPECT_EQ(ctx.decode(batch::from_tokens(some_tokens(10, 300))), decode_aborted);
    EXPECT_EQ(ctx.kv_used_cells(), 3u);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 2);
    // every cell as it was (the aborted batch's cells emptied again)
    ASSERT_EQ(ctx.kv().cells().size(), before.size());
    for (size_t c = 0; c < before.size(); ++c) {
        const kv_cell &now = ctx.kv().cells()[c];
        EXPECT_TRUE(now.pos == before[c].pos && now.seq_mask == before[c].seq_mask &&
                    now.delta == before[c].delta)
            << "cell " << c;
    }
    stop = false;
    EXPECT_EQ(ctx.decode(batch::from_tokens({4})), decode_ok);
}

TEST(Context, EvalCallbackSeesNamedNodes) {
    synth_file f("ctx-cb", small_spec());
    auto m = model::load(f.path());
    std::vector<std::string> seen;
    inference_params p = params_with(32, 512);
    p.cb_eval = [&](tensor *t, bool ask) {
        if (!ask) seen.emplace_back(t->name);
        return true;
    };
    inference_context ctx(*m, p);
    ASSERT_EQ(ctx.decode(batch::from_tokens({1, 2})), decode_ok);
    EXPECT_NE(std::find(seen.begin(), seen.end(), "attn_norm-0"), seen.end());
    EXPECT_NE(std::find(seen.begin(), seen.end(), "result_output"), seen.end());
}

TEST(Context, ReadInsteadOfMappedGivesTheSameLogits) {
    synth_file f("ctx-no-mmap", small_spec("qwen2"));
    model_params mp;
    mp.use_mmap = false;
    auto mapped = model::load(f.path());
    auto read = model::load(f.path(), mp);
    const auto toks = some_tokens(6, 300, 11);
    inference_context a(*mapped, params_with(32, 512)), b(*read, params_with(32, 512));
    const auto ra = all_logits(a, toks), rb = all_logits(b, toks);
    for (size_t i = 0; i < toks.size(); ++i) EXPECT_EQ(ra[i], rb[i]) << "pos " << i;
}

TEST(Context, VocabularyOnlyModelCannotRun) {
    synth_file f("ctx-vocab-only", small_spec());
    model_params mp;
    mp.vocab_only = true;
    auto m = model::load(f.path(), mp);
    EXPECT_THROW(inference_context(*m, params_with(32, 512)), error);
}

TEST(Context, DescribeGraphPlansWithoutRunning) {
    synth_file f("ctx-describe", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(64, 512));
    std::ostringstream dot;
    const auto r = ctx.describe_graph(8, &dot);
    EXPECT_GT(r.n_nodes, 20u);
    EXPECT_GT(r.n_leafs, 10u);
    EXPECT_GT(r.planned_bytes, 0u);
    EXPECT_NE(std::find_if(r.ops.begin(), r.ops.end(), [](const auto &o) { return o.first == "mul_mat"; }),
              r.ops.end());
    EXPECT_NE(dot.str().find("digraph"), std::string::npos);
    EXPECT_EQ(ctx.kv_used_cells(), 0u);
}

}  // namespace
}  // namespace weft

namespace weft {
namespace {

// A profile set on the context sees every computed node of every graph it runs.
TEST(Context, ProfileCountsGraphsAndNodes) {
    test::synth_file f("ctx-profile", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(64, 512));
    op_profile prof;
    ctx.set_profile(&prof);
    ASSERT_EQ(ctx.decode(batch::from_tokens(some_tokens(5, 300))), decode_ok) << ctx.last_error();
    ASSERT_EQ(ctx.decode(batch::from_tokens({7})), decode_ok) << ctx.last_error();
    ctx.set_profile(nullptr);
    ASSERT_EQ(ctx.decode(batch::from_tokens({8})), decode_ok) << ctx.last_error();
    EXPECT_EQ(prof.graphs(), 2);
    int64_t attention_calls = 0, mul_mats = 0;
    for (const auto &r : prof.rows()) {
        if (r.op == "attention") attention_calls = r.calls;
        if (r.op == "mul_mat") mul_mats += r.calls;
    }
    EXPECT_EQ(attention_calls, 2 * 2);  // 2 layers, 2 graphs
    EXPECT_GT(mul_mats, 0);
    EXPECT_GT(prof.total_ns(), 0.0);
    EXPECT_NE(prof.format("t").find("| attention | - | 4 |"), std::string::npos) << prof.format("t");
    // two threads (params_with): each op's threads' time is twice its wall time, of which some was
    // measured busy and the rest waiting
    for (const auto &r : prof.rows()) {
        EXPECT_DOUBLE_EQ(r.thread_ns, 2 * r.ns) << r.op;
        EXPECT_GT(r.busy_ns, 0.0) << r.op;
        EXPECT_GE(r.serial_fraction(), 0.0) << r.op;
        EXPECT_LE(r.serial_fraction(), 1.0) << r.op;
    }
    EXPECT_NE(prof.format("t").find("| share | serial |"), std::string::npos) << prof.format("t");
}

// The serial fraction of an op: the share of its threads' time they spent waiting.
TEST(Context, ProfileSerialFractionIsTheThreadsWaitingShare) {
    tensor node{};
    node.op = op_kind::add;
    node.type = dtype::f32;
    node.ne[0] = node.ne[1] = node.ne[2] = node.ne[3] = 1;
    op_profile prof;
    prof.add(node, 100.0, 100.0, 2);  // one of two threads busy all along: half the time waiting
    ASSERT_EQ(prof.rows().size(), 1u);
    EXPECT_DOUBLE_EQ(prof.rows()[0].serial_fraction(), 0.5);
    prof.add(node, 100.0, 400.0, 4);  // four threads busy to the end
    EXPECT_DOUBLE_EQ(prof.rows()[0].serial_fraction(), 1.0 - 500.0 / 600.0);
    EXPECT_DOUBLE_EQ(prof.serial_fraction(), 1.0 - 500.0 / 600.0);
    prof.reset();
    prof.add(node, 100.0);  // busy time not measured: all threads taken as busy
    EXPECT_DOUBLE_EQ(prof.serial_fraction(), 0.0);
}

}  // namespace
}  // namespace weft
