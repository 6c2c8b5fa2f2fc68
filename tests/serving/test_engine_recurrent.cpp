// tests/serving/test_engine_recurrent.cpp — the serving engine with models that keep recurrent states:
// mamba (recurrent) and lfm2 (hybrid: short-convolution states beside an attention KV cache).
// Continuous batching of slots whose states advance side by side is exact, prompt caching reuses a
// slot's memory only when the new prompt continues everything it holds (a state cannot drop its last
// tokens), a saved slot continues as it was, and speculative decoding is refused with a reason.
#include <gtest/gtest.h>

#include <map>
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

// The model of the running test's architecture (its parameter): tiny, random weights, made once.
const model &state_model(const std::string &arch) {
    static std::map<std::string, std::unique_ptr<model>> models;
    static std::map<std::string, std::unique_ptr<test::synth_file>> files;
    auto &m = models[arch];
    if (!m) {
        synth_spec s;
        s.arch = arch;
        s.n_embd = 64;
        s.n_layer = arch == "lfm2" ? 4 : 2;  // lfm2: convolutions at 0, 1, 3, attention at 2
        s.n_head = 4;
        s.n_head_kv = 2;
        s.n_ff = 96;
        s.n_vocab = 300;
        files[arch] = std::make_unique<test::synth_file>("serving-" + arch, s);
        m = model::load(files[arch]->path());
    }
    return *m;
}

class ServingRecurrent : public ::testing::TestWithParam<std::string> {
  protected:
    const model &m() const { return state_model(GetParam()); }
};

engine_params params(int32_t n_slots, uint32_t n_ctx = 256) {
    engine_params p;
    p.n_slots = n_slots;
    p.context.n_ctx = n_ctx;
    p.context.n_threads = 1;
    return p;
}

request greedy_text(const model &m, const std::string &text, int32_t max_tokens) {
    request r;
    r.prompt = m.vocab().tokenize(text, true, true);
    r.max_tokens = max_tokens;
    r.sampling.temp = 0.0f;
    r.ignore_eos = true;
    return r;
}

bool quiet(const event &) {
    return true;
}

completion alone(const model &m, const request &r) {
    engine eng(m, params(1));
    return eng.generate(r, quiet);
}

TEST_P(ServingRecurrent, BatchedSlotsGiveWhatEachGetsAlone) {
    const std::vector<std::string> texts = {
        "Once upon a time", "the cat", "a dog ran to the park and", "hi", "one two three four five six", "x"};
    std::vector<request> reqs;
    for (size_t i = 0; i < texts.size(); ++i) reqs.push_back(greedy_text(m(), texts[i], 6 + int32_t(i % 4)));
    engine_params p = params(3);
    p.context.n_threads = 2;
    engine eng(m(), p);
    std::vector<std::shared_ptr<job>> jobs;
    for (const request &r : reqs) jobs.push_back(eng.submit(r));
    eng.start();
    for (size_t i = 0; i < reqs.size(); ++i) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
        while (!jobs[i]->finished() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_TRUE(jobs[i]->finished()) << texts[i];
        EXPECT_EQ(test::generated_ids(jobs[i]->result()), test::generated_ids(alone(m(), reqs[i])))
            << texts[i];
    }
    eng.stop();
}

TEST_P(ServingRecurrent, PromptCachingReusesOnlyAWholeState) {
    engine eng(m(), params(1));
    const request a = greedy_text(m(), "the cat sat on the mat", 8);
    const completion ca = eng.generate(a, quiet);
    EXPECT_EQ(ca.n_cached, 0);

    // the next turn continues all the slot holds (the prompt and the output but its last token)
    request turn = a;
    for (const auto &g : ca.tokens) turn.prompt.push_back(g.id);
    for (token t : m().vocab().tokenize(" more", false, false)) turn.prompt.push_back(t);
    const completion ct = eng.generate(turn, quiet);
    EXPECT_EQ(ct.n_cached, int32_t(a.prompt.size() + ca.tokens.size() - 1));
    EXPECT_EQ(test::generated_ids(ct), test::generated_ids(alone(m(), turn)));

    // a prompt sharing only a part, and the same prompt again: the state starts over
    const request partial = greedy_text(m(), "the cat sat on a hat", 8);
    const completion cp = eng.generate(partial, quiet);
    EXPECT_EQ(cp.n_cached, 0);
    EXPECT_EQ(test::generated_ids(cp), test::generated_ids(alone(m(), partial)));
    const completion again = eng.generate(partial, quiet);
    EXPECT_EQ(again.n_cached, 0);
    EXPECT_EQ(test::generated_ids(again), test::generated_ids(cp));
}

TEST_P(ServingRecurrent, ASavedSlotContinuesAsItWas) {
    const std::string path = test::temp_file("mamba-slot").path();
    engine eng(m(), params(2));
    const request a = greedy_text(m(), "once there was a", 5);
    const completion ca = eng.generate(a, quiet);
    eng.save_slot(0, path);
    request turn = a;
    for (const auto &g : ca.tokens) turn.prompt.push_back(g.id);
    const completion want = eng.generate(turn, quiet);

    engine other(m(), params(2));
    other.load_slot(0, path);
    const completion got = other.generate(turn, quiet);
    EXPECT_EQ(got.n_cached, want.n_cached);
    EXPECT_GT(got.n_cached, 0);
    EXPECT_EQ(test::generated_ids(got), test::generated_ids(want));
    std::remove(path.c_str());
}

TEST_P(ServingRecurrent, SpeculativeDecodingIsRefused) {
    engine_params p = params(1);
    p.speculative.lookup_ngram = 3;
    try {
        engine eng(m(), p);
        FAIL() << "expected an error";
    } catch (const error &e) {
        // "... a recurrent model: its recurrent states ...", "... a hybrid model: ..."
        EXPECT_NE(std::string(e.what()).find(GetParam() == "lfm2" ? "hybrid" : "recurrent"),
                  std::string::npos)
            << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(StateModels, ServingRecurrent, ::testing::Values("mamba", "lfm2"));

}  // namespace
}  // namespace weft::serving
