// tests/runtime/test_delta_net_families.cpp — qwen3next, qwen35 and qwen35moe (gated delta nets and
// gated attention, src/model/graph_delta_net.h) end to end on four-layer synthetic files (delta nets at
// layers 0-2, attention at 3): the hybrid memory they get; the same bits however a short prompt is
// batched or threaded (every sequence under 64 tokens a call, so the op runs its recurrent form
// throughout); a 100-token prompt in one call (a chunked block of 64, then 36 by the recurrence) against
// two calls (60 and 40, all by the recurrence) within NMSE 1e-6; saved state continuing bit for bit.
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

// The chunked form (whole blocks of 64 tokens of a sequence in one call) and the recurrence agree within
// 1e-6 on every row, through the following layers and the attention.
TEST(DeltaNetFamilies, ALongPromptInOneCallOrTwoAgrees) {
    const std::vector<token> prompt = test::spread_tokens(100, 280, 3);
    const std::vector<token> head(prompt.begin(), prompt.begin() + 60),
        tail(prompt.begin() + 60, prompt.end());
    for (const char *arch : delta_net_archs) {
        synth_file f(std::string("delta-net-long-") + arch, delta_net_spec(arch));
        const auto m = model::load(f.path());
        inference_context one(*m, test::recurrent_params(512, 2, 1, 128));
        const test::logit_rows whole = test::all_logits(one, prompt);
        inference_context two(*m, test::recurrent_params(512, 2, 1, 128));
        test::logit_rows split = test::all_logits(two, head);
        const test::logit_rows rest = test::all_logits(two, tail, 60);
        split.insert(split.end(), rest.begin(), rest.end());
        ASSERT_EQ(split.size(), whole.size());
        double worst = 0;
        for (size_t i = 0; i < whole.size(); ++i) worst = std::max(worst, test::nmse(split[i], whole[i]));
        std::printf("[ nmse     ] %s: 100 tokens in one call vs 60 + 40, worst row %.3g\n", arch, worst);
        EXPECT_LE(worst, 1e-6) << arch;
        // the forms do differ (a test of the chunked form, not of one path twice)
        EXPECT_GT(worst, 0.0) << arch;
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
