// weft/grammar/json_schema.h — JSON Schema to a GBNF grammar (weft/grammar/grammar.h) whose sentences
// are exactly the JSON texts the schema allows, for constrained output (`weft run --json-schema`, the
// server's response_format).
//
// Supported: type (one or a list): object (properties in the schema's order, required and optional
// ones, additionalProperties false / true / a schema; by default false when properties are listed,
// any value otherwise), array (items, minItems, maxItems), string (minLength, maxLength; format
// date, time, date-time, uuid), integer (minimum, maximum, exclusiveMinimum, exclusiveMaximum),
// number, boolean, null; enum, const; anyOf and oneOf (both as a choice), allOf of one schema; $ref
// to "#/..." anywhere in the document ($defs, definitions), recursion included; true and {} as any
// JSON value. Keywords that only describe (title, description, default, examples, $schema, $id,
// $comment) are ignored. Everything else that constrains (pattern, uniqueItems, not, if/then/else,
// multipleOf, a range on a number, ...) is refused with an error naming its JSON pointer, rather
// than silently allowing more than the schema does.
//
// Limits, checked before the work that grows with them (a 400 in the server, naming the JSON
// pointer): schemas nest at most 128 levels; an enum, an anyOf / oneOf, an object's properties and
// its required names hold at most 4,096 entries each; the grammar made has at most
// max_grammar_rules (grammar.h) rules. Conversion stops with an error once cancel_grammar_work()
// was called.
//
// The grammar allows a little whitespace inside objects and arrays (none before or after the value),
// numbers of at most 16 integer digits, 16 fraction digits and 3 exponent digits, and no \u escape
// of a surrogate, so every sentence parses with any conforming JSON parser.
#pragma once

#include <string>
#include <string_view>

namespace weft {

// The grammar of a schema given as JSON text. Throws weft::error on text that is not JSON ("JSON
// schema: ...") and on a feature it does not support ("JSON schema #/properties/x: ...").
std::string json_schema_to_grammar(std::string_view schema_json);

// The grammar of any JSON value (object_only: any JSON object), as `--json` and the server's
// response_format {"type": "json_object"} use.
std::string json_any_grammar(bool object_only = false);

}  // namespace weft
