// tests/runtime/test_mamba.cpp — the recurrent architecture mamba end to end: logits against an
// independent NumPy forward pass, the same bits however a sequence is batched or threaded, the
// recurrent state's semantics (seq_rm, seq_cp, seq_keep, clear, rollback), saved state, and the
// clear refusals of what a recurrent model cannot do.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "common/numpy_reference.h"
#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "runtime/recurrent_test_util.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::synth_file;

synth_spec tiny_mamba(dtype type = dtype::f32) {
    synth_spec s;
    s.arch = "mamba";
    s.n_embd = 32;
    s.n_layer = 2;
    s.n_vocab = 280;
    s.type = type;
    return s;
}

using test::continue_seq;
using test::expect_same_bits;

inference_params params(uint32_t n_ubatch = 512, int threads = 2, uint32_t n_seq_max = 2,
                        uint32_t n_ctx = 64) {
    return test::recurrent_params(n_ubatch, threads, n_seq_max, n_ctx);
}

// --- against NumPy -------------------------------------------------------------------------------

void expect_matches_numpy(const synth_spec &spec, const std::string &stem) {
    synth_file f(stem, spec);
    const auto m = model::load(f.path());
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 13; ++i) tokens.push_back((i * 37 + 5) % int32_t(spec.n_vocab));
    inference_context ctx(*m, params());
    batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.add(token(tokens[i]), llm_pos(i), {0}, true);
    ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    const std::vector<double> want = test::reference_logits(f.path(), tokens);
    const size_t n_vocab = size_t(spec.n_vocab);
    ASSERT_EQ(want.size(), tokens.size() * n_vocab);
    for (size_t pos = 0; pos < tokens.size(); ++pos) {
        const double e = test::nmse(ctx.get_logits_ith(int32_t(pos)), want.data() + pos * n_vocab, n_vocab);
        EXPECT_LE(e, 1e-10) << stem << ": logits of position " << pos;
    }
}

TEST(MambaNumpy, MatchesTheReferenceForwardPass) {
    WEFT_SKIP_WITHOUT_NUMPY();
    expect_matches_numpy(tiny_mamba(), "mamba-numpy");
}

// Tied output, three layers, a state of 5 and a convolution of 3, and Falcon-Mamba's normed dt, B, C.
TEST(MambaNumpy, TiedOddSizesAndNormedStep) {
    WEFT_SKIP_WITHOUT_NUMPY();
    synth_spec s = tiny_mamba();
    s.n_embd = 40;
    s.n_layer = 3;
    s.tied = true;
    s.ssm_d_state = 5;
    s.ssm_d_conv = 3;
    expect_matches_numpy(s, "mamba-numpy-tied");
    s.ssm_dt_b_c_rms = true;
    expect_matches_numpy(s, "mamba-numpy-rms");
}

// --- batch and thread invariance -----------------------------------------------------------------

TEST(MambaInvariance, SameBitsHoweverBatchedOrThreaded) {
    for (const dtype type : {dtype::f32, dtype::q8_0}) {
        synth_file f(std::string("mamba-inv-") + type_name(type), tiny_mamba(type));
        const auto m = model::load(f.path());
        test::expect_invariant(*m, test::spread_tokens(11, 280, 1), test::spread_tokens(7, 280, 2),
                               type_name(type));
    }
}

// --- the recurrent state -------------------------------------------------------------------------

class MambaState : public ::testing::Test {
  protected:
    MambaState() : file_("mamba-state", tiny_mamba()), model_(model::load(file_.path())) {}
    synth_file file_;
    std::unique_ptr<model> model_;
};

TEST_F(MambaState, RemovingPartOfASequenceIsRefusedAndChangesNothing) {
    inference_context ctx(*model_, params());
    const std::vector<token> prompt = test::spread_tokens(6, 280, 3), next = test::spread_tokens(2, 280, 4);
    continue_seq(ctx, prompt);
    EXPECT_FALSE(ctx.kv_seq_rm(0, 3, -1));  // a tail that cuts into the past
    EXPECT_FALSE(ctx.kv_seq_rm(0, 5, -1));  // even the last position alone
    EXPECT_FALSE(ctx.kv_seq_rm(0, 0, 3));   // a head
    EXPECT_FALSE(ctx.kv_seq_rm(-1, 2, 4));
    EXPECT_TRUE(ctx.kv_seq_rm(0, 6, -1));  // nothing past the end: nothing to do
    EXPECT_EQ(ctx.kv_seq_pos_min(0), 0);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 5);
    EXPECT_EQ(ctx.kv_used_cells(), 6u);

    inference_context fresh(*model_, params());
    continue_seq(fresh, prompt);
    expect_same_bits(continue_seq(fresh, next), continue_seq(ctx, next), "after refused removals");

    EXPECT_TRUE(ctx.kv_seq_rm(0, -1, -1));  // the whole sequence
    EXPECT_EQ(ctx.kv_seq_pos_max(0), -1);
    EXPECT_EQ(ctx.kv_used_cells(), 0u);
    inference_context again(*model_, params());
    expect_same_bits(continue_seq(again, prompt), continue_seq(ctx, prompt), "after removing everything");
}

TEST_F(MambaState, CopyKeepAndClear) {
    inference_context ctx(*model_, params(512, 2, 3));
    const std::vector<token> prompt = test::spread_tokens(5, 280, 5), next = test::spread_tokens(3, 280, 6);
    continue_seq(ctx, prompt, 0);
    ctx.kv_seq_cp(0, 1, -1, -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(1), 4);
    EXPECT_THROW(ctx.kv_seq_cp(0, 2, 0, 3), error);  // a part of a state
    EXPECT_EQ(ctx.kv_seq_pos_max(2), -1);
    const std::vector<float> from0 = continue_seq(ctx, next, 0);
    expect_same_bits(from0, continue_seq(ctx, next, 1), "a copied sequence continues as its source");

    continue_seq(ctx, prompt, 2);
    ctx.kv_seq_keep(2);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(1), -1);
    EXPECT_EQ(ctx.kv_seq_pos_max(2), 4);
    // sequence 0 starts over from a zero state
    inference_context fresh(*model_, params(512, 2, 3));
    expect_same_bits(continue_seq(fresh, prompt, 0), continue_seq(ctx, prompt, 0),
                     "a kept-out sequence restarts");

    ctx.kv_clear();
    EXPECT_EQ(ctx.kv_used_cells(), 0u);
    inference_context fresh2(*model_, params(512, 2, 3));
    expect_same_bits(continue_seq(fresh2, prompt, 1), continue_seq(ctx, prompt, 1), "after clear");
}

TEST_F(MambaState, SavedStateContinuesBitForBit) {
    const std::vector<token> prompt = test::spread_tokens(7, 280, 7), next = test::spread_tokens(3, 280, 8);
    inference_context ctx(*model_, params());
    continue_seq(ctx, prompt, 0);
    continue_seq(ctx, test::spread_tokens(4, 280, 9), 1);
    const std::vector<uint8_t> whole = ctx.state_save(prompt, "user");
    const std::vector<uint8_t> seq1 = ctx.seq_state_save(1);
    const std::vector<float> want0 = continue_seq(ctx, next, 0);
    const std::vector<float> want1 = continue_seq(ctx, next, 1);

    inference_context loaded(*model_, params());
    const auto st = loaded.state_load(whole);
    EXPECT_EQ(st.tokens, prompt);
    EXPECT_EQ(st.user_data, "user");
    EXPECT_EQ(loaded.kv_seq_pos_max(0), 6);
    EXPECT_EQ(loaded.kv_seq_pos_max(1), 3);
    expect_same_bits(want0, continue_seq(loaded, next, 0), "whole state, sequence 0");
    expect_same_bits(want1, continue_seq(loaded, next, 1), "whole state, sequence 1");

    inference_context one(*model_, params());
    continue_seq(one, prompt, 0);
    one.seq_state_load(seq1, 0);  // sequence 1's state into sequence 0, replacing it
    EXPECT_EQ(one.kv_seq_pos_min(0), 0);
    EXPECT_EQ(one.kv_seq_pos_max(0), 3);
    expect_same_bits(want1, continue_seq(one, next, 0), "one sequence's state");

    // a truncated state changes nothing
    inference_context untouched(*model_, params());
    continue_seq(untouched, prompt, 0);
    EXPECT_THROW(untouched.state_load(std::span<const uint8_t>(whole.data(), whole.size() - 9)), error);
    EXPECT_EQ(untouched.kv_seq_pos_max(0), 6);
}

// Aborted part way through the first ubatch (some layers' states written), in the second (the
// first ubatch's states complete: the second writes over the state from before the call) and in the
// third (which writes over the first's): either way the states and positions are as before the call.
TEST_F(MambaState, AnAbortedBatchLeavesTheStatesAsTheyWere) {
    for (const int abort_after_polls : {40, 100, 120}) {
        SCOPED_TRACE("aborted after " + std::to_string(abort_after_polls) + " polls");
        std::atomic<int> polls{0};
        std::atomic<bool> armed{false};
        inference_params p = params(3);
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
        armed = false;

        inference_context fresh(*model_, params(3));
        continue_seq(fresh, prompt);
        expect_same_bits(continue_seq(fresh, more), continue_seq(ctx, more), "after the aborted batch");
    }
}

TEST_F(MambaState, WhatARecurrentModelCannotDoIsRefusedClearly) {
    inference_context ctx(*model_, params(512, 2, 2, 8));
    EXPECT_TRUE(ctx.is_recurrent());
    EXPECT_FALSE(ctx.can_shift());
    try {
        ctx.kv_seq_add(0, 0, -1, -2);
        ADD_FAILURE() << "kv_seq_add moved a recurrent state's positions";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("recurrent"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ctx.kv(), error);
    // a token of two sequences
    batch shared;
    shared.add(5, 0, {0, 1}, true);
    EXPECT_EQ(ctx.decode(shared), decode_invalid);
    EXPECT_NE(ctx.last_error().find("recurrent"), std::string::npos) << ctx.last_error();
    // positions beyond n_ctx: the context is full
    continue_seq(ctx, test::spread_tokens(6, 280, 12), 0);
    EXPECT_EQ(ctx.decode(batch::from_tokens(test::spread_tokens(3, 280, 13))), decode_no_kv_space);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), 5);
}

TEST_F(MambaState, AFileWithoutItsSsmKeysIsRefusedByName) {
    for (const char *key : {"mamba.ssm.conv_kernel", "mamba.ssm.state_size"}) {
        test::temp_file broken("mamba-broken");
        test::gguf_edits e;
        e.remove_keys.push_back(key);
        test::copy_gguf(file_.path(), broken.path(), e);
        try {
            model::load(broken.path());
            ADD_FAILURE() << "loaded without " << key;
        } catch (const error &err) {
            EXPECT_NE(std::string(err.what()).find(key), std::string::npos) << err.what();
        }
    }
}

TEST_F(MambaState, TheGraphIsReusedForDecodeSteps) {
    inference_context ctx(*model_, params());
    continue_seq(ctx, test::spread_tokens(4, 280, 14));
    for (token t : test::spread_tokens(6, 280, 15)) continue_seq(ctx, {t});
    EXPECT_GE(ctx.perf().n_graph_reuses, 5);
    EXPECT_EQ(ctx.compute_grow_count(), 0);
}

}  // namespace
}  // namespace weft
