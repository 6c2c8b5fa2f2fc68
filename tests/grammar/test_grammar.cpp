// tests/grammar/test_grammar.cpp — GBNF: the corpus of valid grammars (with texts each must accept or
// reject) and invalid ones (with the error and its line:column), the matcher on split UTF-8, and the
// grammar sampler against a token-by-token oracle on a small vocabulary.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/fixtures.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/grammar/grammar.h"
#include "weft/sampling/sampling.h"
#include "weft/vocab/vocab.h"

namespace weft {
namespace {

const std::filesystem::path corpus_dir = std::filesystem::path(WEFT_SOURCE_DIR) / "tests/grammar/corpus";

std::string read_file(const std::filesystem::path &p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::vector<std::filesystem::path> corpus(const std::string &kind) {
    std::vector<std::filesystem::path> files;
    for (const auto &e : std::filesystem::directory_iterator(corpus_dir / kind)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    return files;
}

// The texts a corpus grammar lists in its comments: `# accept: "json string"` / `# reject: ...`.
std::vector<std::string> listed(const std::string &text, const std::string &tag) {
    std::vector<std::string> out;
    std::istringstream lines(text);
    const std::string prefix = "# " + tag + ": ";
    for (std::string line; std::getline(lines, line);)
        if (line.rfind(prefix, 0) == 0) out.push_back(nlohmann::json::parse(line.substr(prefix.size())));
    return out;
}

// The same verdict however the text is cut into pieces.
bool matches_in_pieces(const std::shared_ptr<const grammar> &g, const std::string &text, size_t piece) {
    grammar_matcher m(g);
    for (size_t i = 0; i < text.size(); i += piece)
        if (!m.accept(std::string_view(text).substr(i, piece))) return false;
    return m.can_end();
}

TEST(Grammar, ValidCorpusAcceptsAndRejectsItsTexts) {
    const auto files = corpus("valid");
    ASSERT_GE(files.size(), 5u);
    for (const auto &file : files) {
        SCOPED_TRACE(file.filename().string());
        const std::string text = read_file(file);
        const auto g = grammar::parse(text, file.filename().string());
        const auto again = grammar::parse(g->to_string(), "to_string");
        const auto accepted = listed(text, "accept"), rejected = listed(text, "reject");
        ASSERT_FALSE(accepted.empty());
        ASSERT_FALSE(rejected.empty());
        for (const auto &s : accepted) {
            EXPECT_TRUE(grammar_matches(g, s)) << s;
            EXPECT_TRUE(grammar_matches(again, s)) << s << "\n" << g->to_string();
            EXPECT_TRUE(matches_in_pieces(g, s, 1)) << s;
            EXPECT_TRUE(matches_in_pieces(g, s, 3)) << s;
        }
        for (const auto &s : rejected) {
            EXPECT_FALSE(grammar_matches(g, s)) << s;
            EXPECT_FALSE(grammar_matches(again, s)) << s;
            EXPECT_FALSE(matches_in_pieces(g, s, 1)) << s;
        }
    }
}

TEST(Grammar, InvalidCorpusNamesTheErrorAndWhere) {
    const auto files = corpus("invalid");
    ASSERT_GE(files.size(), 15u);
    for (const auto &file : files) {
        SCOPED_TRACE(file.filename().string());
        const std::string text = read_file(file);
        const std::string first = text.substr(0, text.find('\n'));
        ASSERT_EQ(first.rfind("# error: ", 0), 0u) << "the first line says which error to expect";
        const std::string expected = first.substr(9);
        const std::string source = file.filename().string();
        try {
            grammar::parse(text, source);
            ADD_FAILURE() << "parsed without an error";
        } catch (const error &e) {
            const std::string what = e.what();
            // "file:line:column: what" where the expectation has a position, "file: what" otherwise
            const bool positioned = !expected.empty() && expected[0] >= '0' && expected[0] <= '9';
            EXPECT_EQ(what.rfind(source + (positioned ? ":" : ": ") + expected, 0), 0u) << what;
        }
    }
}

TEST(Grammar, DeepNestingIsAnErrorNotACrash) {
    const std::string deep = "root ::= " + std::string(100000, '(') + "\"a\"" + std::string(100000, ')');
    try {
        grammar::parse(deep);
        ADD_FAILURE() << "parsed";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("grammar:1:266: groups nest deeper than 256 levels"),
                  std::string::npos)
            << e.what();
    }
    const std::string fine = "root ::= " + std::string(200, '(') + "\"a\"" + std::string(200, ')') + "+";
    EXPECT_TRUE(grammar_matches(grammar::parse(fine), "aaa"));
}

// Mutated corpus grammars (bytes replaced, inserted, cut) either parse or fail with weft::error; a
// grammar that parses then matches random text without trouble.
TEST(Grammar, MutatedGrammarsParseOrFailCleanly) {
    std::vector<std::string> texts;
    for (const auto &f : corpus("valid")) texts.push_back(read_file(f));
    const std::string alphabet = "()[]{}|*+?.\"\\-^:=# \n\taz09,\xC3\xA9\xFF";
    std::mt19937 rng(11);
    int parsed = 0;
    for (int i = 0; i < 3000; ++i) {
        std::string text = texts[rng() % texts.size()];
        for (int edits = 1 + int(rng() % 3); edits > 0; --edits) {
            const size_t at = rng() % (text.size() + 1);
            const char c = alphabet[rng() % alphabet.size()];
            switch (rng() % 3) {
                case 0:
                    if (at < text.size()) text[at] = c;
                    break;
                case 1:
                    text.insert(text.begin() + ptrdiff_t(at), c);
                    break;
                default:
                    text.erase(at, rng() % 8);
                    break;
            }
        }
        std::shared_ptr<const grammar> g;
        try {
            g = grammar::parse(text);
        } catch (const error &) {
            continue;
        }
        ++parsed;
        // written back, it parses again and answers the same
        std::shared_ptr<const grammar> again;
        ASSERT_NO_THROW(again = grammar::parse(g->to_string(), "to_string")) << text << "\n"
                                                                             << g->to_string();
        for (int k = 0; k < 4; ++k) {
            std::string probe;
            for (size_t n = rng() % 12; n > 0; --n) probe += alphabet[rng() % alphabet.size()];
            EXPECT_EQ(grammar_matches(g, probe), grammar_matches(again, probe)) << text;
        }
    }
    EXPECT_GT(parsed, 100);
}

// Raw text in literals and classes must be the UTF-8 the matcher reads: overlong forms, surrogates
// and sequences above U+10FFFF are errors (the fuzzer found a class holding F6 91 8A 92, "U+191292",
// which to_string() wrote back as an escape the parser then refused).
TEST(Grammar, RawTextMustBeValidUtf8) {
    for (const char *bad : {"\xF6\x91\x8A\x92", "\xF4\x90\x80\x80", "\xC0\xAF", "\xE0\x80\xAF",
                            "\xF0\x80\x80\xAF", "\xED\xA0\x80", "\xED\xBF\xBF"}) {
        for (const std::string &text :
             {"root ::= \"" + std::string(bad) + "\"", "root ::= [a" + std::string(bad) + "]"}) {
            try {
                grammar::parse(text);
                ADD_FAILURE() << "parsed " << text;
            } catch (const error &e) {
                EXPECT_NE(std::string(e.what()).find("grammar:1:"), std::string::npos) << e.what();
                EXPECT_NE(std::string(e.what()).find("not valid UTF-8"), std::string::npos) << e.what();
            }
        }
    }
    const auto g = grammar::parse("root ::= [\x7F\xC2\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF\xEE\x80\x80]+");
    EXPECT_TRUE(grammar_matches(g, "\x7F\xC2\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF\xEE\x80\x80"));
    EXPECT_TRUE(grammar_matches(grammar::parse(g->to_string()), "\xF4\x8F\xBF\xBF"));
}

// Stacks are expanded once however many derivations reach them: with e ::= "" | "", a chain of 64
// e's has 2^64 derivations of the one stack "a" (before, 22 of them took 1.2 s, each one more doubled it,
// and the duplicates filled memory before they were removed).
TEST(GrammarMatcher, AmbiguousEmptyRulesExpandOnce) {
    std::string text = "root ::=";
    for (int i = 0; i < 64; ++i) text += " e";
    text += " \"a\" e \"b\"\ne ::= \"\" | \"\"\n";
    const auto g = grammar::parse(text);
    EXPECT_TRUE(grammar_matches(g, "ab"));
    EXPECT_FALSE(grammar_matches(g, "aab"));
}

// Recursion below nested, ambiguous repetitions adds a stack as deep as the text at every character,
// and each character costs more than the last: the matcher stops with an error once the stacks of
// one point of the text hold max_grammar_stack_positions positions (here after ~200 characters), and
// the sampler turns it into the request's error.
TEST(GrammarMatcher, StacksThatGrowWithTheTextStopWithAnError) {
    const auto g = grammar::parse("root ::= ([a-z]+)* (. root \"x\")?");
    grammar_matcher m(g);
    size_t read = 0;
    try {
        for (; read < 4096; ++read) ASSERT_TRUE(m.accept("a"));
        ADD_FAILURE() << "4096 characters read";
    } catch (const error &e) {
        EXPECT_NE(std::string(e.what()).find("more than " + std::to_string(max_grammar_stack_positions) +
                                             " stack positions"),
                  std::string::npos)
            << e.what();
    }
    EXPECT_GT(read, 64u);
    // the same grammar on text that keeps the stacks few is fine
    EXPECT_TRUE(grammar_matches(g, "abc"));
}

TEST(Grammar, RepetitionsBecomeRules) {
    const auto g = grammar::parse("root ::= [a-c]{2,3} x*\nx ::= \"x\"");
    EXPECT_EQ(g->to_string(),
              "root ::= [a-c] [a-c] root_1 root_2\n"
              "root_1 ::= [a-c] | \"\"\n"
              "x ::= \"x\"\n"
              "root_2 ::= x root_2 | \"\"\n");
    EXPECT_TRUE(g->rules()[1].generated);
    EXPECT_EQ(g->rules()[1].line, 1u);
    EXPECT_EQ(g->rules()[1].column, 15u);  // the '{' it came from
    EXPECT_TRUE(grammar_matches(g, "abcxx"));
    EXPECT_FALSE(grammar_matches(g, "abcdx"));
    EXPECT_FALSE(grammar_matches(g, "a"));
}

TEST(Grammar, StartRuleByName) {
    const auto g = grammar::parse("a ::= \"x\" b\nb ::= \"y\"", "g", "b");
    EXPECT_TRUE(grammar_matches(g, "y"));
    EXPECT_FALSE(grammar_matches(g, "xy"));
}

TEST(GrammarMatcher, CharactersSplitAcrossPieces) {
    const auto g = grammar::parse("root ::= [é-ê] \"x\" | \"\\u4e16\"");
    grammar_matcher m(g);
    EXPECT_TRUE(m.accept("\xC3"));  // half of é: pending, and é or ê may still come
    EXPECT_FALSE(m.can_end());
    EXPECT_FALSE(m.accept("x"));     // not a continuation byte: refused, state unchanged
    EXPECT_FALSE(m.accept("\xA8"));  // è is outside the class
    EXPECT_TRUE(m.accept("\xA9"));
    EXPECT_TRUE(m.accept("x"));
    EXPECT_TRUE(m.can_end());

    m.reset();
    EXPECT_TRUE(m.accept("\xE4"));
    EXPECT_TRUE(m.accept("\xB8"));
    EXPECT_FALSE(m.accept("\x95"));  // U+4E15
    EXPECT_TRUE(m.accept("\x96"));   // U+4E16
    EXPECT_TRUE(m.can_end());

    m.reset();
    EXPECT_FALSE(m.accept("\xE5"));  // no three-byte character starting U+5xxx is expected
}

TEST(GrammarMatcher, InvalidUtf8NeverMatches) {
    const auto any = grammar::parse("root ::= .*");
    EXPECT_TRUE(grammar_matches(any, "h\xC3\xA9llo \xF0\x9F\x98\x80"));
    EXPECT_FALSE(grammar_matches(any, "\x80"));              // stray continuation byte
    EXPECT_FALSE(grammar_matches(any, "\xC0\xAF"));          // overlong '/'
    EXPECT_FALSE(grammar_matches(any, "\xE0\x80\xAF"));      // overlong '/'
    EXPECT_FALSE(grammar_matches(any, "\xED\xA0\x80"));      // surrogate U+D800
    EXPECT_FALSE(grammar_matches(any, "\xF4\x90\x80\x80"));  // above U+10FFFF
    EXPECT_FALSE(grammar_matches(any, "\xC3"));              // cut short
    grammar_matcher m(any);
    EXPECT_FALSE(m.accept("\xED\xA0"));  // only surrogates can follow
}

// --- the sampler, on an SPM vocabulary: <unk> <s> </s>, 256 byte tokens, then JSON-ish pieces

struct json_vocab {
    std::unique_ptr<vocab> v;
    std::vector<std::string> pieces;  // by id, as token_to_piece renders them
};

json_vocab make_json_vocab() {
    vocab_spec s;
    s.model = "llama";
    auto add = [&](std::string text, token_type type) {
        s.tokens.push_back(std::move(text));
        s.scores.push_back(0.0f);
        s.types.push_back(type);
    };
    add("<unk>", token_type::unknown);
    add("<s>", token_type::control);
    add("</s>", token_type::control);
    static const char *hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b) add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", token_type::byte);
    for (const char *piece : {"{",
                              "}",
                              "[",
                              "]",
                              "\"",
                              ":",
                              ",",
                              "{\"",
                              "\":",
                              "\",",
                              "\"}",
                              "true",
                              "false",
                              "null",
                              "0",
                              "1",
                              "12",
                              "-",
                              ".",
                              "e",
                              "a",
                              "ab",
                              "name",
                              "\xE2\x96\x81",
                              "\xE2\x96\x81\"",
                              "\xC3\xA9",
                              "\xC3\xA9t\xC3\xA9",
                              "\xE4\xB8\x96",
                              "\\",
                              "\\n",
                              "\\u00",
                              "\n",
                              "},{",
                              "]}",
                              "x\"",
                              "\"a\":1}"})
        add(piece, token_type::normal);
    add("<|end|>", token_type::control);
    json_vocab out{vocab::create(s, "json-vocab"), {}};
    for (token t = 0; t < out.v->n_tokens(); ++t) out.pieces.push_back(out.v->token_to_piece(t, false));
    return out;
}

const char *json_gbnf = R"(
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) ){0,8} "\""
number ::= "-"? ( "0" | [1-9] [0-9]{0,3} ) ( "." [0-9]{1,3} )? ( [eE] [-+]? [0-9]{1,2} )?
ws     ::= [ \t\n]{0,2}
)";

// The oracle: a fresh matcher over the whole text.
bool is_prefix(const std::shared_ptr<const grammar> &g, const std::string &text) {
    grammar_matcher m(g);
    return m.accept(text);
}

TEST(GrammarSampler, KeepsExactlyTheTokensThatContinueAndEndsOnlyWhenComplete) {
    const json_vocab jv = make_json_vocab();
    const auto g = grammar::parse(json_gbnf);
    const int32_t n_vocab = jv.v->n_tokens();
    int finished = 0;
    for (uint32_t seed = 0; seed < 100; ++seed) {
        SCOPED_TRACE("seed " + std::to_string(seed));
        auto gs = make_grammar_sampler(*jv.v, g);
        std::mt19937 rng(seed);
        std::normal_distribution<float> noise(0.0f, 2.0f);
        std::string text;
        bool ended = false;
        for (int step = 0; step < 80 && !ended; ++step) {
            std::vector<float> logits(static_cast<size_t>(n_vocab));
            for (float &l : logits) l = noise(rng);
            auto cur = token_data_array_from_logits(logits.data(), n_vocab);
            gs->apply(cur);
            ASSERT_FALSE(cur.data.empty());
            std::vector<bool> kept(size_t(n_vocab), false);
            for (const auto &c : cur.data) kept[size_t(c.id)] = true;
            grammar_matcher here(g);
            ASSERT_TRUE(here.accept(text));
            if (seed < 8) {  // the whole vocabulary against the oracle
                for (token t = 0; t < n_vocab; ++t) {
                    const bool expected = jv.v->is_eog(t) ? here.can_end()
                                                          : !jv.pieces[size_t(t)].empty() &&
                                                                is_prefix(g, text + jv.pieces[size_t(t)]);
                    ASSERT_EQ(kept[size_t(t)], expected) << "token " << t << " after " << text;
                }
            }
            // draw among what is left (by the noise order, not the sampler's), then accept
            const token_data pick =
                cur.data[std::uniform_int_distribution<size_t>(0, cur.data.size() - 1)(rng)];
            ASSERT_TRUE(jv.v->is_eog(pick.id) ? here.can_end()
                                              : is_prefix(g, text + jv.pieces[size_t(pick.id)]));
            gs->accept(pick.id);
            if (jv.v->is_eog(pick.id))
                ended = true;
            else
                text += jv.pieces[size_t(pick.id)];
        }
        if (ended) {
            ++finished;
            EXPECT_TRUE(grammar_matches(g, text)) << text;
            EXPECT_TRUE(nlohmann::json::accept(text)) << text;
        }
    }
    EXPECT_GT(finished, 20);
}

TEST(GrammarSampler, FewCandidatesGiveTheSameVerdictsAsTheWholeVocabulary) {
    const json_vocab jv = make_json_vocab();
    const auto g = grammar::parse(json_gbnf);
    auto gs = make_grammar_sampler(*jv.v, g);
    for (const char *piece : {"{\"", "a", "\xC3\xA9"}) gs->accept(jv.v->find(piece));
    const int32_t n_vocab = jv.v->n_tokens();
    std::vector<float> logits(size_t(n_vocab), 0.0f);
    auto all = token_data_array_from_logits(logits.data(), n_vocab);
    gs->apply(all);
    std::vector<token> kept_all;
    for (const auto &c : all.data) kept_all.push_back(c.id);
    std::vector<token> kept_few;
    for (token from = 0; from < n_vocab; from += 20) {
        token_data_array few;
        for (token t = from; t < std::min(n_vocab, from + 20); ++t) few.data.push_back({t, 0.0f, 0.0f});
        try {
            gs->apply(few);
        } catch (const error &) {
            continue;  // none of these twenty can continue
        }
        for (const auto &c : few.data) kept_few.push_back(c.id);
    }
    EXPECT_EQ(kept_all, kept_few);
    EXPECT_NE(std::find(kept_all.begin(), kept_all.end(), jv.v->find("x\"")), kept_all.end());
    EXPECT_EQ(std::find(kept_all.begin(), kept_all.end(), jv.v->find("\n")),
              kept_all.end());  // raw in a string
}

TEST(GrammarSampler, PartialCharactersAcrossByteTokens) {
    const json_vocab jv = make_json_vocab();
    auto gs = make_grammar_sampler(*jv.v, grammar::parse("root ::= \"\\u4e16\" | \"a\""));
    const token e4 = 3 + 0xE4, b8 = 3 + 0xB8, x96 = 3 + 0x96, x95 = 3 + 0x95;
    auto kept = [&] {
        std::vector<float> logits(size_t(jv.v->n_tokens()), 0.0f);
        auto cur = token_data_array_from_logits(logits.data(), jv.v->n_tokens());
        gs->apply(cur);
        std::vector<token> ids;
        for (const auto &c : cur.data) ids.push_back(c.id);
        return ids;
    };
    EXPECT_EQ(kept(), (std::vector<token>{3 + 'a', e4, jv.v->find("a"), jv.v->find("\xE4\xB8\x96")}));
    gs->accept(e4);
    EXPECT_EQ(kept(), std::vector<token>{b8});
    gs->accept(b8);
    EXPECT_EQ(kept(), std::vector<token>{x96});
    EXPECT_THROW(gs->clone()->accept(x95), error);
    gs->accept(x96);
    EXPECT_EQ(kept(), jv.v->eog_tokens());  // complete: only the end remains
}

TEST(GrammarSampler, CloneCarriesTheStateAndResetStartsOver) {
    const json_vocab jv = make_json_vocab();
    auto gs = make_grammar_sampler(*jv.v, grammar::parse(json_gbnf));
    gs->accept(jv.v->find("["));
    auto copy = gs->clone();
    gs->accept(jv.v->find("1"));
    EXPECT_THROW(copy->accept(jv.v->find("]}")), error);
    EXPECT_NO_THROW(copy->accept(jv.v->find("]")));
    gs->reset();
    EXPECT_THROW(gs->accept(jv.v->find("]")), error);
    EXPECT_NO_THROW(gs->accept(jv.v->find("{\"")));
}

// One vocabulary index (the trie) shared by many samplers, as a server's slots share it: each keeps
// exactly what a sampler with its own index keeps; an index of another vocabulary is refused.
TEST(GrammarSampler, SamplersShareOneVocabularyIndex) {
    const json_vocab jv = make_json_vocab();
    const auto index = make_grammar_vocab_index(*jv.v);
    const auto g = grammar::parse(json_gbnf);
    auto own = make_grammar_sampler(*jv.v, g);
    auto shared_a = make_grammar_sampler(*jv.v, g, index);
    auto shared_b = make_grammar_sampler(*jv.v, g, index);
    auto kept = [&](sampler &s) {
        token_data_array cur;
        for (token t = 0; t < jv.v->n_tokens(); ++t) cur.data.push_back({t, 0.0f, 0.0f});
        s.apply(cur);
        std::vector<token> ids;
        for (const token_data &d : cur.data) ids.push_back(d.id);
        return ids;
    };
    for (const char *piece : {"[", "1", ",", "{\""}) {
        const auto want = kept(*own);
        EXPECT_EQ(kept(*shared_a), want) << piece;
        EXPECT_EQ(kept(*shared_b->clone()), want) << piece;
        for (sampler *s : {own.get(), shared_a.get(), shared_b.get()}) s->accept(jv.v->find(piece));
    }
    const json_vocab other = make_json_vocab();
    EXPECT_THROW(make_grammar_sampler(*other.v, g, index), error);
}

TEST(GrammarSampler, ChainRunsTheGrammarFirstAndKeepsThePromptFromIt) {
    const json_vocab jv = make_json_vocab();
    sampling_params p;
    p.grammar = "root ::= \"true\" | \"false\"";
    p.seed = 7;
    EXPECT_THROW(make_sampler_chain(p), error);  // a grammar needs the vocabulary
    const std::vector<token> prompt = {jv.v->find("name"), jv.v->find("{")};  // not the grammar's business
    auto chain = make_sampler_chain(p, *jv.v, prompt);
    EXPECT_EQ(chain->describe().rfind("grammar -> ", 0), 0u) << chain->describe();
    EXPECT_EQ(chain->seed(), std::optional<uint32_t>(7u));
    std::vector<float> logits(size_t(jv.v->n_tokens()), 0.0f);
    logits[size_t(jv.v->find("{"))] = 50.0f;  // the model's favourite is never allowed
    std::string text;
    for (int i = 0; i < 10; ++i) {
        const token t = chain->sample(logits.data(), jv.v->n_tokens());
        if (jv.v->is_eog(t)) break;
        text += jv.pieces[size_t(t)];
    }
    EXPECT_TRUE(text == "true" || text == "false") << text;
    p.grammar = "root ::= (";
    EXPECT_THROW(make_sampler_chain(p, *jv.v), error);
}

// Real vocabularies (SentencePiece with byte fallback, GPT-2's byte-level BPE, a 100k BPE): every
// token the sampler keeps continues the JSON grammar, generation under random logits ends in JSON,
// and the time per step (trie walk included; informational, the machine may be loaded) is printed.
TEST(GrammarSampler, RealVocabulariesWriteJson) {
    const auto g = grammar::parse(json_gbnf);
    std::vector<std::string> paths = {std::string(WEFT_SOURCE_DIR) + "/models/stories260K.gguf"};
    if (test::have_fixtures())
        for (const char *name :
             {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf", "ggml-vocab-deepseek-llm.gguf"})
            paths.push_back(test::fixture(std::string("vocab/") + name));
    else
        std::printf("[ grammar ] shared fixtures absent: stories260K's vocabulary only\n");
    for (const std::string &path : paths) {
        const std::string name = std::filesystem::path(path).filename().string();
        SCOPED_TRACE(name);
        const auto file = gguf_file::open(path);
        const auto v = vocab::load(*file);
        const int32_t n_vocab = v->n_tokens();
        std::mt19937 rng(1);
        std::normal_distribution<float> noise(0.0f, 3.0f);
        double first_ms = 0.0, ms = 0.0;  // the first apply builds the vocabulary's trie
        int steps = 0, finished = 0;
        for (int run = 0; run < 4; ++run) {
            auto gs = make_grammar_sampler(*v, g);
            std::string text;
            for (int step = 0; step < 60; ++step) {
                std::vector<float> logits(static_cast<size_t>(n_vocab));
                for (float &l : logits) l = noise(rng);
                auto cur = token_data_array_from_logits(logits.data(), n_vocab);
                const auto t0 = std::chrono::steady_clock::now();
                gs->apply(cur);
                const double took =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                if (step == 0) {
                    first_ms += took;
                } else {
                    ms += took;
                    ++steps;
                }
                ASSERT_FALSE(cur.data.empty());
                // a few kept tokens checked against the oracle
                for (size_t i = 0; i < cur.data.size(); i += std::max<size_t>(1, cur.data.size() / 8)) {
                    const token t = cur.data[i].id;
                    if (!v->is_eog(t)) {
                        ASSERT_TRUE(is_prefix(g, text + v->token_to_piece(t, false))) << t;
                    }
                }
                const token pick =
                    std::max_element(cur.data.begin(), cur.data.end(), [](const auto &a, const auto &b) {
                        return a.logit < b.logit;
                    })->id;
                gs->accept(pick);
                if (v->is_eog(pick)) {
                    ++finished;
                    EXPECT_TRUE(nlohmann::json::accept(text)) << text;
                    break;
                }
                text += v->token_to_piece(pick, false);
            }
        }
        std::printf(
            "[ grammar ] %s: %d tokens, first step (trie built) %.2f ms, then %.3f ms per step over %d "
            "steps; %d of 4 ended\n",
            name.c_str(), n_vocab, first_ms / 4, ms / std::max(steps, 1), steps, finished);
    }
}

}  // namespace
}  // namespace weft
