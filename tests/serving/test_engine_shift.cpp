// tests/serving/test_engine_shift.cpp — context shift in the engine: a generation goes on past the
// slot's context (keep the start, drop the oldest half of the rest), exactly as the same shifts done
// by hand on an inference_context; shift_slot for a conversation's next turn; a slot's cache saved
// to a file and loaded into another engine.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "common/fixtures.h"
#include "model/model_test_util.h"
#include "weft/model/model.h"
#include "weft/runtime/batch.h"
#include "weft/runtime/context.h"
#include "weft/serving/engine.h"

namespace weft::serving {
namespace {

constexpr uint32_t n_ctx = 48;

engine_params shifting(uint32_t cells, bool shift = true) {
    engine_params p;
    p.context.n_ctx = cells;
    p.context.n_threads = 1;
    p.context_shift = shift;
    return p;
}

request greedy_run(std::vector<token> prompt, int32_t max_tokens, int32_t n_keep) {
    request r;
    r.prompt = std::move(prompt);
    r.max_tokens = max_tokens;
    r.sampling.temp = 0.0f;
    r.ignore_eos = true;
    r.n_keep = n_keep;
    return r;
}

std::vector<token> prompt_of(size_t n) {
    std::vector<token> t;
    for (size_t i = 0; i < n; ++i) t.push_back(token(5 + (i * 29) % 250));
    return t;
}

// The engine's generation redone on a bare context: greedy tokens, and when the context is full,
// the first min(n_keep, n_ctx / 2) cells kept, half of the rest removed and the later ones moved down.
std::vector<token> shifted_by_hand(const model &m, const std::vector<token> &prompt, int32_t max_tokens,
                                   int32_t n_keep, int32_t &n_discarded) {
    inference_params p;
    p.n_ctx = n_ctx;
    p.n_threads = 1;
    inference_context ctx(m, p);
    EXPECT_EQ(ctx.decode(batch::from_tokens(prompt)), decode_ok);
    llm_pos n_past = llm_pos(prompt.size());
    std::vector<token> out;
    n_discarded = 0;
    for (;;) {
        const float *logits = ctx.get_logits_ith(-1);
        const token t = token(std::max_element(logits, logits + ctx.n_vocab()) - logits);
        out.push_back(t);
        if (int32_t(out.size()) == max_tokens) break;
        if (n_past >= llm_pos(n_ctx)) {
            const llm_pos keep = std::min<llm_pos>(n_keep, llm_pos(n_ctx / 2));
            const llm_pos discard = (n_past - keep) / 2;
            ctx.kv_seq_rm(0, keep, keep + discard);
            ctx.kv_seq_add(0, keep + discard, -1, -discard);
            n_past -= discard;
            n_discarded += discard;
        }
        batch b;
        b.add(t, n_past++, {0}, true);
        EXPECT_EQ(ctx.decode(b), decode_ok) << ctx.last_error();
    }
    return out;
}

void expect_shifts_as_by_hand(const model &m, const std::vector<token> &prompt, int32_t n_keep) {
    engine eng(m, shifting(n_ctx));
    const int32_t max_tokens = 150;  // three times the context
    const completion c =
        eng.generate(greedy_run(prompt, max_tokens, n_keep), [](const event &) { return true; });
    EXPECT_EQ(c.finish, finish_reason::length);
    ASSERT_EQ(c.tokens.size(), size_t(max_tokens)) << c.error;
    EXPECT_GE(c.n_shifts, 3);
    int32_t n_discarded = 0;
    EXPECT_EQ(test::generated_ids(c), shifted_by_hand(m, prompt, max_tokens, n_keep, n_discarded));
    EXPECT_EQ(c.n_discarded, n_discarded);
    // the slot holds what is left: the prompt and every sampled token but the last, minus the dropped
    EXPECT_EQ(eng.stats().slots[0].n_cached, int32_t(prompt.size()) + max_tokens - 1 - n_discarded);
    EXPECT_LE(eng.stats().kv_cells_used, n_ctx);
}

TEST(EngineContextShift, GenerationGoesOnPastTheContextAsShiftedByHand) {
    test::synth_file f("engine-shift", synth_spec{});
    auto m = model::load(f.path());
    expect_shifts_as_by_hand(*m, prompt_of(10), 4);
    expect_shifts_as_by_hand(*m, prompt_of(30), 100);  // n_keep capped at half the context
}

TEST(EngineContextShift, Stories260KGoesOnPastTheContext) {
    WEFT_REQUIRE_FIXTURES();
    auto m = model::load(test::fixture("models/stories260K.gguf"));
    expect_shifts_as_by_hand(*m, m->vocab().tokenize("Once upon a time", true, true), 1);
}

TEST(EngineContextShift, OffOrUnboundedStopsAtAFullContext) {
    test::synth_file f("engine-no-shift", synth_spec{});
    auto m = model::load(f.path());
    const std::vector<token> prompt = prompt_of(10);
    engine off(*m, shifting(n_ctx, false));
    const completion a = off.generate(greedy_run(prompt, 150, 4), [](const event &) { return true; });
    EXPECT_EQ(a.finish, finish_reason::length);
    EXPECT_EQ(prompt.size() + a.tokens.size() - 1, size_t(n_ctx));
    EXPECT_EQ(a.n_shifts, 0);

    engine on(*m, shifting(n_ctx));  // max_tokens < 0: until end of generation or a full context
    const completion b = on.generate(greedy_run(prompt, -1, 4), [](const event &) { return true; });
    EXPECT_EQ(prompt.size() + b.tokens.size() - 1, size_t(n_ctx));
    EXPECT_EQ(b.n_shifts, 0);
}

// A conversation about to outgrow the context drops old tokens before its next turn; the rest of
// the slot's cache is reused as it is.
TEST(EngineContextShift, ShiftSlotKeepsTheCacheForTheNextTurn) {
    test::synth_file f("engine-shift-slot", synth_spec{});
    auto m = model::load(f.path());
    engine eng(*m, shifting(n_ctx));
    const std::vector<token> prompt = prompt_of(30);
    const completion first = eng.generate(greedy_run(prompt, 5, 0), [](const event &) { return true; });
    std::vector<token> held = prompt;
    for (const auto &g : first.tokens) held.push_back(g.id);
    held.pop_back();  // the last sampled token was never decoded
    ASSERT_EQ(eng.stats().slots[0].n_cached, int32_t(held.size()));

    EXPECT_EQ(eng.shift_slot(0, 3, 20), 20);
    held.erase(held.begin() + 3, held.begin() + 23);
    EXPECT_EQ(eng.stats().slots[0].n_cached, int32_t(held.size()));
    EXPECT_EQ(eng.context().kv_seq_pos_max(0), llm_pos(held.size()) - 1);

    std::vector<token> next = held;
    for (token t : prompt_of(25)) next.push_back(t);
    const completion second = eng.generate(greedy_run(next, 3, 3), [](const event &) { return true; });
    EXPECT_EQ(second.n_cached, int32_t(held.size()));
    EXPECT_EQ(second.tokens.size(), 3u);
    EXPECT_EQ(eng.shift_slot(0, 3, 0), 0);
    EXPECT_THROW(eng.shift_slot(1, 3, 5), error);
}

// A prompt saved once costs no prefill in another engine: its cells come from the file, and only
// the last prompt token is decoded again (generation starts from its logits).
TEST(EngineSlotState, SavedPromptIsReusedByAnotherEngine) {
    test::synth_file f("engine-slot-state", synth_spec{});
    auto m = model::load(f.path());
    test::temp_file path("engine-slot-state");
    const std::vector<token> prompt = prompt_of(40);
    const completion fresh =
        engine(*m, shifting(128)).generate(greedy_run(prompt, 8, 0), [](const event &) { return true; });

    engine first(*m, shifting(128));
    first.generate(greedy_run(prompt, 0, 0), [](const event &) { return true; });  // the prompt alone
    first.save_slot(0, path.path(), "mine");

    engine second(*m, shifting(128));
    EXPECT_EQ(second.load_slot(0, path.path()), "mine");
    EXPECT_EQ(second.stats().slots[0].n_cached, int32_t(prompt.size()));
    const completion reused = second.generate(greedy_run(prompt, 8, 0), [](const event &) { return true; });
    EXPECT_EQ(reused.n_cached, int32_t(prompt.size()) - 1);
    EXPECT_EQ(second.context().perf().n_p_eval, 0);  // no prompt batch: single tokens only
    EXPECT_EQ(test::generated_ids(reused), test::generated_ids(fresh));

    // a context too small for the saved tokens, or another model: refused, the slot left empty
    engine small(*m, shifting(32));
    EXPECT_THROW(small.load_slot(0, path.path()), error);
    EXPECT_EQ(small.stats().slots[0].n_cached, 0);
    EXPECT_EQ(small.context().kv_used_cells(), 0u);
    synth_spec other_spec;
    other_spec.seed = 9;
    test::synth_file other_file("engine-slot-other", other_spec);
    auto other = model::load(other_file.path());
    engine o(*other, shifting(128));
    try {
        o.load_slot(0, path.path());
        ADD_FAILURE() << "loaded another model's state";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("another model"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace weft::serving
