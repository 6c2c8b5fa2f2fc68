// tests/api/test_c_api.cpp — the C API (include/weft.h) through the engine: what `weft run` prints,
// streaming and stopping, abort from another thread, state, logits, embeddings, chat templates, and
// errors (a bad path, a hostile file, a prompt longer than the context) as codes and messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/fixtures.h"
#include "common/run_weft.h"
#include "weft.h"

namespace {

namespace fs = std::filesystem;

const std::string stories = std::string(WEFT_SOURCE_DIR) + "/models/stories260K.gguf";

struct model_handle {
    weft_model *m = nullptr;
    explicit model_handle(const std::string &path) {
        weft_model_params p;
        weft_model_params_init(&p);
        EXPECT_EQ(weft_model_load(path.c_str(), &p, &m), WEFT_OK) << weft_last_error();
    }
    ~model_handle() { weft_model_free(m); }
};

struct session_handle {
    weft_session *s = nullptr;
    explicit session_handle(weft_model *m, uint32_t n_ctx = 0) {
        weft_session_params p;
        weft_session_params_init(&p);
        p.n_ctx = n_ctx;
        p.n_threads = 2;
        EXPECT_EQ(weft_session_create(m, &p, &s), WEFT_OK) << weft_last_error();
    }
    ~session_handle() { weft_session_free(s); }
};

std::vector<weft_token> tokenize(weft_model *m, const std::string &text) {
    size_t n = 0;
    EXPECT_EQ(weft_tokenize(m, text.data(), text.size(), true, true, nullptr, 0, &n),
              WEFT_ERR_BUFFER_TOO_SMALL);
    std::vector<weft_token> t(n);
    EXPECT_EQ(weft_tokenize(m, text.data(), text.size(), true, true, t.data(), t.size(), &n), WEFT_OK);
    return t;
}

struct collected {
    std::string text;
    std::vector<weft_token> tokens;
    size_t stop_after = SIZE_MAX;  // pieces
    size_t pieces = 0;
};

bool collect(const char *text, size_t length, const weft_token *tokens, size_t n_tokens, void *user_data) {
    auto *c = static_cast<collected *>(user_data);
    c->text.append(text, length);
    c->tokens.insert(c->tokens.end(), tokens, tokens + n_tokens);
    return ++c->pieces < c->stop_after;
}

weft_generate_params greedy(int32_t n) {
    weft_generate_params g;
    weft_generate_params_init(&g);
    g.max_tokens = n;
    g.sampling.temperature = 0.0f;
    g.sampling.repeat_penalty = 1.0f;
    return g;
}

// The built-in model, a session over it and a prompt: what most tests start from.
class CApiStories : public ::testing::Test {
  protected:
    model_handle model{stories};
    session_handle session{model.m};
    const std::vector<weft_token> prompt = tokenize(model.m, "Once upon a time");
};

TEST(CApi, VersionMatchesTheHeader) {
    EXPECT_EQ(weft_version(), WEFT_API_VERSION);
    EXPECT_NE(std::string(weft_version_string()).find("C API 1."), std::string::npos);
    EXPECT_STREQ(weft_status_name(WEFT_ERR_CONTEXT_FULL), "WEFT_ERR_CONTEXT_FULL");
}

TEST_F(CApiStories, GreedyGenerationPrintsWhatWeftRunPrints) {
    const weft_generate_params g = greedy(40);
    collected c;
    weft_generate_result r;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &c, &r), WEFT_OK)
        << weft_last_error();
    EXPECT_EQ(r.n_prompt_tokens, int32_t(prompt.size()));
    EXPECT_EQ(size_t(r.n_generated_tokens), c.tokens.size());
    const auto run = weft::test::run_weft({"run", "-m", stories, "-p", "Once upon a time", "-n", "40",
                                           "--temp", "0", "--repeat-penalty", "1.0"});
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(c.text + "\n", run.out);

    // the same prompt again reuses the session's cache and gives the same text
    collected again;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &again, &r), WEFT_OK);
    EXPECT_EQ(again.text, c.text);
    EXPECT_GT(r.n_cached_tokens, 0);
    // and after a reset it decodes the whole prompt
    ASSERT_EQ(weft_session_reset(session.s), WEFT_OK);
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, &r), WEFT_OK);
    EXPECT_EQ(r.n_cached_tokens, 0);
}

TEST_F(CApiStories, TheCallbackStopsGeneration) {
    const weft_generate_params g = greedy(64);
    collected c;
    c.stop_after = 3;
    weft_generate_result r;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &c, &r), WEFT_OK);
    EXPECT_EQ(r.finish, WEFT_FINISH_CANCELLED);
    EXPECT_EQ(c.pieces, 3u);
}

TEST_F(CApiStories, StopStringsEndTheText) {
    weft_generate_params g = greedy(64);
    collected full;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &full, nullptr), WEFT_OK);
    const size_t cut = full.text.find(' ', 10);
    ASSERT_NE(cut, std::string::npos);
    const std::string stop = full.text.substr(cut, 4);
    const char *stops[] = {stop.c_str()};
    g.stop = stops;
    g.n_stop = 1;
    collected stopped;
    weft_generate_result r;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &stopped, &r), WEFT_OK);
    EXPECT_EQ(r.finish, WEFT_FINISH_STOP);
    EXPECT_EQ(stopped.text, full.text.substr(0, full.text.find(stop)));
}

TEST(CApi, AbortFromAnotherThreadStopsGeneration) {
    model_handle model(stories);
    session_handle session(model.m, 4096);
    const std::vector<weft_token> prompt = tokenize(model.m, "Once upon a time");
    weft_generate_params g = greedy(-1);
    g.ignore_eos = true;  // would run until the context is full
    std::atomic<bool> started{false};
    auto on_piece = [](const char *, size_t, const weft_token *, size_t, void *user_data) {
        static_cast<std::atomic<bool> *>(user_data)->store(true);
        return true;
    };
    std::thread stopper([&] {
        while (!started.load()) std::this_thread::yield();
        weft_session_abort(session.s);
    });
    weft_generate_result r;
    const weft_status st = weft_generate(session.s, prompt.data(), prompt.size(), &g, on_piece, &started, &r);
    stopper.join();
    EXPECT_EQ(st, WEFT_ERR_ABORTED) << weft_last_error();
    EXPECT_LT(r.n_generated_tokens, 4000);
}

TEST_F(CApiStories, AnAbortReachesOneCallOnly) {
    const weft_generate_params g = greedy(4);
    weft_session_abort(session.s);  // none runs: the next call stops
    EXPECT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, nullptr),
              WEFT_ERR_ABORTED);
    EXPECT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, nullptr), WEFT_OK)
        << weft_last_error();
}

TEST(CApi, ErrorsComeAsCodesAndMessages) {
    weft_model *m = nullptr;
    weft_model_params p;
    weft_model_params_init(&p);
    EXPECT_EQ(weft_model_load("/no/such/model.gguf", &p, &m), WEFT_ERR_IO);
    EXPECT_EQ(m, nullptr);
    EXPECT_NE(std::string(weft_last_error()).find("/no/such/model.gguf"), std::string::npos);
    EXPECT_EQ(weft_model_load(nullptr, &p, &m), WEFT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(weft_last_error()).find("path"), std::string::npos);

    // a hostile file: the model's first 4 KiB (a header that promises tensors the file lacks), and
    // one with its tensor count overwritten
    const fs::path dir = fs::temp_directory_path() / ("weft-capi-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string bytes = weft::test::read_text_file(stories);
    std::ofstream(dir / "truncated.gguf", std::ios::binary) << bytes.substr(0, 4096);
    std::string huge = bytes;
    for (size_t i = 8; i < 16; ++i) huge[i] = char(0x7f);
    std::ofstream(dir / "huge.gguf", std::ios::binary) << huge;
    std::ofstream(dir / "text.gguf", std::ios::binary) << "not a model at all";
    for (const char *name : {"truncated.gguf", "huge.gguf", "text.gguf"}) {
        const std::string path = (dir / name).string();
        EXPECT_EQ(weft_model_load(path.c_str(), &p, &m), WEFT_ERR_BAD_FILE) << name;
        EXPECT_NE(std::string(weft_last_error()).find(name), std::string::npos) << weft_last_error();
        EXPECT_EQ(m, nullptr);
    }
    fs::remove_all(dir);

    // a prompt longer than the context
    model_handle model(stories);
    session_handle session(model.m, 32);
    std::string long_text;
    for (int i = 0; i < 40; ++i) long_text += "Once upon a time ";
    const std::vector<weft_token> prompt = tokenize(model.m, long_text);
    const weft_generate_params g = greedy(4);
    EXPECT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, nullptr),
              WEFT_ERR_CONTEXT_FULL);
    EXPECT_NE(std::string(weft_last_error()).find(std::to_string(prompt.size()) + " tokens"),
              std::string::npos)
        << weft_last_error();
    // bad sampling parameters and grammars name the problem
    weft_generate_params bad = greedy(4);
    bad.sampling.top_p = 2.0f;
    EXPECT_EQ(weft_generate(session.s, prompt.data(), 3, &bad, nullptr, nullptr, nullptr),
              WEFT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(weft_last_error()).find("top_p"), std::string::npos) << weft_last_error();
    bad = greedy(4);
    bad.sampling.grammar = "root ::= (";
    EXPECT_EQ(weft_generate(session.s, prompt.data(), 3, &bad, nullptr, nullptr, nullptr),
              WEFT_ERR_INVALID_ARGUMENT);
    bad = greedy(4);
    const weft_token out_of_vocab[] = {1, 999999};
    EXPECT_EQ(weft_generate(session.s, out_of_vocab, 2, &bad, nullptr, nullptr, nullptr),
              WEFT_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(weft_generate(nullptr, prompt.data(), 3, &bad, nullptr, nullptr, nullptr),
              WEFT_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(weft_generate(session.s, prompt.data(), 0, &bad, nullptr, nullptr, nullptr),
              WEFT_ERR_INVALID_ARGUMENT);
}

TEST(CApi, TokensRoundTripAndBuffersReportTheirSize) {
    model_handle model(stories);
    const std::string text = "Once upon a time, a little girl";
    const std::vector<weft_token> t = tokenize(model.m, text);
    ASSERT_FALSE(t.empty());
    EXPECT_EQ(t.front(), weft_model_token_bos(model.m));
    size_t length = 0;
    char small[4];
    EXPECT_EQ(weft_detokenize(model.m, t.data() + 1, t.size() - 1, false, small, sizeof small, &length),
              WEFT_ERR_BUFFER_TOO_SMALL);
    std::vector<char> buf(length + 1);
    ASSERT_EQ(weft_detokenize(model.m, t.data() + 1, t.size() - 1, false, buf.data(), buf.size(), &length),
              WEFT_OK);
    EXPECT_EQ(std::string(buf.data()).find("Once upon a time, a little girl") != std::string::npos, true)
        << buf.data();
    EXPECT_GT(weft_model_n_vocab(model.m), 0);
}

TEST(CApi, ChatTemplatesFormatMessages) {
    model_handle model(stories);
    const weft_chat_message msgs[] = {{"system", "Be brief."}, {"user", "Hello"}};
    size_t length = 0;
    EXPECT_EQ(weft_chat_apply_template(model.m, "chatml", msgs, 2, true, nullptr, 0, &length),
              WEFT_ERR_BUFFER_TOO_SMALL);
    std::string out(length + 1, '\0');
    ASSERT_EQ(weft_chat_apply_template(model.m, "chatml", msgs, 2, true, out.data(), out.size(), &length),
              WEFT_OK);
    out.resize(length);
    EXPECT_EQ(out,
              "<|im_start|>system\nBe "
              "brief.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n");
    EXPECT_EQ(weft_chat_apply_template(model.m, "no-such-family", msgs, 2, true, nullptr, 0, &length),
              WEFT_ERR_INVALID_ARGUMENT);
}

TEST_F(CApiStories, LogitsOfAPromptPredictTheGreedyToken) {
    const size_t n_vocab = size_t(weft_model_n_vocab(model.m));
    std::vector<float> logits(prompt.size() * n_vocab);
    EXPECT_EQ(weft_session_logits(session.s, prompt.data(), prompt.size(), logits.data(), logits.size() - 1),
              WEFT_ERR_BUFFER_TOO_SMALL);
    ASSERT_EQ(weft_session_logits(session.s, prompt.data(), prompt.size(), logits.data(), logits.size()),
              WEFT_OK)
        << weft_last_error();
    const float *last = logits.data() + (prompt.size() - 1) * n_vocab;
    const weft_token best = weft_token(std::max_element(last, last + n_vocab) - last);
    const weft_generate_params g = greedy(1);
    collected c;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &c, nullptr), WEFT_OK);
    ASSERT_EQ(c.tokens.size(), 1u);
    EXPECT_EQ(c.tokens[0], best);
}

TEST_F(CApiStories, StateSavedAndLoadedRestoresTheCache) {
    const weft_generate_params g = greedy(8);
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, nullptr), WEFT_OK);
    size_t size = 0;
    ASSERT_EQ(weft_session_state_save(session.s, nullptr, 0, &size), WEFT_ERR_BUFFER_TOO_SMALL);
    std::vector<uint8_t> state(size);
    ASSERT_EQ(weft_session_state_save(session.s, state.data(), state.size(), &size), WEFT_OK);
    size_t n_cached = 0;
    EXPECT_EQ(weft_session_cached_tokens(session.s, nullptr, 0, &n_cached), WEFT_ERR_BUFFER_TOO_SMALL);
    EXPECT_GE(n_cached, prompt.size());

    session_handle other(model.m);
    ASSERT_EQ(weft_session_state_load(other.s, state.data(), state.size()), WEFT_OK) << weft_last_error();
    size_t n_loaded = 0;
    weft_session_cached_tokens(other.s, nullptr, 0, &n_loaded);
    EXPECT_EQ(n_loaded, n_cached);
    weft_generate_result r;
    ASSERT_EQ(weft_generate(other.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, &r), WEFT_OK);
    EXPECT_EQ(r.n_cached_tokens, int32_t(prompt.size()) - 1);  // the last prompt token is decoded again

    std::vector<uint8_t> damaged(state.begin(), state.begin() + long(state.size() / 2));
    EXPECT_EQ(weft_session_state_load(other.s, damaged.data(), damaged.size()), WEFT_ERR_BAD_FILE);
    EXPECT_STRNE(weft_last_error(), "");
    EXPECT_EQ(weft_session_state_load_file(other.s, "/no/such/state"), WEFT_ERR_IO);
}

TEST_F(CApiStories, JsonSchemaConstrainsTheOutput) {
    weft_generate_params g = greedy(64);
    g.sampling.json_schema =
        R"({"type": "object", "properties": {"color": {"enum": ["red", "green"]}}, "required": ["color"],
            "additionalProperties": false})";
    collected c;
    weft_generate_result r;
    ASSERT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, collect, &c, &r), WEFT_OK)
        << weft_last_error();
    EXPECT_EQ(r.finish, WEFT_FINISH_STOP) << c.text;
    const nlohmann::json j = nlohmann::json::parse(c.text);
    EXPECT_TRUE(j.at("color") == "red" || j.at("color") == "green") << c.text;
    g.sampling.json_schema = R"({"type": "object", "properties": {"x": {"$ref": "#/nowhere"}}})";
    EXPECT_EQ(weft_generate(session.s, prompt.data(), prompt.size(), &g, nullptr, nullptr, nullptr),
              WEFT_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(weft_last_error()).find("json_schema"), std::string::npos) << weft_last_error();
}

TEST(CApi, EmbeddingsOfAnEncoder) {
    const std::string bert = weft::test::fixture("models/tiny-bert-F32.gguf");
    if (!fs::exists(bert)) GTEST_SKIP() << "needs ../shared/fixtures/models/tiny-bert-F32.gguf";
    model_handle model(bert);
    ASSERT_TRUE(weft_model_is_encoder(model.m));
    session_handle session(model.m);
    const std::vector<weft_token> t = tokenize(model.m, "hello world");
    std::vector<float> e(size_t(weft_model_n_embd(model.m)));
    ASSERT_EQ(weft_session_embed(session.s, t.data(), t.size(), WEFT_POOLING_MEAN, true, e.data(), e.size()),
              WEFT_OK)
        << weft_last_error();
    double norm = 0;
    for (float v : e) norm += double(v) * v;
    EXPECT_NEAR(norm, 1.0, 1e-4);
    EXPECT_EQ(weft_generate(session.s, t.data(), t.size(), nullptr, nullptr, nullptr, nullptr),
              WEFT_ERR_UNSUPPORTED);

    model_handle decoder(stories);
    session_handle text_session(decoder.m);
    EXPECT_EQ(weft_session_embed(text_session.s, t.data(), 1, WEFT_POOLING_MEAN, false, e.data(), e.size()),
              WEFT_ERR_UNSUPPORTED);
}

// A reranker (bert, pooling rank): WEFT_POOLING_RANK (or the model's own) gives its score of a
// sequence; a query with an empty document is [CLS] query [SEP], the text tokenized with its specials,
// whose score the reference server gave in tests/data/rerank/reranker-F32.json (document 3).
TEST(CApi, ScoresOfAReranker) {
    const nlohmann::json fx = nlohmann::json::parse(
        std::ifstream(std::string(WEFT_SOURCE_DIR) + "/tests/data/rerank/reranker-F32.json"), nullptr, false);
    ASSERT_TRUE(fx.is_object());
    const fs::path dir = fs::temp_directory_path() / ("weft-capi-rerank-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string rr = (dir / "rr.gguf").string();
    ASSERT_EQ(weft::test::run_weft_shell("synth " + weft::test::shell_quote(rr) + " " +
                                         fx["synth_args"].get<std::string>())
                  .status,
              0);
    {
        model_handle model(rr);
        session_handle session(model.m);
        const std::vector<weft_token> t = tokenize(model.m, fx["query"].get<std::string>());
        float score = 0, own = 0;
        ASSERT_EQ(weft_session_embed(session.s, t.data(), t.size(), WEFT_POOLING_RANK, true, &score, 1),
                  WEFT_OK)
            << weft_last_error();
        ASSERT_EQ(weft_session_embed(session.s, t.data(), t.size(), WEFT_POOLING_MODEL, false, &own, 1),
                  WEFT_OK)
            << weft_last_error();
        EXPECT_EQ(score, own);  // never normalized
        double want = 0;
        for (const auto &r : fx["answer"]["results"])
            if (r["index"] == 3) want = r["relevance_score"];
        EXPECT_NEAR(score, want, 1e-3 * std::abs(want));
        // a reranker's rows are scores: another pooling is refused
        std::vector<float> e(size_t(weft_model_n_embd(model.m)));
        EXPECT_NE(
            weft_session_embed(session.s, t.data(), t.size(), WEFT_POOLING_MEAN, false, e.data(), e.size()),
            WEFT_OK);
    }
    fs::remove_all(dir);
}

}  // namespace
