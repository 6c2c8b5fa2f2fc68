// tests/vocab/test_vocab_fixtures.cpp — real vocabularies against the reference tokenizer's vectors.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "weft/gguf/gguf.h"
#include "weft/vocab/vocab.h"

namespace {

using weft::token;

struct vocab_case {
    std::string text;
    std::vector<token> ids;
};

std::string read_all(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::runtime_error("cannot open " + path);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// <vocab>.gguf.inp holds each input followed by "\n__ggml_vocab_test__\n" (so an input is exactly the
// bytes between two separators, its own leading/trailing newlines included); <vocab>.gguf.out holds
// one line of space-separated ids per input, as the reference test reads them.
std::vector<vocab_case> read_cases(const std::string &gguf_path) {
    const std::string inp = read_all(gguf_path + ".inp");
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<vocab_case> cases;
    for (size_t pos = 0; pos < inp.size();) {
        const size_t next = inp.find(sep, pos);
        if (next == std::string::npos) {
            cases.push_back({inp.substr(pos), {}});
            break;
        }
        cases.push_back({inp.substr(pos, next - pos), {}});
        pos = next + sep.size();
    }
    std::istringstream out(read_all(gguf_path + ".out"));
    std::string line;
    size_t i = 0;
    while (std::getline(out, line)) {
        if (i >= cases.size()) throw std::runtime_error(gguf_path + ".out has more lines than inputs");
        std::istringstream ids(line);
        token t;
        while (ids >> t) cases[i].ids.push_back(t);
        ++i;
    }
    if (i != cases.size()) throw std::runtime_error(gguf_path + ".out has fewer lines than inputs");
    return cases;
}

std::string show_ids(const std::vector<token> &ids, size_t around) {
    std::string s = "[";
    const size_t from = around > 3 ? around - 3 : 0;
    if (from > 0) s += "... ";
    for (size_t i = from; i < ids.size() && i < around + 4; ++i)
        s += (i > from ? ", " : "") + std::to_string(ids[i]);
    if (around + 4 < ids.size()) s += " ...";
    return s + "]";
}

std::string escaped(const std::string &text) {
    std::string s;
    for (const unsigned char c : text) {
        if (c == '\n') {
            s += "\\n";
        } else if (c == '\t') {
            s += "\\t";
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\x%02x", c);
            s += b;
        } else {
            s += char(c);
        }
    }
    return s;
}

std::unique_ptr<weft::vocab> open_vocab(const std::string &path) {
    auto f = weft::gguf_file::open(path, {.use_mmap = true, .load_data = false});
    return weft::vocab::load(*f);
}

class vocab_fixture : public ::testing::TestWithParam<const char *> {};

TEST_P(vocab_fixture, MatchesReferenceIds) {
    WEFT_REQUIRE_FIXTURES();
    const std::string name = GetParam();
    const std::string path = weft::test::fixture("vocab/ggml-vocab-" + name + ".gguf");
    const auto v = open_vocab(path);
    const auto cases = read_cases(path);
    ASSERT_EQ(cases.size(), 46u) << name;
    size_t passed = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto got = v->tokenize(cases[i].text, /*add_special=*/false, /*parse_special=*/false);
        const auto &want = cases[i].ids;
        size_t first_diff = 0;
        while (first_diff < got.size() && first_diff < want.size() && got[first_diff] == want[first_diff])
            ++first_diff;
        if (got == want) {
            ++passed;
            continue;
        }
        ADD_FAILURE() << "vocabulary " << name << ", case " << i << " \"" << escaped(cases[i].text)
                      << "\": first difference at position " << first_diff << ": expected "
                      << show_ids(want, first_diff) << " (" << want.size() << " ids), got "
                      << show_ids(got, first_diff) << " (" << got.size() << " ids)";
    }
    std::printf("vocabulary %s: %zu/%zu cases match\n", name.c_str(), passed, cases.size());
}

// HF-style clean-up of decoded text (what detokenize does for vocabularies that clean spaces),
// written independently of the library: no space before . , ! ? 's 'm 're 've.
std::string cleaned(std::string s) {
    for (const char *pattern : {" ?", " !", " .", " ,", " 's", " 'm", " 're", " 've"}) {
        for (size_t at = s.find(pattern); at != std::string::npos; at = s.find(pattern, at)) s.erase(at, 1);
    }
    return s;
}

// detokenize(tokenize(text)) == text for every fixture input, except:
//  - vocabularies whose decoder cleans up spaces (GPT-2 and most BPE families, as the established
//    engine and HF do) give the cleaned text: cases 32 ("you 😁 ?") and 45 (" ?", " .") of the fixture;
//  - WPM (bert-bge) cannot represent its inputs: it lower-cases, strips accents, drops whitespace
//    and control characters, and maps unknown words to [UNK]; it is not checked here.
TEST_P(vocab_fixture, RoundTrips) {
    WEFT_REQUIRE_FIXTURES();
    const std::string name = GetParam();
    if (name == "bert-bge")
        GTEST_SKIP() << "WPM normalizes its input (lower case, no accents, no whitespace)";
    const bool cleans_spaces =
        name == "gpt-2" || name == "falcon" || name == "mpt" || name == "starcoder" || name == "refact";
    const std::string path = weft::test::fixture("vocab/ggml-vocab-" + name + ".gguf");
    const auto v = open_vocab(path);
    const auto cases = read_cases(path);
    size_t exact = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
        const auto ids = v->tokenize(cases[i].text, false, false);
        const std::string back = v->detokenize(ids);
        const std::string want = cleans_spaces ? cleaned(cases[i].text) : cases[i].text;
        EXPECT_EQ(back, want) << "vocabulary " << name << ", case " << i << " \"" << escaped(cases[i].text)
                              << "\"";
        exact += back == cases[i].text;
    }
    std::printf("vocabulary %s: %zu/%zu cases round-trip byte for byte\n", name.c_str(), exact, cases.size());
}

// Arbitrary bytes (mostly not UTF-8) never fail; with SPM byte fallback they come back unchanged.
// (Byte-level BPE keeps invalid bytes too, see test_vocab_synthetic, but these real vocabularies
// either clean up spaces when decoding or, DeepSeek, spell the bytes 0xF5..0xFF as user-defined
// tokens that render as the UTF-8 of their alphabet character, as the reference does.)
TEST_P(vocab_fixture, ArbitraryBytes) {
    WEFT_REQUIRE_FIXTURES();
    const std::string name = GetParam();
    const auto v = open_vocab(weft::test::fixture("vocab/ggml-vocab-" + name + ".gguf"));
    const bool lossless = name == "llama-spm" || name == "phi-3";
    std::mt19937 rng(42);
    for (int trial = 0; trial < 100; ++trial) {
        std::string bytes(size_t(rng() % 64), '\0');
        for (char &c : bytes) c = char(rng() % 256);
        if (bytes.find("\xE2\x96\x81") != std::string::npos) continue;  // a literal U+2581 decodes as a space
        std::vector<token> ids;
        ASSERT_NO_THROW(ids = v->tokenize(bytes, true, true)) << name << " trial " << trial;
        for (const token t : ids) ASSERT_TRUE(t >= 0 && t < v->n_tokens()) << name << " trial " << trial;
        if (lossless) {
            EXPECT_EQ(v->detokenize(v->tokenize(bytes, false, false)), bytes) << name << " trial " << trial;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(all, vocab_fixture,
                         ::testing::Values("llama-spm", "phi-3", "gpt-2", "falcon", "mpt", "starcoder",
                                           "refact", "deepseek-llm", "deepseek-coder", "bert-bge"),
                         [](const auto &info) {
                             std::string s = info.param;
                             for (char &c : s) c = (c == '-') ? '_' : c;
                             return s;
                         });

// The prompts of the recorded reference runs tokenize as the reference engine did (BOS added,
// special tokens parsed), and the recorded continuations render to the recorded bytes.
TEST(vocab_reference, PromptsAndContinuationsOfRecordedRuns) {
    WEFT_REQUIRE_FIXTURES();
    for (const char *run : {"stories260K.bos", "stories260K.once", "tiny-llama-F32", "tiny-qwen2-F32"}) {
        const std::string name = run;
        const auto json = nlohmann::json::parse(read_all(weft::test::fixture("reference/" + name + ".json")));
        const std::string model = name.substr(0, name.find('.'));
        const auto v = open_vocab(weft::test::fixture("models/" + model + ".gguf"));
        EXPECT_EQ(v->tokenize(json["prompt"].get<std::string>(), true, true),
                  json["prompt_tokens"].get<std::vector<token>>())
            << run;
        std::string text;
        for (const token t : json["greedy"].get<std::vector<token>>()) text += v->token_to_piece(t);
        std::string hex;
        for (const unsigned char c : text) {
            char b[3];
            std::snprintf(b, sizeof b, "%02x", c);
            hex += b;
        }
        EXPECT_EQ(hex, json["greedy_text_hex"].get<std::string>()) << run;
    }
}

// The vocabularies without recorded vectors load and tokenize sensibly: Baichuan (SPM, no add_bos
// key: BOS by default) and GPT-NeoX (no tokenizer.ggml.pre: the default chain).
TEST(vocab_reference, VocabulariesWithoutVectors) {
    WEFT_REQUIRE_FIXTURES();
    const auto baichuan = open_vocab(weft::test::fixture("vocab/ggml-vocab-baichuan.gguf"));
    EXPECT_EQ(baichuan->kind(), weft::vocab_kind::spm);
    EXPECT_TRUE(baichuan->add_bos());
    const std::string text = "Hello world, \xE4\xBD\xA0\xE5\xA5\xBD!\n";  // 你好
    auto ids = baichuan->tokenize(text, true, false);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], baichuan->bos());
    EXPECT_EQ(baichuan->detokenize(std::span<const token>(ids).subspan(1)), text);

    const auto neox = open_vocab(weft::test::fixture("vocab/ggml-vocab-gpt-neox.gguf"));
    EXPECT_EQ(neox->kind(), weft::vocab_kind::bpe);
    EXPECT_EQ(neox->pre_type(), "default");
    ids = neox->tokenize(text, false, false);
    EXPECT_EQ(neox->detokenize(ids), "Hello world, \xE4\xBD\xA0\xE5\xA5\xBD!\n");
    EXPECT_TRUE(neox->is_eog(neox->find("<|endoftext|>")));
}

// English-like text of about `bytes` bytes (a fixed pseudo-random mix of common words and punctuation).
std::string english_text(size_t bytes) {
    static const char *words[] = {
        "the",    "of",      "and",   "to",    "in",           "a",        "is",         "that", "for",
        "it",     "as",      "was",   "with",  "be",           "by",       "on",         "not",  "he",
        "this",   "are",     "or",    "his",   "from",         "at",       "which",      "but",  "have",
        "an",     "had",     "they",  "you",   "were",         "their",    "one",        "all",  "we",
        "can",    "her",     "has",   "there", "been",         "if",       "more",       "when", "will",
        "would",  "who",     "so",    "no",    "Tokenization", "engine's", "vocabulary", "1984", "merges",
        "London", "quickly", "don't", "model"};
    std::string text;
    uint32_t state = 12345;
    size_t in_sentence = 0;
    while (text.size() < bytes) {
        state = state * 1664525u + 1013904223u;
        text += words[(state >> 8) % (sizeof words / sizeof *words)];
        if (++in_sentence > 8 + (state >> 28)) {
            text += (state & 1) ? ". " : ".\n";
            in_sentence = 0;
        } else {
            text += ((state >> 4) % 11 == 0) ? ", " : " ";
        }
    }
    return text;
}

// Throughput on 1 MB of English (Release build): run with --gtest_also_run_disabled_tests.
TEST(vocab_bench, DISABLED_TokenizeOneMegabyte) {
    WEFT_REQUIRE_FIXTURES();
    const std::string text = english_text(1 << 20);
    for (const char *name : {"llama-spm", "gpt-2", "llama-spm", "gpt-2"}) {
        const auto v = open_vocab(weft::test::fixture(std::string("vocab/ggml-vocab-") + name + ".gguf"));
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = v->tokenize(text, false, false);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%-10s %zu bytes -> %zu tokens in %.3f s: %.2f MB/s\n", name, text.size(), ids.size(), s,
                    double(text.size()) / (1 << 20) / s);
        EXPECT_EQ(v->detokenize(ids).size(), text.size());
    }
}

}  // namespace
