// weft/grammar/grammar.h — GBNF grammars (the format of llama.cpp's grammars/*.gbnf): the parser,
// a matcher that follows text through them, and the sampler that keeps generation inside one.
//
// A grammar is a list of rules `name ::= alternatives`, `root` being the whole text. Sequences hold
// "literals" (escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH), character classes [a-z_] and
// negated ones [^"\\], `.` (any character), rule names and (groups); each may be followed by `*`,
// `+`, `?` or `{m}`, `{m,}`, `{m,n}`, `{,n}`. `#` starts a comment. A rule ends at the end of its
// line, except inside parentheses and right after a `|`. Terminals are Unicode code points; the
// matcher reads UTF-8 and keeps a character split between two tokens pending until it is whole.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/sampling/sampling.h"
#include "weft/vocab/vocab.h"

namespace weft {

// A set of code points: sorted, disjoint, non-adjacent inclusive ranges, possibly negated.
struct grammar_char_set {
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    bool negated = false;

    bool matches(uint32_t cp) const;
    // Whether some code point in [lo, hi] matches.
    bool matches_any(uint32_t lo, uint32_t hi) const;
};

// One step of an alternative: a character set, a reference to a rule, or the end of the alternative.
struct grammar_element {
    enum class kind : uint8_t { end, chars, rule };
    kind type = kind::end;
    uint32_t index = 0;  // chars: into char_sets(); rule: into rules()
};

struct grammar_rule {
    std::string name;  // as written; rules made for groups and repetitions are named <rule>_<n>
    std::vector<uint32_t> alternatives;  // each the index in elements() of its first element
    bool generated = false;              // made by the parser for a group or a repetition
    uint32_t line = 0, column = 0;       // where it was defined (a generated rule: its group / operator)
};

// The sizes a grammar may have (grammar::parse refuses more, naming the limit, before the work that
// grows with them): its text, the rules it names, and the rules its groups and repetitions make
// (x{0,n} makes n nested ones). JSON-schema grammars stay far below them (json_schema.h).
constexpr size_t max_grammar_bytes = size_t(4) << 20;
constexpr size_t max_grammar_rules = 10000;
constexpr size_t max_generated_rules = 200000;
// The positions of all the pushdown stacks the matcher keeps for one point of the text, together.
// Recursion below nested, ambiguous repetitions (root ::= ([a-z]+)* (. root "x")) adds stacks as deep
// as the text is long at every character, so each character costs more than the last (256 characters
// took 0.5 s, and the time grows with the cube of the length). Text that reaches this many stops the
// matcher (accept, the sampler) with weft::error naming the limit, at a few milliseconds a character.
constexpr size_t max_grammar_stack_positions = size_t(1) << 16;

// Makes every grammar parse and JSON-schema conversion in progress, and any started later, stop with
// an error: for a process that is stopping (`weft serve` on SIGTERM), which should not wait for them.
void cancel_grammar_work();
// Throws weft::error ("grammar work cancelled") once cancel_grammar_work() was called.
void throw_if_grammar_work_cancelled();

class grammar {
  public:
    // Parses GBNF text. Throws weft::error "<source>:<line>:<column>: <what>" (1-based; columns count
    // characters) on bad syntax, an unknown escape, a rule used but never defined or defined twice,
    // a repetition count out of range, left recursion (a rule that can reach itself without reading
    // a character, which no pushdown matcher can follow), or a missing start rule.
    static std::shared_ptr<const grammar> parse(std::string_view text, std::string_view source = "grammar",
                                                std::string_view root = "root");

    const std::vector<grammar_rule> &rules() const { return rules_; }
    const std::vector<grammar_element> &elements() const { return elements_; }
    const std::vector<grammar_char_set> &char_sets() const { return char_sets_; }
    uint32_t root() const { return root_; }

    // The rules written back as GBNF (groups and repetitions as the rules they became); parsing it
    // gives the same language.
    std::string to_string() const;

  private:
    friend class grammar_parser;
    std::vector<grammar_rule> rules_;
    std::vector<grammar_element> elements_;
    std::vector<grammar_char_set> char_sets_;
    uint32_t root_ = 0;
};

class grammar_automaton;

// Text matched against a grammar so far: the set of pushdown stacks the grammar may be in, and the
// bytes of a character not yet complete.
class grammar_matcher {
  public:
    explicit grammar_matcher(std::shared_ptr<const grammar> g);
    ~grammar_matcher();
    grammar_matcher(grammar_matcher &&) noexcept;
    grammar_matcher &operator=(grammar_matcher &&) noexcept;

    // Reads more bytes; false when they cannot continue the text (the state is then unchanged).
    bool accept(std::string_view bytes);
    // Whether the text read so far is a whole sentence of the grammar.
    bool can_end() const;
    void reset();

  private:
    std::unique_ptr<grammar_automaton> automaton_;
    int32_t state_;
    uint32_t partial_;  // the pending UTF-8 character (see grammar_automaton.h)
};

// Whether all of `text` is a sentence of the grammar.
bool grammar_matches(std::shared_ptr<const grammar> g, std::string_view text);

// Removes every candidate whose text (token_to_piece, control tokens rendered as nothing) cannot
// continue the grammar from what was accepted so far; end-of-generation tokens stay only where the
// grammar can end, and tokens with no text never stay. accept() follows the grammar with the token's
// bytes (an end-of-generation token changes nothing) and throws weft::error for a token the grammar
// rejects. apply() throws weft::error when no candidate is left. The vocabulary must outlive it.
// `index` (make_grammar_vocab_index of the same vocabulary) spares it building its own on first use.
class grammar_vocab_index;
std::unique_ptr<sampler> make_grammar_sampler(const vocab &v, std::shared_ptr<const grammar> g,
                                              std::shared_ptr<const grammar_vocab_index> index = {});

// Every token's piece as a byte trie, what grammar samplers walk: 8-60 ms to build on a large
// vocabulary, so a server builds it once per model and hands it to every request's sampler.
// Immutable once built: shared across threads. The vocabulary must outlive it.
std::shared_ptr<const grammar_vocab_index> make_grammar_vocab_index(const vocab &v);

// make_sampler_chain(params) for every sampler but the grammar. With params.grammar set, the result
// runs the grammar sampler first (so no later sampler can choose a token it removed) and that chain
// after it. `history` (the prompt) is accepted by the inner chain only: penalties see it, the grammar
// does not. Throws weft::error for bad parameters or a grammar that does not parse.
std::unique_ptr<sampler_chain> make_sampler_chain(const sampling_params &params, const vocab &v,
                                                  std::span<const token> history = {},
                                                  std::shared_ptr<const grammar_vocab_index> index = {});

}  // namespace weft
