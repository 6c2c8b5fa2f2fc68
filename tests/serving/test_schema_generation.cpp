// tests/serving/test_schema_generation.cpp — generation under a JSON schema with stories260K for 100
// seeds through the engine: every output parsed and validated against the schema by the independent
// validator of tests/grammar/json_validator.h.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "grammar/json_validator.h"
#include "weft/core/error.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"
#include "weft/model/model.h"
#include "weft/serving/engine.h"

namespace weft::serving {
namespace {

using json = nlohmann::ordered_json;
using test::people_schema;
using test::valid;

// The trained stories260K (the model `weft` embeds) writes JSON under the schema for 100 seeds: every
// output ends by the grammar (not by length), parses, and satisfies the schema.
TEST(JsonSchema, Stories260KWritesValidJsonFor100Seeds) {
    const auto path = std::filesystem::path(WEFT_SOURCE_DIR) / "models/stories260K.gguf";
    const auto m = model::load(path.string());
    engine_params ep;
    ep.n_slots = 1;
    ep.context.n_ctx = 1024;
    ep.context.n_threads = 1;
    engine eng(*m, ep);
    const std::string gbnf = json_schema_to_grammar(people_schema);
    const json schema = json::parse(people_schema);
    const auto g = grammar::parse(gbnf);
    size_t with_pets = 0;
    for (uint32_t seed = 0; seed < 100; ++seed) {
        request r;
        r.prompt = m->vocab().tokenize("Once upon a time", true, true);
        r.max_tokens = 900;
        r.sampling.seed = seed;
        r.sampling.grammar = gbnf;
        const completion done = eng.generate(std::move(r), [](const event &) { return true; });
        ASSERT_EQ(done.finish, finish_reason::stop) << "seed " << seed << ": " << done.error << "\n"
                                                    << done.text;
        EXPECT_TRUE(grammar_matches(g, done.text)) << done.text;
        json value;
        ASSERT_NO_THROW(value = json::parse(done.text)) << "seed " << seed << ": " << done.text;
        std::string why;
        EXPECT_TRUE(valid(schema, value, schema, why)) << "seed " << seed << ": " << why << "\n" << done.text;
        with_pets += value.contains("pets");
    }
    EXPECT_GT(with_pets, 0u);  // the optional parts are taken too, not only the shortest path
}

// Any JSON value: what ends by the grammar parses; what runs out of tokens is still a prefix of JSON.
TEST(JsonSchema, Stories260KWritesJsonValues) {
    const auto path = std::filesystem::path(WEFT_SOURCE_DIR) / "models/stories260K.gguf";
    const auto m = model::load(path.string());
    engine_params ep;
    ep.n_slots = 1;
    ep.context.n_ctx = 512;
    ep.context.n_threads = 1;
    engine eng(*m, ep);
    const std::string gbnf = json_any_grammar();
    const auto g = grammar::parse(gbnf);
    int complete = 0;
    for (uint32_t seed = 0; seed < 100; ++seed) {
        request r;
        r.prompt = {m->vocab().bos()};
        r.max_tokens = 64;
        r.sampling.seed = seed;
        r.sampling.grammar = gbnf;
        const completion done = eng.generate(std::move(r), [](const event &) { return true; });
        ASSERT_NE(done.finish, finish_reason::error) << done.error;
        grammar_matcher prefix(g);
        EXPECT_TRUE(prefix.accept(done.text)) << done.text;
        if (done.finish == finish_reason::stop) {
            ++complete;
            EXPECT_TRUE(nlohmann::json::accept(done.text)) << done.text;
        }
    }
    EXPECT_GT(complete, 10);
}

}  // namespace
}  // namespace weft::serving
