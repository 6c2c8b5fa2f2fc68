// src/grammar/json_schema_pattern.cpp — JSON Schema "pattern" to GBNF: a recursive-descent reader of
// the ECMA-262 subset that schemas use, writing each character set in its JSON encoding (plain
// characters as a class, '"' '\' and control characters as their escapes).
#include "grammar/json_schema_pattern.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

#include "weft/core/error.h"

namespace weft {

namespace {

constexpr uint32_t max_codepoint = 0x10FFFF;
constexpr int max_depth = 64;            // nested groups
constexpr uint64_t max_repeat = 10000;   // {n,m} bounds
constexpr size_t max_pattern = 1 << 14;  // codepoints

// Sorted, disjoint, non-adjacent codepoint ranges.
using char_set = std::vector<std::pair<uint32_t, uint32_t>>;

char_set normalized(char_set s) {
    std::sort(s.begin(), s.end());
    char_set out;
    for (const auto &r : s) {
        if (!out.empty() && r.first <= out.back().second + 1)
            out.back().second = std::max(out.back().second, r.second);
        else
            out.push_back(r);
    }
    return out;
}

char_set complement(const char_set &s) {
    char_set out;
    uint32_t next = 0;
    for (const auto &[lo, hi] : normalized(s)) {
        if (lo > next) out.push_back({next, lo - 1});
        next = hi + 1;
    }
    if (next <= max_codepoint) out.push_back({next, max_codepoint});
    return out;
}

char_set minus(const char_set &a, const char_set &b) {
    char_set out;
    const char_set nb = complement(b);
    for (const auto &[alo, ahi] : normalized(a))
        for (const auto &[blo, bhi] : nb) {
            const uint32_t lo = std::max(alo, blo), hi = std::min(ahi, bhi);
            if (lo <= hi) out.push_back({lo, hi});
        }
    return normalized(out);
}

bool contains(const char_set &s, uint32_t c) {
    return std::any_of(s.begin(), s.end(), [&](const auto &r) { return r.first <= c && c <= r.second; });
}

const char_set &digits() {
    static const char_set s = {{'0', '9'}};
    return s;
}
const char_set &word_chars() {
    static const char_set s = normalized({{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}});
    return s;
}
const char_set &spaces() {  // ECMA-262's WhiteSpace and LineTerminator
    static const char_set s = normalized({{0x09, 0x0D},
                                          {0x20, 0x20},
                                          {0xA0, 0xA0},
                                          {0x1680, 0x1680},
                                          {0x2000, 0x200A},
                                          {0x2028, 0x2029},
                                          {0x202F, 0x202F},
                                          {0x205F, 0x205F},
                                          {0x3000, 0x3000},
                                          {0xFEFF, 0xFEFF}});
    return s;
}

std::string hex(uint32_t v, int digits) {
    static const char *h = "0123456789ABCDEF";
    std::string out(size_t(digits), '0');
    for (int i = digits - 1; i >= 0; --i, v >>= 4) out[size_t(i)] = h[v & 15];
    return out;
}

// A codepoint inside a GBNF class or literal, escaped.
std::string gbnf_escape(uint32_t c) {
    if (c <= 0xFF) return "\\x" + hex(c, 2);
    if (c <= 0xFFFF) return "\\u" + hex(c, 4);
    return "\\U" + hex(c, 8);
}

// The set as GBNF over JSON text: the characters a JSON string holds as they are in one class, the
// others ('"', '\', the controls) as their escapes.
std::string set_to_gbnf(const char_set &set) {
    static const char_set escaped = normalized({{0x00, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}});
    static const char_set surrogates = {{0xD800, 0xDFFF}};
    const char_set plain = minus(minus(set, escaped), surrogates);
    std::vector<std::string> alts;
    if (plain.size() == 1 && plain[0].first == plain[0].second) {
        alts.push_back("\"" + gbnf_escape(plain[0].first) + "\"");
    } else if (!plain.empty()) {
        std::string cls = "[";
        for (const auto &[lo, hi] : plain) {
            cls += gbnf_escape(lo);
            if (hi != lo) cls += "-" + gbnf_escape(hi);
        }
        alts.push_back(cls + "]");
    }
    for (const auto &[lo, hi] : escaped)
        for (uint32_t c = lo; c <= hi; ++c) {
            if (!contains(set, c)) continue;
            static const std::pair<uint32_t, const char *> short_escapes[] = {
                {'"', R"("\\\"")"}, {'\\', R"("\\\\")"}, {'\b', R"("\\b")"}, {'\f', R"("\\f")"},
                {'\n', R"("\\n")"}, {'\r', R"("\\r")"},  {'\t', R"("\\t")"}};
            const auto *e = std::find_if(std::begin(short_escapes), std::end(short_escapes),
                                         [&](const auto &p) { return p.first == c; });
            if (e != std::end(short_escapes)) {
                alts.push_back(e->second);
                continue;
            }
            std::string seq = R"("\\u")";  // \u00XX, its hex letters in either case
            for (const char d : hex(c, 4))
                seq += d >= 'A' ? std::string(" [") + d + char(d - 'A' + 'a') + "]"
                                : std::string(" \"") + d + "\"";
            alts.push_back(seq);
        }
    if (alts.empty()) return "";
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
    return out + " )";
}

std::vector<uint32_t> decode_utf8(std::string_view s) {
    std::vector<uint32_t> out;
    for (size_t i = 0; i < s.size();) {
        const auto b = uint8_t(s[i]);
        const int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + size_t(n) > s.size())
            throw error("pattern: not valid UTF-8 at byte " + std::to_string(i));
        uint32_t c = n == 1 ? b : b & (0x7F >> n);
        for (int k = 1; k < n; ++k) {
            const auto cb = uint8_t(s[i + size_t(k)]);
            if ((cb & 0xC0) != 0x80) throw error("pattern: not valid UTF-8 at byte " + std::to_string(i));
            c = c << 6 | (cb & 0x3F);
        }
        out.push_back(c);
        i += size_t(n);
    }
    return out;
}

class pattern_reader {
  public:
    explicit pattern_reader(std::string_view pattern) : p_(decode_utf8(pattern)) {
        if (p_.size() > max_pattern)
            throw error("pattern: longer than " + std::to_string(max_pattern) + " characters");
    }

    std::string read() {
        std::string out = alternation(0, /*top=*/true);
        if (pos_ < p_.size()) fail("unmatched ')'");
        return out;
    }

  private:
    std::vector<uint32_t> p_;
    size_t pos_ = 0;

    [[noreturn]] void fail(const std::string &what) const {
        throw error("pattern: " + what + " at offset " + std::to_string(pos_));
    }
    bool at_end() const { return pos_ >= p_.size(); }
    uint32_t peek() const { return at_end() ? 0 : p_[pos_]; }
    bool eat(uint32_t c) {
        if (at_end() || p_[pos_] != c) return false;
        ++pos_;
        return true;
    }

    // seq ('|' seq)*; at the top level each alternative may start with ^ and end with $, and an end
    // without one matches anything there (a search, not a whole-string match)
    std::string alternation(int depth, bool top) {
        if (depth > max_depth) fail("groups nested deeper than " + std::to_string(max_depth));
        std::vector<std::string> alts;
        do {
            bool anchored_start = false, anchored_end = false;
            if (top) anchored_start = eat('^');
            std::string seq = sequence(depth, top, anchored_end);
            if (top) {
                if (!anchored_start) seq = "json-char* " + seq;
                if (!anchored_end) seq += " json-char*";
            }
            alts.push_back(seq.empty() ? "\"\"" : seq);
        } while (eat('|'));
        if (alts.size() == 1) return alts[0];
        std::string out = "(";
        for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : " ") + alts[i];
        return out + " )";
    }

    std::string sequence(int depth, bool top, bool &anchored_end) {
        std::string out;
        while (!at_end() && peek() != '|' && peek() != ')') {
            if (peek() == '$') {
                ++pos_;
                if (!top || !(at_end() || peek() == '|'))
                    fail("'$' is supported only at the end of the pattern");
                anchored_end = true;
                break;
            }
            if (peek() == '^') fail("'^' is supported only at the start of the pattern");
            std::string atom_text = quantified(depth);
            if (!atom_text.empty()) out += (out.empty() ? "" : " ") + atom_text;
        }
        return out;
    }

    uint64_t number() {
        if (at_end() || peek() < '0' || peek() > '9') fail("a number expected");
        uint64_t v = 0;
        while (!at_end() && peek() >= '0' && peek() <= '9') {
            v = v * 10 + (p_[pos_++] - '0');
            if (v > max_repeat) fail("a repetition count above " + std::to_string(max_repeat));
        }
        return v;
    }

    std::string quantified(int depth) {
        const std::string a = atom(depth);
        std::string q;
        if (eat('*')) {
            q = "*";
        } else if (eat('+')) {
            q = "+";
        } else if (eat('?')) {
            q = "?";
        } else if (peek() == '{') {
            ++pos_;
            const uint64_t lo = number();
            std::string hi = std::to_string(lo);
            if (eat(',')) hi = peek() == '}' ? "" : std::to_string(number());
            if (!eat('}')) fail("'}' expected");
            if (!hi.empty() && std::stoull(hi) < lo) fail("a repetition {n,m} with m < n");
            q = "{" + std::to_string(lo) + (hi == std::to_string(lo) ? "" : "," + hi) + "}";
        }
        if (q.empty()) return a;
        eat('?');  // lazy: the same language
        if (peek() == '*' || peek() == '+' || peek() == '?' || peek() == '{')
            fail("a quantifier after a quantifier");
        if (a.empty()) return "";
        return "( " + a + " )" + q;
    }

    std::string atom(int depth) {
        const uint32_t c = p_[pos_++];
        switch (c) {
            case '(': {
                if (eat('?')) {
                    if (!eat(':'))
                        fail("only non-capturing groups (?:...) are supported, not look-around or names");
                }
                std::string inner = alternation(depth + 1, false);
                if (!eat(')')) fail("')' expected");
                return inner.empty() ? "" : "( " + inner + " )";
            }
            case '[':
                return set_to_gbnf_checked(char_class());
            case '.':
                return set_to_gbnf_checked(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
            case '\\':
                return set_to_gbnf_checked(escape(/*in_class=*/false));
            case '*':
            case '+':
            case '?':
            case '{':
                --pos_;
                fail("a quantifier with nothing to repeat");
            case ']':
            case '}':
            default:
                return set_to_gbnf_checked({{c, c}});
        }
    }

    std::string set_to_gbnf_checked(const char_set &s) {
        std::string g = set_to_gbnf(s);
        if (g.empty()) fail("a character set that no JSON string character matches");
        return g;
    }

    // After '\': the set it stands for.
    char_set escape(bool in_class) {
        if (at_end()) fail("a pattern ending in '\\'");
        const uint32_t c = p_[pos_++];
        switch (c) {
            case 'd':
                return digits();
            case 'D':
                return complement(digits());
            case 'w':
                return word_chars();
            case 'W':
                return complement(word_chars());
            case 's':
                return spaces();
            case 'S':
                return complement(spaces());
            case 't':
                return {{'\t', '\t'}};
            case 'n':
                return {{'\n', '\n'}};
            case 'r':
                return {{'\r', '\r'}};
            case 'f':
                return {{'\f', '\f'}};
            case 'v':
                return {{'\v', '\v'}};
            case '0':
                return {{0, 0}};
            case 'b':
                if (in_class) return {{'\b', '\b'}};
                fail("word boundaries (\\b) are not supported");
            case 'x':
            case 'u': {
                const int n = c == 'x' ? 2 : 4;
                uint32_t v = 0;
                for (int i = 0; i < n; ++i) {
                    const uint32_t h = peek();
                    const int d = h >= '0' && h <= '9'   ? int(h - '0')
                                  : h >= 'a' && h <= 'f' ? int(h - 'a' + 10)
                                  : h >= 'A' && h <= 'F' ? int(h - 'A' + 10)
                                                         : -1;
                    if (d < 0)
                        fail(std::string("\\") + char(c) + " needs " + std::to_string(n) + " hex digits");
                    v = v * 16 + uint32_t(d);
                    ++pos_;
                }
                return {{v, v}};
            }
            default:
                if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '1' && c <= '9')) {
                    --pos_;
                    fail(std::string("the escape \\") + char(c) + " is not supported");
                }
                return {{c, c}};
        }
    }

    // After '[': the class up to its ']'.
    char_set char_class() {
        const bool negated = eat('^');
        char_set set;
        while (true) {
            if (at_end()) fail("'[' without its ']'");
            if (eat(']')) break;
            char_set item;
            uint32_t single = 0;
            bool is_single = true;
            if (eat('\\')) {
                item = escape(/*in_class=*/true);
                is_single = item.size() == 1 && item[0].first == item[0].second;
                single = item[0].first;
            } else {
                single = p_[pos_++];
                item = {{single, single}};
            }
            if (is_single && peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
                ++pos_;
                uint32_t hi;
                if (eat('\\')) {
                    const char_set h = escape(true);
                    if (h.size() != 1 || h[0].first != h[0].second) fail("a range ending in a class escape");
                    hi = h[0].first;
                } else {
                    hi = p_[pos_++];
                }
                if (hi < single) fail("a range whose end is below its start");
                item = {{single, hi}};
            }
            set.insert(set.end(), item.begin(), item.end());
        }
        set = normalized(set);
        return negated ? complement(set) : set;
    }
};

}  // namespace

std::string pattern_to_gbnf(std::string_view pattern) {
    return pattern_reader(pattern).read();
}

}  // namespace weft
