// tests/serving/test_engine_lora.cpp — LoRA scales per request in the engine: requests with other
// scales share the engine (and are decoded in other steps), each getting the tokens a context with
// its scales gives alone; the engine's default scales; bad scales are errors at submit.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/decode_helpers.h"
#include "model/model_test_util.h"
#include "weft/core/error.h"
#include "weft/model/lora.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"
#include "weft/serving/engine.h"

namespace weft::serving {
namespace {

struct adapted_model {
    test::temp_file base_file{"engine-lora-base"}, adapter_file{"engine-lora-adapter"};
    std::unique_ptr<model> m;
    std::unique_ptr<lora_adapter> adapter;
    adapted_model() {
        synth_spec s;
        synth_write(s, base_file.path());
        synth_lora_write(s, 4, 8.0f, adapter_file.path());
        m = model::load(base_file.path());
        adapter = lora_adapter::load(adapter_file.path(), *m);
    }
};

engine_params params_for(const adapted_model &am, int32_t n_slots, float default_scale) {
    engine_params ep;
    ep.n_slots = n_slots;
    ep.context.n_ctx = 256 * uint32_t(n_slots);
    ep.context.n_threads = ep.context.n_threads_batch = 2;
    ep.context.loras = {{am.adapter.get(), default_scale}};
    return ep;
}

request greedy_request(const model &m, std::vector<float> scales) {
    request r;
    r.prompt = m.vocab().tokenize("Once upon a time", true, true);
    r.max_tokens = 16;
    r.sampling.temp = 0.0f;
    r.ignore_eos = true;
    r.lora_scales = std::move(scales);
    return r;
}

TEST(EngineLora, RequestsWithOtherScalesGetTheirSoloTokens) {
    adapted_model am;
    // alone: an engine whose default is the scale
    std::vector<std::vector<token>> solo;
    for (const float scale : {0.0f, 1.0f, -0.5f}) {
        engine eng(*am.m, params_for(am, 1, scale));
        solo.push_back(
            test::generated_ids(eng.generate(greedy_request(*am.m, {}), [](const event &) { return true; })));
    }
    EXPECT_NE(solo[0], solo[1]);
    // together, each request naming its scale, in an engine whose default is another one
    engine eng(*am.m, params_for(am, 3, 0.25f));
    std::vector<std::shared_ptr<job>> jobs;
    for (const float scale : {0.0f, 1.0f, -0.5f}) jobs.push_back(eng.submit(greedy_request(*am.m, {scale})));
    while (eng.step()) {
    }
    for (size_t i = 0; i < jobs.size(); ++i) EXPECT_EQ(test::generated_ids(jobs[i]->result()), solo[i]) << i;
    // the default changes for the requests after it
    eng.set_lora_scales({1.0f});
    EXPECT_EQ(eng.lora_scales(), std::vector<float>{1.0f});
    EXPECT_EQ(
        test::generated_ids(eng.generate(greedy_request(*am.m, {}), [](const event &) { return true; })),
        solo[1]);
}

TEST(EngineLora, BadScalesAreErrors) {
    adapted_model am;
    engine eng(*am.m, params_for(am, 1, 1.0f));
    EXPECT_THROW(eng.submit(greedy_request(*am.m, {1.0f, 2.0f})), error);  // one adapter, two scales
    EXPECT_THROW(eng.submit(greedy_request(*am.m, {std::nanf("")})), error);
    EXPECT_THROW(eng.set_lora_scales({}), error);
}

}  // namespace
}  // namespace weft::serving
