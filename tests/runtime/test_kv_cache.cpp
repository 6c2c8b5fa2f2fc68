// tests/runtime/test_kv_cache.cpp — KV cache cells: slots, sequence edits, mask, attended range.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "model/model_test_util.h"
#include "weft/model/model.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace {

class KvCache : public ::testing::Test {
  protected:
    void SetUp() override {
        synth_spec s;
        s.n_layer = 2;
        file_ = std::make_unique<test::synth_file>("kv", s);
        model_ = model::load(file_->path());
    }
    std::unique_ptr<test::synth_file> file_;
    std::unique_ptr<model> model_;
};

TEST_F(KvCache, TensorsPerLayerOfTheRequestedType) {
    kv_cache kv(*model_, 40, dtype::f32, 1);
    ASSERT_EQ(kv.layers().size(), 2u);
    EXPECT_EQ(kv.layers()[1].k->type, dtype::f32);
    EXPECT_EQ(kv.layers()[1].k->ne[0], model_->hparams().n_embd_k_gqa(1));
    EXPECT_EQ(kv.layers()[1].v->ne[1], 40);
    EXPECT_GE(kv.total_bytes(), 2u * 2u * 40u * size_t(model_->hparams().n_embd_k_gqa(0)) * 4u);
    EXPECT_THROW(kv_cache(*model_, 40, dtype::q4_k, 1), error);              // not a cache type
    EXPECT_THROW(kv_cache(*model_, 40, dtype::q4_0, 1), error);              // heads of 16: not whole blocks
    EXPECT_THROW(kv_cache(*model_, 40, dtype::f16, dtype::q8_0, 1), error);  // the same for V alone
    kv_cache mixed(*model_, 40, dtype::bf16, dtype::f32, 1);
    EXPECT_EQ(mixed.type_k(), dtype::bf16);
    EXPECT_EQ(mixed.layers()[0].v->type, dtype::f32);
    EXPECT_THROW(kv_cache(*model_, 40, dtype::f16, 65), error);
}

TEST_F(KvCache, SlotsAreFreeCellsAndNothingWhenTheyDoNotFit) {
    kv_cache kv(*model_, 8, dtype::f16, 2);
    const seq_id s0[] = {0};
    for (uint32_t c : {0u, 2u, 3u}) kv.assign(c, llm_pos(c), s0);
    EXPECT_EQ(kv.find_slots(3), (std::vector<uint32_t>{1, 4, 5}));
    EXPECT_TRUE(kv.find_slots(6).empty());
    EXPECT_EQ(kv.find_slots(5).size(), 5u);
    EXPECT_EQ(kv.used_cells(), 3u);
}

// Tokens of known sequences go after every cell of their sequence, so a sequence's cells stay in
// position order; holes before them are used only when nothing after is free.
TEST_F(KvCache, SequenceCellsStayInPositionOrder) {
    kv_cache kv(*model_, 8, dtype::f16, 2);
    const seq_id s0[] = {0}, s1[] = {1};
    kv.assign(0, 0, s1);
    kv.assign(2, 0, s0);
    kv.assign(3, 1, s0);
    const std::vector<std::vector<seq_id>> batch = {{0}, {1}, {0, 1}};
    // sequence 0 after cell 3, sequence 1 after cell 0 (cell 1 is free), both after both
    EXPECT_EQ(kv.find_slots(batch), (std::vector<uint32_t>{4, 1, 5}));
    for (uint32_t c : {4u, 5u, 6u, 7u}) kv.assign(c, llm_pos(c), s0);
    const std::vector<std::vector<seq_id>> full = {{0}};  // nothing free after: the hole before
    EXPECT_EQ(kv.find_slots(full), (std::vector<uint32_t>{1}));
    const std::vector<std::vector<seq_id>> too_many = {{0}, {0}};
    EXPECT_TRUE(kv.find_slots(too_many).empty());
}

TEST_F(KvCache, MaskHidesOtherSequencesAndTheFuture) {
    kv_cache kv(*model_, 6, dtype::f16, 2);
    const seq_id s0[] = {0}, s1[] = {1}, both[] = {0, 1};
    kv.assign(0, 0, both);  // a shared prefix
    kv.assign(1, 1, s0);
    kv.assign(2, 1, s1);
    kv.assign(3, 2, s0);
    const std::vector<llm_pos> pos = {1, 2};
    const std::vector<std::vector<seq_id>> seqs = {{1}, {0}};
    std::vector<float> mask(6 * 2);
    kv.fill_mask(mask.data(), 6, pos, seqs);
    const float inf = INFINITY;
    EXPECT_EQ(std::vector<float>(mask.begin(), mask.begin() + 6),
              (std::vector<float>{0, -inf, 0, -inf, -inf, -inf}));
    EXPECT_EQ(std::vector<float>(mask.begin() + 6, mask.end()),
              (std::vector<float>{0, 0, -inf, 0, -inf, -inf}));
}

// A sliding window of w positions: a token at position p sees p - w + 1 ... p of its sequence.
TEST_F(KvCache, WindowHidesCellsTooFarBack) {
    kv_cache kv(*model_, 6, dtype::f16, 1);
    const seq_id s0[] = {0};
    for (uint32_t c = 0; c < 6; ++c) kv.assign(c, llm_pos(c), s0);
    const std::vector<llm_pos> pos = {5, 2};
    const std::vector<std::vector<seq_id>> seqs = {{0}, {0}};
    std::vector<float> mask(6 * 2);
    kv.fill_mask(mask.data(), 6, pos, seqs, 3);
    const float inf = INFINITY;
    EXPECT_EQ(std::vector<float>(mask.begin(), mask.begin() + 6),
              (std::vector<float>{-inf, -inf, -inf, 0, 0, 0}));
    EXPECT_EQ(std::vector<float>(mask.begin() + 6, mask.end()),
              (std::vector<float>{0, 0, 0, -inf, -inf, -inf}));
}

TEST_F(KvCache, SequenceEditsAndPositions) {
    kv_cache kv(*model_, 8, dtype::f16, 3);
    const seq_id s0[] = {0};
    for (uint32_t c = 0; c < 5; ++c) kv.assign(c, llm_pos(c), s0);
    EXPECT_EQ(kv.seq_pos_max(0), 4);
    EXPECT_EQ(kv.seq_pos_max(1), -1);
    kv.seq_cp(0, 1, 1, 3);  // positions 1 and 2
    EXPECT_EQ(kv.seq_pos_min(1), 1);
    EXPECT_EQ(kv.seq_pos_max(1), 2);
    EXPECT_EQ(kv.seq_pos_max_all(), (std::vector<llm_pos>{4, 2, -1}));
    EXPECT_TRUE(kv.seq_rm(0, 2, -1));
    EXPECT_EQ(kv.seq_pos_max(0), 1);
    EXPECT_EQ(kv.used_cells(), 3u);  // cell 2 still belongs to sequence 1
    kv.seq_keep(1);
    EXPECT_EQ(kv.seq_pos_max(0), -1);
    EXPECT_EQ(kv.used_cells(), 2u);
    EXPECT_TRUE(kv.seq_rm(-1, -1, -1));
    EXPECT_EQ(kv.used_cells(), 0u);
    EXPECT_FALSE(kv.seq_rm(3, 0, -1));  // no such sequence
}

TEST_F(KvCache, AttendedRangeIsPaddedAndCapped) {
    kv_cache kv(*model_, 600, dtype::f16, 1);
    EXPECT_EQ(kv.n_kv_for_graph(256), 256u);
    const seq_id s0[] = {0};
    kv.assign(300, 0, s0);
    EXPECT_EQ(kv.n_kv_for_graph(256), 512u);
    kv.assign(599, 1, s0);
    EXPECT_EQ(kv.n_kv_for_graph(256), 600u);
}

// The cache answers from a summary kept by assign and rebuilt after any other edit: after every
// step of a random run of edits (assign, unassign, seq_rm / cp / keep / add / div, clear_shift,
// defrag, restore, clear), each answer must be what a scan of the cells gives.
TEST_F(KvCache, AnswersMatchAScanOfTheCellsAfterEveryEdit) {
    const uint32_t n_cells = 48, n_seqs = 3;
    kv_cache kv(*model_, n_cells, dtype::f16, n_seqs);
    std::mt19937 rng(11);
    auto pick = [&](int n) { return int(rng() % uint32_t(n)); };
    std::vector<llm_pos> next_pos(n_seqs, 0);
    std::vector<kv_cell> saved;
    for (int step = 0; step < 3000; ++step) {
        SCOPED_TRACE(step);
        const seq_id s = pick(int(n_seqs));
        switch (pick(12)) {
            case 0:
            case 1:
            case 2: {  // a decode step of one or two tokens
                std::vector<std::vector<seq_id>> seqs(size_t(1 + pick(2)), std::vector<seq_id>{s});
                if (pick(4) == 0) seqs[0].push_back(seq_id((s + 1) % int(n_seqs)));  // a shared token
                const std::vector<uint32_t> cells = kv.find_slots(seqs, pick(2) == 0);
                for (size_t i = 0; i < cells.size(); ++i) kv.assign(cells[i], next_pos[size_t(s)]++, seqs[i]);
                if (!cells.empty() && pick(8) == 0) kv.unassign(cells);  // a failed decode
                break;
            }
            case 3:
                kv.seq_rm(pick(5) == 0 ? -1 : s, pick(3) == 0 ? -1 : pick(20), pick(3) == 0 ? -1 : pick(40));
                break;
            case 4:
                kv.seq_cp(s, seq_id(pick(int(n_seqs))), -1, pick(30));
                break;
            case 5:
                if (pick(4) == 0) kv.seq_keep(s);
                break;
            case 6:
                kv.seq_add(pick(4) == 0 ? -1 : s, pick(10), -1, llm_pos(pick(9) - 4));
                break;
            case 7:
                kv.seq_div(s, pick(10), -1, 1 + pick(3));
                break;
            case 8:
                kv.clear_shift();
                break;
            case 9:
                if (pick(3) == 0) kv.defrag();
                break;
            case 10:
                if (saved.empty() || pick(2) == 0)
                    saved = kv.snapshot();
                else
                    kv.restore(saved);
                break;
            case 11:
                if (pick(20) == 0) kv.clear();
                break;
        }
        // the answers, against a scan of the cells
        const std::vector<kv_cell> &cells = kv.cells();
        uint32_t used = 0, used_end = 0;
        std::vector<llm_pos> pos_max(n_seqs, -1);
        std::vector<uint32_t> shifted;
        for (uint32_t i = 0; i < n_cells; ++i) {
            if (cells[i].empty()) continue;
            ++used;
            used_end = i + 1;
            if (cells[i].delta != 0) shifted.push_back(i);
            for (uint32_t q = 0; q < n_seqs; ++q)
                if (cells[i].has_seq(seq_id(q))) pos_max[q] = std::max(pos_max[q], cells[i].pos);
        }
        ASSERT_EQ(kv.used_cells(), used);
        ASSERT_EQ(kv.n_kv_for_graph(8), std::min(n_cells, std::max<uint32_t>(1, (used_end + 7) / 8) * 8));
        ASSERT_EQ(kv.seq_pos_max_all(), pos_max);
        ASSERT_EQ(kv.seq_pos_max(s), pos_max[size_t(s)]);
        ASSERT_EQ(kv.shifted_cells(), shifted);
        // a token of s goes to the first free cell after s's cells
        int64_t last = -1;
        for (uint32_t i = 0; i < n_cells; ++i)
            if (cells[i].has_seq(s)) last = i;
        uint32_t want = n_cells;
        for (uint32_t i = uint32_t(last + 1); i < n_cells && want == n_cells; ++i)
            if (cells[i].empty()) want = i;
        const std::vector<std::vector<seq_id>> one{{s}};
        const std::vector<uint32_t> got = kv.find_slots(one, false);
        if (want == n_cells)
            ASSERT_TRUE(got.empty());
        else
            ASSERT_EQ(got, std::vector<uint32_t>{want});
        for (llm_pos &p : next_pos) p = std::max<llm_pos>(p, 0);
        for (uint32_t q = 0; q < n_seqs; ++q) next_pos[q] = std::max(next_pos[q], pos_max[q] + 1);
    }
}

}  // namespace
}  // namespace weft
