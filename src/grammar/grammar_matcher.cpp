// src/grammar/grammar_matcher.cpp — UTF-8 decoding step by step, the lazily built automaton over the
// grammar's pushdown stacks, and grammar_matcher on top of it.
#include <algorithm>
#include <string>
#include <unordered_set>

#include "grammar/grammar_automaton.h"
#include "weft/core/error.h"

namespace weft {

namespace {

constexpr int32_t unknown_state = -2;

// pending = value | remaining << 24 | length << 26 (see grammar_automaton.h)
uint32_t pack_pending(uint32_t value, uint32_t remaining, uint32_t length) {
    return value | (remaining << 24) | (length << 26);
}

}  // namespace

utf8_step_result utf8_step(uint32_t &pending, uint8_t byte, uint32_t &code_point) {
    if (pending == 0) {
        if (byte < 0x80) {
            code_point = byte;
            return utf8_step_result::complete;
        }
        // C0 and C1 could only start overlong forms; F5..FF nothing at all
        if (byte >= 0xC2 && byte <= 0xDF)
            pending = pack_pending(byte & 0x1Fu, 1, 2);
        else if (byte >= 0xE0 && byte <= 0xEF)
            pending = pack_pending(byte & 0x0Fu, 2, 3);
        else if (byte >= 0xF0 && byte <= 0xF4)
            pending = pack_pending(byte & 0x07u, 3, 4);
        else
            return utf8_step_result::invalid;
        return utf8_step_result::pending;
    }
    if ((byte & 0xC0) != 0x80) return utf8_step_result::invalid;
    const uint32_t value = ((pending & 0x1FFFFFu) << 6) | (byte & 0x3Fu);
    const uint32_t remaining = ((pending >> 24) & 3u) - 1;
    const uint32_t length = (pending >> 26) & 7u;
    if (remaining > 0) {
        pending = pack_pending(value, remaining, length);
        return utf8_step_result::pending;
    }
    pending = 0;
    const uint32_t smallest = length == 2 ? 0x80 : length == 3 ? 0x800 : 0x10000;
    if (value < smallest || (value >= 0xD800 && value <= 0xDFFF) || value > 0x10FFFF)
        return utf8_step_result::invalid;
    code_point = value;
    return utf8_step_result::complete;
}

bool utf8_pending_range(uint32_t pending, uint32_t &lo, uint32_t &hi) {
    const uint32_t value = pending & 0x1FFFFFu;
    const uint32_t remaining = (pending >> 24) & 3u;
    const uint32_t length = (pending >> 26) & 7u;
    lo = value << (6 * remaining);
    hi = lo | ((1u << (6 * remaining)) - 1);
    lo = std::max(lo, length == 2 ? 0x80u : length == 3 ? 0x800u : 0x10000u);
    hi = std::min(hi, 0x10FFFFu);
    if (lo > hi) return false;
    return !(lo >= 0xD800 && hi <= 0xDFFF);
}

namespace {
constexpr uint64_t fnv_basis = 1469598103934665603ull, fnv_prime = 1099511628211ull;
// FNV-1a over a stack's positions and its length
uint64_t hash_stack(uint64_t h, const std::vector<uint32_t> &s) {
    for (uint32_t p : s) h = (h ^ p) * fnv_prime;
    return (h ^ (0x80000000u | uint32_t(s.size()))) * fnv_prime;
}
}  // namespace

size_t grammar_automaton::stacks_hash::operator()(const std::vector<stack> &stacks) const {
    uint64_t h = fnv_basis;
    for (const auto &s : stacks) h = hash_stack(h, s);
    return size_t(h);
}

size_t grammar_automaton::stack_hash::operator()(const stack &s) const {
    return size_t(hash_stack(fnv_basis, s));
}

grammar_automaton::grammar_automaton(std::shared_ptr<const grammar> g) : grammar_(std::move(g)) {
    WEFT_ASSERT(grammar_ != nullptr);
    std::vector<stack> work;
    for (uint32_t start : grammar_->rules()[grammar_->root()].alternatives) {
        stack s;
        if (grammar_->elements()[start].type != grammar_element::kind::end) s.push_back(start);
        work.push_back(std::move(s));
    }
    expand(work, start_stacks_);
    start_ = intern(start_stacks_);
}

void grammar_automaton::expand(std::vector<stack> &work, std::vector<stack> &out) const {
    const auto &elements = grammar_->elements();
    // Past the first few stacks, every stack met is expanded once: a rule reached again by another
    // derivation (e ::= "" | "", root ::= e e e ... e "a") would otherwise double the work at each of
    // them. Most expansions are a handful of stacks and skip the set's cost.
    constexpr size_t dedup_after = 64;
    std::unordered_set<stack, stack_hash> seen;
    size_t met = 0, seen_positions = 0;
    auto too_many = [] {
        throw error("grammar: the text so far leaves the matcher more than " +
                    std::to_string(max_grammar_stack_positions) +
                    " stack positions at once (recursion below nested repetitions); it stops here");
    };
    while (!work.empty()) {
        stack s = std::move(work.back());
        work.pop_back();
        if (++met > dedup_after) {
            if (!seen.insert(s).second) continue;
            seen_positions += s.size() + 1;
            if (seen_positions > 4 * max_grammar_stack_positions) too_many();
        }
        if (s.empty() || elements[s.back()].type == grammar_element::kind::chars) {
            out.push_back(std::move(s));
            continue;
        }
        // a rule on top: what follows it stays below (not when the rule ends its alternative: a tail
        // call, so right recursion such as x* does not grow the stack), each alternative goes on top
        const uint32_t at = s.back();
        s.pop_back();
        if (elements[at + 1].type != grammar_element::kind::end) s.push_back(at + 1);
        for (uint32_t start : grammar_->rules()[elements[at].index].alternatives) {
            stack next = s;
            if (elements[start].type != grammar_element::kind::end) next.push_back(start);
            work.push_back(std::move(next));
        }
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    size_t positions = 0;
    for (const auto &s : out) positions += s.size();
    if (positions > max_grammar_stack_positions) too_many();
}

int32_t grammar_automaton::intern(std::vector<stack> stacks) {
    if (stacks.empty()) return dead;
    if (auto it = ids_.find(stacks); it != ids_.end()) return it->second;
    state_info info;
    info.ascii.fill(unknown_state);
    for (const auto &s : stacks) {
        if (s.empty())
            info.can_end = true;
        else
            info.tops.push_back(grammar_->elements()[s.back()].index);
    }
    std::sort(info.tops.begin(), info.tops.end());
    info.tops.erase(std::unique(info.tops.begin(), info.tops.end()), info.tops.end());
    const int32_t id = int32_t(states_.size());
    ids_.emplace(stacks, id);
    info.stacks = std::move(stacks);
    states_.push_back(std::move(info));
    return id;
}

int32_t grammar_automaton::next(int32_t state, uint32_t code_point) {
    if (state == dead) return dead;
    state_info &info = states_[size_t(state)];
    if (code_point < 128 && info.ascii[code_point] != unknown_state) return info.ascii[code_point];
    if (code_point >= 128)
        if (auto it = info.others.find(code_point); it != info.others.end()) return it->second;

    const auto &elements = grammar_->elements();
    const auto &sets = grammar_->char_sets();
    std::vector<stack> work, out;
    for (const auto &s : info.stacks) {
        if (s.empty() || !sets[elements[s.back()].index].matches(code_point)) continue;
        stack moved = s;
        if (elements[++moved.back()].type == grammar_element::kind::end) moved.pop_back();
        work.push_back(std::move(moved));
    }
    expand(work, out);
    const int32_t to = intern(std::move(out));
    // intern may have grown states_: look the record up again
    state_info &from = states_[size_t(state)];
    if (code_point < 128)
        from.ascii[code_point] = to;
    else
        from.others.emplace(code_point, to);
    return to;
}

bool grammar_automaton::expects_any(int32_t state, uint32_t lo, uint32_t hi) const {
    const auto &sets = grammar_->char_sets();
    for (uint32_t set : states_[size_t(state)].tops)
        if (sets[set].matches_any(lo, hi)) return true;
    return false;
}

int32_t grammar_automaton::step(int32_t state, uint32_t &pending, uint8_t byte) {
    uint32_t cp = 0;
    switch (utf8_step(pending, byte, cp)) {
        case utf8_step_result::invalid:
            return dead;
        case utf8_step_result::complete:
            return next(state, cp);
        case utf8_step_result::pending:
            break;
    }
    uint32_t lo = 0, hi = 0;
    if (!utf8_pending_range(pending, lo, hi) || !expects_any(state, lo, hi)) return dead;
    return state;
}

bool grammar_automaton::feed(int32_t &state, uint32_t &pending, const char *bytes, size_t n) {
    int32_t s = state;
    uint32_t p = pending;
    for (size_t i = 0; i < n && s != dead; ++i) s = step(s, p, uint8_t(bytes[i]));
    if (s == dead) return false;
    state = s;
    pending = p;
    return true;
}

int32_t grammar_automaton::compact(int32_t state) {
    std::vector<stack> keep = states_[size_t(state)].stacks;
    states_.clear();
    ids_.clear();
    start_ = intern(start_stacks_);
    return intern(std::move(keep));
}

int32_t grammar_automaton::adopt(const grammar_automaton &other, int32_t state) {
    WEFT_ASSERT(other.grammar_ == grammar_);
    return intern(other.states_[size_t(state)].stacks);
}

grammar_matcher::grammar_matcher(std::shared_ptr<const grammar> g)
    : automaton_(std::make_unique<grammar_automaton>(std::move(g))),
      state_(automaton_->start()),
      partial_(0) {}
grammar_matcher::~grammar_matcher() = default;
grammar_matcher::grammar_matcher(grammar_matcher &&) noexcept = default;
grammar_matcher &grammar_matcher::operator=(grammar_matcher &&) noexcept = default;

bool grammar_matcher::accept(std::string_view bytes) {
    return automaton_->feed(state_, partial_, bytes.data(), bytes.size());
}

bool grammar_matcher::can_end() const {
    return partial_ == 0 && automaton_->can_end(state_);
}

void grammar_matcher::reset() {
    state_ = automaton_->start();
    partial_ = 0;
}

bool grammar_matches(std::shared_ptr<const grammar> g, std::string_view text) {
    grammar_matcher m(std::move(g));
    return m.accept(text) && m.can_end();
}

}  // namespace weft
