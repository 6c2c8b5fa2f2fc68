// tests/vocab/test_vocab_synthetic.cpp — tokenizer behaviour on small hand-made vocabularies.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "vocab/pretokenizer.h"
#include "vocab/unicode.h"
#include "weft/core/error.h"
#include "weft/gguf/gguf.h"
#include "weft/vocab/vocab.h"

namespace {

using weft::token;
using weft::token_type;
using weft::vocab;
using weft::vocab_spec;

// --- SPM: <unk> <s> </s>, the 256 byte tokens, then a few pieces with scores
vocab_spec spm_spec() {
    vocab_spec s;
    s.model = "llama";
    const auto add = [&](std::string text, float score, token_type type) {
        s.tokens.push_back(std::move(text));
        s.scores.push_back(score);
        s.types.push_back(type);
    };
    add("<unk>", 0, token_type::unknown);
    add("<s>", 0, token_type::control);
    add("</s>", 0, token_type::control);
    static const char *hex = "0123456789ABCDEF";
    for (int b = 0; b < 256; ++b)
        add(std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">", 0, token_type::byte);
    // ids from 259 on
    for (const auto &[text, score] : std::vector<std::pair<std::string, float>>{{"\xE2\x96\x81", -1},
                                                                                {"a", -2},
                                                                                {"b", -2},
                                                                                {"c", -2},
                                                                                {"ab", -5},
                                                                                {"bc", -3},
                                                                                {"\xE2\x96\x81"
                                                                                 "a",
                                                                                 -4},
                                                                                {"x", -2},
                                                                                {"\xE2\x96\x81"
                                                                                 "x",
                                                                                 -1}}) {
        add(text, score, token_type::normal);
    }
    add("<|end|>", 0, token_type::control);  // 268
    return s;
}
constexpr token spm_space = 259, spm_a = 260, spm_b = 261, spm_c = 262, spm_ab = 263, spm_bc = 264,
                spm_space_a = 265, spm_x = 266, spm_space_x = 267, spm_end = 268;
token spm_byte(int b) {
    return 3 + b;
}

TEST(vocab_spm, MergesHighestScoreFirst) {
    const auto v = vocab::create(spm_spec(), "spm");
    EXPECT_EQ(v->kind(), weft::vocab_kind::spm);
    // "▁abc": candidates "▁a" (-4), "ab" (-5), "bc" (-3): "bc" goes first, then "▁a"; "ab" never
    // forms because "b" is taken — the result is ▁a, bc and not ▁, ab, c.
    EXPECT_EQ(v->tokenize("abc", false, false), (std::vector<token>{spm_space_a, spm_bc}));
    EXPECT_EQ(v->tokenize("ab", false, false), (std::vector<token>{spm_space_a, spm_b}));
    EXPECT_EQ(v->tokenize("", false, false), std::vector<token>{});
    EXPECT_EQ(v->tokenize("", true, false), std::vector<token>{1});
    EXPECT_EQ(v->tokenize("x", true, false), (std::vector<token>{1, spm_space_x}));
}

TEST(vocab_spm, ByteFallbackAndInvalidUtf8) {
    const auto v = vocab::create(spm_spec(), "spm");
    // é (C3 A9) is no token: its bytes
    EXPECT_EQ(v->tokenize("\xC3\xA9", false, false),
              (std::vector<token>{spm_space, spm_byte(0xC3), spm_byte(0xA9)}));
    // invalid bytes are single symbols: a lone continuation byte, a truncated sequence, 0xFF
    const std::string bad =
        "x\x80"
        "a\xE2\x82"
        "b\xFF";
    const auto ids = v->tokenize(bad, false, false);
    EXPECT_EQ(ids, (std::vector<token>{spm_space_x, spm_byte(0x80), spm_a, spm_byte(0xE2), spm_byte(0x82),
                                       spm_b, spm_byte(0xFF)}));
    EXPECT_EQ(v->detokenize(ids), bad);
}

TEST(vocab_spm, PiecesAndBufferConvention) {
    const auto v = vocab::create(spm_spec(), "spm");
    EXPECT_EQ(v->token_to_piece(spm_space_a), " a");
    EXPECT_EQ(v->token_to_piece(spm_byte('\n')), "\n");
    EXPECT_EQ(v->token_to_piece(1), "");  // control: nothing unless special
    EXPECT_EQ(v->token_to_piece(1, true), "<s>");
    EXPECT_EQ(v->token_to_piece(-5), "");
    EXPECT_EQ(v->token_to_piece(100000), "");
    char buf[4];
    EXPECT_EQ(v->token_to_piece(spm_space_a, buf, 1, false), -2);
    EXPECT_EQ(v->token_to_piece(spm_space_a, buf, 2, false), 2);
    EXPECT_EQ(std::string(buf, 2), " a");

    token out[8];
    EXPECT_EQ(v->tokenize("abc", out, 1, false, false), -2);
    EXPECT_EQ(v->tokenize("abc", out, 2, false, false), 2);
    EXPECT_EQ(out[0], spm_space_a);
    EXPECT_EQ(v->tokenize("abc", nullptr, 0, true, false), -3);

    // detokenize drops the space prefix of the first piece only
    EXPECT_EQ(v->detokenize(v->tokenize("x abc", false, false)), "x abc");
    EXPECT_EQ(v->detokenize(v->tokenize(" x", false, false)), " x");
    EXPECT_EQ(v->detokenize(std::vector<token>{1, spm_space_x}), " x");  // BOS is not removed here
    EXPECT_EQ(v->detokenize(std::vector<token>{1, spm_space_x}, true), "<s> x");
}

TEST(vocab_spm, SpecialTokensParsedOnlyWhenAsked) {
    const auto v = vocab::create(spm_spec(), "spm");
    EXPECT_EQ(v->tokenize("x<|end|>x", false, true), (std::vector<token>{spm_space_x, spm_end, spm_space_x}));
    const auto literal = v->tokenize("x<|end|>x", false, false);
    EXPECT_EQ(std::find(literal.begin(), literal.end(), spm_end), literal.end());
    EXPECT_EQ(v->eot(), spm_end);  // detected by its text
    EXPECT_TRUE(v->is_eog(spm_end));
    EXPECT_TRUE(v->is_eog(2));
    EXPECT_FALSE(v->is_eog(spm_x));
}

TEST(vocab_spm, Phi3SpecialTokensEatTheSpaceAfterThem) {
    auto spec = spm_spec();
    // without the family attribute: the two spaces after <|end|> stay (plus the space prefix)
    const auto plain = vocab::create(spec, "spm");
    EXPECT_EQ(plain->tokenize("<|end|>  x", false, true),
              (std::vector<token>{spm_end, spm_space, spm_space, spm_space_x}));
    spec.name = "Phi3";
    const auto phi3 = vocab::create(spec, "phi3");
    EXPECT_EQ(phi3->tokenize("<|end|>  x", false, true), (std::vector<token>{spm_end, spm_space_x}));
}

// --- BPE: the byte-level alphabet plus a few merges
vocab_spec bpe_spec(const std::string &pre) {
    vocab_spec s;
    s.model = "gpt2";
    s.pre = pre;
    for (int b = 0; b < 256; ++b) s.tokens.push_back(weft::unicode::byte_to_utf8(uint8_t(b)));
    // merges by rank; each result is a token
    s.merges = {"e l", "l l", "h el", "hel l", "hell o", "\xC4\xA0 w", "\xC4\xA0w o"};
    for (const char *t : {"el", "ll", "hel", "hell", "hello", "\xC4\xA0w", "\xC4\xA0wo"})
        s.tokens.push_back(t);
    s.tokens.push_back("<|endoftext|>");
    s.types.assign(s.tokens.size(), token_type::normal);
    s.types.back() = token_type::control;
    s.tokens.push_back("<tag>");
    s.types.push_back(token_type::user_defined);
    return s;
}
token byte_level(const vocab &v, uint8_t b) {
    return v.find(weft::unicode::byte_to_utf8(b));
}

TEST(vocab_bpe, RankedMerges) {
    const auto v = vocab::create(bpe_spec("gpt-2"), "bpe");
    EXPECT_EQ(v->tokenize("hello", false, false), std::vector<token>{v->find("hello")});
    // "ell": "e l" (rank 0) beats "l l" (rank 1)
    EXPECT_EQ(v->tokenize("ell", false, false), (std::vector<token>{v->find("el"), byte_level(*v, 'l')}));
    EXPECT_EQ(v->tokenize("hello wo", false, false),
              (std::vector<token>{v->find("hello"), v->find("\xC4\xA0wo")}));
    auto swapped = bpe_spec("gpt-2");
    std::swap(swapped.merges[0], swapped.merges[1]);
    const auto w = vocab::create(swapped, "bpe");
    EXPECT_EQ(w->tokenize("ell", false, false), (std::vector<token>{byte_level(*w, 'e'), w->find("ll")}));
    EXPECT_EQ(v->detokenize(v->tokenize("hello wo", false, false)), "hello wo");
}

TEST(vocab_bpe, Llama3EmitsWholeWordsThatAreTokens) {
    auto spec = bpe_spec("llama-bpe");
    spec.tokens.push_back("lo");  // "hel" + "lo" would never merge: there is no "hel lo" merge
    spec.types.push_back(token_type::normal);
    spec.tokens.push_back("yo");
    spec.types.push_back(token_type::normal);
    const auto v = vocab::create(spec, "llama3");
    EXPECT_TRUE(v->add_bos());                                                      // the family's default
    EXPECT_EQ(v->tokenize("yo", false, false), std::vector<token>{v->find("yo")});  // no merge makes "yo"
    const auto g = vocab::create(
        [&] {
            auto s = spec;
            s.pre = "gpt-2";
            return s;
        }(),
        "gpt2");
    EXPECT_EQ(g->tokenize("yo", false, false),
              (std::vector<token>{byte_level(*g, 'y'), byte_level(*g, 'o')}));
    EXPECT_FALSE(g->add_bos());
}

TEST(vocab_bpe, PretokenizerSplitsBeforeMerging) {
    const auto v = vocab::create(bpe_spec("gpt-2"), "bpe");
    // "hel" and "lo" are separate words after "hel,lo": no merge crosses the comma
    const auto ids = v->tokenize("hel,lo", false, false);
    EXPECT_EQ(ids, (std::vector<token>{v->find("hel"), byte_level(*v, ','), byte_level(*v, 'l'),
                                       byte_level(*v, 'o')}));
}

TEST(vocab_bpe, InvalidUtf8IsKeptAsRawBytes) {
    const auto v = vocab::create(bpe_spec("qwen2"), "bpe");
    const std::string bad = "he\xFF\xC3llo\x80";
    const auto ids = v->tokenize(bad, false, false);
    EXPECT_EQ(v->detokenize(ids), bad);
    // any bytes at all round-trip through a byte-level vocabulary without clean-up
    std::mt19937 rng(7);
    for (int trial = 0; trial < 200; ++trial) {
        std::string s(size_t(rng() % 40), '\0');
        for (char &c : s) c = char(rng() % 256);
        EXPECT_EQ(v->detokenize(v->tokenize(s, false, false)), s) << "trial " << trial;
    }
}

TEST(vocab_bpe, UserDefinedAlwaysControlOnlyWhenParsing) {
    const auto v = vocab::create(bpe_spec("gpt-2"), "bpe");
    const token tag = v->find("<tag>"), eot = v->find("<|endoftext|>");
    EXPECT_EQ(v->tokenize("a<tag>b", false, false),
              (std::vector<token>{byte_level(*v, 'a'), tag, byte_level(*v, 'b')}));
    EXPECT_EQ(v->tokenize("<|endoftext|>", false, true), std::vector<token>{eot});
    EXPECT_GT(v->tokenize("<|endoftext|>", false, false).size(), 1u);
    EXPECT_TRUE(v->is_eog(eot));
    EXPECT_TRUE(v->is_control(eot));
    EXPECT_EQ(v->token_to_piece(tag), "<tag>");
    EXPECT_EQ(v->token_to_piece(eot), "");
    EXPECT_EQ(v->detokenize(v->tokenize("a<|endoftext|>b", false, true), true), "a<|endoftext|>b");
    // gpt-2 cleans up spaces when decoding, as HF does
    EXPECT_EQ(v->detokenize(v->tokenize("hello , wo .", false, false)), "hello, wo.");
}

// gpt-oss's harmony: a reply is several messages, each closed by <|end|>, the last by <|return|> (or
// <|call|> for a tool call); the headers that name a message's channel are text to parse it by.
vocab_spec with_control_tokens(vocab_spec s, std::initializer_list<const char *> texts) {
    for (const char *t : texts) {
        s.tokens.push_back(t);
        s.types.push_back(token_type::control);
    }
    return s;
}

TEST(vocab_bpe, HarmonyRepliesGoOnPastEndAndShowTheirHeaders) {
    const auto v = vocab::create(
        with_control_tokens(bpe_spec("gpt-2"), {"<|start|>", "<|end|>", "<|message|>", "<|channel|>",
                                                "<|return|>", "<|call|>", "<|constrain|>"}),
        "harmony");
    EXPECT_TRUE(v->is_eog(v->find("<|return|>")));
    EXPECT_TRUE(v->is_eog(v->find("<|call|>")));
    EXPECT_FALSE(v->is_eog(v->find("<|end|>")));
    for (const char *header : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"}) {
        EXPECT_FALSE(v->is_control(v->find(header))) << header;
        EXPECT_EQ(v->token_to_piece(v->find(header)), header);
    }
    EXPECT_EQ(v->token_to_piece(v->find("<|return|>")), "");
    const std::string reply =
        "<|channel|>analysis<|message|>hello<|end|><|start|>assistant<|channel|>final<|message|>wo";
    EXPECT_EQ(v->detokenize(v->tokenize(reply + "<|return|>", false, true)), reply);

    // without <|return|> and <|call|> (Phi-3's vocabulary), <|end|> ends the reply
    const auto phi = vocab::create(with_control_tokens(bpe_spec("gpt-2"), {"<|end|>", "<|channel|>"}), "phi");
    EXPECT_TRUE(phi->is_eog(phi->find("<|end|>")));
    EXPECT_EQ(phi->token_to_piece(phi->find("<|channel|>")), "<|channel|>");
}

// Gemma 4 ends a reply at <turn|> or <|tool_response>; its </s> is an ordinary token.
TEST(vocab_bpe, Gemma4SlashSIsNotAnEnd) {
    const auto g = vocab::create(
        with_control_tokens(bpe_spec("gpt-2"), {"<turn|>", "<|tool_response>", "</s>"}), "gemma4");
    EXPECT_TRUE(g->is_eog(g->find("<turn|>")));
    EXPECT_TRUE(g->is_eog(g->find("<|tool_response>")));
    EXPECT_FALSE(g->is_eog(g->find("</s>")));
    EXPECT_EQ(g->token_to_piece(g->find("</s>")), "</s>");
    const auto other = vocab::create(with_control_tokens(bpe_spec("gpt-2"), {"</s>"}), "other");
    EXPECT_TRUE(other->is_eog(other->find("</s>")));
}

// Fill-in-the-middle tokens: by the ids the file names, else by their text as the reference finds
// them (Qwen's, Granite's, CodeLlama's ...); found by text they become control tokens, and pad, repo
// and file separator end generation.
TEST(vocab_bpe, FimTokensByIdOrByText) {
    vocab_spec qwen = bpe_spec("gpt-2");
    for (const char *t : {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|fim_pad|>",
                          "<|repo_name|>", "<|file_sep|>"}) {
        qwen.tokens.push_back(t);
        qwen.types.push_back(token_type::user_defined);  // mistyped: becomes control
    }
    const auto q = vocab::create(qwen, "qwen-coder");
    const weft::fim_tokens &f = q->fim();
    EXPECT_TRUE(f.can_infill());
    EXPECT_EQ(f.pre, q->find("<|fim_prefix|>"));
    EXPECT_EQ(f.suf, q->find("<|fim_suffix|>"));
    EXPECT_EQ(f.mid, q->find("<|fim_middle|>"));
    EXPECT_EQ(f.pad, q->find("<|fim_pad|>"));
    EXPECT_EQ(f.rep, q->find("<|repo_name|>"));
    EXPECT_EQ(f.sep, q->find("<|file_sep|>"));
    for (token t : {f.pre, f.suf, f.mid, f.pad, f.rep, f.sep}) EXPECT_TRUE(q->is_control(t)) << t;
    for (token t : {f.pad, f.rep, f.sep}) EXPECT_TRUE(q->is_eog(t)) << t;
    for (token t : {f.pre, f.suf, f.mid}) EXPECT_FALSE(q->is_eog(t)) << t;

    vocab_spec granite =
        with_control_tokens(bpe_spec("gpt-2"), {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"});
    const auto g = vocab::create(granite, "granite");
    EXPECT_EQ(g->fim().pre, g->find("<fim_prefix>"));
    EXPECT_EQ(g->fim().mid, g->find("<fim_middle>"));
    EXPECT_EQ(g->fim().sep, weft::token_null);

    // ids in the file win over the text; an id out of range keeps what the text finds
    granite.fim_pre = 3;
    granite.fim_suf = 100000;
    const auto by_id = vocab::create(granite, "granite");
    EXPECT_EQ(by_id->fim().pre, 3);
    EXPECT_EQ(by_id->fim().suf, by_id->find("<fim_suffix>"));

    const auto plain = vocab::create(bpe_spec("gpt-2"), "plain");
    EXPECT_FALSE(plain->fim().can_infill());
    EXPECT_EQ(plain->fim().pre, weft::token_null);
}

TEST(vocab_bpe, UnknownPretokenizerIsAnError) {
    try {
        vocab::create(bpe_spec("no-such-pre"), "x.gguf");
        FAIL() << "expected an error";
    } catch (const weft::error &e) {
        EXPECT_NE(std::string(e.what()).find("x.gguf"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("no-such-pre"), std::string::npos) << e.what();
    }
    auto spec = bpe_spec("gpt-2");
    spec.pre.reset();  // absent: the default chain, with a warning
    EXPECT_EQ(vocab::create(spec, "bpe")->pre_type(), "default");
}

// --- WPM
vocab_spec wpm_spec() {
    vocab_spec s;
    s.model = "bert";
    s.tokens = {"[PAD]",
                "[UNK]",
                "[CLS]",
                "[SEP]",
                "[MASK]",
                "\xE2\x96\x81hello",
                "\xE2\x96\x81world",
                "\xE2\x96\x81un",
                "aff",
                "able",
                "\xE2\x96\x81!",
                "\xE2\x96\x81\xE4\xB8\x80"};  // ▁一
    s.types.assign(s.tokens.size(), token_type::normal);
    for (int i = 0; i < 5; ++i) s.types[size_t(i)] = token_type::control;
    s.pad = 0, s.unk = 1, s.bos = 2, s.sep = 3, s.mask = 4;
    return s;
}

TEST(vocab_wpm, NormalizesAndMatchesLongestFirst) {
    const auto v = vocab::create(wpm_spec(), "wpm");
    EXPECT_EQ(v->tokenize("H\xC3\xA9llo WORLD!", false, false), (std::vector<token>{5, 6, 10}));  // Héllo
    EXPECT_EQ(v->tokenize("unaffable", false, false), (std::vector<token>{7, 8, 9}));
    EXPECT_EQ(v->tokenize("hello xyz", false, false), (std::vector<token>{5, 1}));
    EXPECT_EQ(v->tokenize("\xE4\xB8\x80\xE4\xB8\x80", false, false),
              (std::vector<token>{11, 11}));  // CJK split
    EXPECT_EQ(v->tokenize("hello", true, false), (std::vector<token>{2, 5, 3}));
    EXPECT_EQ(v->tokenize("hel\xFFlo\x80", false, false), (std::vector<token>{5}));  // invalid bytes dropped
    EXPECT_EQ(v->detokenize(v->tokenize("unaffable world", false, false)), " unaffable world");
}

// --- loading from GGUF files, and what a malformed vocabulary reports
class vocab_gguf : public ::testing::Test {
  protected:
    std::string path(const std::string &name) {
        const auto dir =
            std::filesystem::temp_directory_path() / ("weft-vocab-test-" + std::to_string(getpid()));
        std::filesystem::create_directories(dir);
        dirs_.push_back(dir);
        return (dir / name).string();
    }
    ~vocab_gguf() override {
        for (const auto &d : dirs_) std::filesystem::remove_all(d);
    }
    static void write_spec(weft::gguf_writer &w, const vocab_spec &s) {
        w.set_string("general.architecture", "llama");
        w.set_string("tokenizer.ggml.model", s.model);
        if (s.pre) w.set_string("tokenizer.ggml.pre", *s.pre);
        w.set_string_array("tokenizer.ggml.tokens", s.tokens);
        if (!s.scores.empty())
            w.set_array("tokenizer.ggml.scores", weft::gguf_type::f32, s.scores.data(), s.scores.size());
        if (!s.types.empty()) {
            std::vector<int32_t> t;
            for (auto x : s.types) t.push_back(int32_t(x));
            w.set_array("tokenizer.ggml.token_type", weft::gguf_type::i32, t.data(), t.size());
        }
        if (!s.merges.empty()) w.set_string_array("tokenizer.ggml.merges", s.merges);
    }
    std::unique_ptr<vocab> load(const std::string &file) {
        auto f = weft::gguf_file::open(file, {.use_mmap = true, .load_data = false});
        return vocab::load(*f);
    }
    // load must throw weft::error whose message names the file and contains `what`
    void expect_load_error(const std::string &file, const std::string &what) {
        try {
            load(file);
            ADD_FAILURE() << "loading " << file << " should fail with '" << what << "'";
        } catch (const weft::error &e) {
            EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    }
    std::vector<std::filesystem::path> dirs_;
};

TEST_F(vocab_gguf, LoadsAVocabularyOnlyFile) {
    weft::gguf_writer w;
    write_spec(w, bpe_spec("gpt-2"));
    w.set_u32("tokenizer.ggml.eos_token_id", 256 + 7);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    const std::string file = path("bpe.gguf");
    w.write(file);
    const auto v = load(file);
    EXPECT_EQ(v->kind(), weft::vocab_kind::bpe);
    EXPECT_EQ(v->pre_type(), "gpt-2");
    EXPECT_EQ(v->eos(), 256 + 7);
    EXPECT_FALSE(v->add_bos());
    EXPECT_EQ(v->tokenize("hello", false, false), std::vector<token>{v->find("hello")});
    EXPECT_EQ(v->nl(), byte_level(*v, '\n'));
}

// tokenizer.ggml.suppress_tokens is read as the reference reads it (an integer array); another type
// or an id outside the vocabulary is an error naming the key.
TEST_F(vocab_gguf, SuppressTokensAreReadAndChecked) {
    const auto write = [&](const std::string &name, auto &&set) {
        weft::gguf_writer w;
        write_spec(w, spm_spec());
        set(w);
        const std::string file = path(name);
        w.write(file);
        return file;
    };
    const std::vector<int32_t> ids = {spm_end, 3, spm_end};
    const auto v = load(write("ok.gguf", [&](weft::gguf_writer &w) {
        w.set_array("tokenizer.ggml.suppress_tokens", weft::gguf_type::i32, ids.data(), ids.size());
    }));
    EXPECT_EQ(v->suppressed_tokens(), (std::vector<token>{3, spm_end}));
    EXPECT_TRUE(load(write("none.gguf", [](weft::gguf_writer &) {}))->suppressed_tokens().empty());

    const std::vector<int32_t> past = {spm_end + 1};
    expect_load_error(write("past.gguf",
                            [&](weft::gguf_writer &w) {
                                w.set_array("tokenizer.ggml.suppress_tokens", weft::gguf_type::i32,
                                            past.data(), past.size());
                            }),
                      "tokenizer.ggml.suppress_tokens[0] is 269, not a token of the 269-token vocabulary");
    expect_load_error(
        write("text.gguf",
              [](weft::gguf_writer &w) { w.set_string_array("tokenizer.ggml.suppress_tokens", {"<end>"}); }),
        "tokenizer.ggml.suppress_tokens is an array of string");
}

TEST_F(vocab_gguf, ScoresLongerThanTokensIsAnError) {
    auto s = spm_spec();
    s.scores.push_back(0);
    weft::gguf_writer w;
    write_spec(w, s);
    const std::string file = path("scores.gguf");
    w.write(file);
    expect_load_error(file, "tokenizer.ggml.scores has 270 entries but tokenizer.ggml.tokens has 269");
}

TEST_F(vocab_gguf, MergeNamingAnUnknownTokenIsAnError) {
    auto s = bpe_spec("gpt-2");
    s.merges.push_back("hello zz");
    weft::gguf_writer w;
    write_spec(w, s);
    const std::string file = path("merges.gguf");
    w.write(file);
    expect_load_error(file, "tokenizer.ggml.merges[7] 'hello zz': 'zz' is not a token");
}

TEST_F(vocab_gguf, UnknownTokenizerModelIsAnError) {
    auto s = spm_spec();
    s.model = "t5-unigram";
    weft::gguf_writer w;
    write_spec(w, s);
    const std::string file = path("model.gguf");
    w.write(file);
    expect_load_error(file, "unknown tokenizer model 't5-unigram'");
}

TEST_F(vocab_gguf, MissingOrMistypedArraysAreErrors) {
    {
        weft::gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        const std::string file = path("notokens.gguf");
        w.write(file);
        expect_load_error(file, "no tokenizer.ggml.tokens");
    }
    {
        weft::gguf_writer w;
        w.set_string("tokenizer.ggml.model", "llama");
        const int32_t ids[3] = {1, 2, 3};
        w.set_array("tokenizer.ggml.tokens", weft::gguf_type::i32, ids, 3);
        const std::string file = path("i32tokens.gguf");
        w.write(file);
        expect_load_error(file, "tokenizer.ggml.tokens is an array of");
    }
    {
        auto s = bpe_spec("gpt-2");
        s.merges.clear();
        weft::gguf_writer w;
        write_spec(w, s);
        const std::string file = path("nomerges.gguf");
        w.write(file);
        expect_load_error(file, "no tokenizer.ggml.merges");
    }
    {
        weft::gguf_writer w;
        w.set_string("general.architecture", "llama");
        const std::string file = path("novocab.gguf");
        w.write(file);
        expect_load_error(file, "no tokenizer.ggml.model");
    }
}

// --- building blocks
TEST(vocab_pretokenizer, RegexChainSplitsPiecesAndKeepsGaps) {
    weft::pretokenizer_config gpt2;
    ASSERT_TRUE(weft::pretokenizer_lookup("gpt-2", gpt2));
    const weft::regex_chain chain(gpt2.regexes);
    const std::string text = "Hello world  !!\n's 42";
    const auto pieces = chain.split(text);
    const std::vector<std::string_view> want = {"Hello", " world", " ", " !!", "\n", "'s", " 42"};
    EXPECT_EQ(pieces, want);
    // a chain: falcon first cuts punctuation runs, then applies the GPT-2 expression inside the rest
    weft::pretokenizer_config falcon;
    ASSERT_TRUE(weft::pretokenizer_lookup("falcon", falcon));
    const weft::regex_chain fchain(falcon.regexes);
    const std::vector<std::string_view> fwant = {"a", "...", "b", " ", "123", "4"};  // " 1234": 123 cut out
    EXPECT_EQ(fchain.split("a...b 1234"), fwant);
    // bytes that are not UTF-8 never match: they stay as gap pieces, nothing is lost
    const std::string bad =
        "ab\xFF\xFE"
        "cd";
    std::string joined;
    for (auto p : chain.split(bad)) joined += p;
    EXPECT_EQ(joined, bad);
    EXPECT_FALSE(weft::pretokenizer_lookup("no-such-pre", gpt2));
}

TEST(vocab_pretokenizer, Llama3Expression) {
    weft::pretokenizer_config llama3;
    ASSERT_TRUE(weft::pretokenizer_lookup("llama-bpe", llama3));
    EXPECT_TRUE(llama3.ignore_merges);
    const weft::regex_chain chain(llama3.regexes);
    const std::vector<std::string_view> want = {"I",      "'m", " ",    "123", "45",
                                                " HELLO", "'S", "\n\n", " ",   " x"};
    EXPECT_EQ(chain.split("I'm 12345 HELLO'S\n\n  x"), want);
}

TEST(vocab_unicode, ByteAlphabetIsABijection) {
    for (int b = 0; b < 256; ++b)
        EXPECT_EQ(weft::unicode::cpt_to_byte(weft::unicode::byte_to_cpt(uint8_t(b))), b);
    EXPECT_EQ(weft::unicode::byte_to_cpt(' '), 0x120u);
    EXPECT_EQ(weft::unicode::byte_to_cpt('\n'), 0x10Au);
    EXPECT_EQ(weft::unicode::byte_to_cpt('A'), uint32_t('A'));
    EXPECT_EQ(weft::unicode::cpt_to_byte(0x4E00), -1);
}

TEST(vocab_unicode, ValidSequenceLength) {
    using weft::unicode::valid_sequence_length;
    EXPECT_EQ(valid_sequence_length("a", 0), 1u);
    EXPECT_EQ(valid_sequence_length("\xC3\xA9", 0), 2u);
    EXPECT_EQ(valid_sequence_length("\xE2\x96\x81", 0), 3u);
    EXPECT_EQ(valid_sequence_length("\xF0\x9F\xA6\x99", 0), 4u);
    EXPECT_EQ(valid_sequence_length("\x80", 0), 0u);              // lone continuation
    EXPECT_EQ(valid_sequence_length("\xC0\xAF", 0), 0u);          // overlong
    EXPECT_EQ(valid_sequence_length("\xED\xA0\x80", 0), 0u);      // surrogate
    EXPECT_EQ(valid_sequence_length("\xF4\x90\x80\x80", 0), 0u);  // > U+10FFFF
    EXPECT_EQ(valid_sequence_length("\xE2\x96", 0), 0u);          // truncated
}

}  // namespace
