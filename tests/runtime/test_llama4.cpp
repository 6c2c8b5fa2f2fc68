// tests/runtime/test_llama4.cpp — what Llama 4 adds to the Llama block, piece by piece: the chunked
// attention mask of the KV cache (cells of the token's own chunk only, by position, whatever cell
// holds them), the attention temperature of the NoPE layers, the layer layout read from a file,
// and the refusals. test_family_reference.cpp checks the whole model against the reference engine
// on a short prompt (where chunks and temperature do not act yet); LongPromptMatchesTheReference
// below checks it past position 8192, where both do.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "runtime/family_table.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"

namespace weft {
namespace llama4_test {  // named: the unity build joins this file with others

using chunked_kind = model_hparams::swa_kind;

synth_spec llama4_spec() {
    for (const test::family_case &f : test::families())
        if (f.name() == "llama4") return f.spec();
    ADD_FAILURE() << "family_table.h has no llama4 line";
    return {};
}

class Llama4 : public ::testing::Test {
  protected:
    static void SetUpTestSuite() {
        file_ = new test::synth_file("llama4-pieces", llama4_spec());
        model_ = model::load(file_->path()).release();
    }
    static void TearDownTestSuite() {
        delete model_;
        delete file_;
    }
    static test::synth_file *file_;
    static model *model_;
};
test::synth_file *Llama4::file_ = nullptr;
model *Llama4::model_ = nullptr;

const float hidden = -INFINITY;

std::vector<float> mask_row(const kv_cache &kv, uint32_t n_kv, llm_pos pos, seq_id s, int64_t chunk) {
    std::vector<float> row(n_kv);
    const std::vector<llm_pos> p = {pos};
    const std::vector<std::vector<seq_id>> seqs = {{s}};
    kv.fill_mask(row.data(), n_kv, p, seqs, chunk, true, chunked_kind::chunked);
    return row;
}

// Chunks of 4 positions: a token at position p sees the positions p / 4 * 4 ... p of its sequence.
TEST_F(Llama4, ChunkedMaskShowsOnlyTheTokensOwnChunk) {
    kv_cache kv(*model_, 10, dtype::f16, 2);
    const seq_id s0[] = {0}, s1[] = {1};
    for (uint32_t c = 0; c < 7; ++c) kv.assign(c, llm_pos(c), s0);  // positions 0 ... 6
    kv.assign(7, 0, s1);                                            // another sequence's position 0
    const float o = 0.0f, x = hidden;
    EXPECT_EQ(mask_row(kv, 10, 3, 0, 4),
              (std::vector<float>{o, o, o, o, x, x, x, x, x, x}));  // chunk 0 whole
    EXPECT_EQ(mask_row(kv, 10, 4, 0, 4), (std::vector<float>{x, x, x, x, o, x, x, x, x, x}));  // a new chunk
    EXPECT_EQ(mask_row(kv, 10, 6, 0, 4), (std::vector<float>{x, x, x, x, o, o, o, x, x, x}));
    EXPECT_EQ(mask_row(kv, 10, 5, 1, 4),
              (std::vector<float>{x, x, x, x, x, x, x, x, x, x}));  // s1: chunk 1 empty
    EXPECT_EQ(mask_row(kv, 10, 2, 1, 4), (std::vector<float>{x, x, x, x, x, x, x, o, x, x}));
    // the same cache as a sliding window of 4: the last four positions, across the chunk boundary
    std::vector<float> window(10);
    const std::vector<llm_pos> p = {5};
    const std::vector<std::vector<seq_id>> seqs = {{0}};
    kv.fill_mask(window.data(), 10, p, seqs, 4);
    EXPECT_EQ(window, (std::vector<float>{x, x, o, o, o, o, x, x, x, x}));
}

// Cells freed by removing the start of a sequence take later positions of another chunk: what a
// token sees follows the cells' positions, not their order in the cache.
TEST_F(Llama4, ChunkedMaskFollowsPositionsOfReusedCells) {
    kv_cache kv(*model_, 8, dtype::f16, 1);
    const seq_id s0[] = {0};
    for (uint32_t c = 0; c < 8; ++c) kv.assign(c, llm_pos(c), s0);  // positions 0 ... 7, chunks of 4
    ASSERT_TRUE(kv.seq_rm(0, 0, 4));                                // chunk 0 goes
    const std::vector<uint32_t> cells = kv.find_slots(std::vector<std::vector<seq_id>>(2, {0}));
    ASSERT_EQ(cells.size(), 2u);
    for (size_t i = 0; i < cells.size(); ++i) kv.assign(cells[i], llm_pos(8 + i), s0);  // chunk 2: 8, 9
    std::vector<float> want(8, hidden);
    for (size_t i = 0; i < cells.size(); ++i) want[cells[i]] = 0.0f;  // wherever they went
    EXPECT_EQ(mask_row(kv, 8, 9, 0, 4), want);
    std::vector<float> chunk1(8, hidden);
    for (uint32_t c = 4; c < 8; ++c) chunk1[c] = 0.0f;
    EXPECT_EQ(mask_row(kv, 8, 7, 0, 4), chunk1);  // position 7 still sees 4 ... 7 only
}

TEST_F(Llama4, TemperatureStepsEvery8192PositionsFromPosition8191) {
    const model_hparams &hp = model_->hparams();
    EXPECT_EQ(hp.attn_temperature(0), 1.0f);
    EXPECT_EQ(hp.attn_temperature(8190), 1.0f);
    EXPECT_EQ(hp.attn_temperature(8191), float(1.0 + 0.1 * std::log(2.0)));  // (8191 + 1) / 8192 = 1
    EXPECT_EQ(hp.attn_temperature(16382), float(1.0 + 0.1 * std::log(2.0)));
    EXPECT_EQ(hp.attn_temperature(16383), float(1.0 + 0.1 * std::log(3.0)));
}

TEST_F(Llama4, LayoutOfTheFile) {
    const model_hparams &hp = model_->hparams();
    EXPECT_EQ(hp.n_swa, 8192);
    EXPECT_EQ(hp.swa_type, chunked_kind::chunked);
    EXPECT_EQ(hp.n_moe_layer_step, 2);
    EXPECT_TRUE(hp.expert_weights_before_ffn);
    EXPECT_EQ(hp.n_ff_shexp, hp.n_ff_exp);
    EXPECT_EQ(hp.n_ff(0), 2 * hp.n_ff_exp);  // the dense FFNs are twice as wide
    for (int64_t il = 0; il < 4; ++il) {
        EXPECT_EQ(hp.is_swa(il), il != 3) << il;  // chunked at 0-2, the whole context at 3
        const layer_weights &l = model_->weights().layers[size_t(il)];
        EXPECT_EQ(l.ffn_gate_inp != nullptr, il % 2 == 1) << il;
        EXPECT_EQ(l.ffn_down_shexp != nullptr, il % 2 == 1) << il;
        EXPECT_EQ(l.ffn_down != nullptr, il % 2 == 0) << il;
    }
    EXPECT_FALSE(model_->can_shift_kv()) << "the NoPE layer's keys cannot follow a moved position";
}

TEST_F(Llama4, RefusesWhatTheReferenceCannotRun) {
    auto load_with = [&](const test::gguf_edits &e) {
        test::temp_file copy("llama4-edited");
        test::copy_gguf(file_->path(), copy.path(), e);
        model::load(copy.path());
    };
    test::gguf_edits no_chunks;
    no_chunks.set_ints["llama4.attention.sliding_window"] = 0;
    EXPECT_THROW(load_with(no_chunks), error);
    test::gguf_edits no_step;
    no_step.remove_keys.push_back("llama4.interleave_moe_layer_step");
    EXPECT_THROW(load_with(no_step), error);
    test::gguf_edits no_experts;
    no_experts.set_ints["llama4.expert_count"] = 0;
    EXPECT_THROW(load_with(no_experts), error);
    test::gguf_edits own_base;
    own_base.set_floats["llama4.rope.freq_base_swa"] = 10000.0f;
    EXPECT_THROW(load_with(own_base), error);
}

// tests/data/families/llama4-long-F32.json (record.sh's record_long line): the reference's perplexity
// tool on one chunk of 8704 tokens, its log-probabilities (16 bits per entry) at positions before
// 8191, around the temperature's step (8191) and the second chunk's start (8192), and at the end.
// Every kept row within NMSE 1e-6 over the entries within 16 nats of the top one, the same top token.
TEST(Llama4Long, LongPromptMatchesTheReference) {
    std::ifstream in(std::string(WEFT_SOURCE_DIR) + "/tests/data/families/llama4-long-F32.json");
    ASSERT_TRUE(in) << "tests/data/families/llama4-long-F32.json: missing (record it with record.sh)";
    const nlohmann::json j = nlohmann::json::parse(in);
    test::family_case family;
    for (const test::family_case &f : test::families())
        if (f.name() == "llama4") family = f;
    ASSERT_EQ(j.at("synth_args").get<std::string>(), family.synth_args()) << "re-record with record.sh";
    test::synth_file file("llama4-long", family.spec());
    auto m = model::load(file.path());
    const auto tokens = j.at("tokens").get<std::vector<token>>();
    const int32_t n_ctx = j.at("n_ctx").get<int32_t>(), n_vocab = j.at("n_vocab").get<int32_t>();
    ASSERT_EQ(m->hparams().n_vocab, n_vocab);
    ASSERT_EQ(int32_t(tokens.size()), n_ctx);
    std::vector<int32_t> kept;
    for (const auto &r : j.at("rows")) kept.push_back(r.at("pos").get<int32_t>());
    inference_params ip;
    ip.n_ctx = uint32_t(n_ctx);
    ip.n_batch = 2048;
    ip.n_threads = ip.n_threads_batch = 2;
    inference_context ctx(*m, ip);
    // as the perplexity tool decodes a chunk: its first token replaced by BOS, batches of 2048
    for (int32_t begin = 0; begin < n_ctx; begin += 2048) {
        batch b;
        bool any_output = false;
        for (int32_t k = begin; k < std::min(n_ctx, begin + 2048); ++k) {
            const bool out = std::find(kept.begin(), kept.end(), k) != kept.end();
            b.add(k == 0 ? m->vocab().bos() : tokens[size_t(k)], llm_pos(k), {0}, out);
            any_output = any_output || out;
        }
        if (!any_output) b.output.back() = 1;  // a decode computes at least one row
        ASSERT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
        double worst = 0;
        for (const auto &r : j.at("rows")) {
            const int32_t pos = r.at("pos").get<int32_t>();
            if (pos < begin || pos >= begin + 2048) continue;
            const float *logits = ctx.get_logits_ith(pos - begin);  // by the batch's token
            const float step = r.at("step").get<float>(), lowest = r.at("lowest").get<float>();
            const auto codes = r.at("codes").get<std::vector<uint16_t>>();
            const float top = *std::max_element(logits, logits + n_vocab);
            double sum_exp = 0;
            for (int32_t i = 0; i < n_vocab; ++i) sum_exp += std::exp(double(logits[i]) - top);
            double num = 0, den = 0;
            int32_t want_top = 0;
            for (int32_t i = 0; i < n_vocab; ++i) {
                if (codes[size_t(i)] > codes[size_t(want_top)]) want_top = i;
                if (codes[size_t(i)] == 0) continue;  // more than 16 nats below the top: not kept
                const double want = double(lowest) + double(codes[size_t(i)]) * double(step);
                const double got = double(logits[i]) - top - std::log(sum_exp);
                num += (got - want) * (got - want);
                den += want * want;
            }
            worst = std::max(worst, num / den);
            EXPECT_LE(num / den, 1e-6) << "position " << pos;
            EXPECT_EQ(int32_t(std::max_element(logits, logits + n_vocab) - logits), want_top)
                << "position " << pos;
        }
        if (worst > 0)
            std::printf("[ nmse     ] llama4 positions %d-%d: worst kept row %.3g\n", begin,
                        std::min(n_ctx, begin + 2048) - 1, worst);
    }
}

}  // namespace llama4_test
}  // namespace weft
