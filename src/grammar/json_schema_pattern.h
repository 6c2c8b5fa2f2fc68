// src/grammar/json_schema_pattern.h — a JSON Schema "pattern" (an ECMA-262 regular expression) as a
// GBNF expression of the JSON string's content: what may stand between the quotes, every character in
// its JSON encoding.
#pragma once

#include <string>
#include <string_view>

namespace weft {

// The pattern's language as GBNF. Unanchored ends (no leading ^, no trailing $) match anything there,
// as JSON Schema's search semantics say. Supported: literals and escapes (\d \w \s and their negations,
// \t \n \r \f \v \0, \xHH, \uHHHH, escaped punctuation), ".", classes [a-z...] and [^...], groups (...)
// and (?:...), alternation, quantifiers * + ? {n} {n,} {n,m} (lazy forms the same). Throws
// weft::error naming the offset for anything else (back-references, look-around, named groups,
// anchors inside the pattern, bad syntax).
std::string pattern_to_gbnf(std::string_view pattern);

}  // namespace weft
