// src/template/jinja_lexer.cpp — Jinja source to tokens: text, tag delimiters and the tokens of
// expressions, with whitespace control ({%- -%}, trim_blocks, lstrip_blocks) applied here.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "template/jinja_ast.h"

namespace weft::jinja_detail {

namespace {

bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_name_start(char c) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_';
}
bool is_name_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

class lexer {
  public:
    lexer(std::string_view src, const jinja_options &opt) : src_(src), opt_(opt) {
        line_starts_.push_back(0);
        for (size_t i = 0; i < src.size(); ++i)
            if (src[i] == '\n') line_starts_.push_back(i + 1);
    }

    std::vector<token> run() {
        size_t pos = 0;
        bool strip_next_text = false;
        while (pos < src_.size()) {
            const size_t tag = find_tag(pos);
            std::string text(src_.substr(pos, tag - pos));
            if (strip_next_text) {
                size_t n = 0;
                while (n < text.size() && is_space(text[n])) ++n;
                text.erase(0, n);
                strip_next_text = false;
            }
            if (tag == src_.size()) {
                emit_text(std::move(text), pos);
                break;
            }
            const char kind = src_[tag + 1];  // '{', '%' or '#'
            const char modifier = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
            if (modifier == '-') {
                while (!text.empty() && is_space(text.back())) text.pop_back();
            } else if (kind != '{' && modifier != '+' && opt_.lstrip_blocks) {
                size_t ws = tag;
                while (ws > 0 && (src_[ws - 1] == ' ' || src_[ws - 1] == '\t')) --ws;
                if (ws == 0 || src_[ws - 1] == '\n')
                    text.erase(text.size() - std::min(text.size(), tag - ws));
            }
            emit_text(std::move(text), pos);
            size_t inner = tag + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
            char end_modifier = '\0';
            if (kind == '#') {
                const size_t close = src_.find("#}", inner);
                if (close == std::string_view::npos) fail(tag, "unterminated comment");
                end_modifier = close > inner && (src_[close - 1] == '-' || src_[close - 1] == '+')
                                   ? src_[close - 1]
                                   : '\0';
                pos = close + 2;
            } else if (kind == '%' && is_raw(inner)) {
                pos = lex_raw(tag, inner, strip_next_text);
                continue;
            } else {
                tokens_.push_back(make(kind == '{' ? token::kind::var_begin : token::kind::block_begin,
                                       kind == '{' ? "{{" : "{%", tag));
                pos = lex_inside(inner, kind == '{' ? '}' : '%', end_modifier);
            }
            if (end_modifier == '-') {
                strip_next_text = true;
            } else if (kind != '{' && end_modifier != '+' && opt_.trim_blocks) {
                if (pos < src_.size() && src_[pos] == '\n') ++pos;
            }
        }
        tokens_.push_back(make(token::kind::eof, "", src_.size()));
        return std::move(tokens_);
    }

  private:
    std::string_view src_;
    const jinja_options &opt_;
    std::vector<size_t> line_starts_;
    std::vector<token> tokens_;

    token make(token::kind k, std::string text, size_t pos) const {
        token t{k, std::move(text)};
        const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), pos);
        const size_t line = size_t(it - line_starts_.begin());
        t.line = int(line);
        t.column = int(pos - line_starts_[line - 1] + 1);
        return t;
    }

    [[noreturn]] void fail(size_t pos, const std::string &msg) const {
        const token t = make(token::kind::eof, "", pos);
        throw jinja_error(msg, t.line, t.column);
    }

    void emit_text(std::string text, size_t pos) {
        if (!text.empty()) tokens_.push_back(make(token::kind::text, std::move(text), pos));
    }

    size_t find_tag(size_t from) const {
        for (size_t i = src_.find('{', from); i != std::string_view::npos; i = src_.find('{', i + 1)) {
            if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
                return i;
        }
        return src_.size();
    }

    size_t skip_space(size_t p) const {
        while (p < src_.size() && is_space(src_[p])) ++p;
        return p;
    }

    // {% raw %} at `inner` (just after "{%" and its modifier)?
    bool is_raw(size_t inner) const {
        const size_t p = skip_space(inner);
        if (src_.compare(p, 3, "raw") != 0) return false;
        const size_t q = skip_space(p + 3);
        return src_.compare(q, 2, "%}") == 0 || src_.compare(q, 3, "-%}") == 0;
    }

    size_t lex_raw(size_t tag, size_t inner, bool &strip_next_text) {
        size_t p = skip_space(skip_space(inner) + 3);
        const bool strip_start = src_[p] == '-';
        p += strip_start ? 3 : 2;
        for (size_t i = src_.find("{%", p); i != std::string_view::npos; i = src_.find("{%", i + 2)) {
            size_t q = i + 2;
            const bool strip_end = q < src_.size() && src_[q] == '-';
            if (strip_end || (q < src_.size() && src_[q] == '+')) ++q;
            q = skip_space(q);
            if (src_.compare(q, 6, "endraw") != 0) continue;
            size_t r = skip_space(q + 6);
            char modifier = '\0';
            if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) modifier = src_[r++];
            if (src_.compare(r, 2, "%}") != 0) continue;
            std::string text(src_.substr(p, i - p));
            if (strip_start) text.erase(0, std::min(text.size(), text.find_first_not_of(" \t\n\r\f\v")));
            if (strip_end) {
                while (!text.empty() && is_space(text.back())) text.pop_back();
            }
            emit_text(std::move(text), p);
            r += 2;
            if (modifier == '-') {
                strip_next_text = true;
            } else if (modifier != '+' && opt_.trim_blocks && r < src_.size() && src_[r] == '\n') {
                ++r;
            }
            return r;
        }
        fail(tag, "unterminated raw block: missing {% endraw %}");
    }

    // The tokens of one tag's expression, up to and including its end delimiter.
    size_t lex_inside(size_t p, char close, char &end_modifier) {
        int depth = 0;  // open ( [ {: a '}' inside a dict literal does not end the tag
        while (true) {
            p = skip_space(p);
            if (p >= src_.size())
                fail(p, close == '}' ? "unterminated '{{': missing '}}'" : "unterminated '{%': missing '%}'");
            if (depth == 0) {
                const char c = src_[p];
                if ((c == '-' || c == '+') && p + 2 < src_.size() + 0 && src_[p + 1] == close &&
                    src_[p + 2] == '}') {
                    end_modifier = c;
                    tokens_.push_back(
                        make(close == '}' ? token::kind::var_end : token::kind::block_end, "", p));
                    return p + 3;
                }
                if (c == close && p + 1 < src_.size() && src_[p + 1] == '}') {
                    tokens_.push_back(
                        make(close == '}' ? token::kind::var_end : token::kind::block_end, "", p));
                    return p + 2;
                }
            }
            const char c = src_[p];
            if (is_name_start(c)) {
                size_t e = p;
                while (e < src_.size() && is_name_char(src_[e])) ++e;
                tokens_.push_back(make(token::kind::name, std::string(src_.substr(p, e - p)), p));
                p = e;
            } else if (is_digit(c)) {
                p = lex_number(p);
            } else if (c == '\'' || c == '"') {
                p = lex_string(p);
            } else {
                static const char *const ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                                  "/",  "%",  "~",  "|",  ".",  ",",  ":", "(", ")",
                                                  "[",  "]",  "{",  "}",  "<",  ">",  "="};
                const char *found = nullptr;
                for (const char *op : ops)
                    if (src_.compare(p, std::strlen(op), op) == 0) {
                        found = op;
                        break;
                    }
                if (!found) {
                    // a byte that is not printable ASCII is named by its value: the message stays UTF-8
                    char name[16];
                    if (c > ' ' && c < 0x7f)
                        std::snprintf(name, sizeof name, "'%c'", c);
                    else
                        std::snprintf(name, sizeof name, "byte 0x%02x", static_cast<unsigned char>(c));
                    fail(p, std::string("unexpected character ") + name);
                }
                if (c == '(' || c == '[' || c == '{') ++depth;
                if ((c == ')' || c == ']' || c == '}') && depth > 0) --depth;
                tokens_.push_back(make(token::kind::op, found, p));
                p += std::strlen(found);
            }
        }
    }

    size_t lex_number(size_t p) {
        const size_t start = p;
        const bool after_dot =
            !tokens_.empty() && tokens_.back().type == token::kind::op && tokens_.back().text == ".";
        auto digits = [&](size_t q) {
            while (q < src_.size() &&
                   (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
                ++q;
            return q;
        };
        p = digits(p);
        bool is_float = false;
        if (!after_dot && p + 1 < src_.size() && src_[p] == '.' && is_digit(src_[p + 1])) {
            p = digits(p + 1);
            is_float = true;
        }
        if (!after_dot && p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
            size_t q = p + 1;
            if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
            if (q < src_.size() && is_digit(src_[q])) {
                p = digits(q);
                is_float = true;
            }
        }
        std::string text;
        for (size_t i = start; i < p; ++i)
            if (src_[i] != '_') text += src_[i];
        tokens_.push_back(make(is_float ? token::kind::floating : token::kind::integer, text, start));
        return p;
    }

    // A quoted string with Python's escapes (\n \t \xNN \uNNNN ...); unknown escapes stay as written.
    size_t lex_string(size_t p) {
        const char quote = src_[p];
        const size_t start = p++;
        std::string out;
        while (true) {
            if (p >= src_.size()) fail(start, "unterminated string literal");
            const char c = src_[p];
            if (c == quote) break;
            if (c != '\\' || p + 1 >= src_.size()) {
                out += c;
                ++p;
                continue;
            }
            const char e = src_[p + 1];
            p += 2;
            auto hex = [&](int n) -> bool {
                if (p + size_t(n) > src_.size()) return false;
                uint32_t cp = 0;
                for (int i = 0; i < n; ++i) {
                    const char h = src_[p + size_t(i)];
                    if (!std::isxdigit(static_cast<unsigned char>(h))) return false;
                    cp = cp * 16 + uint32_t(is_digit(h) ? h - '0' : (std::tolower(h) - 'a' + 10));
                }
                if (cp > 0x10FFFF) return false;
                append_utf8(out, cp);
                p += size_t(n);
                return true;
            };
            switch (e) {
                case 'n':
                    out += '\n';
                    break;
                case 't':
                    out += '\t';
                    break;
                case 'r':
                    out += '\r';
                    break;
                case 'a':
                    out += '\a';
                    break;
                case 'b':
                    out += '\b';
                    break;
                case 'f':
                    out += '\f';
                    break;
                case 'v':
                    out += '\v';
                    break;
                case '\\':
                    out += '\\';
                    break;
                case '\'':
                    out += '\'';
                    break;
                case '"':
                    out += '"';
                    break;
                case '\n':
                    break;
                case 'x':
                    if (!hex(2)) fail(p, "bad \\x escape in string literal");
                    break;
                case 'u':
                    if (!hex(4)) fail(p, "bad \\u escape in string literal");
                    break;
                case 'U':
                    if (!hex(8)) fail(p, "bad \\U escape in string literal");
                    break;
                default:
                    if (e >= '0' && e <= '7') {
                        uint32_t cp = uint32_t(e - '0');
                        for (int i = 0; i < 2 && p < src_.size() && src_[p] >= '0' && src_[p] <= '7'; ++i)
                            cp = cp * 8 + uint32_t(src_[p++] - '0');
                        append_utf8(out, cp);
                    } else {
                        out += '\\';
                        out += e;
                    }
            }
        }
        tokens_.push_back(make(token::kind::string, std::move(out), start));
        return p + 1;
    }
};

}  // namespace

void append_utf8(std::string &out, uint32_t cp) {
    if (cp < 0x80) {
        out += char(cp);
    } else if (cp < 0x800) {
        out += char(0xC0 | (cp >> 6));
        out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        out += char(0xE0 | (cp >> 12));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    } else {
        out += char(0xF0 | (cp >> 18));
        out += char(0x80 | ((cp >> 12) & 0x3F));
        out += char(0x80 | ((cp >> 6) & 0x3F));
        out += char(0x80 | (cp & 0x3F));
    }
}

std::vector<token> lex(std::string_view source, const jinja_options &options) {
    // jinja2 writes every line break of the template (\r\n, \r, \n) as \n, and drops one
    // newline at the end of the template (keep_trailing_newline=False)
    std::string text;
    text.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
        if (source[i] != '\r') {
            text += source[i];
        } else {
            text += '\n';
            if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
        }
    }
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return lexer(text, options).run();
}

}  // namespace weft::jinja_detail
