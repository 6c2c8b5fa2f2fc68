// src/grammar/grammar_parser.cpp — GBNF text to rules of flat elements: groups and repetitions become
// rules of their own, literals become one char set per character; then the checks (every rule
// defined, no left recursion) and the text form back.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "grammar/grammar_automaton.h"
#include "weft/core/error.h"
#include "weft/grammar/grammar.h"

namespace weft {

namespace {

constexpr uint32_t max_code_point = 0x10FFFF;
// The parser writes x{m,n} out as m copies and n - m nested optional rules: bounded so that a typo
// cannot ask for a billion rules.
constexpr uint64_t max_repetitions = 100000;
// Groups nest by recursion in the parser: bounded so that hostile text cannot overflow the stack.
constexpr int max_group_depth = 256;

std::atomic<bool> grammar_work_stopped{false};

bool is_name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

// Sorts and merges the ranges (overlapping or adjacent ones become one).
void normalize(grammar_char_set &set) {
    auto &r = set.ranges;
    std::sort(r.begin(), r.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto &range : r) {
        if (!merged.empty() && range.first <= merged.back().second + 1)
            merged.back().second = std::max(merged.back().second, range.second);
        else
            merged.push_back(range);
    }
    r = std::move(merged);
}

// One code point as GBNF writes it inside a literal or a class: printable ASCII as itself (`special`
// characters escaped), everything else as \xHH, \uHHHH or \UHHHHHHHH.
std::string escape_code_point(uint32_t cp, std::string_view special) {
    char buf[16];
    if (cp >= 0x20 && cp < 0x7F) {
        std::string s;
        if (cp == '\\' || special.find(char(cp)) != std::string_view::npos) s += '\\';
        s += char(cp);
        return s;
    }
    if (cp == '\n') return "\\n";
    if (cp == '\r') return "\\r";
    if (cp == '\t') return "\\t";
    if (cp < 0x80)
        std::snprintf(buf, sizeof buf, "\\x%02X", unsigned(cp));
    else if (cp <= 0xFFFF)
        std::snprintf(buf, sizeof buf, "\\u%04X", unsigned(cp));
    else
        std::snprintf(buf, sizeof buf, "\\U%08X", unsigned(cp));
    return buf;
}

}  // namespace

bool grammar_char_set::matches(uint32_t cp) const {
    // the first range ending at or after cp is the only one that can hold it
    auto it =
        std::lower_bound(ranges.begin(), ranges.end(), cp,
                         [](const std::pair<uint32_t, uint32_t> &r, uint32_t c) { return r.second < c; });
    const bool inside = it != ranges.end() && it->first <= cp;
    return inside != negated;
}

bool grammar_char_set::matches_any(uint32_t lo, uint32_t hi) const {
    auto it =
        std::lower_bound(ranges.begin(), ranges.end(), lo,
                         [](const std::pair<uint32_t, uint32_t> &r, uint32_t c) { return r.second < c; });
    if (!negated) return it != ranges.end() && it->first <= hi;
    // the ranges are merged, so [lo, hi] is wholly excluded only when one range covers it
    return !(it != ranges.end() && it->first <= lo && it->second >= hi);
}

// Recursive descent over the text; rules are gathered as sequences of elements whose rule indices
// are final (a name gets its index when it is first seen, defined or used).
class grammar_parser {
  public:
    grammar_parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

    std::shared_ptr<const grammar> run(std::string_view root_name) {
        if (text_.size() > max_grammar_bytes)
            throw error(std::string(source_) + ": the grammar is " + std::to_string(text_.size()) +
                        " bytes long; at most " + std::to_string(max_grammar_bytes) + " are taken");
        skip_space(true);
        while (pos_ < text_.size()) {
            throw_if_grammar_work_cancelled();
            parse_rule();
            skip_space(true);
        }
        for (const auto &r : rules_)
            if (!r.defined) fail_at(r.first_use, "rule '" + r.name + "' is used but never defined");
        const auto root = names_.find(std::string(root_name));
        if (root == names_.end() || !rules_[root->second].defined)
            throw error(std::string(source_) + ": no rule named '" + std::string(root_name) +
                        "' (the rule a grammar starts from)");
        name_generated_rules();
        check_left_recursion();
        return build(root->second);
    }

  private:
    using sequence = std::vector<grammar_element>;
    struct rule_draft {
        std::string name;
        std::vector<sequence> alternatives;
        bool defined = false, generated = false;
        std::string parent;     // generated: the rule it was written in
        size_t defined_at = 0;  // offset of the definition (generated: of its group / operator)
        size_t first_use = 0;   // offset of the first reference
    };

    // 1-based line and column (in characters) of a byte offset: the line by binary search in a table
    // of line starts made once, so that placing every rule costs the text's length once, not once a
    // rule (20,000 rules took 17 s that way)
    std::pair<uint32_t, uint32_t> line_column(size_t offset) const {
        offset = std::min(offset, text_.size());
        if (line_starts_.empty()) {
            line_starts_.push_back(0);
            for (size_t i = 0; i < text_.size(); ++i)
                if (text_[i] == '\n') line_starts_.push_back(i + 1);
        }
        const auto after = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
        const size_t line_start = *(after - 1);
        uint32_t column = 1;
        for (size_t i = line_start; i < offset; ++i)
            if ((uint8_t(text_[i]) & 0xC0) != 0x80) ++column;
        return {uint32_t(after - line_starts_.begin()), column};
    }
    std::string position_of(size_t offset) const {
        const auto [line, column] = line_column(offset);
        return std::to_string(line) + ":" + std::to_string(column);
    }

    [[noreturn]] void fail_at(size_t offset, const std::string &what) const {
        throw error(std::string(source_) + ":" + position_of(offset) + ": " + what);
    }
    [[noreturn]] void fail(const std::string &what) const { fail_at(pos_, what); }

    bool at_end() const { return pos_ >= text_.size(); }
    char peek(size_t ahead = 0) const { return pos_ + ahead < text_.size() ? text_[pos_ + ahead] : '\0'; }
    std::string shown_here() const {
        if (at_end()) return "the end of the text";
        if (peek() == '\n' || peek() == '\r') return "the end of the line";
        return quoted(text_.substr(pos_, 1));
    }

    // Spaces, tabs and comments; line breaks too when `newlines` (between rules, inside parentheses).
    void skip_space(bool newlines) {
        while (!at_end()) {
            const char c = peek();
            if (c == ' ' || c == '\t') {
                ++pos_;
            } else if (c == '#') {
                while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
            } else if ((c == '\n' || c == '\r') && newlines) {
                ++pos_;
            } else {
                break;
            }
        }
    }

    uint32_t rule_index(const std::string &name, size_t used_at) {
        auto [it, inserted] = names_.try_emplace(name, uint32_t(rules_.size()));
        if (inserted) {
            if (rules_.size() - n_generated_ >= max_grammar_rules)
                fail_at(used_at,
                        "the grammar names more than " + std::to_string(max_grammar_rules) + " rules");
            rules_.push_back({});
            rules_.back().name = name;
            rules_.back().first_use = used_at;
        }
        return it->second;
    }

    uint32_t new_generated_rule(std::vector<sequence> alternatives, size_t at) {
        if (++n_generated_ > max_generated_rules)
            fail_at(at, "the grammar's groups and repetitions make more than " +
                            std::to_string(max_generated_rules) + " rules (x{0,n} makes n)");
        rule_draft r;
        r.alternatives = std::move(alternatives);
        r.defined = r.generated = true;
        r.parent = rules_[current_rule_].name;
        r.defined_at = r.first_use = at;
        rules_.push_back(std::move(r));
        return uint32_t(rules_.size() - 1);
    }

    std::string parse_name() {
        const size_t start = pos_;
        while (!at_end() && is_name_char(peek())) ++pos_;
        return std::string(text_.substr(start, pos_ - start));
    }

    void parse_rule() {
        const size_t start = pos_;
        const std::string name = parse_name();
        if (name.empty()) fail("expected a rule name, found " + shown_here());
        skip_space(false);
        if (text_.substr(pos_, 3) != "::=")
            fail("expected '::=' after the rule name '" + name + "', found " + shown_here());
        pos_ += 3;
        skip_space(true);
        const uint32_t index = rule_index(name, start);
        if (rules_[index].defined)
            fail_at(start, "rule '" + name + "' is defined twice (first at " +
                               position_of(rules_[index].defined_at) + ")");
        rules_[index].defined = true;
        rules_[index].defined_at = start;
        current_rule_ = index;
        auto alternatives = parse_alternatives(false);
        rules_[index].alternatives = std::move(alternatives);
        skip_space(false);
        if (!at_end() && peek() != '\n' && peek() != '\r') fail("unexpected " + shown_here());
    }

    std::vector<sequence> parse_alternatives(bool nested) {
        std::vector<sequence> alternatives;
        alternatives.push_back(parse_sequence(nested));
        while (peek() == '|') {
            ++pos_;
            skip_space(true);
            alternatives.push_back(parse_sequence(nested));
        }
        return alternatives;
    }

    sequence parse_sequence(bool nested) {
        sequence seq;
        size_t last_item = SIZE_MAX;  // where the last item's elements start in seq
        while (!at_end()) {
            const char c = peek();
            const size_t item_at = pos_;
            if (c == '"') {
                last_item = seq.size();
                parse_literal(seq);
            } else if (c == '[') {
                last_item = seq.size();
                seq.push_back(chars(parse_class()));
            } else if (c == '.') {
                ++pos_;
                last_item = seq.size();
                grammar_char_set any;
                any.negated = true;
                seq.push_back(chars(std::move(any)));
            } else if (is_name_char(c)) {
                last_item = seq.size();
                const std::string name = parse_name();
                seq.push_back({grammar_element::kind::rule, rule_index(name, item_at)});
            } else if (c == '(') {
                if (group_depth_ >= max_group_depth)
                    fail("groups nest deeper than " + std::to_string(max_group_depth) + " levels");
                ++group_depth_;
                ++pos_;
                skip_space(true);
                auto alternatives = parse_alternatives(true);
                if (peek() != ')')
                    fail("expected ')' to close the group opened at " + position_of(item_at) + ", found " +
                         shown_here());
                ++pos_;
                --group_depth_;
                last_item = seq.size();
                seq.push_back(
                    {grammar_element::kind::rule, new_generated_rule(std::move(alternatives), item_at)});
            } else if (c == '*' || c == '+' || c == '?' || c == '{') {
                if (last_item == SIZE_MAX) fail(std::string("'") + c + "' has nothing before it to repeat");
                uint64_t min = 0, max = UINT64_MAX;  // UINT64_MAX: no upper bound
                ++pos_;
                if (c == '+') min = 1;
                if (c == '?') max = 1;
                if (c == '{') parse_counts(min, max, item_at);
                repeat(seq, last_item, min, max, item_at);
            } else if (c == '<' || c == '!') {
                fail("token references (<...>, !<...>) are not supported");
            } else {
                break;  // the sequence ends: '|', ')', a line break, or something the caller rejects
            }
            skip_space(nested);
        }
        return seq;
    }

    grammar_element chars(grammar_char_set set) {
        normalize(set);
        char_sets_.push_back(std::move(set));
        return {grammar_element::kind::chars, uint32_t(char_sets_.size() - 1)};
    }

    uint64_t parse_count() {
        const size_t start = pos_;
        uint64_t n = 0;
        while (peek() >= '0' && peek() <= '9') {
            n = n * 10 + uint64_t(peek() - '0');
            if (n > max_repetitions)
                fail_at(start,
                        "repetition count is too large (at most " + std::to_string(max_repetitions) + ")");
            ++pos_;
        }
        return n;
    }

    // After '{': "m}", "m,}", "m,n}" or ",n}".
    void parse_counts(uint64_t &min, uint64_t &max, size_t brace_at) {
        skip_space(false);
        const bool has_min = peek() >= '0' && peek() <= '9';
        min = has_min ? parse_count() : 0;
        skip_space(false);
        if (peek() == '}') {
            if (!has_min) fail("expected a count in {m}, {m,}, {m,n} or {,n}");
            max = min;
        } else if (peek() == ',') {
            ++pos_;
            skip_space(false);
            if (peek() >= '0' && peek() <= '9') {
                max = parse_count();
                if (max < min)
                    fail_at(brace_at, "repetition {" + std::to_string(min) + "," + std::to_string(max) +
                                          "} has its maximum below its minimum");
            } else if (!has_min) {
                fail("expected a count in {m}, {m,}, {m,n} or {,n}");
            }
            skip_space(false);
        }
        if (peek() != '}') fail("expected '}' to close the repetition, found " + shown_here());
        ++pos_;
    }

    // Rewrites the item at seq[from..] as min copies, then either a star rule (no maximum) or
    // max - min nested optional rules (x{0,3}: (x (x (x)?)?)?, so no two ways match the same text).
    void repeat(sequence &seq, size_t from, uint64_t min, uint64_t max, size_t at) {
        if (min > max_repetitions || (max != UINT64_MAX && max > max_repetitions))
            fail_at(at, "repetition count is too large (at most " + std::to_string(max_repetitions) + ")");
        // the rules it will make, refused before any is made
        const uint64_t makes = (max == UINT64_MAX ? 1 : max - min) + 1;
        if (n_generated_ + makes > max_generated_rules)
            fail_at(at, "the grammar's groups and repetitions make more than " +
                            std::to_string(max_generated_rules) + " rules (x{0,n} makes n)");
        sequence item(seq.begin() + ptrdiff_t(from), seq.end());
        seq.resize(from);
        if (item.size() != 1) item = {{grammar_element::kind::rule, new_generated_rule({item}, at)}};
        const grammar_element x = item[0];
        for (uint64_t i = 0; i < min; ++i) seq.push_back(x);
        if (max == UINT64_MAX) {
            const uint32_t star = new_generated_rule({}, at);
            rules_[star].alternatives = {{x, {grammar_element::kind::rule, star}}, {}};
            seq.push_back({grammar_element::kind::rule, star});
        } else if (max > min) {
            uint32_t inner = UINT32_MAX;
            for (uint64_t k = 0; k < max - min; ++k) {
                sequence once = {x};
                if (inner != UINT32_MAX) once.push_back({grammar_element::kind::rule, inner});
                inner = new_generated_rule({once, {}}, at);
            }
            seq.push_back({grammar_element::kind::rule, inner});
        }
    }

    // One character of a literal or class, escapes decoded; `open` is where the literal / class began.
    uint32_t parse_char(size_t open, char closer) {
        if (at_end())
            fail_at(open, std::string(closer == '"' ? "literal" : "character class") + " is not closed");
        const size_t start = pos_;
        const uint8_t b = uint8_t(peek());
        if (b == '\\') {
            ++pos_;
            const char e = peek();
            ++pos_;
            switch (e) {
                case 'n':
                    return '\n';
                case 'r':
                    return '\r';
                case 't':
                    return '\t';
                case '\\':
                case '"':
                case '[':
                case ']':
                case '-':
                case '^':
                    return uint32_t(uint8_t(e));
                case 'x':
                    return parse_hex(2, start);
                case 'u':
                    return parse_hex(4, start);
                case 'U':
                    return parse_hex(8, start);
                default:
                    fail_at(start, at_end() || e == '\0'
                                       ? std::string("escape '\\' at the end of the text")
                                       : "unknown escape " + quoted(text_.substr(start, 2)));
            }
        }
        // a raw character: one UTF-8 sequence, read as the matcher reads text (utf8_step: no
        // overlong form, surrogate or code point above U+10FFFF), so to_string() can write it back
        uint32_t pending = 0, cp = 0;
        for (size_t at = pos_; at < text_.size(); ++at) {
            const utf8_step_result r = utf8_step(pending, uint8_t(text_[at]), cp);
            if (r == utf8_step_result::invalid) break;
            if (r == utf8_step_result::complete) {
                pos_ = at + 1;
                return cp;
            }
        }
        fail("the text is not valid UTF-8 here");
    }

    uint32_t parse_hex(int digits, size_t escape_at) {
        uint32_t v = 0;
        for (int i = 0; i < digits; ++i) {
            const char c = peek();
            int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
            if (d < 0)
                fail_at(escape_at, "escape " + quoted(text_.substr(escape_at, size_t(2 + i))) + " needs " +
                                       std::to_string(digits) + " hex digits");
            v = v * 16 + uint32_t(d);
            ++pos_;
        }
        if (v > max_code_point) fail_at(escape_at, "escape names a code point above U+10FFFF");
        return v;
    }

    void parse_literal(sequence &seq) {
        const size_t open = pos_++;
        while (true) {
            if (at_end()) fail_at(open, "literal is not closed");
            if (peek() == '"') break;
            const uint32_t cp = parse_char(open, '"');
            grammar_char_set one;
            one.ranges.push_back({cp, cp});
            seq.push_back(chars(std::move(one)));
        }
        ++pos_;
    }

    grammar_char_set parse_class() {
        const size_t open = pos_++;
        grammar_char_set set;
        if (peek() == '^') {
            set.negated = true;
            ++pos_;
        }
        while (true) {
            if (at_end()) fail_at(open, "character class is not closed");
            if (peek() == ']') break;
            const size_t item_at = pos_;
            const uint32_t lo = parse_char(open, ']');
            uint32_t hi = lo;
            if (peek() == '-' && peek(1) != ']' && pos_ + 1 < text_.size()) {
                ++pos_;
                hi = parse_char(open, ']');
                if (hi < lo)
                    fail_at(item_at,
                            "range " + quoted(text_.substr(item_at, pos_ - item_at)) + " is reversed");
            }
            set.ranges.push_back({lo, hi});
        }
        ++pos_;
        return set;
    }

    // Generated rules are named after the rule they were written in, <rule>_<n>, avoiding names in use.
    void name_generated_rules() {
        std::unordered_set<std::string> used;
        for (const auto &r : rules_)
            if (!r.generated) used.insert(r.name);
        std::unordered_map<std::string, int> counters;
        for (auto &r : rules_) {
            if (!r.generated) continue;
            do r.name = r.parent + "_" + std::to_string(++counters[r.parent]);
            while (used.count(r.name));
            used.insert(r.name);
        }
    }

    // A rule that can reach itself at the start of one of its alternatives, past nothing but rules that
    // can match the empty text, would make the matcher expand it forever.
    void check_left_recursion() const {
        const size_t n = rules_.size();
        // nullable rules by a worklist, linear in the grammar's size: an alternative is empty once
        // every element of it is a nullable rule (a chain of rules each the next's only use took a
        // pass over all rules per link before)
        std::vector<bool> nullable(n, false);
        struct alternative_ref {
            uint32_t rule;
            uint32_t alternative;
        };
        std::vector<std::vector<alternative_ref>> used_in(n);  // rule -> the alternatives naming it
        std::vector<std::vector<uint32_t>> pending(n);         // rule, alternative -> non-nullable left
        std::vector<uint32_t> work;
        for (size_t i = 0; i < n; ++i) {
            pending[i].resize(rules_[i].alternatives.size());
            for (size_t a = 0; a < rules_[i].alternatives.size(); ++a) {
                uint32_t left = 0;
                bool has_chars = false;
                for (const auto &e : rules_[i].alternatives[a]) {
                    if (e.type == grammar_element::kind::rule) {
                        ++left;
                        used_in[e.index].push_back({uint32_t(i), uint32_t(a)});
                    } else {
                        has_chars = true;
                    }
                }
                pending[i][a] = has_chars ? UINT32_MAX : left;  // characters: never empty
                if (left == 0 && !has_chars && !nullable[i]) {
                    nullable[i] = true;
                    work.push_back(uint32_t(i));
                }
            }
        }
        while (!work.empty()) {
            const uint32_t r = work.back();
            work.pop_back();
            for (const auto &[rule, alternative] : used_in[r]) {
                uint32_t &left = pending[rule][alternative];
                if (left == UINT32_MAX || left == 0) continue;
                if (--left == 0 && !nullable[rule]) {
                    nullable[rule] = true;
                    work.push_back(rule);
                }
            }
        }
        // edges: rule -> the rules it may start with
        std::vector<std::vector<uint32_t>> starts(n);
        for (size_t i = 0; i < n; ++i)
            for (const auto &alt : rules_[i].alternatives)
                for (const auto &e : alt) {
                    if (e.type != grammar_element::kind::rule) break;
                    starts[i].push_back(e.index);
                    if (!nullable[e.index]) break;
                }
        // depth-first search with an explicit stack; a grey node met again closes a cycle
        std::vector<uint8_t> color(n, 0);  // 0 white, 1 grey (on the path), 2 black
        for (size_t root = 0; root < n; ++root) {
            if (color[root]) continue;
            std::vector<std::pair<uint32_t, size_t>> path = {{uint32_t(root), 0}};
            color[root] = 1;
            while (!path.empty()) {
                auto &[rule, next] = path.back();
                if (next == starts[rule].size()) {
                    color[rule] = 2;
                    path.pop_back();
                    continue;
                }
                const uint32_t to = starts[rule][next++];
                if (color[to] == 1) {
                    std::string cycle;
                    bool on = false;
                    for (const auto &p : path) {
                        on = on || p.first == to;
                        if (on) cycle += rules_[p.first].name + " -> ";
                    }
                    cycle += rules_[to].name;
                    const rule_draft &r = rules_[to];
                    fail_at(r.defined_at,
                            (r.generated ? "this repetition or group ('" + r.name + "')"
                                         : "rule '" + r.name + "'") +
                                " can reach itself without reading a character (left recursion: " + cycle +
                                ")");
                }
                if (color[to] == 0) {
                    color[to] = 1;
                    path.push_back({to, 0});
                }
            }
        }
    }

    std::shared_ptr<const grammar> build(uint32_t root) {
        auto g = std::make_shared<grammar>();
        g->char_sets_ = std::move(char_sets_);
        g->root_ = root;
        for (const auto &r : rules_) {
            grammar_rule out;
            out.name = r.name;
            out.generated = r.generated;
            std::tie(out.line, out.column) = line_column(r.defined_at);
            for (const auto &alt : r.alternatives) {
                out.alternatives.push_back(uint32_t(g->elements_.size()));
                g->elements_.insert(g->elements_.end(), alt.begin(), alt.end());
                g->elements_.push_back({grammar_element::kind::end, 0});
            }
            g->rules_.push_back(std::move(out));
        }
        return g;
    }

    std::string_view text_, source_;
    mutable std::vector<size_t> line_starts_;
    size_t n_generated_ = 0;  // of rules_, made for groups and repetitions  // of text_, made when a position
                              // is first asked for
    size_t pos_ = 0;
    std::vector<rule_draft> rules_;
    std::unordered_map<std::string, uint32_t> names_;
    std::vector<grammar_char_set> char_sets_;
    uint32_t current_rule_ = 0;
    int group_depth_ = 0;
};

void cancel_grammar_work() {
    grammar_work_stopped = true;
}

void throw_if_grammar_work_cancelled() {
    if (grammar_work_stopped.load(std::memory_order_relaxed))
        throw error("grammar work cancelled: the process is stopping");
}

std::shared_ptr<const grammar> grammar::parse(std::string_view text, std::string_view source,
                                              std::string_view root) {
    return grammar_parser(text, source).run(root);
}

std::string grammar::to_string() const {
    auto single = [&](const grammar_element &e) {
        if (e.type != grammar_element::kind::chars) return false;
        const auto &s = char_sets_[e.index];
        return !s.negated && s.ranges.size() == 1 && s.ranges[0].first == s.ranges[0].second;
    };
    std::string out;
    for (const auto &r : rules_) {
        out += r.name + " ::=";
        for (size_t a = 0; a < r.alternatives.size(); ++a) {
            if (a) out += " |";
            size_t i = r.alternatives[a];
            if (elements_[i].type == grammar_element::kind::end) out += " \"\"";
            for (; elements_[i].type != grammar_element::kind::end; ++i) {
                const grammar_element &e = elements_[i];
                if (e.type == grammar_element::kind::rule) {
                    out += " " + rules_[e.index].name;
                } else if (single(e)) {
                    out += " \"";
                    for (; single(elements_[i]); ++i)
                        out += escape_code_point(char_sets_[elements_[i].index].ranges[0].first, "\"");
                    --i;
                    out += "\"";
                } else {
                    const auto &s = char_sets_[e.index];
                    if (s.negated && s.ranges.empty()) {
                        out += " .";
                        continue;
                    }
                    out += s.negated ? " [^" : " [";
                    for (const auto &[lo, hi] : s.ranges) {
                        out += escape_code_point(lo, "[]-^");
                        if (hi != lo) out += "-" + escape_code_point(hi, "[]-^");
                    }
                    out += "]";
                }
            }
        }
        out += "\n";
    }
    return out;
}

}  // namespace weft
