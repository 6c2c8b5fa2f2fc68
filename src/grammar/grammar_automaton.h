// src/grammar/grammar_automaton.h — the grammar's pushdown stacks as an automaton built lazily: each
// distinct set of stacks is interned once and its transitions per code point are remembered, so text
// the grammar has already seen (a string's characters, a token piece tried at the last step) costs a
// table lookup. Internal to the grammar matcher and sampler.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "weft/grammar/grammar.h"

namespace weft {

// A UTF-8 character in progress, packed in 32 bits: 0 when none; otherwise bits 0..20 hold the value
// read so far, bits 24..25 the bytes still to come and bits 26..27 the character's length.
enum class utf8_step_result { invalid, pending, complete };
// Adds one byte. Invalid: a stray continuation byte, a lead byte that starts nothing, a missing
// continuation byte, or a finished character that is overlong, a surrogate or above U+10FFFF.
utf8_step_result utf8_step(uint32_t &pending, uint8_t byte, uint32_t &code_point);
// The code points the pending character can still become, clipped to valid scalar values; false
// when none is left (a surrogate's prefix, say).
bool utf8_pending_range(uint32_t pending, uint32_t &lo, uint32_t &hi);

class grammar_automaton {
  public:
    static constexpr int32_t dead = -1;

    explicit grammar_automaton(std::shared_ptr<const grammar> g);

    const std::shared_ptr<const grammar> &source() const { return grammar_; }
    int32_t start() const { return start_; }
    // The state after reading code point cp in `state` (dead when the grammar cannot read it).
    int32_t next(int32_t state, uint32_t code_point);
    // Reads bytes from (state, pending); false, leaving both unchanged, when they cannot continue.
    bool feed(int32_t &state, uint32_t &pending, const char *bytes, size_t n);
    // The state after one byte, with a pending character checked against what the stacks expect.
    int32_t step(int32_t state, uint32_t &pending, uint8_t byte);
    bool can_end(int32_t state) const { return states_[size_t(state)].can_end; }
    size_t size() const { return states_.size(); }

    // Forgets every state but `state`, which it returns renumbered (the cache's memory is bounded
    // this way on long generations). Ids of other states become invalid.
    int32_t compact(int32_t state);
    // Interns the stacks of `state` of another automaton of the same grammar.
    int32_t adopt(const grammar_automaton &other, int32_t state);

  private:
    using stack = std::vector<uint32_t>;  // element positions; the back one is the next to match
    struct state_info {
        std::vector<stack> stacks;   // sorted, unique; an empty stack: the grammar may end here
        std::vector<uint32_t> tops;  // the distinct char sets at the stacks' tops
        bool can_end = false;
        std::array<int32_t, 128> ascii;                // next state per ASCII code point; -2: not known
        std::unordered_map<uint32_t, int32_t> others;  // the same for the rest
    };
    struct stacks_hash {
        size_t operator()(const std::vector<stack> &s) const;
    };
    struct stack_hash {
        size_t operator()(const stack &s) const;
    };

    // Replaces rule references at the stacks' tops by the rules' alternatives until every stack has a
    // char set on top (or is empty), then sorts and deduplicates.
    void expand(std::vector<stack> &work, std::vector<stack> &out) const;
    int32_t intern(std::vector<stack> stacks);
    bool expects_any(int32_t state, uint32_t lo, uint32_t hi) const;

    std::shared_ptr<const grammar> grammar_;
    std::vector<state_info> states_;
    std::unordered_map<std::vector<stack>, int32_t, stacks_hash> ids_;
    std::vector<stack> start_stacks_;
    int32_t start_ = dead;
};

}  // namespace weft
