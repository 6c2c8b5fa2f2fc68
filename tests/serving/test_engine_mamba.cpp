// tests/serving/test_engine_mamba.cpp — the serving engine with a recurrent model (mamba): continuous
// batching of slots whose states advance side by side is exact, prompt caching reuses a slot's state
// only when the new prompt continues everything it holds (a state cannot drop its last tokens), a
// saved slot continues as it was, and speculative decoding is refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/decode_helpers.h"
#include "model/model_test_util.h"
#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/serving/engine.h"

namespace weft::serving {
namespace {

const model &mamba() {
    static const auto m = [] {
        synth_spec s;
        s.arch = "mamba";
        s.n_embd = 64;
        s.n_layer = 2;
        s.n_vocab = 300;
        static test::synth_file f("serving-mamba", s);
        return model::load(f.path());
    }();
    return *m;
}

engine_params params(int32_t n_slots, uint32_t n_ctx = 256) {
    engine_params p;
    p.n_slots = n_slots;
    p.context.n_ctx = n_ctx;
    p.context.n_threads = 1;
    return p;
}

request fixed(const std::string &text, int32_t max_tokens) {
    request r;
    r.prompt = mamba().vocab().tokenize(text, true, true);
    r.max_tokens = max_tokens;
    r.sampling.temp = 0.0f;
    r.ignore_eos = true;
    return r;
}

bool quiet(const event &) {
    return true;
}

completion alone(const request &r) {
    engine eng(mamba(), params(1));
    return eng.generate(r, quiet);
}

TEST(ServingMamba, BatchedSlotsGiveWhatEachGetsAlone) {
    const std::vector<std::string> texts = {
        "Once upon a time", "the cat", "a dog ran to the park and", "hi", "one two three four five six", "x"};
    std::vector<request> reqs;
    for (size_t i = 0; i < texts.size(); ++i) reqs.push_back(fixed(texts[i], 6 + int32_t(i % 4)));
    engine_params p = params(3);
    p.context.n_threads = 2;
    engine eng(mamba(), p);
    std::vector<std::shared_ptr<job>> jobs;
    for (const request &r : reqs) jobs.push_back(eng.submit(r));
    eng.start();
    for (size_t i = 0; i < reqs.size(); ++i) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!jobs[i]->finished() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_TRUE(jobs[i]->finished()) << texts[i];
        EXPECT_EQ(test::generated_ids(jobs[i]->result()), test::generated_ids(alone(reqs[i]))) << texts[i];
    }
    eng.stop();
}

TEST(ServingMamba, PromptCachingReusesOnlyAWholeState) {
    engine eng(mamba(), params(1));
    const request a = fixed("the cat sat on the mat", 8);
    const completion ca = eng.generate(a, quiet);
    EXPECT_EQ(ca.n_cached, 0);

    // the next turn continues all the slot holds (the prompt and the output but its last token)
    request turn = a;
    for (const auto &g : ca.tokens) turn.prompt.push_back(g.id);
    for (token t : mamba().vocab().tokenize(" more", false, false)) turn.prompt.push_back(t);
    const completion ct = eng.generate(turn, quiet);
    EXPECT_EQ(ct.n_cached, int32_t(a.prompt.size() + ca.tokens.size() - 1));
    EXPECT_EQ(test::generated_ids(ct), test::generated_ids(alone(turn)));

    // a prompt sharing only a part, and the same prompt again: the state starts over
    const request partial = fixed("the cat sat on a hat", 8);
    const completion cp = eng.generate(partial, quiet);
    EXPECT_EQ(cp.n_cached, 0);
    EXPECT_EQ(test::generated_ids(cp), test::generated_ids(alone(partial)));
    const completion again = eng.generate(partial, quiet);
    EXPECT_EQ(again.n_cached, 0);
    EXPECT_EQ(test::generated_ids(again), test::generated_ids(cp));
}

TEST(ServingMamba, ASavedSlotContinuesAsItWas) {
    const std::string path = test::temp_file("mamba-slot").path();
    engine eng(mamba(), params(2));
    const request a = fixed("once there was a", 5);
    const completion ca = eng.generate(a, quiet);
    eng.save_slot(0, path);
    request turn = a;
    for (const auto &g : ca.tokens) turn.prompt.push_back(g.id);
    const completion want = eng.generate(turn, quiet);

    engine other(mamba(), params(2));
    other.load_slot(0, path);
    const completion got = other.generate(turn, quiet);
    EXPECT_EQ(got.n_cached, want.n_cached);
    EXPECT_GT(got.n_cached, 0);
    EXPECT_EQ(test::generated_ids(got), test::generated_ids(want));
    std::remove(path.c_str());
}

TEST(ServingMamba, SpeculativeDecodingIsRefused) {
    engine_params p = params(1);
    p.speculative.lookup_ngram = 3;
    try {
        engine eng(mamba(), p);
        FAIL() << "expected an error";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("recurrent"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace weft::serving
