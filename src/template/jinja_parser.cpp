// src/template/jinja_parser.cpp — tokens to a syntax tree, by recursive descent with jinja2's
// operator precedence; nesting is bounded so a hostile template cannot overflow the stack.
#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "template/jinja_ast.h"

namespace weft::jinja_detail {

namespace {

class parser {
  public:
    parser(std::vector<token> tokens, const jinja_options &opt) : toks_(std::move(tokens)), opt_(opt) {}

    std::unique_ptr<program> run() {
        auto prog = std::make_unique<program>();
        std::string end;
        prog->root = parse_body({}, end);
        return prog;
    }

  private:
    std::vector<token> toks_;
    const jinja_options &opt_;
    size_t pos_ = 0;
    int depth_ = 0;

    // Counts nesting on the way down and back up.
    struct nest {
        parser &p;
        explicit nest(parser &pp) : p(pp) {
            if (++p.depth_ > p.opt_.max_nesting)
                p.fail(p.peek(),
                       "template nests deeper than " + std::to_string(p.opt_.max_nesting) + " levels");
        }
        ~nest() { --p.depth_; }
    };

    const token &peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
    const token &next() {
        const token &t = toks_[pos_];
        if (pos_ + 1 < toks_.size()) ++pos_;
        return t;
    }

    [[noreturn]] void fail(const token &t, const std::string &msg) const {
        throw jinja_error(msg, t.line, t.column);
    }

    static std::string describe(const token &t) {
        switch (t.type) {
            case token::kind::eof:
                return "end of template";
            case token::kind::text:
                return "text";
            case token::kind::var_end:
                return "'}}'";
            case token::kind::block_end:
                return "'%}'";
            case token::kind::var_begin:
                return "'{{'";
            case token::kind::block_begin:
                return "'{%'";
            case token::kind::string:
                return "string literal";
            default:
                return "'" + t.text + "'";
        }
    }

    bool at_op(const char *op, size_t ahead = 0) const {
        return peek(ahead).type == token::kind::op && peek(ahead).text == op;
    }
    bool at_name(const char *name, size_t ahead = 0) const {
        return peek(ahead).type == token::kind::name && peek(ahead).text == name;
    }
    bool accept_op(const char *op) {
        if (!at_op(op)) return false;
        next();
        return true;
    }
    bool accept_name(const char *name) {
        if (!at_name(name)) return false;
        next();
        return true;
    }
    void expect_op(const char *op) {
        if (!accept_op(op)) fail(peek(), std::string("expected '") + op + "', got " + describe(peek()));
    }
    std::string expect_name() {
        if (peek().type != token::kind::name) fail(peek(), "expected a name, got " + describe(peek()));
        return next().text;
    }
    void expect_block_end() {
        if (peek().type != token::kind::block_end) fail(peek(), "expected '%}', got " + describe(peek()));
        next();
    }

    expr_ptr make_expr(expr::kind k, const token &at) {
        auto e = std::make_unique<expr>();
        e->type = k;
        e->line = at.line;
        e->column = at.column;
        return e;
    }
    stmt_ptr make_stmt(stmt::kind k, const token &at) {
        auto s = std::make_unique<stmt>();
        s->type = k;
        s->line = at.line;
        s->column = at.column;
        return s;
    }

    // Statements until one of `ends` ({% endfor %}, {% else %} ...); its name is stored in `end`
    // with the tag's '%}' not yet consumed. At the top level (no ends) runs to the end of input.
    body parse_body(const std::vector<std::string> &ends, std::string &end) {
        nest guard(*this);
        body out;
        const token &opened = peek();
        while (true) {
            const token &t = peek();
            if (t.type == token::kind::eof) {
                if (ends.empty()) return out;
                fail(t, "unexpected end of template: missing {% " + ends.back() +
                            " %} (block opened at line " + std::to_string(opened.line) + ")");
            }
            if (t.type == token::kind::text) {
                auto s = make_stmt(stmt::kind::text, t);
                s->text = next().text;
                out.push_back(std::move(s));
            } else if (t.type == token::kind::var_begin) {
                next();
                auto s = make_stmt(stmt::kind::output, t);
                s->value = parse_expr();
                if (peek().type != token::kind::var_end)
                    fail(peek(), "expected '}}', got " + describe(peek()));
                next();
                out.push_back(std::move(s));
            } else if (t.type == token::kind::block_begin) {
                const token &kw = peek(1);
                if (kw.type != token::kind::name) fail(kw, "expected a statement name after '{%'");
                for (const auto &e : ends)
                    if (kw.text == e) {
                        next();
                        next();
                        end = e;
                        return out;
                    }
                next();
                out.push_back(parse_statement());
            } else {
                fail(t, "unexpected " + describe(t));
            }
        }
    }

    stmt_ptr parse_statement() {
        const token &kw = next();
        const std::string &k = kw.text;
        if (k == "if") return parse_if(kw);
        if (k == "for") return parse_for(kw);
        if (k == "set") return parse_set(kw);
        if (k == "macro") return parse_macro(kw);
        if (k == "filter") return parse_filter_block(kw);
        if (k == "generation") {
            auto s = make_stmt(stmt::kind::generation, kw);
            expect_block_end();
            std::string end;
            s->main = parse_body({"endgeneration"}, end);
            expect_block_end();
            return s;
        }
        if (k == "break" || k == "continue") {
            auto s = make_stmt(k == "break" ? stmt::kind::break_ : stmt::kind::continue_, kw);
            expect_block_end();
            return s;
        }
        if (k == "do") {
            auto s = make_stmt(stmt::kind::do_, kw);
            s->value = parse_expr();
            expect_block_end();
            return s;
        }
        fail(kw, "unknown or unsupported statement '" + k + "'");
    }

    stmt_ptr parse_if(const token &kw) {
        auto s = make_stmt(stmt::kind::if_, kw);
        s->conditions.push_back(parse_expr());
        expect_block_end();
        while (true) {
            std::string end;
            body b = parse_body({"elif", "else", "endif"}, end);
            s->bodies.push_back(std::move(b));
            if (end == "elif") {
                s->conditions.push_back(parse_expr());
                expect_block_end();
            } else if (end == "else") {
                expect_block_end();
                s->has_else = true;
                s->else_body = parse_body({"endif"}, end);
                expect_block_end();
                return s;
            } else {
                expect_block_end();
                return s;
            }
        }
    }

    std::vector<std::string> parse_targets() {
        std::vector<std::string> names;
        const bool paren = accept_op("(");
        names.push_back(expect_name());
        while (accept_op(",")) {
            if (peek().type != token::kind::name || at_name("in")) break;
            names.push_back(expect_name());
        }
        if (paren) expect_op(")");
        return names;
    }

    stmt_ptr parse_for(const token &kw) {
        auto s = make_stmt(stmt::kind::for_, kw);
        s->targets = parse_targets();
        if (!accept_name("in")) fail(peek(), "expected 'in' in for loop, got " + describe(peek()));
        s->value = parse_or_expr();  // `if` here starts the loop filter, not a condition expression
        if (accept_name("if")) s->condition = parse_expr();
        if (accept_name("recursive")) fail(kw, "recursive for loops are not supported");
        expect_block_end();
        std::string end;
        s->main = parse_body({"else", "endfor"}, end);
        expect_block_end();
        if (end == "else") {
            s->has_else = true;
            s->else_body = parse_body({"endfor"}, end);
            expect_block_end();
        }
        return s;
    }

    stmt_ptr parse_set(const token &kw) {
        auto s = make_stmt(stmt::kind::set, kw);
        s->targets = parse_targets();
        if (s->targets.size() == 1 && accept_op(".")) s->attribute = expect_name();
        if (accept_op("=")) {
            s->value = parse_tuple_or_expr();
            expect_block_end();
            return s;
        }
        if (s->targets.size() != 1 || !s->attribute.empty()) fail(peek(), "expected '=' in set");
        if (at_op("|")) {  // {% set x | filter %} ... {% endset %}
            next();
            s->condition = parse_filter_chain(make_expr(expr::kind::literal, kw));
        }
        expect_block_end();
        std::string end;
        s->main = parse_body({"endset"}, end);
        expect_block_end();
        return s;
    }

    stmt_ptr parse_macro(const token &kw) {
        auto s = make_stmt(stmt::kind::macro, kw);
        s->name = expect_name();
        expect_op("(");
        while (!at_op(")")) {
            s->params.push_back(expect_name());
            s->defaults.push_back(accept_op("=") ? parse_expr() : nullptr);
            if (!accept_op(",")) break;
        }
        expect_op(")");
        expect_block_end();
        std::string end;
        s->main = parse_body({"endmacro"}, end);
        if (peek().type == token::kind::name) next();  // {% endmacro name %}
        expect_block_end();
        return s;
    }

    stmt_ptr parse_filter_block(const token &kw) {
        auto s = make_stmt(stmt::kind::filter, kw);
        s->value = parse_filter_chain(make_expr(expr::kind::literal, kw));
        expect_block_end();
        std::string end;
        s->main = parse_body({"endfilter"}, end);
        expect_block_end();
        return s;
    }

    // Expressions, loosest binding first.

    // `a, b` at the top of a set: a tuple (a list here).
    expr_ptr parse_tuple_or_expr() {
        const token &at = peek();
        expr_ptr first = parse_expr();
        if (!at_op(",")) return first;
        auto list = make_expr(expr::kind::list, at);
        list->name = "tuple";
        list->items.push_back(std::move(first));
        while (accept_op(",")) {
            if (peek().type == token::kind::block_end) break;
            list->items.push_back(parse_expr());
        }
        return list;
    }

    expr_ptr parse_expr() {
        nest guard(*this);
        const token &at = peek();
        expr_ptr e = parse_or_expr();
        if (accept_name("if")) {
            auto c = make_expr(expr::kind::condition, at);
            c->items.push_back(parse_or_expr());
            c->items.push_back(std::move(e));
            c->items.push_back(accept_name("else") ? parse_expr() : nullptr);
            return grow(std::move(c));
        }
        return e;
    }

    // The height of `e` from its children's: a long chain such as a ~ b ~ c ... is flat in the
    // source but deep in the tree, and evaluating (or freeing) the tree recurses through it.
    expr_ptr grow(expr_ptr e) {
        int h = 0;
        const auto see = [&h](const expr_ptr &c) {
            if (c) h = std::max(h, c->height);
        };
        for (const auto &c : e->items) see(c);
        for (const auto &c : e->keys) see(c);
        for (const auto &c : e->args) see(c);
        for (const auto &kv : e->kwargs) see(kv.second);
        see(e->object);
        e->height = h + 1;
        if (e->height > opt_.max_nesting)
            throw jinja_error("expression nests deeper than " + std::to_string(opt_.max_nesting) + " levels",
                              e->line, e->column);
        return e;
    }

    expr_ptr binary(const token &at, std::string op, expr_ptr l, expr_ptr r) {
        auto b = make_expr(expr::kind::binary, at);
        b->name = std::move(op);
        b->items.push_back(std::move(l));
        b->items.push_back(std::move(r));
        return grow(std::move(b));
    }

    expr_ptr parse_or_expr() {
        expr_ptr e = parse_and_expr();
        while (at_name("or")) {
            const token &at = next();
            e = binary(at, "or", std::move(e), parse_and_expr());
        }
        return e;
    }

    expr_ptr parse_and_expr() {
        expr_ptr e = parse_not_expr();
        while (at_name("and")) {
            const token &at = next();
            e = binary(at, "and", std::move(e), parse_not_expr());
        }
        return e;
    }

    expr_ptr parse_not_expr() {
        if (at_name("not")) {
            nest guard(*this);
            const token &at = next();
            auto u = make_expr(expr::kind::unary, at);
            u->name = "not";
            u->items.push_back(parse_not_expr());
            return grow(std::move(u));
        }
        return parse_compare();
    }

    expr_ptr parse_compare() {
        expr_ptr e = parse_math1();
        while (true) {
            const token &at = peek();
            std::string op;
            if (at.type == token::kind::op && (at.text == "==" || at.text == "!=" || at.text == "<" ||
                                               at.text == ">" || at.text == "<=" || at.text == ">=")) {
                op = next().text;
            } else if (at_name("in")) {
                next();
                op = "in";
            } else if (at_name("not") && at_name("in", 1)) {
                next();
                next();
                op = "not in";
            } else {
                return e;
            }
            e = binary(at, op, std::move(e), parse_math1());
        }
    }

    expr_ptr parse_math1() {
        expr_ptr e = parse_concat();
        while (at_op("+") || at_op("-")) {
            const token &at = next();
            e = binary(at, at.text, std::move(e), parse_concat());
        }
        return e;
    }

    expr_ptr parse_concat() {
        expr_ptr e = parse_math2();
        while (at_op("~")) {
            const token &at = next();
            e = binary(at, "~", std::move(e), parse_math2());
        }
        return e;
    }

    expr_ptr parse_math2() {
        expr_ptr e = parse_pow();
        while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
            const token &at = next();
            e = binary(at, at.text, std::move(e), parse_pow());
        }
        return e;
    }

    expr_ptr parse_pow() {
        expr_ptr e = parse_unary(true);
        while (at_op("**")) {
            const token &at = next();
            e = binary(at, "**", std::move(e), parse_unary(true));
        }
        return e;
    }

    expr_ptr parse_unary(bool with_filter) {
        nest guard(*this);
        const token &at = peek();
        expr_ptr e;
        if (at_op("-") || at_op("+")) {
            next();
            e = make_expr(expr::kind::unary, at);
            e->name = at.text;
            e->items.push_back(parse_unary(false));
            e = grow(std::move(e));
        } else {
            e = parse_primary();
        }
        e = parse_postfix(std::move(e));
        if (with_filter) e = parse_filter_expr(std::move(e));
        return e;
    }

    expr_ptr parse_primary() {
        const token &t = peek();
        switch (t.type) {
            case token::kind::name: {
                next();
                if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
                    auto e = make_expr(expr::kind::literal, t);
                    e->value = jinja_value(t.text[0] == 't' || t.text[0] == 'T');
                    return e;
                }
                if (t.text == "none" || t.text == "None") {
                    auto e = make_expr(expr::kind::literal, t);
                    e->value = jinja_value::none();
                    return e;
                }
                auto e = make_expr(expr::kind::name, t);
                e->name = t.text;
                return e;
            }
            case token::kind::string: {
                std::string s = next().text;
                while (peek().type == token::kind::string) s += next().text;  // 'a' 'b' is 'ab'
                auto e = make_expr(expr::kind::literal, t);
                e->value = jinja_value(std::move(s));
                return e;
            }
            case token::kind::integer: {
                next();
                auto e = make_expr(expr::kind::literal, t);
                errno = 0;
                const long long v = std::strtoll(t.text.c_str(), nullptr, 10);
                if (errno == ERANGE) fail(t, "integer literal too large");
                e->value = jinja_value(int64_t(v));
                return e;
            }
            case token::kind::floating: {
                next();
                auto e = make_expr(expr::kind::literal, t);
                e->value = jinja_value(std::strtod(t.text.c_str(), nullptr));
                return e;
            }
            case token::kind::op:
                if (t.text == "(") {
                    next();
                    if (accept_op(")")) {
                        auto e = make_expr(expr::kind::list, t);
                        e->name = "tuple";
                        return e;
                    }
                    expr_ptr first = parse_expr();
                    if (accept_op(")")) return first;
                    auto e = make_expr(expr::kind::list, t);  // a tuple
                    e->name = "tuple";
                    e->items.push_back(std::move(first));
                    while (accept_op(",")) {
                        if (at_op(")")) break;
                        e->items.push_back(parse_expr());
                    }
                    expect_op(")");
                    return grow(std::move(e));
                }
                if (t.text == "[") {
                    next();
                    auto e = make_expr(expr::kind::list, t);
                    while (!at_op("]")) {
                        e->items.push_back(parse_expr());
                        if (!accept_op(",")) break;
                    }
                    expect_op("]");
                    return grow(std::move(e));
                }
                if (t.text == "{") {
                    next();
                    auto e = make_expr(expr::kind::dict, t);
                    while (!at_op("}")) {
                        e->keys.push_back(parse_expr());
                        expect_op(":");
                        e->items.push_back(parse_expr());
                        if (!accept_op(",")) break;
                    }
                    expect_op("}");
                    return grow(std::move(e));
                }
                break;
            default:
                break;
        }
        fail(t, "unexpected " + describe(t) + " in expression");
    }

    void parse_call_args(expr &e) {
        expect_op("(");
        while (!at_op(")")) {
            if (peek().type == token::kind::name && at_op("=", 1)) {
                std::string key = next().text;
                next();
                e.kwargs.emplace_back(std::move(key), parse_expr());
            } else {
                if (!e.kwargs.empty()) fail(peek(), "positional argument after keyword argument");
                e.args.push_back(parse_expr());
            }
            if (!accept_op(",")) break;
        }
        expect_op(")");
    }

    expr_ptr parse_postfix(expr_ptr e) {
        while (true) {
            const token &at = peek();
            if (at_op(".")) {
                next();
                auto g = make_expr(expr::kind::getattr, at);
                const token &n = next();
                if (n.type == token::kind::name) {
                    g->name = n.text;
                } else if (n.type == token::kind::integer) {  // x.0 is x[0]
                    g->type = expr::kind::getitem;
                    auto idx = make_expr(expr::kind::literal, n);
                    idx->value = jinja_value(int64_t(std::strtoll(n.text.c_str(), nullptr, 10)));
                    g->items.push_back(std::move(idx));
                } else {
                    fail(n, "expected an attribute name after '.', got " + describe(n));
                }
                g->object = std::move(e);
                e = grow(std::move(g));
            } else if (at_op("[")) {
                next();
                nest guard(*this);
                expr_ptr parts[3];
                int colons = 0;
                for (int i = 0; i < 3; ++i) {
                    if (!at_op(":") && !at_op("]")) parts[i] = parse_expr();
                    if (i < 2 && accept_op(":"))
                        ++colons;
                    else
                        break;
                }
                expect_op("]");
                auto g = make_expr(colons ? expr::kind::slice : expr::kind::getitem, at);
                if (!colons && !parts[0]) fail(at, "empty subscript");
                for (int i = 0; i < (colons ? 3 : 1); ++i) g->items.push_back(std::move(parts[i]));
                g->object = std::move(e);
                e = grow(std::move(g));
            } else if (at_op("(")) {
                nest guard(*this);
                auto c = make_expr(expr::kind::call, at);
                parse_call_args(*c);
                c->object = std::move(e);
                e = grow(std::move(c));
            } else {
                return e;
            }
        }
    }

    // `| name(args)` repeated; `subject` is the filtered value (a placeholder in filter blocks).
    expr_ptr parse_filter_chain(expr_ptr subject) {
        while (true) {
            const token &at = peek();
            auto f = make_expr(expr::kind::filter, at);
            f->name = expect_name();
            while (accept_op(".")) f->name += "." + expect_name();
            if (!known_filter(f->name)) fail(at, "unknown filter '" + f->name + "'");
            if (at_op("(")) parse_call_args(*f);
            f->items.push_back(std::move(subject));
            subject = grow(std::move(f));
            if (!accept_op("|")) return subject;
        }
    }

    expr_ptr parse_filter_expr(expr_ptr e) {
        while (true) {
            if (at_op("|")) {
                next();
                nest guard(*this);
                e = parse_filter_chain(std::move(e));
            } else if (at_name("is")) {
                nest guard(*this);
                const token &at = next();
                auto t = make_expr(expr::kind::test, at);
                t->negated = accept_name("not");
                t->name = expect_name();
                while (accept_op(".")) t->name += "." + expect_name();
                if (!known_test(t->name)) fail(at, "unknown test '" + t->name + "'");
                const token &a = peek();
                if (at_op("(")) {
                    parse_call_args(*t);
                } else if ((a.type == token::kind::name && a.text != "else" && a.text != "or" &&
                            a.text != "and" && a.text != "if" && a.text != "in" && a.text != "not" &&
                            a.text != "is") ||
                           a.type == token::kind::string || a.type == token::kind::integer ||
                           a.type == token::kind::floating || at_op("[") || at_op("{")) {
                    t->args.push_back(parse_postfix(parse_primary()));
                }
                t->items.push_back(std::move(e));
                e = grow(std::move(t));
            } else if (at_op("(")) {
                nest guard(*this);
                auto c = make_expr(expr::kind::call, peek());
                parse_call_args(*c);
                c->object = std::move(e);
                e = grow(std::move(c));
            } else {
                return e;
            }
        }
    }
};

}  // namespace

std::unique_ptr<program> parse(std::string_view source, const jinja_options &options) {
    return parser(lex(source, options), options).run();
}

}  // namespace weft::jinja_detail
