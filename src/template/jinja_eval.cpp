// src/template/jinja_eval.cpp — evaluates the Jinja syntax tree: scopes, statements, operators
// with Python semantics, filters, tests, methods of str / list / dict, globals, and the limits
// (steps, output, value depth, wall time) that bound a hostile template.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "template/jinja_ast.h"

namespace weft::jinja_detail {

namespace {

using value = jinja_value;
using vkind = jinja_value::kind;

[[noreturn]] void fail(const std::string &msg) {
    throw jinja_error(msg, 0, 0);
}

const char *type_name(const value &v) {
    switch (v.type()) {
        case vkind::undefined:
            return "Undefined";
        case vkind::none:
            return "NoneType";
        case vkind::boolean:
            return "bool";
        case vkind::integer:
            return "int";
        case vkind::floating:
            return "float";
        case vkind::string:
            return "str";
        case vkind::list:
            return "list";
        case vkind::dict:
            return v.as_dict().is_namespace ? "Namespace" : "dict";
        case vkind::function:
            return "function";
    }
    return "?";
}

[[noreturn]] void fail_undefined(const value &v) {
    fail(v.as_string().empty() ? "value is undefined" : "'" + v.as_string() + "' is undefined");
}

// ---- strings: UTF-8 code points, Python's whitespace ----

std::vector<std::string_view> utf8_chars(std::string_view s) {
    std::vector<std::string_view> out;
    for (size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
        n = std::min(n, s.size() - i);
        out.push_back(s.substr(i, n));
        i += n;
    }
    return out;
}

size_t utf8_length(std::string_view s) {
    size_t n = 0;
    for (const char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
    return n;
}

const char *const whitespace = " \t\n\r\f\v";

std::string strip(std::string_view s, std::string_view chars, bool left, bool right) {
    size_t b = 0, e = s.size();
    const auto in = [&](char c) { return chars.find(c) != std::string_view::npos; };
    if (left)
        while (b < e && in(s[b])) ++b;
    if (right)
        while (e > b && in(s[e - 1])) --e;
    return std::string(s.substr(b, e - b));
}

std::string to_upper(std::string s) {
    for (char &c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
    return s;
}
std::string to_lower(std::string s) {
    for (char &c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}
bool is_alpha(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) != 0;
}

// Python's str.title(): a letter after a non-letter is upper case, other letters lower case.
std::string py_title(std::string s) {
    bool prev_letter = false;
    for (char &c : s) {
        const bool letter = is_alpha(c);
        if (letter)
            c = char(prev_letter ? std::tolower(static_cast<unsigned char>(c))
                                 : std::toupper(static_cast<unsigned char>(c)));
        prev_letter = letter || (static_cast<unsigned char>(c) >= 0x80);
    }
    return s;
}

std::string py_capitalize(std::string s) {
    s = to_lower(std::move(s));
    if (!s.empty()) s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
    return s;
}

std::vector<std::string> py_split(const std::string &s, const value &sep, int64_t maxsplit) {
    std::vector<std::string> out;
    if (sep.is_none() || sep.is_undefined()) {
        size_t i = 0;
        while (true) {
            while (i < s.size() && std::strchr(whitespace, s[i]) && s[i]) ++i;
            if (i >= s.size()) break;
            if (maxsplit >= 0 && int64_t(out.size()) == maxsplit) {
                std::string rest = s.substr(i);
                while (!rest.empty() && std::strchr(whitespace, rest.back())) rest.pop_back();
                out.push_back(rest);
                break;
            }
            size_t j = i;
            while (j < s.size() && !std::strchr(whitespace, s[j])) ++j;
            out.push_back(s.substr(i, j - i));
            i = j;
        }
        return out;
    }
    if (!sep.is_string()) fail("split: separator must be a string");
    const std::string &d = sep.as_string();
    if (d.empty()) fail("split: empty separator");
    size_t i = 0;
    while (true) {
        const size_t j = s.find(d, i);
        if (j == std::string::npos || (maxsplit >= 0 && int64_t(out.size()) == maxsplit)) {
            out.push_back(s.substr(i));
            break;
        }
        out.push_back(s.substr(i, j - i));
        i = j + d.size();
    }
    return out;
}

// Python's str.splitlines(): \n, \r\n, \r, \v, \f, \x1c-\x1e, U+0085, U+2028 and U+2029 end lines.
std::vector<std::string> py_splitlines(std::string_view s) {
    std::vector<std::string> lines;
    size_t start = 0, i = 0;
    while (i < s.size()) {
        size_t len = 0;  // of the line break at i
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '\r')
            len = i + 1 < s.size() && s[i + 1] == '\n' ? 2 : 1;
        else if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e)
            len = 1;
        else if (s.compare(i, 2, "\xc2\x85") == 0)
            len = 2;
        else if (s.compare(i, 3, "\xe2\x80\xa8") == 0 || s.compare(i, 3, "\xe2\x80\xa9") == 0)
            len = 3;
        if (len == 0) {
            ++i;
            continue;
        }
        lines.emplace_back(s.substr(start, i - start));
        i += len;
        start = i;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return lines;
}

std::string py_replace(const std::string &s, const std::string &from, const std::string &to, int64_t count,
                       size_t limit) {
    std::string out;
    const auto put = [&](std::string_view t) {
        if (out.size() + t.size() > limit)
            fail("replace: result exceeds " + std::to_string(limit) + " bytes");
        out += t;
    };
    if (from.empty()) {
        int64_t n = 0;
        for (const auto ch : utf8_chars(s)) {
            if (count < 0 || n++ < count) put(to);
            put(ch);
        }
        if (count < 0 || n < count) put(to);
        return out;
    }
    size_t i = 0;
    int64_t n = 0;
    while (count < 0 || n < count) {
        const size_t j = s.find(from, i);
        if (j == std::string::npos) break;
        put(std::string_view(s).substr(i, j - i));
        put(to);
        i = j + from.size();
        ++n;
    }
    put(std::string_view(s).substr(i));
    return out;
}

// ---- arguments ----

struct args_view {
    const jinja_call_args &a;
    size_t skip = 0;  // positional arguments consumed before (the subject of a filter is not in `a`)
    const value *get(size_t i, std::string_view name) const {
        if (i < a.positional.size()) return &a.positional[i];
        for (const auto &kv : a.keyword)
            if (kv.first == name) return &kv.second;
        return nullptr;
    }
    value get_or(size_t i, std::string_view name, value fallback) const {
        const value *v = get(i, name);
        return v ? *v : fallback;
    }
};

int64_t to_int_arg(const value &v, const char *what) {
    if (v.is_int() || v.is_bool()) return v.as_int();
    if (v.is_float()) return int64_t(v.as_float());
    fail(std::string(what) + ": expected an integer, got " + type_name(v));
}

// ---- comparisons ----

bool less(const value &a, const value &b, bool case_sensitive = true) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() < b.as_float();
        return a.as_int() < b.as_int();
    }
    if (a.is_string() && b.is_string())
        return case_sensitive ? a.as_string() < b.as_string()
                              : to_lower(a.as_string()) < to_lower(b.as_string());
    if (a.is_list() && b.is_list()) {
        const auto &x = a.as_list();
        const auto &y = b.as_list();
        for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
            if (less(x[i], y[i], case_sensitive)) return true;
            if (less(y[i], x[i], case_sensitive)) return false;
        }
        return x.size() < y.size();
    }
    fail(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" + type_name(b) +
         "'");
}

// ---- scopes ----

struct scope {
    std::unordered_map<std::string, value> vars;
    std::shared_ptr<scope> parent;

    const value *lookup(const std::string &name) const {
        for (const scope *s = this; s; s = s->parent.get()) {
            const auto it = s->vars.find(name);
            if (it != s->vars.end()) return &it->second;
        }
        return nullptr;
    }
};
using scope_ptr = std::shared_ptr<scope>;

enum class flow { normal, break_, continue_ };

class evaluator {
  public:
    evaluator(const jinja_options &opt) : opt_(opt), start_(std::chrono::steady_clock::now()) {}

    std::string run(const program &prog, const value &context) {
        auto globals = std::make_shared<scope>();
        install_globals(*globals);
        auto root = std::make_shared<scope>();
        root->parent = globals;
        if (context.is_dict())
            for (const auto &[k, v] : context.as_dict().items) root->vars[k] = v;
        else if (!context.is_undefined() && !context.is_none())
            fail("the context of a render must be a dict");
        std::string out;
        exec(prog.root, root, out);
        // break a cycle: macros defined at the top level hold the scope that holds them
        root->vars.clear();
        return out;
    }

  private:
    const jinja_options &opt_;
    std::chrono::steady_clock::time_point start_;
    int64_t steps_ = 0;
    int call_depth_ = 0;
    size_t allocated_ = 0;

    // One loop iteration or macro call; also where the wall-time limit is checked.
    void step() {
        if (++steps_ > opt_.max_iterations)
            fail("render exceeds " + std::to_string(opt_.max_iterations) +
                 " loop iterations and macro calls");
        if ((steps_ & 1023) == 0) check_time();
    }

    void check_time() const {
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
        if (s > opt_.max_seconds) {
            char buf[64];
            std::snprintf(buf, sizeof buf, "render exceeds %g seconds", opt_.max_seconds);
            fail(buf);
        }
    }

    // Counts the bytes of a value just made against max_alloc.
    void charge(const value &v) {
        if (v.is_string())
            allocated_ += v.as_string().size();
        else if (v.is_list())
            allocated_ += v.as_list().size() * sizeof(value);
        else
            return;
        if (allocated_ > opt_.max_alloc)
            fail("render allocates more than " + std::to_string(opt_.max_alloc >> 20) + " MiB of values");
    }

    void put(std::string &out, std::string_view s) const {
        if (out.size() + s.size() > opt_.max_output)
            fail("rendered text exceeds " + std::to_string(opt_.max_output) + " bytes");
        out += s;
    }

    std::string str(const value &v) const { return jinja_str(v, opt_.max_output); }

    // Containers built by a template may not nest without bound (freeing or printing them recurses).
    int depth_of(const value &v, int limit) const {
        if (limit <= 0) fail("value nests deeper than " + std::to_string(opt_.max_value_depth) + " levels");
        int d = 0;
        if (v.is_list())
            for (const auto &x : v.as_list())
                if (x.is_list() || x.is_dict()) d = std::max(d, depth_of(x, limit - 1));
        if (v.is_dict())
            for (const auto &kv : v.as_dict().items)
                if (kv.second.is_list() || kv.second.is_dict())
                    d = std::max(d, depth_of(kv.second, limit - 1));
        return d + (v.is_list() || v.is_dict() ? 1 : 0);
    }
    void check_depth(const value &v) const {
        if (v.is_list() || v.is_dict()) depth_of(v, opt_.max_value_depth);
    }
    void check_list_size(size_t n) const {
        if (n > opt_.max_list) fail("list exceeds " + std::to_string(opt_.max_list) + " elements");
    }

    // ---- statements ----

    flow exec(const body &b, const scope_ptr &sc, std::string &out) {
        for (const auto &s : b) {
            const flow f = exec_one(*s, sc, out);
            if (f != flow::normal) return f;
        }
        return flow::normal;
    }

    flow exec_one(const stmt &s, const scope_ptr &sc, std::string &out) {
        try {
            return exec_inner(s, sc, out);
        } catch (const jinja_error &e) {
            if (e.line() > 0) throw;
            throw jinja_error(e.what(), s.line, s.column, e.raised());
        }
    }

    flow exec_inner(const stmt &s, const scope_ptr &sc, std::string &out) {
        switch (s.type) {
            case stmt::kind::text:
                put(out, s.text);
                return flow::normal;
            case stmt::kind::output:
                put(out, str(eval(*s.value, sc)));
                return flow::normal;
            case stmt::kind::if_:
                for (size_t i = 0; i < s.conditions.size(); ++i)
                    if (eval(*s.conditions[i], sc).truthy()) return exec(s.bodies[i], sc, out);
                return s.has_else ? exec(s.else_body, sc, out) : flow::normal;
            case stmt::kind::for_:
                exec_for(s, sc, out);
                return flow::normal;
            case stmt::kind::set:
                exec_set(s, sc);
                return flow::normal;
            case stmt::kind::macro:
                define_macro(s, sc);
                return flow::normal;
            case stmt::kind::filter: {
                std::string inner;
                exec(s.main, sc, inner);
                put(out, str(apply_chain(*s.value, value(std::move(inner)), sc)));
                return flow::normal;
            }
            case stmt::kind::generation:
                return exec(s.main, sc, out);
            case stmt::kind::break_:
                return flow::break_;
            case stmt::kind::continue_:
                return flow::continue_;
            case stmt::kind::do_:
                eval(*s.value, sc);
                return flow::normal;
        }
        return flow::normal;
    }

    void bind_targets(const std::vector<std::string> &targets, const value &v, scope &sc) {
        if (targets.size() == 1) {
            sc.vars[targets[0]] = v;
            return;
        }
        const jinja_list items = iterate(v);
        if (items.size() != targets.size())
            fail("cannot unpack " + std::to_string(items.size()) + " values into " +
                 std::to_string(targets.size()) + " names");
        for (size_t i = 0; i < targets.size(); ++i) sc.vars[targets[i]] = items[i];
    }

    void exec_for(const stmt &s, const scope_ptr &sc, std::string &out) {
        jinja_list items = iterate(eval(*s.value, sc));
        if (s.condition) {
            jinja_list kept;
            for (auto &item : items) {
                step();
                auto tmp = std::make_shared<scope>();
                tmp->parent = sc;
                bind_targets(s.targets, item, *tmp);
                if (eval(*s.condition, tmp).truthy()) kept.push_back(std::move(item));
            }
            items = std::move(kept);
        }
        const auto n = int64_t(items.size());
        // loop.cycle of the current iteration: one function per loop, reading the shared index
        auto current = std::make_shared<int64_t>(0);
        const value cycle(jinja_function([current](jinja_call_args &a) -> value {
            if (a.positional.empty()) fail("loop.cycle needs at least one argument");
            return a.positional[size_t(*current) % a.positional.size()];
        }));
        for (int64_t i = 0; i < n; ++i) {
            step();
            *current = i;
            auto it = std::make_shared<scope>();
            it->parent = sc;
            jinja_dict loop;
            loop.items.reserve(13);
            loop.items.emplace_back("index", value(i + 1));
            loop.items.emplace_back("index0", value(i));
            loop.items.emplace_back("revindex", value(n - i));
            loop.items.emplace_back("revindex0", value(n - i - 1));
            loop.items.emplace_back("first", value(i == 0));
            loop.items.emplace_back("last", value(i == n - 1));
            loop.items.emplace_back("length", value(n));
            loop.items.emplace_back("depth", value(1));
            loop.items.emplace_back("depth0", value(0));
            loop.items.emplace_back("previtem", i > 0 ? items[size_t(i - 1)] : value::undefined("previtem"));
            loop.items.emplace_back("nextitem",
                                    i + 1 < n ? items[size_t(i + 1)] : value::undefined("nextitem"));
            loop.items.emplace_back("cycle", cycle);
            it->vars["loop"] = value(std::move(loop));
            bind_targets(s.targets, items[size_t(i)], *it);
            if (exec(s.main, it, out) == flow::break_) break;
        }
        if (n == 0 && s.has_else) exec(s.else_body, sc, out);
    }

    void exec_set(const stmt &s, const scope_ptr &sc) {
        value v;
        if (s.value) {
            v = eval(*s.value, sc);
        } else {
            std::string inner;
            exec(s.main, sc, inner);
            v = value(std::move(inner));
            if (s.condition) v = apply_chain(*s.condition, v, sc);
        }
        if (!s.attribute.empty()) {
            const value *target = sc->lookup(s.targets[0]);
            if (!target || !target->is_dict() || !target->as_dict().is_namespace)
                fail("cannot assign attribute '" + s.attribute + "' on '" + s.targets[0] +
                     "': not a namespace");
            check_depth(v);
            jinja_dict &ns = target->as_dict();
            const value *old = ns.find(s.attribute);
            const std::optional<value> previous = old ? std::optional<value>(*old) : std::nullopt;
            ns.set(s.attribute, v);
            try {
                check_depth(*target);  // `set ns.x = ns` would make a cycle
            } catch (const jinja_error &) {
                if (previous)
                    ns.set(s.attribute, *previous);
                else
                    ns.items.pop_back();
                throw;
            }
            return;
        }
        bind_targets(s.targets, v, *sc);
    }

    void define_macro(const stmt &s, const scope_ptr &sc) {
        std::weak_ptr<scope> home = sc;
        const stmt *def = &s;
        sc->vars[s.name] = value(jinja_function([this, home, def](jinja_call_args &a) -> value {
            const scope_ptr parent = home.lock();
            if (!parent) fail("macro '" + def->name + "' is called after its scope ended");
            step();
            if (call_depth_ >= opt_.max_call_depth)
                fail("macro calls nest deeper than " + std::to_string(opt_.max_call_depth) +
                     " (runaway recursion?)");
            struct depth_guard {
                int &d;
                explicit depth_guard(int &dd) : d(dd) { ++d; }
                ~depth_guard() { --d; }
            } guard(call_depth_);
            auto local = std::make_shared<scope>();
            local->parent = parent;
            jinja_list varargs;
            for (size_t i = 0; i < a.positional.size(); ++i) {
                if (i < def->params.size())
                    local->vars[def->params[i]] = a.positional[i];
                else
                    varargs.push_back(a.positional[i]);
            }
            jinja_dict kwargs;
            for (auto &kv : a.keyword) {
                const auto p = std::find(def->params.begin(), def->params.end(), kv.first);
                if (p == def->params.end())
                    kwargs.set(kv.first, kv.second);
                else
                    local->vars[kv.first] = kv.second;
            }
            for (size_t i = 0; i < def->params.size(); ++i) {
                if (local->vars.count(def->params[i])) continue;
                local->vars[def->params[i]] =
                    def->defaults[i] ? eval(*def->defaults[i], local) : value::undefined(def->params[i]);
            }
            local->vars["varargs"] = value::tuple(std::move(varargs));
            local->vars["kwargs"] = value(std::move(kwargs));
            std::string out;
            exec(def->main, local, out);
            return value(std::move(out));
        }));
    }

    // ---- expressions ----

    value eval(const expr &e, const scope_ptr &sc) {
        try {
            value v = eval_inner(e, sc);
            switch (e.type) {  // the kinds that make new values
                case expr::kind::binary:
                case expr::kind::filter:
                case expr::kind::call:
                case expr::kind::list:
                case expr::kind::slice:
                    charge(v);
                    break;
                default:
                    break;
            }
            return v;
        } catch (const jinja_error &err) {
            if (err.line() > 0) throw;
            throw jinja_error(err.what(), e.line, e.column, err.raised());
        }
    }

    jinja_call_args eval_args(const expr &e, const scope_ptr &sc) {
        jinja_call_args a;
        for (const auto &x : e.args) a.positional.push_back(eval(*x, sc));
        for (const auto &kv : e.kwargs) a.keyword.emplace_back(kv.first, eval(*kv.second, sc));
        return a;
    }

    value eval_inner(const expr &e, const scope_ptr &sc) {
        switch (e.type) {
            case expr::kind::literal:
                return e.value;
            case expr::kind::name: {
                const value *v = sc->lookup(e.name);
                return v ? *v : value::undefined(e.name);
            }
            case expr::kind::list: {
                jinja_list l;
                for (const auto &x : e.items) l.push_back(eval(*x, sc));
                value v = e.name == "tuple" ? value::tuple(std::move(l)) : value(std::move(l));
                check_depth(v);
                return v;
            }
            case expr::kind::dict: {
                jinja_dict d;
                for (size_t i = 0; i < e.keys.size(); ++i) {
                    if ((i & 1023) == 1023) check_time();  // setting a key is linear in the keys
                    const value k = eval(*e.keys[i], sc);
                    d.set(k.is_string() ? k.as_string() : str(k), eval(*e.items[i], sc));
                }
                value v(std::move(d));
                check_depth(v);
                return v;
            }
            case expr::kind::getattr:
                return get_attr(eval(*e.object, sc), e.name);
            case expr::kind::getitem:
                return get_item(eval(*e.object, sc), eval(*e.items[0], sc));
            case expr::kind::slice: {
                const value obj = eval(*e.object, sc);
                value parts[3];
                for (int i = 0; i < 3; ++i)
                    if (e.items[size_t(i)]) parts[i] = eval(*e.items[size_t(i)], sc);
                return slice(obj, parts[0], parts[1], parts[2]);
            }
            case expr::kind::call: {
                const value fn = eval(*e.object, sc);
                jinja_call_args a = eval_args(e, sc);
                if (fn.is_undefined()) fail_undefined(fn);
                if (!fn.is_function()) fail(std::string("'") + type_name(fn) + "' object is not callable");
                return fn.as_function()(a);
            }
            case expr::kind::filter: {
                const value subject = eval(*e.items[0], sc);
                jinja_call_args a = eval_args(e, sc);
                return filter(e.name, subject, a);
            }
            case expr::kind::test: {
                const expr &subject = *e.items[0];
                value v;
                if (e.name == "defined" || e.name == "undefined") {
                    // a name that is not there at all, or an attribute of an undefined value
                    try {
                        v = eval(subject, sc);
                    } catch (const jinja_error &) {
                        if (subject.type != expr::kind::getattr && subject.type != expr::kind::getitem) throw;
                        v = value();
                    }
                } else {
                    v = eval(subject, sc);
                }
                jinja_call_args a = eval_args(e, sc);
                return value(test(e.name, v, a) != e.negated);
            }
            case expr::kind::unary: {
                const value v = eval(*e.items[0], sc);
                if (e.name == "not") return value(!v.truthy());
                if (v.is_undefined()) fail_undefined(v);
                if (!v.is_number())
                    fail(std::string("bad operand type for unary ") + e.name + ": '" + type_name(v) + "'");
                if (e.name == "+") return v.is_float() ? v : value(v.as_int());
                if (v.is_float()) return value(-v.as_float());
                if (v.as_int() == INT64_MIN) fail("integer overflow");
                return value(-v.as_int());
            }
            case expr::kind::binary:
                return binary(e, sc);
            case expr::kind::condition: {
                if (eval(*e.items[0], sc).truthy()) return eval(*e.items[1], sc);
                return e.items[2] ? eval(*e.items[2], sc) : value::undefined("");
            }
        }
        return value();
    }

    // Filters in `chain` applied to `subject` (the innermost, placeholder operand is replaced).
    value apply_chain(const expr &chain, const value &subject, const scope_ptr &sc) {
        if (chain.type != expr::kind::filter) return subject;
        const value v = apply_chain(*chain.items[0], subject, sc);
        jinja_call_args a = eval_args(chain, sc);
        return filter(chain.name, v, a);
    }

    value binary(const expr &e, const scope_ptr &sc) {
        const std::string &op = e.name;
        const value a = eval(*e.items[0], sc);
        if (op == "and") return a.truthy() ? eval(*e.items[1], sc) : a;
        if (op == "or") return a.truthy() ? a : eval(*e.items[1], sc);
        const value b = eval(*e.items[1], sc);
        if (op == "==") return value(jinja_equal(a, b));
        if (op == "!=") return value(!jinja_equal(a, b));
        if (op == "in") return value(contains(b, a));
        if (op == "not in") return value(!contains(b, a));
        if (op == "~") {
            std::string s = str(a);
            const std::string t = str(b);
            if (s.size() + t.size() > opt_.max_output)
                fail("string exceeds " + std::to_string(opt_.max_output) + " bytes");
            return value(s + t);
        }
        if (op == "<") return value(less(a, b));
        if (op == ">") return value(less(b, a));
        if (op == "<=") return value(!less(b, a));
        if (op == ">=") return value(!less(a, b));
        return arithmetic(op, a, b);
    }

    value arithmetic(const std::string &op, const value &a, const value &b) {
        if (a.is_undefined()) fail_undefined(a);
        if (b.is_undefined()) fail_undefined(b);
        if (op == "+") {
            if (a.is_string() && b.is_string()) {
                if (a.as_string().size() + b.as_string().size() > opt_.max_output)
                    fail("string exceeds " + std::to_string(opt_.max_output) + " bytes");
                return value(a.as_string() + b.as_string());
            }
            if (a.is_list() && b.is_list() && !a.is_generator() && !b.is_generator()) {
                check_list_size(a.as_list().size() + b.as_list().size());
                if (a.is_tuple() != b.is_tuple())
                    fail(std::string("can only concatenate ") + (a.is_tuple() ? "tuple" : "list") +
                         " (not \"" + (b.is_tuple() ? "tuple" : "list") + "\") to " +
                         (a.is_tuple() ? "tuple" : "list"));
                jinja_list l = a.as_list();
                l.insert(l.end(), b.as_list().begin(), b.as_list().end());
                return a.is_tuple() ? value::tuple(std::move(l)) : value(std::move(l));
            }
        }
        const auto sequence = [](const value &x) {
            return x.is_string() || (x.is_list() && !x.is_generator());
        };
        if (op == "*" && sequence(a) && (b.is_int() || b.is_bool())) return repeat(a, b.as_int());
        if (op == "*" && sequence(b) && (a.is_int() || a.is_bool())) return repeat(b, a.as_int());
        if (!a.is_number() || !b.is_number())
            fail(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                 type_name(b) + "'");
        const bool real = a.is_float() || b.is_float();
        if (op == "/") {
            if (b.as_float() == 0) fail("division by zero");
            return value(a.as_float() / b.as_float());
        }
        if (real) {
            const double x = a.as_float(), y = b.as_float();
            if (op == "+") return value(x + y);
            if (op == "-") return value(x - y);
            if (op == "*") return value(x * y);
            if (op == "**") return value(std::pow(x, y));
            if (y == 0) fail("float division by zero");
            if (op == "//") return value(std::floor(x / y));
            if (op == "%") {
                double r = std::fmod(x, y);
                if (r != 0 && ((r < 0) != (y < 0))) r += y;
                return value(r);
            }
        }
        const int64_t x = a.as_int(), y = b.as_int();
        int64_t r = 0;
        if (op == "+" && !__builtin_add_overflow(x, y, &r)) return value(r);
        if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return value(r);
        if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return value(r);
        if (op == "//" || op == "%") {
            if (y == 0) fail("integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) fail("integer overflow");
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                --q;
                m += y;
            }
            return value(op == "//" ? q : m);
        }
        if (op == "**") {
            if (y < 0) return value(std::pow(double(x), double(y)));
            int64_t acc = 1;
            for (int64_t i = 0; i < y; ++i) {
                if (__builtin_mul_overflow(acc, x, &acc)) fail("integer overflow in **");
                if (acc == 0 || acc == 1) break;
                if (acc == -1) {
                    acc = ((y - i - 1) % 2 == 0) ? -1 : 1;
                    break;
                }
            }
            return value(acc);
        }
        fail("integer overflow in " + op);
    }

    value repeat(const value &v, int64_t n) {
        if (n <= 0) return v.is_string() ? value("") : v.is_tuple() ? value::tuple({}) : value::list();
        if (v.is_string()) {
            if (v.as_string().size() * uint64_t(n) > opt_.max_output || uint64_t(n) > opt_.max_output)
                fail("string exceeds " + std::to_string(opt_.max_output) + " bytes");
            std::string s;
            for (int64_t i = 0; i < n; ++i) s += v.as_string();
            return value(std::move(s));
        }
        if (uint64_t(n) > opt_.max_list) check_list_size(size_t(-1));
        check_list_size(v.as_list().size() * size_t(n));
        jinja_list l;
        for (int64_t i = 0; i < n; ++i) l.insert(l.end(), v.as_list().begin(), v.as_list().end());
        return v.is_tuple() ? value::tuple(std::move(l)) : value(std::move(l));
    }

    bool contains(const value &haystack, const value &needle) {
        if (haystack.is_string()) {
            if (!needle.is_string())
                fail(std::string("'in <string>' requires string as left operand, not ") + type_name(needle));
            return haystack.as_string().find(needle.as_string()) != std::string::npos;
        }
        if (haystack.is_list()) {
            if (haystack.is_generator()) return contains(value(iterate(haystack)), needle);
            for (const auto &x : haystack.as_list())
                if (jinja_equal(x, needle)) return true;
            return false;
        }
        if (haystack.is_dict())
            return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
        if (haystack.is_undefined()) return false;
        fail(std::string("argument of type '") + type_name(haystack) + "' is not iterable");
    }

    jinja_list iterate(const value &v) {
        switch (v.type()) {
            case vkind::undefined:
                return {};
            case vkind::list:
                if (v.is_generator()) {  // a generator is used up by iterating it
                    jinja_list items = std::move(v.as_list());
                    v.as_list().clear();
                    return items;
                }
                return v.as_list();
            case vkind::dict: {
                if (v.as_dict().is_namespace) break;
                jinja_list keys;
                for (const auto &kv : v.as_dict().items) keys.push_back(value(kv.first));
                return keys;
            }
            case vkind::string: {
                jinja_list chars;
                for (const auto c : utf8_chars(v.as_string())) chars.push_back(value(c));
                return chars;
            }
            default:
                break;
        }
        fail(std::string("'") + type_name(v) + "' object is not iterable");
    }

    value get_attr(const value &obj, const std::string &name) {
        if (obj.is_undefined()) fail_undefined(obj);
        if (obj.is_dict()) {
            static const char *const dict_methods[] = {"get", "items",  "keys", "values",
                                                       "pop", "update", "copy"};
            if (!obj.as_dict().is_namespace)
                for (const char *m : dict_methods)
                    if (name == m) return bound_method(obj, name);
            if (const value *v = obj.as_dict().find(name)) return *v;
            return value::undefined(name);
        }
        static const char *const str_methods[] = {
            "strip",  "lstrip",     "rstrip",     "upper",    "lower",   "title",   "capitalize", "split",
            "rsplit", "splitlines", "startswith", "endswith", "replace", "find",    "rfind",      "index",
            "count",  "join",       "isdigit",    "isalpha",  "isspace", "isalnum", "isupper",    "islower"};
        static const char *const list_methods[] = {"append", "pop", "index", "count", "copy"};
        if (obj.is_string())
            for (const char *m : str_methods)
                if (name == m) return bound_method(obj, name);
        if (obj.is_list() && !obj.is_generator())
            for (const char *m : list_methods)
                if (name == m) return bound_method(obj, name);
        return value::undefined(name);
    }

    value get_item(const value &obj, const value &key) {
        if (obj.is_undefined()) fail_undefined(obj);
        if (obj.is_generator()) return value::undefined(str(key));
        if (obj.is_dict()) {
            if (key.is_string())
                if (const value *v = obj.as_dict().find(key.as_string())) return *v;
            return value::undefined(key.is_string() ? key.as_string() : str(key));
        }
        if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
            int64_t i = key.as_int();
            if (obj.is_list()) {
                const auto n = int64_t(obj.as_list().size());
                if (i < 0) i += n;
                if (i < 0 || i >= n) return value::undefined("[" + std::to_string(key.as_int()) + "]");
                return obj.as_list()[size_t(i)];
            }
            const auto chars = utf8_chars(obj.as_string());
            const auto n = int64_t(chars.size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) return value::undefined("[" + std::to_string(key.as_int()) + "]");
            return value(chars[size_t(i)]);
        }
        if (key.is_string()) return get_attr(obj, key.as_string());
        return value::undefined(str(key));
    }

    value slice(const value &obj, const value &start_v, const value &stop_v, const value &step_v) {
        if (obj.is_undefined()) fail_undefined(obj);
        const auto opt_int = [](const value &v, const char *what) -> std::optional<int64_t> {
            if (v.is_undefined() || v.is_none()) return std::nullopt;
            return to_int_arg(v, what);
        };
        const int64_t step = opt_int(step_v, "slice step").value_or(1);
        if (step == 0) fail("slice step cannot be zero");
        std::vector<std::string_view> chars;
        int64_t n = 0;
        if (obj.is_generator()) return value::undefined("slice");
        if (obj.is_list()) {
            n = int64_t(obj.as_list().size());
        } else if (obj.is_string()) {
            chars = utf8_chars(obj.as_string());
            n = int64_t(chars.size());
        } else {
            fail(std::string("'") + type_name(obj) + "' object is not subscriptable");
        }
        const auto clamp = [&](std::optional<int64_t> v, int64_t dflt) {
            if (!v) return dflt;
            int64_t i = *v;
            if (i < 0) i += n;
            if (step > 0) return std::clamp<int64_t>(i, 0, n);
            return std::clamp<int64_t>(i, -1, n - 1);
        };
        const int64_t start = clamp(opt_int(start_v, "slice start"), step > 0 ? 0 : n - 1);
        const int64_t stop = clamp(opt_int(stop_v, "slice stop"), step > 0 ? n : -1);
        jinja_list l;
        std::string s;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            if (obj.is_list())
                l.push_back(obj.as_list()[size_t(i)]);
            else
                s += chars[size_t(i)];
        }
        return obj.is_list() ? value(std::move(l)) : value(std::move(s));
    }

    // ---- methods of str, list and dict ----

    value bound_method(const value &obj, const std::string &name) {
        return value(
            jinja_function([this, obj, name](jinja_call_args &a) { return call_method(obj, name, a); }));
    }

    value call_method(const value &obj, const std::string &name, jinja_call_args &a) {
        const args_view args{a};
        if (obj.is_string()) {
            const std::string &s = obj.as_string();
            const auto chars_arg = [&]() -> std::string {
                const value c = args.get_or(0, "chars", value::none());
                return c.is_string() ? c.as_string() : std::string(whitespace);
            };
            if (name == "strip") return value(strip(s, chars_arg(), true, true));
            if (name == "lstrip") return value(strip(s, chars_arg(), true, false));
            if (name == "rstrip") return value(strip(s, chars_arg(), false, true));
            if (name == "upper") return value(to_upper(s));
            if (name == "lower") return value(to_lower(s));
            if (name == "title") return value(py_title(s));
            if (name == "capitalize") return value(py_capitalize(s));
            if (name == "split" || name == "rsplit") {
                const int64_t maxsplit = to_int_arg(args.get_or(1, "maxsplit", value(-1)), "split");
                if (name == "rsplit" && maxsplit >= 0) fail("rsplit with maxsplit is not supported");
                jinja_list l;
                for (auto &p : py_split(s, args.get_or(0, "sep", value::none()), maxsplit))
                    l.push_back(value(std::move(p)));
                return value(std::move(l));
            }
            if (name == "splitlines") {
                jinja_list l;
                for (auto &line : py_splitlines(s)) l.push_back(value(std::move(line)));
                return value(std::move(l));
            }
            if (name == "startswith" || name == "endswith") {
                const value p = args.get_or(0, "prefix", value());
                const auto match = [&](const value &x) {
                    if (!x.is_string()) fail(name + ": expected a string");
                    const std::string &t = x.as_string();
                    if (t.size() > s.size()) return false;
                    return name == "startswith" ? s.compare(0, t.size(), t) == 0
                                                : s.compare(s.size() - t.size(), t.size(), t) == 0;
                };
                if (p.is_list()) {
                    for (const auto &x : p.as_list())
                        if (match(x)) return value(true);
                    return value(false);
                }
                return value(match(p));
            }
            if (name == "replace")
                return value(py_replace(
                    s, str(args.get_or(0, "old", value(""))), str(args.get_or(1, "new", value(""))),
                    to_int_arg(args.get_or(2, "count", value(-1)), "replace"), opt_.max_output));
            if (name == "find" || name == "rfind" || name == "index") {
                const std::string t = str(args.get_or(0, "sub", value("")));
                const size_t p = name == "rfind" ? s.rfind(t) : s.find(t);
                if (p == std::string::npos) {
                    if (name == "index") fail("substring not found");
                    return value(-1);
                }
                return value(int64_t(utf8_length(std::string_view(s).substr(0, p))));
            }
            if (name == "count") {
                const std::string t = str(args.get_or(0, "sub", value("")));
                if (t.empty()) return value(int64_t(utf8_length(s) + 1));
                int64_t n = 0;
                for (size_t p = s.find(t); p != std::string::npos; p = s.find(t, p + t.size())) ++n;
                return value(n);
            }
            if (name == "join") {
                std::string out;
                bool first = true;
                for (const auto &x : iterate(args.get_or(0, "iterable", value::list()))) {
                    if (!first) out += s;
                    first = false;
                    out += str(x);
                    if (out.size() > opt_.max_output) fail("join: result too large");
                }
                return value(std::move(out));
            }
            if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isalnum" ||
                name == "isupper" || name == "islower") {
                if (s.empty()) return value(false);
                bool any_cased = false;
                for (const char c : s) {
                    const auto u = static_cast<unsigned char>(c);
                    if (name == "isdigit" && !std::isdigit(u)) return value(false);
                    if (name == "isalpha" && !std::isalpha(u)) return value(false);
                    if (name == "isalnum" && !std::isalnum(u)) return value(false);
                    if (name == "isspace" && !std::isspace(u)) return value(false);
                    if (name == "isupper" && std::islower(u)) return value(false);
                    if (name == "islower" && std::isupper(u)) return value(false);
                    any_cased |= std::isalpha(u) != 0;
                }
                return value((name != "isupper" && name != "islower") || any_cased);
            }
        } else if (obj.is_list()) {
            jinja_list &l = obj.as_list();
            if (name == "append") {
                if (a.positional.size() != 1) fail("append takes exactly one argument");
                check_list_size(l.size() + 1);
                check_depth(a.positional[0]);
                l.push_back(a.positional[0]);
                try {
                    check_depth(obj);  // `x.append(x)` would make a cycle
                } catch (const jinja_error &) {
                    l.pop_back();
                    throw;
                }
                return value::none();
            }
            if (name == "pop") {
                if (l.empty()) fail("pop from empty list");
                int64_t i = to_int_arg(args.get_or(0, "index", value(-1)), "pop");
                if (i < 0) i += int64_t(l.size());
                if (i < 0 || i >= int64_t(l.size())) fail("pop index out of range");
                value v = l[size_t(i)];
                l.erase(l.begin() + i);
                return v;
            }
            if (name == "index" || name == "count") {
                const value x = args.get_or(0, "value", value());
                int64_t n = 0;
                for (size_t i = 0; i < l.size(); ++i)
                    if (jinja_equal(l[i], x)) {
                        if (name == "index") return value(int64_t(i));
                        ++n;
                    }
                if (name == "index") fail("value is not in list");
                return value(n);
            }
            if (name == "copy") return value(jinja_list(l));
        } else if (obj.is_dict()) {
            jinja_dict &d = obj.as_dict();
            if (name == "get") {
                const value k = args.get_or(0, "key", value());
                if (k.is_string())
                    if (const value *v = d.find(k.as_string())) return *v;
                return args.get_or(1, "default", value::none());
            }
            if (name == "items") {
                jinja_list l;
                for (const auto &kv : d.items)
                    l.push_back(value::tuple(jinja_list{value(kv.first), kv.second}));
                return value(std::move(l));
            }
            if (name == "keys" || name == "values") {
                jinja_list l;
                for (const auto &kv : d.items) l.push_back(name == "keys" ? value(kv.first) : kv.second);
                return value(std::move(l));
            }
            if (name == "copy") return value(jinja_dict(d));
            if (name == "pop") {
                const std::string k = str(args.get_or(0, "key", value()));
                for (auto it = d.items.begin(); it != d.items.end(); ++it)
                    if (it->first == k) {
                        value v = it->second;
                        d.items.erase(it);
                        return v;
                    }
                if (const value *dflt = args.get(1, "default")) return *dflt;
                fail("KeyError: '" + k + "'");
            }
            if (name == "update") {
                const value other = args.get_or(0, "other", value::dict());
                const auto saved = d.items;
                if (other.is_dict())
                    for (const auto &kv : other.as_dict().items) d.set(kv.first, kv.second);
                for (const auto &kv : a.keyword) d.set(kv.first, kv.second);
                try {
                    check_depth(obj);  // `d.update({'d': d})` would make a cycle
                } catch (const jinja_error &) {
                    d.items = saved;
                    throw;
                }
                return value::none();
            }
        }
        fail(std::string("'") + type_name(obj) + "' object has no attribute '" + name + "'");
    }

    // ---- tests ----

    bool test(const std::string &name, const value &v, const jinja_call_args &a) {
        const args_view args{a};
        const auto arg0 = [&]() { return args.get_or(0, "other", value()); };
        if (name == "defined") return !v.is_undefined();
        if (name == "undefined") return v.is_undefined();
        if (name == "none") return v.is_none();
        if (name == "boolean") return v.is_bool();
        if (name == "true") return v.is_bool() && v.as_bool();
        if (name == "false") return v.is_bool() && !v.as_bool();
        if (name == "string") return v.is_string();
        if (name == "number") return v.is_number();
        if (name == "integer") return v.is_int();
        if (name == "float") return v.is_float();
        if (name == "mapping") return v.is_dict();
        if (name == "sequence")
            return v.is_undefined() || (v.is_list() && !v.is_generator()) || v.is_string() ||
                   (v.is_dict() && !v.as_dict().is_namespace);
        if (name == "iterable")  // an undefined value iterates as empty
            return v.is_undefined() || v.is_list() || v.is_string() ||
                   (v.is_dict() && !v.as_dict().is_namespace);
        if (name == "callable") return v.is_function();
        // value % 2 == 1, value % 2 == 0, value % num == 0, as in Python (2.5 is neither odd nor even)
        if (name == "odd") return jinja_equal(arithmetic("%", v, value(2)), value(1));
        if (name == "even") return jinja_equal(arithmetic("%", v, value(2)), value(0));
        if (name == "divisibleby")
            return jinja_equal(arithmetic("%", v, args.get_or(0, "num", value(1))), value(0));
        if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
            return jinja_equal(v, arg0());
        if (name == "ne" || name == "!=") return !jinja_equal(v, arg0());
        if (name == "lt" || name == "lessthan" || name == "<") return less(v, arg0());
        if (name == "gt" || name == "greaterthan" || name == ">") return less(arg0(), v);
        if (name == "le" || name == "<=") return !less(arg0(), v);
        if (name == "ge" || name == ">=") return !less(v, arg0());
        if (name == "in") return contains(args.get_or(0, "seq", value()), v);
        if (name == "upper" || name == "lower") {  // str(value).isupper() / .islower()
            jinja_call_args none;
            return call_method(value(str(v)), name == "upper" ? "isupper" : "islower", none).truthy();
        }
        fail("unknown test '" + name + "'");
    }

    // ---- filters ----

    // The attribute path "a.b.0" of v, as jinja2's make_attrgetter reads it.
    value attribute_of(const value &v, const std::string &path) {
        value cur = v;
        size_t i = 0;
        while (true) {
            const size_t j = path.find('.', i);
            const std::string part = path.substr(i, j == std::string::npos ? std::string::npos : j - i);
            const bool digits = !part.empty() && std::all_of(part.begin(), part.end(),
                                                             [](char c) { return c >= '0' && c <= '9'; });
            if (cur.is_undefined()) return cur;
            cur = digits ? get_item(cur, value(int64_t(std::stoll(part)))) : get_item(cur, value(part));
            if (j == std::string::npos) return cur;
            i = j + 1;
        }
    }

    // select / reject / selectattr / rejectattr
    value select(const value &v, const jinja_call_args &a, bool by_attr, bool keep) {
        jinja_call_args rest;
        size_t first = 0;
        std::string attr;
        if (by_attr) {
            if (a.positional.empty()) fail("selectattr needs an attribute name");
            attr = str(a.positional[0]);
            first = 1;
        }
        std::string test_name;
        if (a.positional.size() > first) test_name = str(a.positional[first]);
        for (size_t i = first + 1; i < a.positional.size(); ++i) rest.positional.push_back(a.positional[i]);
        if (!test_name.empty() && !known_test(test_name)) fail("unknown test '" + test_name + "'");
        jinja_list out;
        for (const auto &item : iterate(v)) {
            const value x = by_attr ? attribute_of(item, attr) : item;
            const bool ok = test_name.empty() ? x.truthy() : test(test_name, x, rest);
            if (ok == keep) out.push_back(item);
        }
        return value::generator(std::move(out));
    }

    jinja_list sorted(const value &v, bool reverse, bool case_sensitive, const value &attribute) {
        jinja_list items = iterate(v);
        const std::string attr = attribute.is_string() ? attribute.as_string() : "";
        std::stable_sort(items.begin(), items.end(), [&](const value &x, const value &y) {
            const value kx = attr.empty() ? x : attribute_of(x, attr);
            const value ky = attr.empty() ? y : attribute_of(y, attr);
            return reverse ? less(ky, kx, case_sensitive) : less(kx, ky, case_sensitive);
        });
        return items;
    }

    value filter(const std::string &name, const value &v, jinja_call_args &a) {
        const args_view args{a};
        if (name == "default" || name == "d") {
            const bool boolean = args.get_or(1, "boolean", value(false)).truthy();
            if (v.is_undefined() || (boolean && !v.truthy()))
                return args.get_or(0, "default_value", value(""));
            return v;
        }
        if (name == "safe" || name == "string") return v.is_string() ? v : value(str(v));
        if (name == "length" || name == "count") {
            if (v.is_string()) return value(int64_t(utf8_length(v.as_string())));
            if (v.is_list() && !v.is_generator()) return value(int64_t(v.as_list().size()));
            if (v.is_dict()) return value(int64_t(v.as_dict().items.size()));
            if (v.is_undefined()) return value(0);
            fail(std::string("object of type '") + type_name(v) + "' has no len()");
        }
        if (name == "tojson") {
            // HF's tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
            jinja_json_format f;
            f.ensure_ascii = args.get_or(0, "ensure_ascii", value(false)).truthy();
            const value indent = args.get_or(1, "indent", value::none());
            if (!indent.is_none()) f.indent = int(std::clamp<int64_t>(to_int_arg(indent, "tojson"), 0, 64));
            const value separators = args.get_or(2, "separators", value::none());
            if (!separators.is_none()) {
                if (!separators.is_list() || separators.as_list().size() != 2)
                    fail("tojson: separators must be a pair of strings");
                f.item_separator = str(separators.as_list()[0]);
                f.key_separator = str(separators.as_list()[1]);
            }
            f.sort_keys = args.get_or(3, "sort_keys", value(false)).truthy();
            return value(jinja_tojson(v, f, opt_.max_output));
        }
        if (name == "items") {
            if (v.is_undefined()) return value::generator({});
            if (!v.is_dict()) fail("items: expected a mapping");
            jinja_call_args none;
            return value::generator(iterate(call_method(v, "items", none)));
        }
        if (name == "list") return value(iterate(v));
        if (name == "first" || name == "last") {
            const jinja_list l = iterate(v);
            if (l.empty()) return value::undefined("first");
            return name == "first" ? l.front() : l.back();
        }
        if (name == "join") {
            const std::string sep = str(args.get_or(0, "d", value("")));
            const value attr = args.get_or(1, "attribute", value::none());
            std::string out;
            bool first = true;
            for (const auto &x : iterate(v)) {
                if (!first) out += sep;
                first = false;
                out += str(attr.is_none() ? x : attribute_of(x, str(attr)));
                if (out.size() > opt_.max_output) fail("join: result too large");
            }
            return value(std::move(out));
        }
        if (name == "map") {
            jinja_list out;
            if (const value *attr = args.get(size_t(-1), "attribute")) {
                const value dflt = args.get_or(size_t(-1), "default", value());
                for (const auto &x : iterate(v)) {
                    value y = attribute_of(x, str(*attr));
                    out.push_back(y.is_undefined() && !dflt.is_undefined() ? dflt : y);
                }
                return value::generator(std::move(out));
            }
            if (a.positional.empty()) fail("map needs a filter name or attribute=");
            const std::string f = str(a.positional[0]);
            if (!known_filter(f)) fail("unknown filter '" + f + "'");
            jinja_call_args rest;
            rest.positional.assign(a.positional.begin() + 1, a.positional.end());
            rest.keyword = a.keyword;
            for (const auto &x : iterate(v)) out.push_back(filter(f, x, rest));
            return value::generator(std::move(out));
        }
        if (name == "select" || name == "reject") return select(v, a, false, name == "select");
        if (name == "selectattr" || name == "rejectattr") return select(v, a, true, name == "selectattr");
        if (name == "trim") {
            const value chars = args.get_or(0, "chars", value::none());
            return value(strip(str(v), chars.is_string() ? chars.as_string() : whitespace, true, true));
        }
        if (name == "upper") return value(to_upper(str(v)));
        if (name == "lower") return value(to_lower(str(v)));
        if (name == "capitalize") return value(py_capitalize(str(v)));
        if (name == "title") {
            // jinja2's do_title: words begin after '-', whitespace, or an opening bracket
            std::string s = str(v);
            bool start = true;
            for (char &c : s) {
                const bool sep = c == '-' || std::strchr(" \t\n\r\f\v({[<", c);
                if (sep && c) {
                    start = true;
                    continue;
                }
                c = char(start ? std::toupper(static_cast<unsigned char>(c))
                               : std::tolower(static_cast<unsigned char>(c)));
                start = false;
            }
            return value(std::move(s));
        }
        if (name == "replace")
            return value(py_replace(
                str(v), str(args.get_or(0, "old", value(""))), str(args.get_or(1, "new", value(""))),
                to_int_arg(args.get_or(2, "count", value(-1)), "replace"), opt_.max_output));
        if (name == "escape" || name == "e" || name == "forceescape") {
            std::string out;
            for (const char c : str(v)) {
                switch (c) {
                    case '&':
                        out += "&amp;";
                        break;
                    case '<':
                        out += "&lt;";
                        break;
                    case '>':
                        out += "&gt;";
                        break;
                    case '"':
                        out += "&#34;";
                        break;
                    case '\'':
                        out += "&#39;";
                        break;
                    default:
                        out += c;
                }
            }
            return value(std::move(out));
        }
        if ((name == "int" || name == "float" || name == "indent") && v.is_undefined()) fail_undefined(v);
        if (name == "int") {
            const value dflt = args.get_or(0, "default", value(0));
            if (v.is_int() || v.is_bool()) return value(v.as_int());
            if (v.is_float()) return std::isfinite(v.as_float()) ? value(int64_t(v.as_float())) : dflt;
            if (v.is_string()) {
                const std::string s = strip(v.as_string(), whitespace, true, true);
                char *end = nullptr;
                errno = 0;
                const long long i = std::strtoll(s.c_str(), &end, 10);
                if (!s.empty() && *end == '\0' && errno == 0) return value(int64_t(i));
                const double d = std::strtod(s.c_str(), &end);
                if (!s.empty() && *end == '\0' && std::isfinite(d)) return value(int64_t(d));
            }
            return dflt;
        }
        if (name == "float") {
            const value dflt = args.get_or(0, "default", value(0.0));
            if (v.is_number()) return value(v.as_float());
            if (v.is_string()) {
                const std::string s = strip(v.as_string(), whitespace, true, true);
                char *end = nullptr;
                const double d = std::strtod(s.c_str(), &end);
                if (!s.empty() && *end == '\0') return value(d);
            }
            return dflt;
        }
        if (name == "abs") {
            if (v.is_float()) return value(std::fabs(v.as_float()));
            if (v.is_number()) {
                if (v.as_int() == INT64_MIN) fail("integer overflow");
                return value(v.as_int() < 0 ? -v.as_int() : v.as_int());
            }
            fail(std::string("bad operand type for abs(): '") + type_name(v) + "'");
        }
        if (name == "round") {
            if (!v.is_number()) fail("round: expected a number");
            const int64_t precision = to_int_arg(args.get_or(0, "precision", value(0)), "round");
            const std::string method = str(args.get_or(1, "method", value("common")));
            const double scale = std::pow(10.0, double(precision));
            if (!v.is_float() && method == "common") {  // Python's round(int, n) is an int
                if (precision >= 0) return value(v.as_int());
                return value(int64_t(std::nearbyint(double(v.as_int()) * scale) / scale));
            }
            if (method == "common" && precision >= 0 && precision <= 300 && std::isfinite(v.as_float())) {
                // Python's round() rounds the exact binary value (2.675 is below 2.675, so 2.67)
                // and sends exact halves to the even neighbour, as printf does
                char buf[512];
                std::snprintf(buf, sizeof buf, "%.*f", int(precision), v.as_float());
                return value(std::strtod(buf, nullptr));
            }
            const double x = v.as_float() * scale;
            double r;
            if (method == "common")
                r = std::nearbyint(x);  // halves go to the even neighbour
            else if (method == "ceil")
                r = std::ceil(x);
            else if (method == "floor")
                r = std::floor(x);
            else
                fail("round: method must be common, ceil or floor");
            return value(r / scale);
        }
        if (name == "reverse") {
            if (v.is_string()) {
                auto chars = utf8_chars(v.as_string());
                std::string s;
                for (auto it = chars.rbegin(); it != chars.rend(); ++it) s += *it;
                return value(std::move(s));
            }
            // jinja2 returns reversed(list), an iterator, and a list for anything else
            const bool iterator = !v.is_generator();
            jinja_list l = iterate(v);
            std::reverse(l.begin(), l.end());
            return iterator ? value::generator(std::move(l)) : value(std::move(l));
        }
        if (name == "sort")
            return value(sorted(v, args.get_or(0, "reverse", value(false)).truthy(),
                                args.get_or(1, "case_sensitive", value(false)).truthy(),
                                args.get_or(2, "attribute", value::none())));
        if (name == "dictsort") {
            if (!v.is_dict()) fail("dictsort: expected a mapping");
            const bool case_sensitive = args.get_or(0, "case_sensitive", value(false)).truthy();
            const std::string by = str(args.get_or(1, "by", value("key")));
            const bool reverse = args.get_or(2, "reverse", value(false)).truthy();
            jinja_list pairs;
            for (const auto &kv : v.as_dict().items)
                pairs.push_back(value::tuple(jinja_list{value(kv.first), kv.second}));
            const size_t k = by == "value" ? 1 : 0;
            std::stable_sort(pairs.begin(), pairs.end(), [&](const value &x, const value &y) {
                return reverse ? less(y.as_list()[k], x.as_list()[k], case_sensitive)
                               : less(x.as_list()[k], y.as_list()[k], case_sensitive);
            });
            return value(std::move(pairs));
        }
        if (name == "unique") {
            const bool case_sensitive = args.get_or(0, "case_sensitive", value(false)).truthy();
            const value attr = args.get_or(1, "attribute", value::none());
            jinja_list out;
            std::unordered_set<std::string> seen;
            for (const auto &x : iterate(v)) {
                value key = attr.is_none() ? x : attribute_of(x, str(attr));
                if (!case_sensitive && key.is_string()) key = value(to_lower(key.as_string()));
                // one text per class of equal values: 1, 1.0 and True are one
                std::string text;
                if (key.is_number() && (!key.is_float() || key.as_float() == std::floor(key.as_float())) &&
                    std::fabs(key.as_float()) < 9e15)
                    text = "n" + std::to_string(key.is_float() ? int64_t(key.as_float()) : key.as_int());
                else
                    text = std::string(1, char('a' + int(key.type()))) + jinja_repr(key, opt_.max_output);
                if (seen.insert(std::move(text)).second) out.push_back(x);
            }
            return value::generator(std::move(out));
        }
        if (name == "min" || name == "max") {
            const bool case_sensitive = args.get_or(0, "case_sensitive", value(false)).truthy();
            const value attr = args.get_or(1, "attribute", value::none());
            const jinja_list l = sorted(v, false, case_sensitive, attr);
            if (l.empty()) return value::undefined(name);
            return name == "min" ? l.front() : l.back();
        }
        if (name == "sum") {
            const value attr = args.get_or(0, "attribute", value::none());
            value acc = args.get_or(1, "start", value(0));
            for (const auto &x : iterate(v))
                acc = arithmetic("+", acc, attr.is_none() ? x : attribute_of(x, str(attr)));
            return acc;
        }
        if (name == "indent") {
            if (!v.is_string()) fail(std::string("indent: expected a string, got ") + type_name(v));
            const value w = args.get_or(0, "width", value(4));
            const std::string pad =
                w.is_string()
                    ? w.as_string()
                    : std::string(size_t(std::clamp<int64_t>(to_int_arg(w, "indent"), 0, 1024)), ' ');
            const bool first = args.get_or(1, "first", value(false)).truthy();
            const bool blank = args.get_or(2, "blank", value(false)).truthy();
            // jinja2's do_indent: (s + "\n").splitlines(), the first line not indented
            const std::vector<std::string> lines = py_splitlines(str(v) + "\n");
            std::string out = lines.empty() ? "" : lines[0];
            for (size_t i = 1; i < lines.size(); ++i) {
                out += "\n";
                if (blank || !lines[i].empty()) out += pad;
                out += lines[i];
                if (out.size() > opt_.max_output) fail("indent: result too large");
            }
            if (first) out = pad + out;
            return value(std::move(out));
        }
        if (name == "wordcount") {
            int64_t n = 0;
            bool in_word = false;
            for (const char c : str(v)) {
                const bool w = std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                               (static_cast<unsigned char>(c) >= 0x80);
                if (w && !in_word) ++n;
                in_word = w;
            }
            return value(n);
        }
        if (name == "attr") return get_attr(v, str(args.get_or(0, "name", value(""))));
        if (name == "batch") {
            const int64_t size = to_int_arg(args.get_or(0, "linecount", value(1)), "batch");
            if (size <= 0) fail("batch: size must be positive");
            const value fill = args.get_or(1, "fill_with", value::none());
            jinja_list out, cur;
            for (const auto &x : iterate(v)) {
                cur.push_back(x);
                if (int64_t(cur.size()) == size) {
                    out.push_back(value(std::move(cur)));
                    cur.clear();
                }
            }
            if (!cur.empty()) {
                if (!fill.is_none())
                    while (int64_t(cur.size()) < size) cur.push_back(fill);
                out.push_back(value(std::move(cur)));
            }
            return value::generator(std::move(out));
        }
        if (name == "pprint") return value(jinja_repr(v, opt_.max_output));
        fail("unknown filter '" + name + "'");
    }

    // ---- globals ----

    void install_globals(scope &g) {
        g.vars["range"] = value(jinja_function([this](jinja_call_args &a) -> value {
            if (a.positional.empty() || a.positional.size() > 3) fail("range expects 1 to 3 arguments");
            int64_t start = 0, stop, step = 1;
            if (a.positional.size() == 1) {
                stop = to_int_arg(a.positional[0], "range");
            } else {
                start = to_int_arg(a.positional[0], "range");
                stop = to_int_arg(a.positional[1], "range");
                if (a.positional.size() == 3) step = to_int_arg(a.positional[2], "range");
            }
            if (step == 0) fail("range() arg 3 must not be zero");
            const long double count =
                step > 0 ? (stop > start ? ((long double)stop - start + step - 1) / step : 0)
                         : (start > stop ? ((long double)start - stop - step - 1) / -step : 0);
            if (count > (long double)opt_.max_range)
                fail("range() of more than " + std::to_string(opt_.max_range) + " items is not allowed");
            jinja_list l;
            for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) l.push_back(value(i));
            return value(std::move(l));
        }));
        const auto make_dict = [this](jinja_call_args &a, bool ns) -> value {
            jinja_dict d;
            d.is_namespace = ns;
            for (const auto &p : a.positional) {
                if (!p.is_dict())
                    fail(ns ? "namespace() takes a mapping or keyword arguments" : "dict() takes a mapping");
                for (const auto &kv : p.as_dict().items) d.set(kv.first, kv.second);
            }
            for (const auto &kv : a.keyword) d.set(kv.first, kv.second);
            value v(std::move(d));
            check_depth(v);
            return v;
        };
        g.vars["namespace"] =
            value(jinja_function([make_dict](jinja_call_args &a) { return make_dict(a, true); }));
        g.vars["dict"] =
            value(jinja_function([make_dict](jinja_call_args &a) { return make_dict(a, false); }));
        g.vars["raise_exception"] = value(jinja_function([this](jinja_call_args &a) -> value {
            throw jinja_error(a.positional.empty() ? "raise_exception() called" : str(a.positional[0]), 0, 0,
                              true);
        }));
        g.vars["strftime_now"] = value(jinja_function([this](jinja_call_args &a) -> value {
            const std::string fmt = a.positional.empty() ? "" : str(a.positional[0]);
            const std::time_t t = std::time(nullptr);
            std::tm tm{};
            localtime_r(&t, &tm);
            char buf[256];
            const size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
            return value(std::string(buf, n));
        }));
    }
};

const char *const filter_names[] = {
    "abs",     "attr",    "batch", "capitalize",  "count",  "d",          "default", "dictsort", "e",
    "escape",  "first",   "float", "forceescape", "indent", "int",        "items",   "join",     "last",
    "length",  "list",    "lower", "map",         "max",    "min",        "pprint",  "reject",   "rejectattr",
    "replace", "reverse", "round", "safe",        "select", "selectattr", "sort",    "string",   "sum",
    "title",   "tojson",  "trim",  "unique",      "upper",  "wordcount",
};
const char *const test_names[] = {
    "defined",     "undefined", "none",    "boolean",     "true",     "false",    "string", "number",
    "integer",     "float",     "mapping", "sequence",    "iterable", "callable", "odd",    "even",
    "divisibleby", "equalto",   "eq",      "==",          "sameas",   "ne",       "!=",     "lt",
    "lessthan",    "<",         "gt",      "greaterthan", ">",        "le",       "<=",     "ge",
    ">=",          "in",        "upper",   "lower",
};

}  // namespace

bool known_filter(std::string_view name) {
    for (const char *f : filter_names)
        if (name == f) return true;
    return false;
}

bool known_test(std::string_view name) {
    for (const char *t : test_names)
        if (name == t) return true;
    return false;
}

std::string evaluate(const program &prog, const jinja_value &context, const jinja_options &options) {
    return evaluator(options).run(prog, context);
}

}  // namespace weft::jinja_detail

namespace weft {

jinja_template::jinja_template(std::string_view source, jinja_options options)
    : program_(jinja_detail::parse(source, options)), options_(options), source_(source) {}
jinja_template::~jinja_template() = default;
jinja_template::jinja_template(jinja_template &&) noexcept = default;
jinja_template &jinja_template::operator=(jinja_template &&) noexcept = default;

std::string jinja_template::render(const jinja_value &context) const {
    return jinja_detail::evaluate(*program_, context, options_);
}

std::string jinja_render(std::string_view source, const jinja_value &context, const jinja_options &options) {
    return jinja_template(source, options).render(context);
}

std::string jinja_render_chat(const jinja_template &tmpl, const jinja_chat_params &params) {
    jinja_value ctx = jinja_value::dict();
    ctx.set("messages", params.messages);
    if (!params.tools.is_undefined()) ctx.set("tools", params.tools);
    ctx.set("add_generation_prompt", jinja_value(params.add_generation_prompt));
    ctx.set("bos_token", jinja_value(params.bos_token));
    ctx.set("eos_token", jinja_value(params.eos_token));
    if (params.extra.is_dict())
        for (const auto &[k, v] : params.extra.as_dict().items) ctx.set(k, v);
    return tmpl.render(ctx);
}

}  // namespace weft
