// tests/runtime/test_delta_net_families.cpp — qwen3next, qwen35 and qwen35moe (gated delta nets and
// gated attention, src/model/graph_delta_net.h) end to end on four-layer synthetic files (delta nets at
// layers 0-2, attention at 3): the hybrid memory they get; the same bits however a short prompt is
// batched or threaded; a 100-token prompt (a whole block of the op's 64 and a part of the next) the
// same bits in one call or cut into several; saved state continuing bit for bit.
// Their logits against the reference engine: test_family_reference.cpp (family_table.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "model/model_test_util.h"
#include "runtime/context_test_util.h"
#include "runtime/recurrent_test_util.h"
#include "weft/model/model.h"
#include "weft/runtime/context.h"
#include "weft/runtime/kv_cache.h"
#include "weft/runtime/memory.h"

namespace weft {
namespace {

using test::continue_seq;
using test::expect_same_bits;
using test::synth_file;

const char *const delta_net_archs[] = {"qwen3next", "qwen35", "qwen35moe"};

synth_spec delta_net_spec(const std::string &arch, dtype type = dtype::f32) {
    synth_spec s = test::small_spec(arch);
    s.n_layer = 4;
    s.n_vocab = 280;
    s.type = type;
    return s;
}

TEST(DeltaNetFamilies, TheMemoryIsAHybridWithTheKvCacheOnTheAttentionLayer) {
    for (const char *arch : delta_net_archs) {
        synth_file f(std::string("delta-net-layers-") + arch, delta_net_spec(arch));
        const auto m = model::load(f.path());
        ASSERT_TRUE(m->hparams().hybrid()) << arch;
        inference_context ctx(*m, test::recurrent_params());
        EXPECT_EQ(ctx.memory().kind(), memory_kind::hybrid) << arch;
        for (int64_t il = 0; il < 4; ++il) {
            EXPECT_EQ(m->hparams().is_recurrent(il), il != 3) << arch << " layer " << il;
            EXPECT_EQ(ctx.kv().layers()[size_t(il)].k != nullptr, il == 3) << arch << " layer " << il;
        }
    }
}

TEST(DeltaNetFamilies, SameBitsHoweverBatchedOrThreaded) {
    for (const char *arch : delta_net_archs) {
        synth_file f(std::string("delta-net-inv-") + arch, delta_net_spec(arch));
        const auto m = model::load(f.path());
        test::expect_invariant(*m, test::spread_tokens(11, 280, 1), test::spread_tokens(7, 280, 2), arch);
    }
}

// A prompt longer than the op's blocks of 64 tokens gives the same bits in one call, in two calls cut
// inside a block, or cut on a block's end and then token by token (the blocks are counted from the
// sequence's first token, whatever the calls: ops.h), through the following layers and the attention.
TEST(DeltaNetFamilies, ALongPromptGivesTheSameBitsHoweverItIsCut) {
    const std::vector<token> prompt = test::spread_tokens(100, 280, 3);
    for (const char *arch : delta_net_archs) {
        synth_file f(std::string("delta-net-long-") + arch, delta_net_spec(arch));
        const auto m = model::load(f.path());
        inference_context one(*m, test::recurrent_params(512, 2, 1, 128));
        const test::logit_rows whole = test::all_logits(one, prompt);
        for (const std::vector<size_t> &cuts :
             {std::vector<size_t>{60}, std::vector<size_t>{64, 65, 66, 67}}) {
            inference_context cut(*m, test::recurrent_params(512, 2, 1, 128));
            test::logit_rows rows;
            size_t begin = 0;
            for (size_t i = 0; i <= cuts.size(); ++i) {
                const size_t end = i < cuts.size() ? cuts[i] : prompt.size();
                const test::logit_rows part = test::all_logits(
                    cut,
                    std::vector<token>(prompt.begin() + ptrdiff_t(begin), prompt.begin() + ptrdiff_t(end)),
                    llm_pos(begin));
                rows.insert(rows.end(), part.begin(), part.end());
                begin = end;
            }
            ASSERT_EQ(rows.size(), whole.size()) << arch;
            for (size_t i = 0; i < whole.size(); ++i)
                EXPECT_EQ(rows[i], whole[i]) << arch << ", cut at " << cuts[0] << ": row " << i;
        }
    }
}

TEST(DeltaNetFamilies, SavedStateContinuesBitForBit) {
    for (const char *arch : delta_net_archs) {
        synth_file f(std::string("delta-net-state-") + arch, delta_net_spec(arch));
        const auto m = model::load(f.path());
        const std::vector<token> prompt = test::spread_tokens(7, 280, 7),
                                 next = test::spread_tokens(3, 280, 8);
        inference_context ctx(*m, test::recurrent_params());
        continue_seq(ctx, prompt, 0);
        const std::vector<uint8_t> saved = ctx.state_save(prompt, "user");
        const std::vector<float> want = continue_seq(ctx, next, 0);

        inference_context loaded(*m, test::recurrent_params());
        EXPECT_EQ(loaded.state_load(saved).tokens, prompt) << arch;
        expect_same_bits(want, continue_seq(loaded, next, 0), std::string(arch) + ", loaded state");
    }
}

}  // namespace
}  // namespace weft
