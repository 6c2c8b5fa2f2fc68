// tests/serving/test_json_schema.cpp — JSON Schema to GBNF: texts each grammar must accept or reject,
// integer ranges checked value by value, errors naming the JSON pointer, and generation under a schema
// with stories260K for 100 seeds, every output parsed and validated against the schema by a small
// validator written here for the supported subset.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/model/model.h"
#include "weft/runtime/grammar.h"
#include "weft/serving/engine.h"
#include "weft/serving/json_schema.h"

namespace weft::serving {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const grammar> schema_grammar(const std::string &schema) {
    const std::string gbnf = json_schema_to_grammar(schema);
    try {
        return grammar::parse(gbnf, "converted");
    } catch (const error &e) {
        ADD_FAILURE() << e.what() << "\n" << gbnf;
        throw;
    }
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
    const auto g = schema_grammar(R"({"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}},
        "required": ["b"]})");
    for (const char *ok :
         {R"({"b": "x"})", R"({"a": 1, "b": ""})", R"({"b":"y","c":true})", R"({"a":-5,"b":"z","c":false})",
          "{ \"b\" : \"q\" }", "{\n  \"b\": \"\\u00e9\"\n}"})
        EXPECT_TRUE(grammar_matches(g, ok)) << ok;
    for (const char *bad : {R"({})", R"({"a": 1})", R"({"b": "x",})", R"({"c": true, "b": "x"})",
                            R"({"b": "x", "d": 1})", R"({"b": 1})", R"( {"b": "x"})", R"({"b": "\ud800"})"})
        EXPECT_FALSE(grammar_matches(g, bad)) << bad;
    const auto all_optional = schema_grammar(R"({"properties": {"a": {"type": "null"}, "b": {"const": 1}}})");
    for (const char *ok : {"{}", R"({"a": null})", R"({"b": 1})", R"({"a": null, "b": 1})"})
        EXPECT_TRUE(grammar_matches(all_optional, ok)) << ok;
    EXPECT_FALSE(grammar_matches(all_optional, R"({"b": 2})"));
    const auto free_form = schema_grammar(R"({"type": "object"})");
    EXPECT_TRUE(grammar_matches(free_form, R"({"any": [1, {"x": null}], "k": "v"})"));
    EXPECT_FALSE(grammar_matches(free_form, "[]"));
}

TEST(JsonSchema, ArraysEnumsStringsAndReferences) {
    const auto g = schema_grammar(R"({"type": "array", "items": {"enum": ["red", 3, null]},
                                      "minItems": 1, "maxItems": 2})");
    EXPECT_TRUE(grammar_matches(g, R"(["red"])"));
    EXPECT_TRUE(grammar_matches(g, R"([3, null])"));
    EXPECT_FALSE(grammar_matches(g, "[]"));
    EXPECT_FALSE(grammar_matches(g, R"(["red", 3, null])"));
    EXPECT_FALSE(grammar_matches(g, R"(["blue"])"));

    const auto s = schema_grammar(R"({"type": "string", "minLength": 2, "maxLength": 3})");
    EXPECT_TRUE(grammar_matches(s, R"("ab")"));
    EXPECT_TRUE(grammar_matches(s, R"("a\n\u00e9")"));  // escapes count as one character
    EXPECT_FALSE(grammar_matches(s, R"("a")"));
    EXPECT_FALSE(grammar_matches(s, R"("abcd")"));

    const auto date = schema_grammar(R"({"type": "string", "format": "date-time"})");
    EXPECT_TRUE(grammar_matches(date, R"("2024-02-29T23:59:01.5+02:00")"));
    EXPECT_FALSE(grammar_matches(date, R"("2024-13-01T00:00:00Z")"));

    // a tree through $defs: recursion ends in a rule that names itself
    const auto tree = schema_grammar(R"({"$ref": "#/$defs/node", "$defs": {"node": {"type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["v"]}}})");
    EXPECT_TRUE(grammar_matches(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": []}]})"));
    EXPECT_FALSE(grammar_matches(tree, R"({"v": 1, "kids": [{}]})"));

    const auto choice = schema_grammar(R"({"oneOf": [{"type": "number"}, {"type": ["string", "null"]}]})");
    for (const char *ok : {"1.5e-3", "-0", R"("x")", "null"}) EXPECT_TRUE(grammar_matches(choice, ok)) << ok;
    for (const char *bad : {"01", "1.", "true", "[]"}) EXPECT_FALSE(grammar_matches(choice, bad)) << bad;
}

TEST(JsonSchema, IntegerRangesValueByValue) {
    for (const auto &[lo, hi] : std::vector<std::pair<int, int>>{{0, 0},
                                                                 {7, 7},
                                                                 {-5, -3},
                                                                 {10, 99},
                                                                 {1, 1000},
                                                                 {-123, 4567},
                                                                 {95, 105},
                                                                 {-1000, -999},
                                                                 {0, 30}}) {
        const auto g = schema_grammar(R"({"type": "integer", "minimum": )" + std::to_string(lo) +
                                      R"(, "maximum": )" + std::to_string(hi) + "}");
        for (int v = lo - 150; v <= hi + 150; ++v)
            ASSERT_EQ(grammar_matches(g, std::to_string(v)), v >= lo && v <= hi)
                << v << " in [" << lo << ", " << hi << "]";
        EXPECT_FALSE(grammar_matches(g, "0" + std::to_string(std::abs(hi))));  // no leading zeros
        EXPECT_FALSE(grammar_matches(g, "-0"));
    }
    const auto exclusive =
        schema_grammar(R"({"type": "integer", "exclusiveMinimum": 2, "exclusiveMaximum": 5})");
    for (int v = -3; v < 10; ++v)
        EXPECT_EQ(grammar_matches(exclusive, std::to_string(v)), v == 3 || v == 4) << v;
    const auto above = schema_grammar(R"({"type": "integer", "minimum": 998})");
    EXPECT_FALSE(grammar_matches(above, "997"));
    EXPECT_TRUE(grammar_matches(above, "998"));
    EXPECT_TRUE(grammar_matches(above, "1234567890123456"));
}

void expect_schema_error(const std::string &schema, const std::string &expected) {
    try {
        json_schema_to_grammar(schema);
        ADD_FAILURE() << "no error for " << schema;
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
}

TEST(JsonSchema, UnsupportedFeaturesNameTheirPointer) {
    expect_schema_error(R"({"properties": {"a/b": {"type": "string", "pattern": "^x$"}}})",
                        "JSON schema #/properties/a~1b/pattern: 'pattern' is not supported");
    expect_schema_error(R"({"type": "string", "format": "email"})",
                        "#/format: format \"email\" is not supported");
    expect_schema_error(R"({"items": {"$ref": "https://x.org/s.json"}})",
                        "#/items/$ref: '$ref' https://x.org");
    expect_schema_error(R"({"$ref": "#/$defs/missing"})", "#/$ref: '$ref' #/$defs/missing names nothing");
    expect_schema_error(R"({"type": "number", "minimum": 0})",
                        "#/minimum: 'minimum' is supported for 'integer' only");
    expect_schema_error(R"({"anyOf": [true, false]})", "#/anyOf/1: the schema 'false' allows no value");
    expect_schema_error(R"({"type": "array", "uniqueItems": true})", "#/uniqueItems");
    expect_schema_error(R"({"type": "integer", "minimum": 5, "maximum": 4})", "no integer lies between");
    expect_schema_error(R"({"type": "strin"})", "#/type: unknown type 'strin'");
    expect_schema_error(R"({"properties": {}, "required": ["x"], "additionalProperties": false})",
                        "#/required: required property 'x'");
    expect_schema_error(R"({"type": )", "JSON schema: not valid JSON");
    std::string deep;
    for (int i = 0; i < 5000; ++i) deep += R"({"items": )";
    deep += "{}" + std::string(5000, '}');
    expect_schema_error(deep, "schemas nest deeper than 128 levels");
}

TEST(JsonSchema, AnyJsonGrammar) {
    const auto any = grammar::parse(json_any_grammar());
    const auto object = grammar::parse(json_any_grammar(true));
    for (const char *v : {"1", R"("s")", "[[], {}]", R"({"a": {"b": [true, false, null, -1.5E+3]}})"})
        EXPECT_TRUE(grammar_matches(any, v)) << v;
    EXPECT_FALSE(grammar_matches(any, "[1,]"));
    EXPECT_TRUE(grammar_matches(object, R"({"a": 1})"));
    EXPECT_FALSE(grammar_matches(object, "1"));
}

// --- a validator for the subset the converter supports, independent of it

bool valid(const json &schema, const json &v, const json &root, std::string &why);

bool valid_type(const std::string &type, const json &schema, const json &v, const json &root,
                std::string &why) {
    if (type == "null") return v.is_null();
    if (type == "boolean") return v.is_boolean();
    if (type == "number") return v.is_number();
    if (type == "integer") {
        if (!v.is_number_integer()) return false;
        const double x = v.get<double>();
        if (schema.contains("minimum") && x < schema["minimum"].get<double>()) return false;
        if (schema.contains("maximum") && x > schema["maximum"].get<double>()) return false;
        return true;
    }
    if (type == "string") {
        if (!v.is_string()) return false;
        const std::string s = v.get<std::string>();
        size_t chars = 0;
        for (unsigned char c : s) chars += (c & 0xC0) != 0x80;
        if (schema.contains("minLength") && chars < schema["minLength"].get<size_t>()) return false;
        if (schema.contains("maxLength") && chars > schema["maxLength"].get<size_t>()) return false;
        if (schema.value("format", "") == "date") {
            if (s.size() != 10 || s[4] != '-' || s[7] != '-') return false;
            const int month = std::stoi(s.substr(5, 2)), day = std::stoi(s.substr(8, 2));
            return month >= 1 && month <= 12 && day >= 1 && day <= 31;
        }
        return true;
    }
    if (type == "array") {
        if (!v.is_array()) return false;
        if (schema.contains("minItems") && v.size() < schema["minItems"].get<size_t>()) return false;
        if (schema.contains("maxItems") && v.size() > schema["maxItems"].get<size_t>()) return false;
        if (schema.contains("items"))
            for (const auto &item : v)
                if (!valid(schema["items"], item, root, why)) return false;
        return true;
    }
    if (type == "object") {
        if (!v.is_object()) return false;
        const json props = schema.value("properties", json::object());
        for (const auto &name : schema.value("required", json::array()))
            if (!v.contains(name.get<std::string>())) {
                why = "missing " + name.get<std::string>();
                return false;
            }
        for (const auto &[key, value] : v.items()) {
            if (!props.contains(key)) {
                why = "unexpected " + key;
                return false;
            }
            if (!valid(props[key], value, root, why)) return false;
        }
        return true;
    }
    why = "type " + type;
    return false;
}

bool valid(const json &schema, const json &v, const json &root, std::string &why) {
    if (schema.contains("$ref"))
        return valid(root.at(json::json_pointer(schema["$ref"].get<std::string>().substr(1))), v, root, why);
    if (schema.contains("const")) return v == schema["const"];
    if (schema.contains("enum")) {
        for (const auto &e : schema["enum"])
            if (e == v) return true;
        return false;
    }
    if (schema.contains("anyOf")) {
        for (const auto &alt : schema["anyOf"])
            if (valid(alt, v, root, why)) return true;
        return false;
    }
    if (!schema.contains("type")) return true;
    const bool ok = valid_type(schema["type"].get<std::string>(), schema, v, root, why);
    if (!ok && why.empty()) why = v.dump() + " against " + schema.dump();
    return ok;
}

const char *people_schema = R"({
  "$defs": {
    "pet": {"type": "object",
            "properties": {"kind": {"enum": ["cat", "dog", null]},
                           "age": {"type": "integer", "minimum": 0, "maximum": 30}},
            "required": ["kind"]}
  },
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "maxLength": 12},
    "id": {"type": "integer", "minimum": -50, "maximum": 1234},
    "score": {"type": "number"},
    "ok": {"type": "boolean"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 3},
    "pets": {"type": "array", "items": {"$ref": "#/$defs/pet"}, "maxItems": 2},
    "when": {"type": "string", "format": "date"},
    "version": {"const": 2},
    "extra": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 9}]}
  },
  "required": ["name", "id", "tags"]
})";

TEST(JsonSchema, ValidatorAgreesOnHandWrittenValues) {
    const json schema = json::parse(people_schema);
    std::string why;
    EXPECT_TRUE(valid(schema,
                      json::parse(R"({"name": "Al", "id": 3, "tags": ["a"], "pets": [{"kind": null}]})"),
                      schema, why))
        << why;
    EXPECT_FALSE(valid(schema, json::parse(R"({"name": "Al", "id": 3, "tags": []})"), schema, why));
    EXPECT_FALSE(valid(schema,
                       json::parse(R"({"name": "Al", "id": 3, "tags": ["a"], "pets": [{"kind": "owl"}]})"),
                       schema, why));
}

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
