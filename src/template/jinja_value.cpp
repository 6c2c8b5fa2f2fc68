// src/template/jinja_value.cpp — the Jinja value type and its Python-compatible text forms:
// str(), repr(), json.dumps(ensure_ascii=False) and ==.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "weft/template/jinja.h"

namespace weft {

jinja_error::jinja_error(const std::string &what, int line, int column, bool raised)
    : std::runtime_error(raised || line <= 0 ? what
                                             : "line " + std::to_string(line) + ", column " +
                                                   std::to_string(column) + ": " + what),
      line_(line),
      column_(column),
      raised_(raised) {}

const jinja_value *jinja_dict::find(std::string_view key) const {
    for (const auto &kv : items)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

jinja_value *jinja_dict::find(std::string_view key) {
    for (auto &kv : items)
        if (kv.first == key) return &kv.second;
    return nullptr;
}

void jinja_dict::set(std::string key, jinja_value value) {
    if (jinja_value *v = find(key))
        *v = std::move(value);
    else
        items.emplace_back(std::move(key), std::move(value));
}

jinja_value::jinja_value(jinja_list l)
    : kind_(kind::list), list_(std::make_shared<jinja_list>(std::move(l))) {}
jinja_value::jinja_value(jinja_dict d)
    : kind_(kind::dict), dict_(std::make_shared<jinja_dict>(std::move(d))) {}
jinja_value::jinja_value(jinja_function f)
    : kind_(kind::function), fn_(std::make_shared<jinja_function>(std::move(f))) {}

const std::string &jinja_value::empty_string() {
    static const std::string empty;
    return empty;
}

jinja_value jinja_value::tuple(jinja_list l) {
    jinja_value v(std::move(l));
    v.tuple_ = true;
    return v;
}

jinja_value jinja_value::generator(jinja_list l) {
    jinja_value v(std::move(l));
    v.generator_ = true;
    return v;
}

jinja_value jinja_value::undefined(std::string name) {
    jinja_value v;
    v.str_ = std::make_shared<const std::string>(std::move(name));
    return v;
}

bool jinja_value::truthy() const {
    switch (kind_) {
        case kind::undefined:
        case kind::none:
            return false;
        case kind::boolean:
        case kind::integer:
            return int_ != 0;
        case kind::floating:
            return float_ != 0.0;
        case kind::string:
            return !as_string().empty();
        case kind::list:
            return generator_ || !list_->empty();
        case kind::dict:
            return dict_->is_namespace || !dict_->items.empty();
        case kind::function:
            return true;
    }
    return false;
}

void jinja_value::set(std::string key, jinja_value v) {
    dict_->set(std::move(key), std::move(v));
}

jinja_value jinja_value::get(std::string_view key) const {
    if (kind_ == kind::dict)
        if (const jinja_value *v = dict_->find(key)) return *v;
    return undefined(std::string(key));
}

void jinja_value::push_back(jinja_value v) {
    list_->push_back(std::move(v));
}

namespace {

// Python's repr(float): the shortest text that reads back to the same double.
std::string float_repr(double d, bool json) {
    if (std::isnan(d)) return json ? "NaN" : "nan";
    if (std::isinf(d)) return d > 0 ? (json ? "Infinity" : "inf") : (json ? "-Infinity" : "-inf");
    char buf[40];
    int prec = 1;
    for (; prec <= 17; ++prec) {
        std::snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (std::strtod(buf, nullptr) == d) break;
    }
    // buf is [-]D[.DDD]e[+-]XX: split into sign, digits and exponent
    std::string s(buf);
    const bool neg = s[0] == '-';
    if (neg) s.erase(0, 1);
    const size_t e = s.find('e');
    const int exp = std::atoi(s.c_str() + e + 1);
    std::string digits;
    for (size_t i = 0; i < e; ++i)
        if (s[i] != '.') digits += s[i];
    while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
    std::string out = neg ? "-" : "";
    if (exp < -4 || exp >= 16) {
        out += digits.substr(0, 1);
        if (digits.size() > 1) out += "." + digits.substr(1);
        char eb[16];
        std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
        return out + eb;
    }
    if (exp < 0) return out + "0." + std::string(size_t(-exp - 1), '0') + digits;
    if (digits.size() <= size_t(exp) + 1)
        return out + digits + std::string(size_t(exp) + 1 - digits.size(), '0') + ".0";
    return out + digits.substr(0, size_t(exp) + 1) + "." + digits.substr(size_t(exp) + 1);
}

struct writer {
    std::string out;
    size_t limit;
    void put(std::string_view s) {
        if (out.size() + s.size() > limit)
            throw jinja_error("text of a value exceeds " + std::to_string(limit) + " bytes", 0, 0);
        out += s;
    }
    void put(char c) { put(std::string_view(&c, 1)); }
};

void write_repr_string(writer &w, const std::string &s) {
    const char quote = (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) ? '"' : '\'';
    w.put(quote);
    for (const char c : s) {
        const auto u = static_cast<unsigned char>(c);
        if (c == '\\')
            w.put("\\\\");
        else if (c == quote)
            w.put(quote == '\'' ? "\\'" : "\\\"");
        else if (c == '\n')
            w.put("\\n");
        else if (c == '\r')
            w.put("\\r");
        else if (c == '\t')
            w.put("\\t");
        else if (u < 0x20 || u == 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", u);
            w.put(buf);
        } else
            w.put(c);
    }
    w.put(quote);
}

void write_repr(writer &w, const jinja_value &v, int depth);

void write_str(writer &w, const jinja_value &v, int depth) {
    if (depth > 512) throw jinja_error("value nests too deeply to print", 0, 0);
    switch (v.type()) {
        case jinja_value::kind::undefined:
            return;
        case jinja_value::kind::none:
            return w.put("None");
        case jinja_value::kind::boolean:
            return w.put(v.as_bool() ? "True" : "False");
        case jinja_value::kind::integer:
            return w.put(std::to_string(v.as_int()));
        case jinja_value::kind::floating:
            return w.put(float_repr(v.as_float(), false));
        case jinja_value::kind::string:
            return w.put(v.as_string());
        case jinja_value::kind::list: {
            if (v.is_generator()) return w.put("<generator object>");
            w.put(v.is_tuple() ? '(' : '[');
            bool first = true;
            for (const auto &item : v.as_list()) {
                if (!first) w.put(", ");
                first = false;
                write_repr(w, item, depth + 1);
            }
            if (v.is_tuple() && v.as_list().size() == 1) w.put(',');
            return w.put(v.is_tuple() ? ')' : ']');
        }
        case jinja_value::kind::dict: {
            const bool ns = v.as_dict().is_namespace;
            w.put(ns ? "<Namespace {" : "{");
            bool first = true;
            for (const auto &[k, item] : v.as_dict().items) {
                if (!first) w.put(", ");
                first = false;
                write_repr_string(w, k);
                w.put(": ");
                write_repr(w, item, depth + 1);
            }
            return w.put(ns ? "}>" : "}");
        }
        case jinja_value::kind::function:
            return w.put("<function>");
    }
}

void write_repr(writer &w, const jinja_value &v, int depth) {
    if (v.is_string())
        write_repr_string(w, v.as_string());
    else if (v.is_undefined())
        w.put("Undefined");
    else
        write_str(w, v, depth);
}

void put_u16(writer &w, uint32_t unit) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\u%04x", unit);
    w.put(buf);
}

void write_json_string(writer &w, const std::string &s, bool ensure_ascii) {
    w.put('"');
    for (size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        const auto u = static_cast<unsigned char>(c);
        if (ensure_ascii && u >= 0x7f) {
            // decode one UTF-8 sequence (a malformed byte stands for itself)
            const size_t n = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : u >= 0xC0 ? 2 : 1;
            uint32_t cp = n == 1 ? u : u & (0x3F >> (n - 1));
            size_t k = 1;
            for (; k < n && i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; ++k)
                cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            if (k != n) cp = u;
            i += k - 1;
            if (cp > 0xFFFF) {
                cp -= 0x10000;
                put_u16(w, 0xD800 + (cp >> 10));
                put_u16(w, 0xDC00 + (cp & 0x3FF));
            } else {
                put_u16(w, cp);
            }
            continue;
        }
        switch (c) {
            case '"':
                w.put("\\\"");
                break;
            case '\\':
                w.put("\\\\");
                break;
            case '\n':
                w.put("\\n");
                break;
            case '\r':
                w.put("\\r");
                break;
            case '\t':
                w.put("\\t");
                break;
            case '\b':
                w.put("\\b");
                break;
            case '\f':
                w.put("\\f");
                break;
            default:
                if (u < 0x20) {
                    char buf[8];
                    std::snprintf(buf, sizeof buf, "\\u%04x", u);
                    w.put(buf);
                } else {
                    w.put(c);
                }
        }
    }
    w.put('"');
}

void write_json(writer &w, const jinja_value &v, const jinja_json_format &f, int level) {
    if (level > 512) throw jinja_error("value nests too deeply for tojson", 0, 0);
    const int indent = f.indent;
    const std::string item_sep = f.item_separator.value_or(indent >= 0 ? "," : ", ");
    const std::string key_sep = f.key_separator.value_or(": ");
    const auto newline = [&](int lvl) {
        w.put('\n');
        w.put(std::string(size_t(indent) * size_t(lvl), ' '));
    };
    switch (v.type()) {
        case jinja_value::kind::undefined:
            throw jinja_error("tojson: Object of type Undefined is not JSON serializable", 0, 0);
        case jinja_value::kind::function:
            throw jinja_error("tojson: a function is not JSON serializable", 0, 0);
        case jinja_value::kind::none:
            return w.put("null");
        case jinja_value::kind::boolean:
            return w.put(v.as_bool() ? "true" : "false");
        case jinja_value::kind::integer:
            return w.put(std::to_string(v.as_int()));
        case jinja_value::kind::floating:
            return w.put(float_repr(v.as_float(), true));
        case jinja_value::kind::string:
            return write_json_string(w, v.as_string(), f.ensure_ascii);
        case jinja_value::kind::list: {
            if (v.is_generator())
                throw jinja_error("tojson: Object of type generator is not JSON serializable", 0, 0);
            if (v.as_list().empty()) return w.put("[]");
            w.put('[');
            bool first = true;
            for (const auto &item : v.as_list()) {
                if (!first) w.put(item_sep);
                first = false;
                if (indent >= 0) newline(level + 1);
                write_json(w, item, f, level + 1);
            }
            if (indent >= 0) newline(level);
            return w.put(']');
        }
        case jinja_value::kind::dict: {
            if (v.as_dict().items.empty()) return w.put("{}");
            w.put('{');
            bool first = true;
            std::vector<const std::pair<std::string, jinja_value> *> items;
            for (const auto &kv : v.as_dict().items) items.push_back(&kv);
            if (f.sort_keys)
                std::stable_sort(items.begin(), items.end(),
                                 [](const auto *a, const auto *b) { return a->first < b->first; });
            for (const auto *kv : items) {
                if (!first) w.put(item_sep);
                first = false;
                if (indent >= 0) newline(level + 1);
                write_json_string(w, kv->first, f.ensure_ascii);
                w.put(key_sep);
                write_json(w, kv->second, f, level + 1);
            }
            if (indent >= 0) newline(level);
            return w.put('}');
        }
    }
}

}  // namespace

std::string jinja_str(const jinja_value &v, size_t limit) {
    if (v.is_string()) {
        if (v.as_string().size() > limit)
            throw jinja_error("string exceeds " + std::to_string(limit) + " bytes", 0, 0);
        return v.as_string();
    }
    writer w{{}, limit};
    write_str(w, v, 0);
    return std::move(w.out);
}

std::string jinja_repr(const jinja_value &v, size_t limit) {
    writer w{{}, limit};
    write_repr(w, v, 0);
    return std::move(w.out);
}

std::string jinja_tojson(const jinja_value &v, int indent, size_t limit) {
    jinja_json_format f;
    f.indent = indent;
    return jinja_tojson(v, f, limit);
}

std::string jinja_tojson(const jinja_value &v, const jinja_json_format &format, size_t limit) {
    writer w{{}, limit};
    write_json(w, v, format, 0);
    return std::move(w.out);
}

bool jinja_equal(const jinja_value &a, const jinja_value &b) {
    if (a.is_number() && b.is_number()) {
        if (a.is_float() || b.is_float()) return a.as_float() == b.as_float();
        return a.as_int() == b.as_int();
    }
    if (a.type() != b.type()) return false;
    switch (a.type()) {
        case jinja_value::kind::undefined:
        case jinja_value::kind::none:
            return true;
        case jinja_value::kind::string:
            return a.as_string() == b.as_string();
        case jinja_value::kind::list: {
            const auto &x = a.as_list();
            const auto &y = b.as_list();
            if (&x == &y) return true;
            if (a.is_generator() || b.is_generator()) return false;
            if (a.is_tuple() != b.is_tuple() || x.size() != y.size()) return false;
            for (size_t i = 0; i < x.size(); ++i)
                if (!jinja_equal(x[i], y[i])) return false;
            return true;
        }
        case jinja_value::kind::dict: {
            const auto &x = a.as_dict();
            const auto &y = b.as_dict();
            if (&x == &y) return true;
            if (x.is_namespace || y.is_namespace || x.items.size() != y.items.size()) return false;
            for (const auto &[k, v] : x.items) {
                const jinja_value *o = y.find(k);
                if (!o || !jinja_equal(v, *o)) return false;
            }
            return true;
        }
        case jinja_value::kind::function:
            return &a.as_function() == &b.as_function();
        default:
            return false;
    }
}

}  // namespace weft
