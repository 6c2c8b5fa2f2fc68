// src/grammar/json_schema.cpp — JSON Schema to GBNF: one rule per schema that needs a name (the root,
// each property, array items, each $ref target), shared rules for the JSON primitives, and integer
// ranges written out digit by digit.
#include "weft/grammar/json_schema.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "grammar/json_schema_pattern.h"
#include "weft/core/error.h"
#include "weft/grammar/grammar.h"

namespace weft {

namespace {

using json = nlohmann::ordered_json;

// Integer digits at most (so a value stays within a 64-bit integer's precision), and the largest
// magnitude a range may name.
constexpr int max_int_digits = 16;
constexpr int64_t max_int_magnitude = 9999999999999999;
// Schemas nest by recursion in the converter: bounded so that a hostile one cannot overflow the stack.
constexpr int max_schema_depth = 128;
// Lists in a schema that become alternatives or rules one by one: enum values, anyOf / oneOf
// schemas, an object's properties and required names. Bounded so that a schema a few megabytes
// long cannot make a grammar whose matching costs minutes a token; json_schema.h has the numbers.
constexpr size_t max_schema_list = 4096;

// The primitives, written once and added to a grammar when used.
const std::map<std::string, std::string> &primitives() {
    static const std::map<std::string, std::string> rules = {
        {"ws", R"(( " " | "\n" [ \t]{0,16} )?)"},
        {"json-char", R"([^"\\\x00-\x1F\x7F] | "\\" ( ["\\/bfnrt] | "u" json-hex-char ))"},
        // \u escapes of every code unit but the surrogates D800-DFFF
        {"json-hex-char", R"(( [0-9a-cA-CefEF] [0-9a-fA-F] | [dD] [0-7] ) [0-9a-fA-F]{2})"},
        {"json-string", R"("\"" json-char* "\"")"},
        {"json-integer", R"("-"? ( "0" | [1-9] [0-9]{0,15} ))"},
        {"json-number", R"(json-integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?)"},
        {"json-boolean", R"("true" | "false")"},
        {"json-null", R"("null")"},
        {"json-value", "json-object | json-array | json-string | json-number | json-boolean | json-null"},
        {"json-object", R"("{" ws ( json-member ( "," ws json-member )* )? "}")"},
        {"json-member", R"(json-string ws ":" ws json-value ws)"},
        {"json-array", R"("[" ws ( json-value ws ( "," ws json-value ws )* )? "]")"},
        {"json-date", R"([0-9]{4} "-" ( "0" [1-9] | "1" [0-2] ) "-" ( "0" [1-9] | [12] [0-9] | "3" [01] ))"},
        {"json-time", R"(( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ":" [0-5] [0-9] ( "." [0-9]{1,6} )? )"
                      R"(( "Z" | [+-] ( [01] [0-9] | "2" [0-3] ) ":" [0-5] [0-9] ))"},
        {"json-uuid",
         R"([0-9a-fA-F]{8} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{4} "-" [0-9a-fA-F]{12})"},
    };
    return rules;
}

// Which primitives a primitive's body names (added with it).
std::vector<std::string> primitive_uses(const std::string &name) {
    static const std::map<std::string, std::vector<std::string>> uses = {
        {"json-char", {"json-hex-char"}},
        {"json-string", {"json-char"}},
        {"json-number", {"json-integer"}},
        {"json-value",
         {"json-object", "json-array", "json-string", "json-number", "json-boolean", "json-null"}},
        {"json-object", {"ws", "json-member"}},
        {"json-member", {"json-string", "ws", "json-value"}},
        {"json-array", {"ws", "json-value"}},
    };
    auto it = uses.find(name);
    return it == uses.end() ? std::vector<std::string>{} : it->second;
}

// Text as a GBNF literal.
std::string literal(std::string_view text) {
    std::string out = "\"";
    for (unsigned char c : text) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += char(c);
        } else if (c < 0x20 || c == 0x7F) {
            static const char *hex = "0123456789ABCDEF";
            out += "\\x";
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += char(c);
        }
    }
    return out + "\"";
}

std::string repeat_count(uint64_t min, std::optional<uint64_t> max) {
    if (max && *max == min) return "{" + std::to_string(min) + "}";
    return "{" + std::to_string(min) + "," + (max ? std::to_string(*max) : "") + "}";
}

std::string any_digits(size_t n) {
    if (n == 0) return "";
    return n == 1 ? " [0-9]" : " [0-9]{" + std::to_string(n) + "}";
}

std::string digit_class(char lo, char hi) {
    if (lo == hi) return std::string("\"") + lo + "\"";
    return std::string("[") + lo + "-" + hi + "]";
}

// Decimal strings of one length between lo and hi (inclusive, lo <= hi), digit by digit.
std::string same_length_range(const std::string &lo, const std::string &hi) {
    if (lo.empty()) return "";
    const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
    if (lo[0] == hi[0]) {
        const std::string rest = same_length_range(lo_rest, hi_rest);
        return digit_class(lo[0], lo[0]) + (rest.empty() ? "" : " " + rest);
    }
    const bool lo_rest_min = lo_rest.find_first_not_of('0') == std::string::npos;
    const bool hi_rest_max = hi_rest.find_first_not_of('9') == std::string::npos;
    std::vector<std::string> parts;
    char first = lo[0], last = hi[0];
    if (!lo_rest_min) {
        parts.push_back(digit_class(lo[0], lo[0]) + " " +
                        same_length_range(lo_rest, std::string(lo_rest.size(), '9')));
        ++first;
    }
    if (!hi_rest_max) --last;
    if (first <= last) parts.push_back(digit_class(first, last) + any_digits(lo_rest.size()));
    if (!hi_rest_max)
        parts.push_back(digit_class(hi[0], hi[0]) + " " +
                        same_length_range(std::string(hi_rest.size(), '0'), hi_rest));
    if (parts.size() == 1) return parts[0];
    std::string out = "(";
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : " ") + parts[i];
    return out + " )";
}

// Non-negative integers in [lo, hi] without leading zeros, as alternatives (one per digit count).
std::vector<std::string> unsigned_range(uint64_t lo, uint64_t hi) {
    std::vector<std::string> out;
    uint64_t low_of_length = 0, high_of_length = 9;
    for (int digits = 1; digits <= max_int_digits; ++digits) {
        const uint64_t a = std::max(lo, low_of_length), b = std::min(hi, high_of_length);
        if (a <= b) out.push_back(same_length_range(std::to_string(a), std::to_string(b)));
        low_of_length = high_of_length + 1;
        high_of_length = high_of_length * 10 + 9;
    }
    return out;
}

// Integers in [lo, hi].
std::string integer_range(int64_t lo, int64_t hi) {
    std::vector<std::string> parts;
    if (hi >= 0)
        for (auto &p : unsigned_range(uint64_t(std::max<int64_t>(lo, 0)), uint64_t(hi))) parts.push_back(p);
    if (lo < 0) {
        const auto negative = unsigned_range(uint64_t(hi < 0 ? -hi : 1), uint64_t(-lo));
        std::string alternatives;
        for (size_t i = 0; i < negative.size(); ++i) alternatives += (i ? " | " : "") + negative[i];
        parts.push_back("\"-\" ( " + alternatives + " )");
    }
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? " | " : "") + parts[i];
    return out;
}

// Non-negative decimals m (no exponent) with a <= m <= b, either end open; "" when there is none. An
// integer part i holds [i, i + 1): every fraction between the ends, the open lower end's own i with a
// fraction that is not all zeros, the closed upper end's with zeros only.
std::string unsigned_decimal_range(uint64_t a, bool a_open, uint64_t b, bool b_open) {
    const std::string any_fraction = R"(( "." [0-9]{1,16} )?)";
    const std::string zero_fraction = R"(( "." "0"{1,16} )?)";
    const std::string nonzero_fraction = R"("." "0"{0,15} [1-9] [0-9]{0,15})";
    auto integers = [](uint64_t lo, uint64_t hi) {
        std::string out;
        for (const std::string &alt : unsigned_range(lo, hi)) out += (out.empty() ? "" : " | ") + alt;
        return "( " + out + " )";
    };
    std::vector<std::string> parts;
    if (a > b || (a == b && (a_open || b_open))) return "";
    if (a == b) return integers(a, a) + " " + zero_fraction;
    if (a_open) parts.push_back(integers(a, a) + " " + nonzero_fraction);
    const uint64_t first_whole = a_open ? a + 1 : a;
    if (first_whole <= b - 1) parts.push_back(integers(first_whole, b - 1) + " " + any_fraction);
    if (!b_open) parts.push_back(integers(b, b) + " " + zero_fraction);
    std::string out;
    for (const std::string &p : parts) out += (out.empty() ? "" : " | ") + p;
    return out;
}

// Numbers x (no exponent) with lo <= x <= hi, either end open; the ends are whole numbers.
std::string decimal_range(int64_t lo, bool lo_open, int64_t hi, bool hi_open) {
    std::vector<std::string> parts;
    if (hi >= 0) {
        const bool from_zero = lo < 0;
        const std::string p = unsigned_decimal_range(from_zero ? 0 : uint64_t(lo),
                                                     from_zero ? false : lo_open, uint64_t(hi), hi_open);
        if (!p.empty()) parts.push_back(p);
    }
    if (lo < 0) {  // "-" m with -hi <= m <= -lo and m > 0 (zero is written above)
        const bool above_zero = hi >= 0;
        const std::string p = unsigned_decimal_range(above_zero ? 0 : uint64_t(-hi),
                                                     above_zero ? true : hi_open, uint64_t(-lo), lo_open);
        if (!p.empty()) parts.push_back("\"-\" ( " + p + " )");
    }
    std::string out;
    for (const std::string &p : parts) out += (out.empty() ? "" : " | ") + p;
    return out;
}

std::string pointer_text(const std::string &pointer) {
    return "#" + pointer;
}

std::string escape_pointer_token(const std::string &key) {
    std::string out;
    for (char c : key) {
        if (c == '~')
            out += "~0";
        else if (c == '/')
            out += "~1";
        else
            out += c;
    }
    return out;
}

class converter {
  public:
    explicit converter(json root) : root_(std::move(root)) {}

    std::string run() {
        const std::string body = visit(root_, "", "root");
        std::string out = "root ::= " + body + "\n";
        for (const auto &[name, rule] : rules_) out += name + " ::= " + rule + "\n";
        for (const auto &name : used_primitives_) out += name + " ::= " + primitives().at(name) + "\n";
        return out;
    }

  private:
    [[noreturn]] static void fail(const std::string &pointer, const std::string &what) {
        throw error("JSON schema " + pointer_text(pointer) + ": " + what);
    }

    std::string use(const std::string &primitive) {
        if (used_primitives_.insert(primitive).second)
            for (const auto &dep : primitive_uses(primitive)) use(dep);
        return primitive;
    }

    // A fresh rule name from a hint ("root-address-street").
    std::string rule_name(const std::string &hint) {
        std::string name;
        for (char c : hint) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
        if (name.empty() || name == "root") name = "root-value";
        std::string unique = name;
        for (int n = 2; names_.count(unique) || primitives().count(unique); ++n)
            unique = name + "-" + std::to_string(n);
        names_.insert(unique);
        return unique;
    }

    std::string add_rule(const std::string &hint, const std::string &body) {
        if (rules_.size() >= max_grammar_rules)
            fail("", "the schema makes more than " + std::to_string(max_grammar_rules) + " grammar rules");
        const std::string name = rule_name(hint);
        rules_.emplace_back(name, body);
        return name;
    }

    static void check_list_size(const json &list, const std::string &pointer, const std::string &what) {
        if (list.size() > max_schema_list)
            fail(pointer, "has " + std::to_string(list.size()) + " " + what + "; at most " +
                              std::to_string(max_schema_list) + " are taken");
    }

    static std::optional<uint64_t> count_keyword(const json &schema, const char *key,
                                                 const std::string &pointer) {
        const auto it = schema.find(key);
        if (it == schema.end()) return std::nullopt;
        if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > 100000)
            fail(pointer + "/" + key, std::string("'") + key + "' must be an integer in [0, 100000]");
        return it->get<uint64_t>();
    }

    // The grammar expression for the values `schema` allows; `hint` names the rules it makes.
    std::string visit(const json &schema, const std::string &pointer, const std::string &hint) {
        if (depth_ >= max_schema_depth)
            fail(pointer, "schemas nest deeper than " + std::to_string(max_schema_depth) + " levels");
        throw_if_grammar_work_cancelled();
        ++depth_;
        std::string out = visit_schema(schema, pointer, hint);
        --depth_;
        return out;
    }

    std::string visit_schema(const json &schema, const std::string &pointer, const std::string &hint) {
        if (schema.is_boolean()) {
            if (!schema.get<bool>()) fail(pointer, "the schema 'false' allows no value");
            return use("json-value");
        }
        if (!schema.is_object()) fail(pointer, "a schema must be an object or a boolean");
        static const std::set<std::string> unsupported = {"patternProperties",
                                                          "propertyNames",
                                                          "minProperties",
                                                          "maxProperties",
                                                          "dependentRequired",
                                                          "dependentSchemas",
                                                          "dependencies",
                                                          "if",
                                                          "then",
                                                          "else",
                                                          "not",
                                                          "contains",
                                                          "minContains",
                                                          "maxContains",
                                                          "prefixItems",
                                                          "multipleOf",
                                                          "unevaluatedProperties",
                                                          "unevaluatedItems",
                                                          "$dynamicRef",
                                                          "$recursiveRef"};
        for (const auto &[key, value] : schema.items())
            if (unsupported.count(key))
                fail(pointer + "/" + escape_pointer_token(key), "'" + key + "' is not supported");
        if (schema.contains("uniqueItems") && schema["uniqueItems"] == true)
            fail(pointer + "/uniqueItems", "'uniqueItems' is not supported");

        if (auto ref = schema.find("$ref"); ref != schema.end()) return visit_ref(*ref, pointer + "/$ref");
        if (auto c = schema.find("const"); c != schema.end()) return literal(c->dump());
        if (auto e = schema.find("enum"); e != schema.end()) {
            if (!e->is_array() || e->empty()) fail(pointer + "/enum", "'enum' must be a non-empty array");
            check_list_size(*e, pointer + "/enum", "'enum' values");
            std::string out;
            for (const auto &v : *e) out += (out.empty() ? "" : " | ") + literal(v.dump());
            return "( " + out + " )";
        }
        for (const char *key : {"anyOf", "oneOf"})
            if (auto alts = schema.find(key); alts != schema.end()) {
                if (!alts->is_array() || alts->empty())
                    fail(pointer + "/" + key, std::string("'") + key + "' must be a non-empty array");
                check_list_size(*alts, pointer + "/" + key, std::string("'") + key + "' schemas");
                std::string out;
                for (size_t i = 0; i < alts->size(); ++i)
                    out += (i ? " | " : "") + visit((*alts)[i], pointer + "/" + key + "/" + std::to_string(i),
                                                    hint + "-" + std::to_string(i));
                return add_rule(hint, out);
            }
        if (auto all = schema.find("allOf"); all != schema.end()) {
            if (!all->is_array() || all->size() != 1)
                fail(pointer + "/allOf", "'allOf' is supported with exactly one schema");
            return visit((*all)[0], pointer + "/allOf/0", hint);
        }

        const auto type = schema.find("type");
        if (type == schema.end()) {
            // the type follows from the keywords, else any value
            if (schema.contains("properties") || schema.contains("additionalProperties") ||
                schema.contains("required"))
                return visit_object(schema, pointer, hint);
            if (schema.contains("items") || schema.contains("minItems") || schema.contains("maxItems"))
                return visit_array(schema, pointer, hint);
            return use("json-value");
        }
        if (type->is_array()) {
            if (type->empty()) fail(pointer + "/type", "'type' must not be an empty list");
            std::string out;
            for (size_t i = 0; i < type->size(); ++i) {
                if (!(*type)[i].is_string())
                    fail(pointer + "/type/" + std::to_string(i), "a type must be a string");
                out += (i ? " | " : "") + visit_type((*type)[i].get<std::string>(), schema, pointer,
                                                     hint + "-" + (*type)[i].get<std::string>());
            }
            return "( " + out + " )";
        }
        if (!type->is_string()) fail(pointer + "/type", "'type' must be a string or a list of strings");
        return visit_type(type->get<std::string>(), schema, pointer, hint);
    }

    std::string visit_type(const std::string &type, const json &schema, const std::string &pointer,
                           const std::string &hint) {
        if (type == "object") return visit_object(schema, pointer, hint);
        if (type == "array") return visit_array(schema, pointer, hint);
        if (type == "string") return visit_string(schema, pointer, hint);
        if (type == "integer") return visit_integer(schema, pointer, hint);
        if (type == "number") return visit_number(schema, pointer, hint);
        if (type == "boolean") return use("json-boolean");
        if (type == "null") return use("json-null");
        fail(pointer + "/type", "unknown type '" + type + "'");
    }

    std::string visit_ref(const json &ref, const std::string &pointer) {
        if (!ref.is_string()) fail(pointer, "'$ref' must be a string");
        const std::string target = ref.get<std::string>();
        if (auto it = refs_.find(target); it != refs_.end()) return it->second;
        if (target.empty() || target[0] != '#')
            fail(pointer,
                 "'$ref' " + target + " is not supported: only references inside the document (#/...)");
        const std::string inner = target.substr(1);
        const json *resolved = nullptr;
        try {
            resolved = &root_.at(json::json_pointer(inner));
        } catch (const json::exception &) {
            fail(pointer, "'$ref' " + target + " names nothing in the document");
        }
        // named before it is visited, so a schema that refers to itself ends in a rule that does
        const std::string name = rule_name("ref" + inner);
        refs_.emplace(target, name);
        const size_t slot = rules_.size();
        rules_.emplace_back(name, "");
        const std::string body = visit(*resolved, inner, name);
        rules_[slot].second = body;
        return name;
    }

    std::string visit_string(const json &schema, const std::string &pointer, const std::string &hint) {
        if (auto format = schema.find("format"); format != schema.end()) {
            const std::string f = format->is_string() ? format->get<std::string>() : "";
            if (f == "date") return "\"\\\"\" " + use("json-date") + " \"\\\"\"";
            if (f == "time") return "\"\\\"\" " + use("json-time") + " \"\\\"\"";
            if (f == "date-time")
                return "\"\\\"\" " + use("json-date") + " \"T\" " + use("json-time") + " \"\\\"\"";
            if (f == "uuid") return "\"\\\"\" " + use("json-uuid") + " \"\\\"\"";
            fail(pointer + "/format",
                 "format " + format->dump() + " is not supported (date, time, date-time, uuid are)");
        }
        const auto min = count_keyword(schema, "minLength", pointer);
        const auto max = count_keyword(schema, "maxLength", pointer);
        if (auto pattern = schema.find("pattern"); pattern != schema.end()) {
            if (!pattern->is_string()) fail(pointer + "/pattern", "'pattern' must be a string");
            if (min || max)
                fail(pointer + "/pattern",
                     "'pattern' together with 'minLength' or 'maxLength' is not supported");
            std::string content;
            try {
                content = pattern_to_gbnf(pattern->get<std::string>());
            } catch (const error &e) {
                fail(pointer + "/pattern", e.what());
            }
            use("json-char");  // an unanchored end matches any characters there
            return add_rule(hint, "\"\\\"\" " + content + " \"\\\"\"");
        }
        if (!min && !max) return use("json-string");
        if (min && max && *max < *min) fail(pointer + "/maxLength", "'maxLength' is below 'minLength'");
        return add_rule(hint,
                        "\"\\\"\" " + use("json-char") + repeat_count(min.value_or(0), max) + " \"\\\"\"");
    }

    static std::optional<double> number_keyword(const json &schema, const char *key,
                                                const std::string &pointer) {
        const auto it = schema.find(key);
        if (it == schema.end()) return std::nullopt;
        if (it->is_boolean()) return std::nullopt;  // draft 4's exclusive flags: read with their bound
        if (!it->is_number()) fail(pointer + "/" + key, std::string("'") + key + "' must be a number");
        return it->get<double>();
    }

    std::string visit_integer(const json &schema, const std::string &pointer, const std::string &hint) {
        double lo = -double(max_int_magnitude), hi = double(max_int_magnitude);
        bool bounded = false;
        auto draft4_exclusive = [&](const char *key) {
            auto it = schema.find(key);
            return it != schema.end() && it->is_boolean() && it->get<bool>();
        };
        if (auto v = number_keyword(schema, "minimum", pointer)) {
            lo = std::max(lo, draft4_exclusive("exclusiveMinimum") ? std::floor(*v) + 1 : std::ceil(*v));
            bounded = true;
        }
        if (auto v = number_keyword(schema, "exclusiveMinimum", pointer)) {
            lo = std::max(lo, std::floor(*v) + 1);
            bounded = true;
        }
        if (auto v = number_keyword(schema, "maximum", pointer)) {
            hi = std::min(hi, draft4_exclusive("exclusiveMaximum") ? std::ceil(*v) - 1 : std::floor(*v));
            bounded = true;
        }
        if (auto v = number_keyword(schema, "exclusiveMaximum", pointer)) {
            hi = std::min(hi, std::ceil(*v) - 1);
            bounded = true;
        }
        if (!bounded) return use("json-integer");
        lo = std::max(lo, -double(max_int_magnitude));
        hi = std::min(hi, double(max_int_magnitude));
        if (lo > hi) fail(pointer, "no integer lies between its minimum and maximum");
        return add_rule(hint, integer_range(int64_t(lo), int64_t(hi)));
    }

    // Numbers with bounds: written without an exponent, the bounds whole numbers.
    std::string visit_number(const json &schema, const std::string &pointer, const std::string &hint) {
        double lo = -double(max_int_magnitude), hi = double(max_int_magnitude);
        bool lo_open = false, hi_open = false, bounded = false;
        auto bound = [&](const char *key, bool upper, bool open) {
            const auto v = number_keyword(schema, key, pointer);
            if (!v) return;
            if (std::floor(*v) != *v || std::fabs(*v) > double(max_int_magnitude))
                fail(pointer + "/" + key, std::string("'") + key +
                                              "' on a 'number' is supported with whole-number bounds "
                                              "(up to 16 digits) only");
            const bool is_open = open || (schema.contains(upper ? "exclusiveMaximum" : "exclusiveMinimum") &&
                                          schema[upper ? "exclusiveMaximum" : "exclusiveMinimum"] == true);
            bounded = true;
            if (upper && (*v < hi || (*v == hi && is_open))) hi = *v, hi_open = is_open;
            if (!upper && (*v > lo || (*v == lo && is_open))) lo = *v, lo_open = is_open;
        };
        bound("minimum", false, false);
        bound("exclusiveMinimum", false, true);
        bound("maximum", true, false);
        bound("exclusiveMaximum", true, true);
        if (!bounded) return use("json-number");
        const std::string range = decimal_range(int64_t(lo), lo_open, int64_t(hi), hi_open);
        if (range.empty()) fail(pointer, "no number lies between its minimum and maximum");
        return add_rule(hint, range);
    }

    std::string visit_array(const json &schema, const std::string &pointer, const std::string &hint) {
        std::string item = use("json-value");
        if (auto items = schema.find("items"); items != schema.end()) {
            if (items->is_array()) fail(pointer + "/items", "'items' as a list (tuples) is not supported");
            item = visit(*items, pointer + "/items", hint + "-item");
        }
        const uint64_t min = count_keyword(schema, "minItems", pointer).value_or(0);
        const auto max = count_keyword(schema, "maxItems", pointer);
        if (max && *max < min) fail(pointer + "/maxItems", "'maxItems' is below 'minItems'");
        use("ws");
        const std::string one = item + " ws";
        const std::string more = "( \",\" ws " + one + " )";
        if (max && *max == 0) return add_rule(hint, "\"[\" ws \"]\"");
        std::string body;
        if (min == 0) {
            body = "\"[\" ws ( " + one + " " + more + (max ? repeat_count(0, *max - 1) : "*") + " )? \"]\"";
        } else {
            body = "\"[\" ws " + one + " " + more +
                   repeat_count(min - 1, max ? std::optional(*max - 1) : std::nullopt) + " \"]\"";
        }
        return add_rule(hint, body);
    }

    // Properties in the schema's order, each required one present, each optional one present or
    // not, the commas right: first_i is "what may come from property i on, nothing written yet".
    std::string visit_object(const json &schema, const std::string &pointer, const std::string &hint) {
        const json empty = json::object();
        const auto props_it = schema.find("properties");
        const json &props = props_it == schema.end() ? empty : *props_it;
        if (!props.is_object()) fail(pointer + "/properties", "'properties' must be an object");
        check_list_size(props, pointer + "/properties", "properties");
        std::set<std::string> required;
        if (auto req = schema.find("required"); req != schema.end()) {
            if (!req->is_array()) fail(pointer + "/required", "'required' must be an array of names");
            check_list_size(*req, pointer + "/required", "required names");
            for (size_t i = 0; i < req->size(); ++i) {
                if (!(*req)[i].is_string())
                    fail(pointer + "/required/" + std::to_string(i), "a name must be a string");
                required.insert((*req)[i].get<std::string>());
            }
        }
        // additional properties: by default none when properties are listed, any value otherwise
        std::optional<std::string> additional;
        const auto add_it = schema.find("additionalProperties");
        if (add_it == schema.end()) {
            if (props.empty()) additional = use("json-value");
        } else if (!(add_it->is_boolean() && !add_it->get<bool>())) {
            additional = visit(*add_it, pointer + "/additionalProperties", hint + "-additional");
        }
        for (const auto &name : required)
            if (!props.contains(name) && !additional)
                fail(pointer + "/required",
                     "required property '" + name +
                         "' is not among 'properties' and additionalProperties is false");
        use("ws");
        std::vector<std::string> members;
        std::vector<bool> is_required;
        for (const auto &[name, sub] : props.items()) {
            const std::string value =
                visit(sub, pointer + "/properties/" + escape_pointer_token(name), hint + "-" + name);
            members.push_back(literal(json(name).dump()) + " ws \":\" ws " + value + " ws");
            is_required.push_back(required.count(name) > 0);
        }
        std::string extra;  // the additional members, after the listed ones
        if (additional) {
            const std::string member =
                add_rule(hint + "-additional-kv", use("json-string") + " ws \":\" ws " + *additional + " ws");
            extra = member;
        }
        if (members.empty())
            return add_rule(hint, "\"{\" ws " +
                                      (extra.empty() ? std::string()
                                                     : "( " + extra + " ( \",\" ws " + extra + " )* )? ") +
                                      "\"}\"");
        const size_t n = members.size();
        // rest[i]: a rule for the members from i on when something is already written (each behind
        // a comma); "" when nothing can follow
        std::vector<std::string> rest(n + 1);
        if (!extra.empty()) rest[n] = add_rule(hint + "-rest", "( \",\" ws " + extra + " )*");
        for (size_t i = n; i-- > 1;) {  // rest[0] would follow nothing
            std::string part = "\",\" ws " + members[i];
            if (!is_required[i]) part = "( " + part + " )?";
            rest[i] = add_rule(hint + "-rest-" + std::to_string(i),
                               part + (rest[i + 1].empty() ? "" : " " + rest[i + 1]));
        }
        // first: what may come from member i on with nothing written yet; it starts with any optional
        // member up to the first required one
        std::string first = extra.empty() ? "" : "( " + extra + " " + rest[n] + " )?";
        for (size_t i = n; i-- > 0;) {
            const std::string with = members[i] + (rest[i + 1].empty() ? "" : " " + rest[i + 1]);
            if (is_required[i])
                first = with;
            else
                first = add_rule(hint + "-from-" + std::to_string(i),
                                 with + " | " + (first.empty() ? "\"\"" : first));
        }
        return add_rule(hint, "\"{\" ws " + first + " \"}\"");
    }

    json root_;
    std::vector<std::pair<std::string, std::string>> rules_;
    std::set<std::string> names_ = {"root"};
    std::set<std::string> used_primitives_;
    std::map<std::string, std::string> refs_;
    int depth_ = 0;
};

// How deep the JSON text's arrays and objects nest (strings skipped), in one pass and no memory:
// checked before the text is parsed, because the parser's ordered objects copy a member's whole
// subtree each time their list grows, which costs the depth squared (a schema 10,000 deep took 87 s).
size_t json_nesting(std::string_view text) {
    size_t depth = 0, deepest = 0;
    bool in_string = false;
    for (size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                ++i;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '{' || c == '[') {
            deepest = std::max(deepest, ++depth);
        } else if ((c == '}' || c == ']') && depth > 0) {
            --depth;
        }
    }
    return deepest;
}

}  // namespace

std::string json_schema_to_grammar(std::string_view schema_json) {
    // a schema level is at most a few JSON levels ({"properties": {"name": {...}}} is two)
    constexpr size_t max_json_depth = 4 * size_t(max_schema_depth);
    if (const size_t depth = json_nesting(schema_json); depth > max_json_depth)
        throw error("JSON schema: its objects and arrays nest " + std::to_string(depth) +
                    " levels deep; schemas nest deeper than " + std::to_string(max_schema_depth) +
                    " levels are refused (at most " + std::to_string(max_json_depth) + " JSON levels)");
    json schema;
    try {
        schema = json::parse(schema_json);
    } catch (const json::exception &e) {
        throw error(std::string("JSON schema: not valid JSON: ") + e.what());
    }
    return converter(std::move(schema)).run();
}

std::string json_any_grammar(bool object_only) {
    return json_schema_to_grammar(object_only ? R"({"type": "object"})" : "{}");
}

}  // namespace weft
