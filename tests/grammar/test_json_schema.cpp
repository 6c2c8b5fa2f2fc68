// tests/grammar/test_json_schema.cpp — JSON Schema to GBNF: texts each grammar must accept or reject,
// integer ranges checked value by value, errors naming the JSON pointer, and the independent
// validator (json_validator.h) the generation tests (tests/serving/test_schema_generation.cpp) use.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "grammar/json_validator.h"
#include "weft/core/error.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"

namespace weft {
namespace {

using json = nlohmann::ordered_json;
using test::people_schema;
using test::valid;

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

// Number ranges (whole-number bounds, open or closed ends): every value from lo - 3 to hi + 3 in
// quarter steps, written as an integer, with one and with three decimals, and the grammar's answer
// against the comparison.
TEST(JsonSchema, NumberRangesValueByValue) {
    struct range {
        std::string schema;
        double lo, hi;
        bool lo_open, hi_open;
    };
    const std::vector<range> ranges = {
        {R"("minimum": 0, "maximum": 1)", 0, 1, false, false},
        {R"("minimum": -2, "maximum": 3)", -2, 3, false, false},
        {R"("exclusiveMinimum": -2, "exclusiveMaximum": 3)", -2, 3, true, true},
        {R"("minimum": -5, "exclusiveMaximum": -1)", -5, -1, false, true},
        {R"("exclusiveMinimum": 0, "maximum": 12)", 0, 12, true, false},
        {R"("minimum": 4, "maximum": 4)", 4, 4, false, false},
        {R"("minimum": 0, "maximum": 1, "exclusiveMinimum": true)", 0, 1, true, false},  // draft 4
        {R"("minimum": 9)", 9, 1e15, false, false},
        {R"("maximum": -9)", -1e15, -9, false, false},
    };
    for (const range &r : ranges) {
        SCOPED_TRACE(r.schema);
        const auto g = schema_grammar(R"({"type": "number", )" + r.schema + "}");
        const double from = std::max(r.lo, r.hi - 20) - 3, to = std::min(r.hi, r.lo + 20) + 3;
        for (double v = from; v <= to; v += 0.25) {
            for (const int decimals : {0, 1, 3}) {
                if (decimals == 0 && v != std::floor(v)) continue;
                char text[64];
                std::snprintf(text, sizeof text, "%.*f", decimals, v);
                // zero with a minus sign: the grammar writes zero unsigned
                if (std::string(text) == "-0" || std::string(text).rfind("-0.0", 0) == 0) continue;
                const double written = std::strtod(text, nullptr);  // 0.25 with one decimal is 0.2
                const bool want = (r.lo_open ? written > r.lo : written >= r.lo) &&
                                  (r.hi_open ? written < r.hi : written <= r.hi);
                ASSERT_EQ(grammar_matches(g, text), want) << text;
            }
        }
    }
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

// Patterns against std::regex (ECMAScript, searched as JSON Schema says): every string of up to 3
// characters of a small alphabet (quotes, backslashes, a newline and a tab included) and some longer
// ones are accepted by the pattern's grammar exactly when std::regex_search finds the pattern in them.
TEST(JsonSchema, PatternsAgreeWithStdRegex) {
    const std::vector<std::string> patterns = {"^[a-c]+$",
                                               "^\\d{2}-\\d$",
                                               "^(?:ab|c)*e?$",
                                               "bc",
                                               "^a.c$",
                                               "^[^0-9\"]{2,3}$",
                                               "1$",
                                               "^\\w+@\\w+\\.x$",
                                               "^[\\\\\"]+$",
                                               "^\\s?a$",
                                               "^(a|b)+c{1,2}$",
                                               "^[A-Fa-f0-9]{2}$",
                                               "^$",
                                               "a|^b",
                                               "^\\S\\n?$",
                                               "^[\\t -/]*$",
                                               "^.{0,2}e$",
                                               "^\\x61\\u0062?$"};
    const std::string alphabet = "abce12-\"\\ @.x\n\t";
    std::vector<std::string> texts = {"", "12-3", "ababce", "joe@mail.x", "aaaaaaaaaaaab", "\\\"\\", "cc1"};
    for (const char a : alphabet) {
        texts.push_back(std::string(1, a));
        for (const char b : alphabet) {
            texts.push_back(std::string{a, b});
            for (const char c : alphabet) texts.push_back(std::string{a, b, c});
        }
    }
    for (const std::string &pattern : patterns) {
        SCOPED_TRACE(pattern);
        const auto g = schema_grammar(json{{"type", "string"}, {"pattern", pattern}}.dump());
        const std::regex re(pattern, std::regex::ECMAScript);
        size_t n_matching = 0;
        for (const std::string &t : texts) {
            const bool want = std::regex_search(t, re);
            n_matching += want;
            ASSERT_EQ(grammar_matches(g, json(t).dump()), want) << json(t).dump();
        }
        EXPECT_GT(n_matching, 0u);  // every pattern is exercised both ways
        EXPECT_LT(n_matching, texts.size());
    }
}

TEST(JsonSchema, UnsupportedFeaturesNameTheirPointer) {
    expect_schema_error(
        R"({"properties": {"a/b": {"type": "object", "patternProperties": {}}}})",
        "JSON schema #/properties/a~1b/patternProperties: 'patternProperties' is not supported");
    expect_schema_error(R"({"type": "string", "pattern": "^(?=a)b$"})",
                        "#/pattern: pattern: only non-capturing groups");
    expect_schema_error(R"({"type": "string", "pattern": "(a)\\1"})", "#/pattern: pattern: the escape \\1");
    expect_schema_error(R"({"type": "string", "pattern": "[a-"})", "#/pattern: pattern: '[' without its ']'");
    expect_schema_error(R"({"type": "string", "pattern": "a{3,2}"})", "m < n");
    expect_schema_error(R"({"type": "string", "pattern": "a^b"})", "'^' is supported only at the start");
    expect_schema_error(R"({"type": "string", "pattern": "^a$", "maxLength": 3})",
                        "'pattern' together with 'minLength' or 'maxLength' is not supported");
    expect_schema_error(R"({"type": "string", "format": "email"})",
                        "#/format: format \"email\" is not supported");
    expect_schema_error(R"({"items": {"$ref": "https://x.org/s.json"}})",
                        "#/items/$ref: '$ref' https://x.org");
    expect_schema_error(R"({"$ref": "#/$defs/missing"})", "#/$ref: '$ref' #/$defs/missing names nothing");
    expect_schema_error(R"({"type": "number", "minimum": 0.5})",
                        "#/minimum: 'minimum' on a 'number' is supported with whole-number bounds");
    expect_schema_error(R"({"type": "number", "exclusiveMinimum": 2, "maximum": 2})",
                        "no number lies between");
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

TEST(JsonSchema, ValidatorAgreesOnHandWrittenValues) {
    const json schema = json::parse(people_schema);
    std::string why;
    EXPECT_TRUE(valid(
        schema,
        json::parse(R"({"name": "Al", "id": 3, "tags": ["a"], "pets": [{"kind": null}], "code": "AB-12yz"})"),
        schema, why))
        << why;
    EXPECT_FALSE(
        valid(schema, json::parse(R"({"name": "Al", "id": 3, "tags": ["a"], "code": "AB-1"})"), schema, why));
    EXPECT_FALSE(valid(schema, json::parse(R"({"name": "Al", "id": 3, "tags": []})"), schema, why));
    EXPECT_FALSE(valid(schema,
                       json::parse(R"({"name": "Al", "id": 3, "tags": ["a"], "pets": [{"kind": "owl"}]})"),
                       schema, why));
}

}  // namespace
}  // namespace weft
