// tests/runtime/test_kv_shift.cpp — moving cached positions (seq_add, seq_div) with the keys
// re-rotated, context shifts, and defragmentation of the KV cache.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace {

using test::last_logits;
using test::max_rel_diff;
using test::params_with;
using test::same_logits;
using test::small_spec;
using test::some_tokens;
using test::synth_file;

// --- the cells' bookkeeping

class KvShiftCells : public ::testing::Test {
  protected:
    void SetUp() override {
        file_ = std::make_unique<synth_file>("kv-shift", small_spec());
        model_ = model::load(file_->path());
    }
    std::vector<llm_pos> positions(const kv_cache &kv) const {
        std::vector<llm_pos> p;
        for (const kv_cell &c : kv.cells()) p.push_back(c.pos);
        return p;
    }
    std::unique_ptr<synth_file> file_;
    std::unique_ptr<model> model_;
};

TEST_F(KvShiftCells, SeqAddMovesTheRangeOfOneSequenceAndRecordsTheMove) {
    kv_cache kv(*model_, 8, dtype::f32, 2);
    const seq_id s0[] = {0}, s1[] = {1};
    for (uint32_t c = 0; c < 5; ++c) kv.assign(c, llm_pos(c), s0);
    kv.assign(5, 3, s1);
    kv.seq_add(0, 2, 4, 10);
    EXPECT_EQ(positions(kv), (std::vector<llm_pos>{0, 1, 12, 13, 4, 3, -1, -1}));
    EXPECT_EQ(kv.shifted_cells(), (std::vector<uint32_t>{2, 3}));
    EXPECT_EQ(kv.cells()[2].delta, 10);
    EXPECT_EQ(kv.seq_pos_max(0), 13);
    EXPECT_EQ(kv.seq_pos_max(1), 3);  // the other sequence did not move

    // moving below position 0 drops the cell; moves add up
    kv.seq_add(0, -1, -1, -1);
    EXPECT_EQ(positions(kv), (std::vector<llm_pos>{-1, 0, 11, 12, 3, 3, -1, -1}));
    EXPECT_TRUE(kv.cells()[0].empty());
    EXPECT_EQ(kv.cells()[2].delta, 9);
    EXPECT_EQ(kv.cells()[1].delta, -1);
    EXPECT_EQ(kv.shifted_cells(), (std::vector<uint32_t>{1, 2, 3, 4}));
    kv.clear_shift();
    EXPECT_TRUE(kv.shifted_cells().empty());

    // every sequence at once
    kv.seq_add(-1, 3, 4, 100);
    EXPECT_EQ(positions(kv), (std::vector<llm_pos>{-1, 0, 11, 12, 103, 103, -1, -1}));
}

TEST_F(KvShiftCells, SeqDivRoundsDownAndASharedCellMovesForEverySequence) {
    kv_cache kv(*model_, 8, dtype::f16, 2);
    const seq_id both[] = {0, 1}, s0[] = {0};
    kv.assign(0, 0, both);
    for (uint32_t c = 1; c < 6; ++c) kv.assign(c, llm_pos(2 * c + 1), s0);  // 3, 5, 7, 9, 11
    kv.seq_div(0, 3, 10, 2);
    EXPECT_EQ(positions(kv), (std::vector<llm_pos>{0, 1, 2, 3, 4, 11, -1, -1}));
    EXPECT_EQ(kv.cells()[4].delta, 4 - 9);
    EXPECT_EQ(kv.shifted_cells(), (std::vector<uint32_t>{1, 2, 3, 4}));

    kv.seq_add(0, 0, 1, 7);  // the shared cell: one position for both sequences
    EXPECT_EQ(kv.seq_pos_max(1), 7);
}

TEST_F(KvShiftCells, DefragMovesRowsToTheFrontInOrder) {
    kv_cache kv(*model_, 8, dtype::f32, 1);
    const seq_id s0[] = {0};
    const size_t k_floats = size_t(kv.layers()[0].k->ne[0]), v_floats = size_t(kv.layers()[0].v->ne[0]);
    for (uint32_t c = 0; c < 8; ++c) {
        kv.assign(c, llm_pos(c), s0);
        for (size_t il = 0; il < kv.layers().size(); ++il) {
            std::vector<float> k(k_floats, float(100 * il + c)), v(v_floats, -float(100 * il + c));
            kv.write_k_row(il, c, k.data());
            kv.write_v_row(il, c, v.data());
        }
    }
    kv.seq_rm(0, 1, 3);
    kv.seq_rm(0, 5, 6);
    kv.seq_add(0, 6, -1, -1);    // a pending move travels with its cell
    EXPECT_EQ(kv.defrag(), 4u);  // cells 3, 4, 6, 7
    EXPECT_EQ(positions(kv), (std::vector<llm_pos>{0, 3, 4, 5, 6, -1, -1, -1}));
    EXPECT_EQ(kv.shifted_cells(), (std::vector<uint32_t>{3, 4}));
    const float source[] = {0, 3, 4, 6, 7};
    for (size_t il = 0; il < kv.layers().size(); ++il)
        for (uint32_t c = 0; c < 5; ++c) {
            std::vector<float> k_row(k_floats), v_row(v_floats);
            kv.read_k_row(il, c, k_row.data());
            kv.read_v_row(il, c, v_row.data());
            const float k = k_row.back(), v = v_row.front();
            EXPECT_EQ(k, float(100 * il) + source[c]) << "layer " << il << " cell " << c;
            EXPECT_EQ(v, -(float(100 * il) + source[c])) << "layer " << il << " cell " << c;
        }
    EXPECT_EQ(kv.defrag(), 0u);  // already compact
}

// --- re-rotated keys against a fresh decode

// Decodes `toks` at positions first_pos, first_pos + step, ... into sequence 0, moves them with
// `move`, then decodes `next` after them; returns its logits.
template <typename Move>
std::vector<float> logits_after_move(const model &m, const inference_params &p,
                                     const std::vector<token> &toks, llm_pos first_pos, llm_pos step,
                                     Move move, token next) {
    inference_context ctx(m, p);
    batch b;
    for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], first_pos + llm_pos(i) * step, {0}, false);
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    move(ctx);
    EXPECT_EQ(ctx.kv_seq_pos_max(0), llm_pos(toks.size()) - 1);
    EXPECT_EQ(ctx.decode(batch::from_tokens({next})), decode_ok) << ctx.last_error();
    EXPECT_EQ(ctx.perf().n_k_shifts, 1);
    EXPECT_EQ(ctx.compute_grow_count(), 0);  // the constructor reserved for re-rotating every cell
    return last_logits(ctx);
}

std::vector<float> fresh_logits(const model &m, const inference_params &p, std::vector<token> toks,
                                token next) {
    inference_context ctx(m, p);
    toks.push_back(next);
    EXPECT_EQ(ctx.decode(batch::from_tokens(toks)), decode_ok) << ctx.last_error();
    return last_logits(ctx);
}

// seq_div keeps no distances, so its check is built where only the rotation matters: token i
// alone in sequence i (its cells then hold what they hold at any position, rotation aside) at
// position spacing * i, divided by `spacing`, then `next` seeing all of them.
std::vector<float> logits_after_div(const model &m, inference_params p, const std::vector<token> &toks,
                                    int spacing, token next) {
    p.n_seq_max = uint32_t(toks.size());
    inference_context ctx(m, p);
    batch b;
    std::vector<seq_id> every;
    for (size_t i = 0; i < toks.size(); ++i) {
        b.add(toks[i], llm_pos(i) * spacing, {seq_id(i)}, false);
        every.push_back(seq_id(i));
    }
    EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    ctx.kv_seq_div(-1, -1, -1, spacing);
    batch last;
    last.add(next, llm_pos(toks.size()), every, true);
    EXPECT_EQ(ctx.decode(last), decode_ok) << ctx.last_error();
    EXPECT_EQ(ctx.perf().n_k_shifts, spacing > 1 ? 1 : 0);
    return last_logits(ctx);
}

// Bounds: measured at most 1.3e-5 (f32 cache: the rounding of two rotations instead of one) and
// 1e-3 (f16 cache: the rotated key is rounded to f16 once more) over every architecture and the
// fixtures, with a margin of 5 to 8.
constexpr double shifted_f32 = 1e-4;
constexpr double shifted_f16 = 5e-3;

// Checks seq_add both ways and seq_div for the model, with both cache types.
void expect_moves_match_fresh_decode(const model &m, size_t n_tokens) {
    const auto toks = some_tokens(n_tokens, int32_t(m.hparams().n_vocab), 3);
    const token next = 7;
    for (dtype kv_type : {dtype::f32, dtype::f16}) {
        SCOPED_TRACE(std::string("KV cache ") + type_name(kv_type));
        inference_params p = params_with(128, 512);
        p.type_k = p.type_v = kv_type;
        const double bound = kv_type == dtype::f32 ? shifted_f32 : shifted_f16;
        const std::vector<float> ref = fresh_logits(m, p, toks, next);

        const auto back = logits_after_move(
            m, p, toks, 100, 1, [](inference_context &c) { c.kv_seq_add(0, -1, -1, -100); }, next);
        EXPECT_LT(max_rel_diff(back, ref.data()), bound) << "seq_add -100";

        // moved forward in two steps, then decoded from a context that starts at 0 (-50 then +50)
        const auto there_and_back = logits_after_move(
            m, p, toks, 50, 1,
            [](inference_context &c) {
                c.kv_seq_add(0, -1, -1, 30);
                c.kv_seq_add(0, -1, -1, -80);
            },
            next);
        EXPECT_LT(max_rel_diff(there_and_back, ref.data()), bound) << "seq_add +30 -80";

        EXPECT_LT(
            max_rel_diff(logits_after_div(m, p, toks, 1, next), logits_after_div(m, p, toks, 2, next).data()),
            bound)
            << "seq_div 2";
    }
}

class EveryRotaryArchitecture : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryRotaryArchitecture, MovedKeysGiveTheLogitsOfAFreshDecodeAtTheNewPositions) {
    synth_file f("kv-shift-" + GetParam(), small_spec(GetParam()));
    auto m = model::load(f.path());
    ASSERT_TRUE(m->can_shift_kv());
    expect_moves_match_fresh_decode(*m, 12);
}

std::vector<std::string> rotary_architectures() {
    std::vector<std::string> names = supported_architectures();
    std::erase(names, "bert");
    // recurrent and hybrid models: a state has no positions to move (test_mamba.cpp,
    // test_hybrid_memory.cpp and test_delta_net_families.cpp check the refusal)
    for (const char *recurrent :
         {"mamba", "mamba2", "lfm2", "granitehybrid", "qwen3next", "qwen35", "qwen35moe"})
        std::erase(names, recurrent);
    // their NoPE layers' keys must stay as they are while the others turn: weft does not shift them
    std::erase(names, "smollm3");
    std::erase(names, "llama4");
    // its attention temperature follows the absolute position, so a moved cache keeps what the old
    // positions' temperatures made of the deeper layers' keys: checked below without the temperature
    std::erase(names, "mistral3");
    // its global layers' keys turn with frequency factors the window layers' do not: not shifted
    // (tests/runtime/test_gemma4.cpp checks the refusal)
    std::erase(names, "gemma4");
    return names;
}

INSTANTIATE_TEST_SUITE_P(Registered, EveryRotaryArchitecture, ::testing::ValuesIn(rotary_architectures()));

// mistral3 moves its keys as llama does; the position-dependent temperature (which a move cannot
// redo for what the cache already holds) is set to 0 for the exact check.
TEST(KvShift, Mistral3WithoutTemperatureMovesExactly) {
    synth_file f("kv-shift-mistral3", small_spec("mistral3"));
    test::temp_file plain("kv-shift-mistral3-edit");
    test::gguf_edits e;
    e.set_floats["mistral3.attention.temperature_scale"] = 0.0f;
    test::copy_gguf(f.path(), plain.path(), e);
    auto m = model::load(plain.path());
    ASSERT_EQ(m->hparams().attn_temp_scale, 0.0f);
    ASSERT_TRUE(m->can_shift_kv());
    expect_moves_match_fresh_decode(*m, 12);
}

// YaRN puts an attention factor into the rotation; re-rotating must not apply it a second time.
TEST(KvShift, YarnScaledRopeMovesWithoutChangingTheKeysMagnitude) {
    synth_file f("kv-shift-yarn", small_spec());
    test::temp_file yarn("kv-shift-yarn-edit");
    test::gguf_edits e;
    e.set_strings["llama.rope.scaling.type"] = "yarn";
    e.set_floats["llama.rope.scaling.factor"] = 4.0f;
    e.set_floats["llama.rope.freq_base"] = 50000.0f;
    test::copy_gguf(f.path(), yarn.path(), e);
    auto m = model::load(yarn.path());
    ASSERT_EQ(m->hparams().rope_scaling, rope_scaling_kind::yarn);
    expect_moves_match_fresh_decode(*m, 12);
}

TEST(KvShift, ResultsDoNotDependOnTheThreadCount) {
    synth_file f("kv-shift-threads", small_spec("qwen2"));
    auto m = model::load(f.path());
    const auto toks = some_tokens(20, 300, 5);
    std::vector<std::vector<float>> got;
    for (int32_t threads : {1, 3}) {
        inference_params p = params_with(64, 512);
        p.n_threads = p.n_threads_batch = threads;
        got.push_back(logits_after_move(
            *m, p, toks, 40, 1, [](inference_context &c) { c.kv_seq_add(0, -1, -1, -40); }, 9));
    }
    EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
}

TEST(KvShift, BadDivisorIsRefused) {
    synth_file f("kv-shift-div", small_spec());
    auto m = model::load(f.path());
    inference_context ctx(*m, params_with(32, 512));
    EXPECT_THROW(ctx.kv_seq_div(0, -1, -1, 0), error);
    EXPECT_NO_THROW(ctx.kv_seq_div(0, -1, -1, 1));
}

// A context shift as generation does it: the oldest tokens removed, the rest moved down. The
// removed tokens are in sequence 1 so that the kept ones never saw them: what is kept is then
// exactly what a fresh decode of the kept tokens at the shifted positions holds.
void expect_context_shift_matches_fresh_decode(const model &m) {
    const int32_t n_vocab = int32_t(m.hparams().n_vocab);
    const auto dropped = some_tokens(40, n_vocab, 1), kept = some_tokens(24, n_vocab, 2);
    const token next = 11;
    for (dtype kv_type : {dtype::f32, dtype::f16}) {
        SCOPED_TRACE(std::string("KV cache ") + type_name(kv_type));
        inference_params p = params_with(128, 16, 2);
        p.type_k = p.type_v = kv_type;
        const std::vector<float> ref = fresh_logits(m, p, kept, next);

        inference_context ctx(m, p);
        batch b;
        for (size_t i = 0; i < dropped.size(); ++i) b.add(dropped[i], llm_pos(i), {1}, false);
        for (size_t i = 0; i < kept.size(); ++i) b.add(kept[i], llm_pos(dropped.size() + i), {0}, false);
        ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        ASSERT_TRUE(ctx.kv_seq_rm(1, -1, -1));
        ctx.kv_seq_add(0, llm_pos(dropped.size()), -1, -llm_pos(dropped.size()));
        EXPECT_EQ(ctx.kv_seq_pos_min(0), 0);
        EXPECT_EQ(ctx.kv_seq_pos_max(0), llm_pos(kept.size()) - 1);
        ASSERT_EQ(ctx.decode(batch::from_tokens({next})), decode_ok) << ctx.last_error();
        EXPECT_LT(max_rel_diff(last_logits(ctx), ref.data()),
                  kv_type == dtype::f32 ? shifted_f32 : shifted_f16);
    }
}

TEST(KvShift, ContextShiftOnTheTinyLlamaFixture) {
    WEFT_REQUIRE_FIXTURES();
    auto m = model::load(test::fixture("models/tiny-llama-F32.gguf"));
    expect_context_shift_matches_fresh_decode(*m);
    expect_moves_match_fresh_decode(*m, 16);
}

TEST(KvShift, ContextShiftOnStories260K) {
    WEFT_REQUIRE_FIXTURES();
    auto m = model::load(test::fixture("models/stories260K.gguf"));
    expect_context_shift_matches_fresh_decode(*m);
    expect_moves_match_fresh_decode(*m, 16);
}

TEST(KvShift, LearnedPositionsCannotMove) {
    WEFT_REQUIRE_FIXTURES();
    auto m = model::load(test::fixture("models/tiny-bert-F32.gguf"));
    EXPECT_FALSE(m->can_shift_kv());
    inference_context ctx(*m, params_with(32, 32));
    EXPECT_FALSE(ctx.can_shift());
    try {
        ctx.kv_seq_add(0, -1, -1, -3);
        FAIL() << "kv_seq_add on bert did not throw";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("bert"), std::string::npos) << e.what();
    }
}

// --- defragmentation

// Holes left by seq_rm in the middle, too few free cells after the sequence: decode compacts the
// cache and the batch goes after the sequence's cells, in position order, as in a cache big
// enough to need no compaction.
TEST(KvDefrag, HolesAreCompactedWhenABatchFitsOnlyThatWay) {
    synth_file f("kv-defrag", small_spec());
    auto m = model::load(f.path());
    const auto first = some_tokens(40, 300, 4), more = some_tokens(30, 300, 5);
    batch b;
    for (size_t i = 0; i < more.size(); ++i) b.add(more[i], llm_pos(40 + i), {0}, i + 1 == more.size());

    inference_context roomy(*m, params_with(256, 512));
    ASSERT_EQ(roomy.decode(batch::from_tokens(first)), decode_ok);
    ASSERT_TRUE(roomy.kv_seq_rm(0, 8, 24));
    ASSERT_EQ(roomy.decode(b), decode_ok);
    EXPECT_EQ(roomy.perf().n_defrags, 0);

    inference_context small(*m, params_with(64, 512));
    ASSERT_EQ(small.decode(batch::from_tokens(first)), decode_ok);
    ASSERT_TRUE(small.kv_seq_rm(0, 8, 24));
    // 24 free cells after the sequence, 16 holes before: 30 tokens fit only after compaction
    EXPECT_EQ(small.kv().find_slots(std::vector<std::vector<seq_id>>(30, {0}), false).size(), 0u);
    ASSERT_EQ(small.decode(b), decode_ok) << small.last_error();
    EXPECT_EQ(small.perf().n_defrags, 1);
    EXPECT_EQ(small.kv_used_cells(), 54u);
    llm_pos previous = -1;
    for (uint32_t c = 0; c < 54; ++c) {
        EXPECT_GT(small.kv().cells()[c].pos, previous) << "cell " << c;
        previous = small.kv().cells()[c].pos;
    }
    EXPECT_EQ(previous, 69);
    EXPECT_LT(max_rel_diff(last_logits(small), roomy.get_logits_ith(-1)), same_logits);

    // a batch larger than every free cell together still does not fit, and changes nothing
    EXPECT_EQ(small.decode(batch::from_tokens(some_tokens(11, 300))), decode_no_kv_space);
    EXPECT_EQ(small.kv_used_cells(), 54u);
}

}  // namespace
}  // namespace weft
