// tools/weft/grammar_options.h — the constrained-output options `weft run` and `weft chat` share:
// --grammar, --grammar-file, --json-schema and --json, resolved to the GBNF text of sampling_params.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "weft/core/error.h"
#include "weft/core/safe_file.h"
#include "weft/file_arguments.h"
#include "weft/grammar/grammar.h"
#include "weft/grammar/json_schema.h"

namespace weft::tool {

struct grammar_options {
    std::string grammar;       // GBNF text
    std::string grammar_file;  // a GBNF file
    std::string json_schema;   // a JSON Schema file, or the schema itself when it starts with '{'
    bool json = false;         // any JSON value
};

inline void add_grammar_options(CLI::App &app, grammar_options &o) {
    auto *text = app.add_option("--grammar", o.grammar,
                                "GBNF grammar the output must follow (llama.cpp's format; the start rule is "
                                "'root')");
    auto *file = app.add_option("--grammar-file", o.grammar_file, "read the GBNF grammar from this file")
                     ->check(input_file());
    auto *schema =
        app.add_option("--json-schema", o.json_schema,
                       "output JSON valid under this JSON Schema: a file, or the schema itself when it "
                       "starts with '{'");
    auto *json = app.add_flag("--json", o.json, "output one JSON value (any)");
    text->excludes(file)->excludes(schema)->excludes(json);
    file->excludes(schema)->excludes(json);
    schema->excludes(json);
}

// The GBNF text the options ask for ("" when none), checked: a grammar that does not parse or a schema
// weft cannot convert throws weft::error naming the file and the line:column or JSON pointer.
inline std::string resolve_grammar(const grammar_options &o) {
    std::string gbnf, source = "--grammar";
    if (!o.grammar.empty()) {
        gbnf = o.grammar;
    } else if (!o.grammar_file.empty()) {
        gbnf = read_input_file(o.grammar_file);
        source = o.grammar_file;
    } else if (!o.json_schema.empty()) {
        const size_t first = o.json_schema.find_first_not_of(" \t\r\n");
        const bool inline_schema = first != std::string::npos && o.json_schema[first] == '{';
        const std::string schema = inline_schema ? o.json_schema : read_input_file(o.json_schema);
        try {
            gbnf = json_schema_to_grammar(schema);
        } catch (const error &e) {
            throw error((inline_schema ? std::string("--json-schema") : o.json_schema) + ": " + e.what());
        }
        source = "the grammar of the JSON schema";
    } else if (o.json) {
        gbnf = json_any_grammar();
    }
    if (!gbnf.empty()) grammar::parse(gbnf, source);
    return gbnf;
}

}  // namespace weft::tool
