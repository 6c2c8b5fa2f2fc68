// src/template/jinja_ast.h — the Jinja interpreter's insides: tokens from the lexer, the syntax
// tree the parser builds, and the entry points of the three stages (lex, parse, evaluate).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "weft/template/jinja.h"

namespace weft::jinja_detail {

struct token {
    enum class kind {
        text,         // template text between tags (already whitespace-controlled)
        var_begin,    // {{
        var_end,      // }}
        block_begin,  // {%
        block_end,    // %}
        name,
        string,
        integer,
        floating,
        op,  // punctuation and operators: ( ) [ ] { } . , : | ~ + - * / // % ** = == != < > <= >=
        eof,
    };
    kind type;
    std::string text;  // the text, name, operator or the decoded string literal
    int line = 1;
    int column = 1;
};

std::vector<token> lex(std::string_view source, const jinja_options &options);

// Expressions.
struct expr {
    enum class kind {
        literal,    // value
        name,       // name
        list,       // items (a tuple when name is "tuple")
        dict,       // keys[i]: items[i]
        getattr,    // object.name
        getitem,    // object[items[0]]
        slice,      // object[items[0]:items[1]:items[2]] (null pointers for absent parts)
        call,       // object(args)
        filter,     // items[0] | name(args)
        test,       // items[0] is [not] name(args)
        unary,      // op items[0]   (op: "not", "-", "+")
        binary,     // items[0] op items[1]
        condition,  // items[1] if items[0] else items[2]
    };
    kind type;
    int line = 1;
    int column = 1;
    int height = 1;                            // of the subtree, bounded by max_nesting
    jinja_value value;                         // literal
    std::string name;                          // name, attribute, filter, test, operator
    bool negated = false;                      // test: "is not"
    std::vector<std::unique_ptr<expr>> items;  // operands, list items, dict values
    std::vector<std::unique_ptr<expr>> keys;   // dict keys
    std::unique_ptr<expr> object;              // getattr, getitem, slice, call
    std::vector<std::unique_ptr<expr>> args;   // call / filter / test positional arguments
    std::vector<std::pair<std::string, std::unique_ptr<expr>>> kwargs;
};
using expr_ptr = std::unique_ptr<expr>;

// Statements.
struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using body = std::vector<stmt_ptr>;

struct stmt {
    enum class kind {
        text,        // text
        output,      // {{ value }}
        if_,         // conditions[i] -> bodies[i]; else_body
        for_,        // for targets in value [if condition] body [else else_body]
        set,         // set targets = value, or set target.attribute = value, or block set (body)
        macro,       // macro name(params = defaults) body
        filter,      // filter block: value is a filter expr applied to the body's text
        generation,  // body rendered as is
        break_,
        continue_,
        do_,  // evaluate value, discard
    };
    kind type;
    int line = 1;
    int column = 1;
    std::string text;
    expr_ptr value;
    expr_ptr condition;
    std::vector<std::string> targets;  // for / set names (more than one: tuple unpacking)
    std::string attribute;             // set ns.attribute
    std::vector<expr_ptr> conditions;
    std::vector<body> bodies;
    body main;
    body else_body;
    bool has_else = false;
    std::string name;                 // macro name
    std::vector<std::string> params;  // macro parameters
    std::vector<expr_ptr> defaults;   // one per parameter, null when none
};

struct program {
    body root;
};

// Names the parser accepts after '|' and 'is' (jinja2 rejects unknown ones when compiling too).
bool known_filter(std::string_view name);
bool known_test(std::string_view name);

std::unique_ptr<program> parse(std::string_view source, const jinja_options &options);

std::string evaluate(const program &prog, const jinja_value &context, const jinja_options &options);

// The UTF-8 bytes of code point `cp`, appended to `out`.
void append_utf8(std::string &out, uint32_t cp);

}  // namespace weft::jinja_detail
