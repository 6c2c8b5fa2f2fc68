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
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::synth_file;
using rows = std::vector<std::vector<float>>;

synth_spec tiny_mamba(dtype type = dtype::f32) {
    synth_spec s;
    s.arch = "mamba";
    s.n_embd = 32;
    s.n_layer = 2;
    s.n_vocab = 280;
    s.type = type;
    return s;
}

inference_params params(uint32_t n_ubatch = 512, int threads = 2, uint32_t n_seq_max = 2,
                        uint32_t n_ctx = 64) {
    inference_params p = test::params_with(n_ctx, n_ubatch, n_seq_max);
    p.n_threads = p.n_threads_batch = threads;
    return p;
}

std::vector<float> last_row(const inference_context &ctx) {
    return std::vector<float>(ctx.get_logits_ith(-1), ctx.get_logits_ith(-1) + ctx.n_vocab());
}

// Decodes toks as sequence s, continuing it; returns the last token's logits.
std::vector<float> continue_seq(inference_context &ctx, const std::vector<token> &toks, seq_id s = 0) {
    batch b;
    const llm_pos start = ctx.kv_seq_pos_max(s) + 1;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], start + llm_pos(i), {s}, i + 1 == toks.size());
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    return last_row(ctx);
}

void expect_same_bits(const std::vector<float> &want, const std::vector<float> &got, const std::string &how) {
    ASSERT_EQ(want.size(), got.size()) << how;
    EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0) << how;
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

rows one_by_one(const model &m, const std::vector<token> &a, int threads) {
    inference_context ctx(m, params(512, threads));
    rows r;
    for (const token t : a) r.push_back(continue_seq(ctx, {t}));
    return r;
}

// a as sequence 0, every row, with `other` as sequence 1 interleaved (shorter: unequal lengths in one
// ubatch), in ubatches of n_ubatch.
rows together(const model &m, const std::vector<token> &a, uint32_t n_ubatch, int threads,
              const std::vector<token> *other = nullptr) {
    inference_context ctx(m, params(n_ubatch, threads));
    batch b;
    std::vector<int32_t> index_of_a;
    for (size_t i = 0; i < a.size(); ++i) {
        if (other && i < other->size() && i % 2 == 1) b.add((*other)[i], llm_pos(i), {1}, true);
        index_of_a.push_back(b.n_tokens());
        b.add(a[i], llm_pos(i), {0}, true);
        if (other && i < other->size() && i % 2 == 0) b.add((*other)[i], llm_pos(i), {1}, true);
    }
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    rows r;
    for (int32_t i : index_of_a) r.emplace_back(ctx.get_logits_ith(i), ctx.get_logits_ith(i) + ctx.n_vocab());
    return r;
}

TEST(MambaInvariance, SameBitsHoweverBatchedOrThreaded) {
    for (const dtype type : {dtype::f32, dtype::q8_0}) {
        synth_file f(std::string("mamba-inv-") + type_name(type), tiny_mamba(type));
        const auto m = model::load(f.path());
        const std::vector<token> a = test::spread_tokens(11, 280, 1), other = test::spread_tokens(7, 280, 2);
        const rows want = one_by_one(*m, a, 1);
        auto check = [&](const rows &got, const std::string &how) {
            ASSERT_EQ(got.size(), want.size());
            for (size_t i = 0; i < want.size(); ++i)
                expect_same_bits(
                    want[i], got[i],
                    std::string(type_name(type)) + ", " + how + ", position " + std::to_string(i));
        };
        for (int threads : {1, 2, 3}) {
            const std::string t = std::to_string(threads) + " threads";
            check(one_by_one(*m, a, threads), "one by one, " + t);
            check(together(*m, a, 512, threads), "one ubatch, " + t);
            check(together(*m, a, 3, threads), "ubatches of 3, " + t);
            check(together(*m, a, 512, threads, &other), "beside another sequence, " + t);
            check(together(*m, a, 3, threads, &other), "beside another sequence in ubatches of 3, " + t);
        }
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

// Aborted part way through the first ubatch (some layers' states written) and in the second (the
// first ubatch's states complete): either way the states and positions are as before the call.
TEST_F(MambaState, AnAbortedBatchLeavesTheStatesAsTheyWere) {
    for (const int abort_after_polls : {40, 100}) {
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
