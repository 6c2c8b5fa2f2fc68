// tests/runtime/test_state.cpp — saving and loading context and sequence state: round trips give
// bit-identical logits; another model, a truncated or corrupt file, a mismatched context are refused
// with a clear error and leave the context as it was.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"

namespace weft {
namespace {

using test::last_logits;
using test::params_with;
using test::small_spec;
using test::some_tokens;
using test::synth_file;

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> decode_one(inference_context &ctx, token t, seq_id s = 0) {
    batch b;
    b.add(t, ctx.kv_seq_pos_max(s) + 1, {s}, true);
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    return last_logits(ctx);
}

// Expects f to throw weft::error with `fragment` in its message.
template <typename F>
void expect_error(F f, const std::string &fragment) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one saying '" << fragment << "'";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
}

class State : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        file_ = new synth_file("state", small_spec());
        model_ = model::load(file_->path()).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete file_;
    }
    static synth_file *file_;
    static model *model_;
};
synth_file *State::file_ = nullptr;
model *State::model_ = nullptr;

TEST_F(State, WholeContextRoundTripIsBitIdentical) {
    const model &m = *model_;
    inference_context a(m, params_with(64, 8, 2));
    // two sequences and a hole, so cell indices matter
    batch b;
    for (llm_pos i = 0; i < 12; ++i) b.add(some_tokens(12, 300, 1)[size_t(i)], i, {0}, false);
    for (llm_pos i = 0; i < 9; ++i) b.add(some_tokens(9, 300, 2)[size_t(i)], i, {1}, i == 8);
    ASSERT_EQ(a.decode(b), decode_ok);
    ASSERT_TRUE(a.kv_seq_rm(0, 3, 5));
    const std::vector<float> saved_logits = last_logits(a);
    const std::vector<token> tokens = {1, 2, 3};
    const std::vector<uint8_t> bytes = a.state_save(tokens, "notes");
    const std::vector<float> next0 = decode_one(a, 17, 0), next1 = decode_one(a, 18, 1);

    inference_context c(m, params_with(64, 8, 2));
    const inference_context::saved_state got = c.state_load(bytes);
    EXPECT_EQ(got.tokens, tokens);
    EXPECT_EQ(got.user_data, "notes");
    EXPECT_TRUE(same_bits(last_logits(c), saved_logits));  // the logits come back too
    EXPECT_EQ(c.kv_used_cells(), 19u);
    EXPECT_TRUE(same_bits(decode_one(c, 17, 0), next0));
    EXPECT_TRUE(same_bits(decode_one(c, 18, 1), next1));
}

TEST_F(State, SequenceRoundTripIsBitIdenticalAndLandsInAnySequence) {
    const model &m = *model_;
    inference_context a(m, params_with(64, 512, 2));
    ASSERT_EQ(a.decode(batch::from_tokens(some_tokens(15, 300, 3))), decode_ok);
    const std::vector<uint8_t> bytes = a.seq_state_save(0);
    const std::vector<float> next = decode_one(a, 21);

    inference_context fresh(m, params_with(64, 512, 2));
    EXPECT_TRUE(fresh.seq_state_load(bytes, 0).tokens.empty());
    EXPECT_EQ(fresh.kv_seq_pos_max(0), 14);
    EXPECT_TRUE(same_bits(decode_one(fresh, 21), next));

    // into sequence 1 of a context that holds something else in sequence 0, replacing what 1 held
    inference_context busy(m, params_with(64, 512, 2));
    batch other;
    for (llm_pos i = 0; i < 10; ++i) other.add(some_tokens(10, 300, 4)[size_t(i)], i, {0}, false);
    for (llm_pos i = 0; i < 4; ++i) other.add(5, i, {1}, i == 3);
    ASSERT_EQ(busy.decode(other), decode_ok);
    busy.seq_state_load(bytes, 1);
    EXPECT_EQ(busy.kv_used_cells(), 25u);
    EXPECT_EQ(busy.kv_seq_pos_max(1), 14);
    EXPECT_LT(test::max_rel_diff(decode_one(busy, 21, 1), next.data()), test::same_logits);
}

TEST_F(State, FilesRoundTripAndAPendingMoveIsAppliedFirst) {
    const model &m = *model_;
    test::temp_file path("state-file");
    inference_context a(m, params_with(64, 512));
    batch b;
    const auto toks = some_tokens(10, 300, 5);
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], llm_pos(30 + i), {0}, false);
    ASSERT_EQ(a.decode(b), decode_ok);
    a.kv_seq_add(0, -1, -1, -30);  // rotated when saving
    a.seq_state_save_file(path.path(), 0, toks, "seq");
    const std::vector<float> next = decode_one(a, 9);

    inference_context c(m, params_with(64, 512));
    const auto got = c.seq_state_load_file(path.path(), 0);
    EXPECT_EQ(got.tokens, toks);
    EXPECT_EQ(got.user_data, "seq");
    EXPECT_TRUE(same_bits(decode_one(c, 9), next));

    a.state_save_file(path.path());
    inference_context d(m, params_with(64, 512));
    d.state_load_file(path.path());
    EXPECT_TRUE(same_bits(last_logits(d), next));
}

TEST_F(State, WrongModelTruncatedCorruptAndMismatchedStatesAreRefused) {
    const model &m = *model_;
    inference_context a(m, params_with(32, 512));
    ASSERT_EQ(a.decode(batch::from_tokens(some_tokens(6, 300, 6))), decode_ok);
    const std::vector<uint8_t> whole = a.state_save(), seq = a.seq_state_save(0);

    inference_context target(m, params_with(32, 512));
    ASSERT_EQ(target.decode(batch::from_tokens({4, 5, 6})), decode_ok);
    const std::vector<float> before = last_logits(target);
    auto expect_refused = [&](const std::vector<uint8_t> &bytes, const std::string &fragment, bool as_seq) {
        expect_error(
            [&] {
                if (as_seq)
                    target.seq_state_load(bytes, 0);
                else
                    target.state_load(bytes);
            },
            fragment);
        EXPECT_EQ(target.kv_used_cells(), 3u);  // unchanged
        EXPECT_TRUE(same_bits(last_logits(target), before));
    };

    for (size_t cut : {size_t(3), size_t(30), whole.size() / 2, whole.size() - 1})
        expect_refused(std::vector<uint8_t>(whole.begin(), whole.begin() + std::ptrdiff_t(cut)),
                       cut == 3 ? "not a weft state file" : "truncated", false);
    std::vector<uint8_t> corrupt = whole;
    corrupt[corrupt.size() - 5] ^= 0x40;
    expect_refused(corrupt, "checksum mismatch", false);
    std::vector<uint8_t> longer = whole;
    longer.push_back(0);
    expect_refused(longer, "unexpected bytes", false);
    expect_refused(seq, "one sequence's state", false);
    expect_refused(whole, "a whole context's state", true);

    // another model: same shapes, other weights
    synth_spec other_spec = small_spec();
    other_spec.seed = 7;
    synth_file other_file("state-other", other_spec);
    auto other = model::load(other_file.path());
    inference_context o(*other, params_with(32, 512));
    expect_error([&] { o.state_load(whole); }, "saved with another model");
    expect_error([&] { o.seq_state_load(seq, 0); }, "saved with another model");

    // the same model in a context of another size or cache type
    inference_context bigger(m, params_with(64, 512));
    expect_error([&] { bigger.state_load(whole); }, "saved from a context of 32 cells");
    EXPECT_NO_THROW(bigger.seq_state_load(seq, 0));  // a sequence fits anywhere with room
    inference_params f32 = params_with(32, 512);
    f32.type_k = f32.type_v = dtype::f32;
    inference_context other_type(m, f32);
    expect_error([&] { other_type.seq_state_load(seq, 0); }, "the saved KV cache is f16");
    inference_context tiny(m, params_with(4, 4));
    expect_error([&] { tiny.seq_state_load(seq, 0); }, "6 cells saved, the cache has 4");

    // files: a missing one, a truncated one (named)
    test::temp_file path("state-truncated");
    {
        std::ofstream out(path.path(), std::ios::binary);
        out.write(reinterpret_cast<const char *>(whole.data()), std::streamsize(whole.size() - 10));
    }
    expect_error([&] { target.state_load_file(path.path()); }, "state file " + path.path() + ": truncated");
    expect_error([&] { target.state_load_file(path.path() + ".missing"); }, ".missing");
}

}  // namespace
}  // namespace weft
