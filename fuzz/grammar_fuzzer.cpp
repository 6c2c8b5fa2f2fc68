// fuzz/grammar_fuzzer.cpp — libFuzzer target: any bytes as a GBNF grammar (requests and --grammar-file
// carry them), and as a JSON schema (requests' response_format). The input is split at its first NUL:
// the part before is the grammar or schema, the part after the text matched against it.
// Properties checked besides "no crash": a grammar that parses, written back with to_string(), parses
// again and gives the same answer on the text; a schema that converts gives a grammar that parses.
// Rejections (weft::error) are the expected outcome for most inputs.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weft/core/error.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"

namespace {

// Matching walks every pushdown stack the grammar allows: bound the text so a grammar of many
// ambiguous alternatives takes milliseconds per input, not seconds.
constexpr size_t max_text = 128;

void check_grammar(std::string_view text, std::string_view sample) {
    std::shared_ptr<const weft::grammar> g;
    try {
        g = weft::grammar::parse(text, "fuzz");
    } catch (const weft::error &) {
        return;
    }
    const bool matches = weft::grammar_matches(g, sample);
    std::shared_ptr<const weft::grammar> again;
    try {
        again = weft::grammar::parse(g->to_string(), "to_string");
    } catch (const weft::error &) {
        __builtin_trap();  // a parsed grammar must parse again when written back
    }
    if (weft::grammar_matches(again, sample) != matches) __builtin_trap();
}

void check_schema(std::string_view text, std::string_view sample) {
    std::string gbnf;
    try {
        gbnf = weft::json_schema_to_grammar(text);
    } catch (const weft::error &) {
        return;
    }
    std::shared_ptr<const weft::grammar> g;
    try {
        g = weft::grammar::parse(gbnf, "schema");
    } catch (const weft::error &) {
        __builtin_trap();  // the converter's own grammar must parse
    }
    volatile bool matches = weft::grammar_matches(g, sample);
    (void)matches;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string_view all(reinterpret_cast<const char *>(data), size);
    const size_t nul = all.find('\0');
    const std::string_view text = all.substr(0, nul);
    std::string_view sample = nul == std::string_view::npos ? std::string_view() : all.substr(nul + 1);
    if (sample.size() > max_text) sample = sample.substr(0, max_text);
    check_grammar(text, sample);
    check_schema(text, sample);
    return 0;
}
