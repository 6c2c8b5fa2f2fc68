// tests/runtime/test_hybrid_memory.cpp — the memory interface's three kinds, and the hybrid end to end
// on lfm2 (short-convolution layers keeping states, attention layers a KV cache): the same bits
// however a sequence is batched or threaded; sequence edits that succeed only as both parts allow and
// change nothing when refused; rollback of an aborted batch in both parts; saved state; the clear
// refusals that name the hybrid. (The serving engine on it: tests/serving/test_engine_recurrent.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "runtime/recurrent_test_util.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"
#include "weft/runtime/memory.h"

namespace weft {
namespace {

using test::continue_seq;
using test::expect_same_bits;
using test::synth_file;

// Four layers: convolutions at 0, 1 and 3, attention at 2.
synth_spec tiny_lfm2(dtype type = dtype::f32) {
    synth_spec s = test::small_spec("lfm2");
    s.n_layer = 4;
    s.n_vocab = 280;
    s.type = type;
    return s;
}

inference_params hybrid_params(uint32_t n_ubatch = 512, int threads = 2, uint32_t n_seq_max = 2,
                               uint32_t n_ctx = 64) {
    return test::recurrent_params(n_ubatch, threads, n_seq_max, n_ctx);
}

TEST(MemoryKinds, EachModelGetsTheMemoryItsLayersNeed) {
    const struct {
        synth_spec spec;
        memory_kind kind;
    } cases[] = {{test::small_spec("llama"), memory_kind::attention},
                 {[] {
                      synth_spec s = test::small_spec("mamba");
                      s.n_vocab = 280;
                      return s;
                  }(),
                  memory_kind::recurrent},
                 {tiny_lfm2(), memory_kind::hybrid}};
    for (const auto &c : cases) {
        synth_file f("memory-kind-" + c.spec.arch, c.spec);
        const auto m = model::load(f.path());
        inference_context ctx(*m, hybrid_params());
        EXPECT_EQ(ctx.memory().kind(), c.kind) << c.spec.arch;
        EXPECT_EQ(ctx.memory().attention() != nullptr, c.kind != memory_kind::recurrent) << c.spec.arch;
        EXPECT_EQ(ctx.memory().recurrent() != nullptr, c.kind != memory_kind::attention) << c.spec.arch;
        EXPECT_EQ(ctx.is_recurrent(), c.kind != memory_kind::attention) << c.spec.arch;
    }
}

TEST(HybridMemory, TheKvCacheHoldsOnlyTheAttentionLayers) {
    synth_file f("lfm2-layers", tiny_lfm2());
    const auto m = model::load(f.path());
    ASSERT_TRUE(m->hparams().hybrid());
    inference_context ctx(*m, hybrid_params());
    const kv_cache &kv = ctx.kv();
    for (int64_t il = 0; il < 4; ++il)
        EXPECT_EQ(kv.layers()[size_t(il)].k != nullptr, il == 2) << "layer " << il;
}

TEST(HybridInvariance, SameBitsHoweverBatchedOrThreaded) {
    for (const dtype type : {dtype::f32, dtype::q8_0}) {
        synth_file f(std::string("lfm2-inv-") + type_name(type), tiny_lfm2(type));
        const auto m = model::load(f.path());
        test::expect_invariant(*m, test::spread_tokens(11, 280, 1), test::spread_tokens(7, 280, 2),
                               type_name(type));
    }
}

class HybridState : public ::testing::Test {
  protected:
    HybridState() : file_("lfm2-state", tiny_lfm2()), model_(model::load(file_.path())) {}
    synth_file file_;
    std::unique_ptr<model> model_;
};

TEST_F(HybridState, RemovingPartOfASequenceIsRefusedAndChangesNothing) {
    inference_context ctx(*model_, hybrid_params());
    const std::vector<token> prompt = test::spread_tokens(6, 280, 3), next = test::spread_tokens(2, 280, 4);
    continue_seq(ctx, prompt);
    const uint32_t used = ctx.kv_used_cells();
    EXPECT_EQ(used, 6u);
    // the KV cache could drop a tail, the convolution states cannot: refused before either changes
    EXPECT_FALSE(ctx.kv_seq_rm(0, 3, -1));
    EXPECT_FALSE(ctx.kv_seq_rm(0, 0, 3));
    EXPECT_EQ(ctx.kv_used_cells(), used);
    EXPECT_EQ(ctx.kv_seq_pos_min(0), 0);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 5);

    inference_context fresh(*model_, hybrid_params());
    continue_seq(fresh, prompt);
    expect_same_bits(continue_seq(fresh, next), continue_seq(ctx, next), "after refused removals");

    EXPECT_TRUE(ctx.kv_seq_rm(0, -1, -1));
    EXPECT_EQ(ctx.kv_seq_pos_max(0), -1);
    EXPECT_EQ(ctx.kv_used_cells(), 0u);
    inference_context again(*model_, hybrid_params());
    expect_same_bits(continue_seq(again, prompt), continue_seq(ctx, prompt), "after removing everything");
}

TEST_F(HybridState, CopyKeepAndClear) {
    inference_context ctx(*model_, hybrid_params(512, 2, 3));
    const std::vector<token> prompt = test::spread_tokens(5, 280, 5), next = test::spread_tokens(3, 280, 6);
    continue_seq(ctx, prompt, 0);
    ctx.kv_seq_cp(0, 1, -1, -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(1), 4);
    EXPECT_THROW(ctx.kv_seq_cp(0, 2, 0, 3), error);  // a part of a state: refused before the KV part
    EXPECT_EQ(ctx.kv_seq_pos_max(2), -1);
    EXPECT_EQ(ctx.kv_used_cells(), 5u);
    const std::vector<float> from0 = continue_seq(ctx, next, 0);
    expect_same_bits(from0, continue_seq(ctx, next, 1), "a copied sequence continues as its source");

    continue_seq(ctx, prompt, 2);
    ctx.kv_seq_keep(2);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(1), -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(2), 4);
    inference_context fresh(*model_, hybrid_params(512, 2, 3));
    expect_same_bits(continue_seq(fresh, prompt, 0), continue_seq(ctx, prompt, 0),
                     "a kept-out sequence restarts");

    ctx.kv_clear();
    EXPECT_EQ(ctx.kv_used_cells(), 0u);
    inference_context fresh2(*model_, hybrid_params(512, 2, 3));
    expect_same_bits(continue_seq(fresh2, prompt, 1), continue_seq(ctx, prompt, 1), "after clear");
}

TEST_F(HybridState, SavedStateContinuesBitForBit) {
    const std::vector<token> prompt = test::spread_tokens(7, 280, 7), next = test::spread_tokens(3, 280, 8);
    inference_context ctx(*model_, hybrid_params());
    continue_seq(ctx, prompt, 0);
    continue_seq(ctx, test::spread_tokens(4, 280, 9), 1);
    const std::vector<uint8_t> whole = ctx.state_save(prompt, "user");
    const std::vector<uint8_t> seq1 = ctx.seq_state_save(1);
    const std::vector<float> want0 = continue_seq(ctx, next, 0);
    const std::vector<float> want1 = continue_seq(ctx, next, 1);

    inference_context loaded(*model_, hybrid_params());
    const auto st = loaded.state_load(whole);
    EXPECT_EQ(st.tokens, prompt);
    EXPECT_EQ(loaded.kv_seq_pos_max(0), 6);
    EXPECT_EQ(loaded.kv_seq_pos_max(1), 3);
    expect_same_bits(want0, continue_seq(loaded, next, 0), "whole state, sequence 0");
    expect_same_bits(want1, continue_seq(loaded, next, 1), "whole state, sequence 1");

    inference_context one(*model_, hybrid_params());
    continue_seq(one, prompt, 0);
    one.seq_state_load(seq1, 0);  // sequence 1's cells and states into sequence 0, replacing it
    EXPECT_EQ(one.kv_seq_pos_min(0), 0);
    EXPECT_EQ(one.kv_seq_pos_max(0), 3);
    EXPECT_EQ(one.kv_used_cells(), 4u);
    expect_same_bits(want1, continue_seq(one, next, 0), "one sequence's state");

    // a truncated state changes nothing
    inference_context untouched(*model_, hybrid_params());
    continue_seq(untouched, prompt, 0);
    EXPECT_THROW(untouched.state_load(std::span<const uint8_t>(whole.data(), whole.size() - 9)), error);
    EXPECT_EQ(untouched.kv_seq_pos_max(0), 6);
    EXPECT_EQ(untouched.kv_used_cells(), 7u);
}

// Aborted part way through the first ubatch and in a later one: the KV cells the batch took are free
// again and the convolution states are as before the call.
TEST_F(HybridState, AnAbortedBatchLeavesBothPartsAsTheyWere) {
    for (const int abort_after_polls : {20, 90}) {
        SCOPED_TRACE("aborted after " + std::to_string(abort_after_polls) + " polls");
        std::atomic<int> polls{0};
        std::atomic<bool> armed{false};
        inference_params p = hybrid_params(3);
        p.abort_callback = [&] { return armed.load() && ++polls > abort_after_polls; };
        inference_context ctx(*model_, p);
        const std::vector<token> prompt = test::spread_tokens(5, 280, 10),
                                 more = test::spread_tokens(8, 280, 11);
        continue_seq(ctx, prompt);
        armed = true;
        batch b;
        for (size_t i = 0; i < more.size(); ++i) b.add(more[i], llm_pos(5 + i), {0}, i + 1 == more.size());
        EXPECT_EQ(ctx.decode(b), decode_aborted);
        EXPECT_EQ(ctx.kv_seq_pos_max(0), 4);
        EXPECT_EQ(ctx.kv_used_cells(), 5u);
        armed = false;

        inference_context fresh(*model_, hybrid_params(3));
        continue_seq(fresh, prompt);
        expect_same_bits(continue_seq(fresh, more), continue_seq(ctx, more), "after the aborted batch");
    }
}

TEST_F(HybridState, WhatAHybridModelCannotDoIsRefusedClearly) {
    inference_context ctx(*model_, hybrid_params(512, 2, 2, 8));
    EXPECT_FALSE(ctx.can_shift());
    try {
        ctx.kv_seq_add(0, 0, -1, -2);
        ADD_FAILURE() << "kv_seq_add moved a hybrid model's positions";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("hybrid"), std::string::npos) << e.what();
    }
    batch shared;  // a token of two sequences: one state cannot advance for both
    shared.add(5, 0, {0, 1}, true);
    EXPECT_EQ(ctx.decode(shared), decode_invalid);
    // the KV cells bound the context
    continue_seq(ctx, test::spread_tokens(6, 280, 12), 0);
    EXPECT_EQ(ctx.decode(batch::from_tokens(test::spread_tokens(3, 280, 13))), decode_no_kv_space);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 5);
    EXPECT_EQ(ctx.kv_used_cells(), 6u);
}

}  // namespace
}  // namespace weft
