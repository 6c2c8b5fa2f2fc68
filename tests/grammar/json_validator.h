// tests/grammar/json_validator.h — a validator for the JSON Schema subset the converter supports,
// written independently of it: the grammar tests check it on hand-written values, and the serving
// tests validate what a model writes under a schema with it.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>
#include <string>

namespace weft::test {

using json = nlohmann::ordered_json;

// --- a validator for the subset the converter supports, independent of it

inline bool valid(const json &schema, const json &v, const json &root, std::string &why);

inline bool valid_type(const std::string &type, const json &schema, const json &v, const json &root,
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
        // ECMAScript regular expressions, searched (not matched whole), as JSON Schema says
        if (schema.contains("pattern") &&
            !std::regex_search(s, std::regex(schema["pattern"].get<std::string>(), std::regex::ECMAScript)))
            return false;
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

inline bool valid(const json &schema, const json &v, const json &root, std::string &why) {
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

inline const char *people_schema = R"({
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
    "extra": {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 0, "maximum": 9}]},
    "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2,3}(?:x|yz)?$"}
  },
  "required": ["name", "id", "tags", "code"]
})";

}  // namespace weft::test
