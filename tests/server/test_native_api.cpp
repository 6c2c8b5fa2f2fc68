// tests/server/test_native_api.cpp — the reference server's own routes: POST /completion (its native
// shape, streamed and whole), POST /infill (the FIM prompt assembled exactly as the 2026 reference
// assembles it: tests/server/infill/expected.json, recorded by record.sh) and POST /apply-template
// (the reasoning families' templates rendered as the reference's /apply-template renders them).
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "server/api_test_server.h"
#include "server/native_api.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"

namespace weft::server {
namespace {

namespace fs = std::filesystem;
using api_test::sse_events;
using api_test::stories_model;
using json = nlohmann::json;

std::string read_text(const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// A server over `m` with a chat template, n_ctx positions for one slot, n_batch a batch and
// --n-predict n_predict (the numbers infill's limits are taken from).
struct native_server {
    std::unique_ptr<serving::engine> eng;
    std::unique_ptr<openai_server> svr;
    int port = 0;

    native_server(const model &m, const std::string &chat_template, uint32_t n_ctx = 1024,
                  uint32_t n_batch = 512, int32_t n_predict = 64) {
        server_options opt;
        opt.port = 0;
        opt.http_threads = 4;
        opt.n_slots = 1;
        opt.n_predict = n_predict;
        svr = std::make_unique<openai_server>(opt);
        port = svr->listen();
        svr->start();
        serving::engine_params ep;
        ep.context = serving::conversation_params(m, n_ctx, n_batch, 2);
        eng = std::make_unique<serving::engine>(m, ep);
        eng->start();
        svr->set_ready(m, *eng, serving::choose_chat_template(m, chat_template), "test");
    }
    ~native_server() {
        svr->stop();
        svr->wait();
        svr.reset();
        eng->stop();
    }
    httplib::Result post(const std::string &path, const std::string &body) const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60, 0);
        return c.Post(path, body, "application/json");
    }
};

// The model record.sh runs the reference on (weft synth --fim, Qwen2.5-Coder's FIM tokens).
const model &fim_model() {
    static const std::unique_ptr<model> m = [] {
        synth_spec s;
        s.arch = "qwen2";
        s.n_embd = 64, s.n_layer = 2, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 96, s.n_vocab = 400, s.seed = 7;
        s.fim = true;
        const fs::path path =
            fs::temp_directory_path() / ("weft-native-fim-" + std::to_string(::getpid()) + ".gguf");
        synth_write(s, path.string());
        auto loaded = model::load(path.string());
        fs::remove(path);
        return loaded;
    }();
    return *m;
}

TEST(NativeApi, CompletionAnswersInTheReferencesShape) {
    native_server server(stories_model(), "chatml");
    const json body = {{"prompt", "Once upon"}, {"n_predict", 4},        {"temperature", 0},
                       {"n_probs", 2},          {"return_tokens", true}, {"id_slot", 0}};
    auto res = server.post("/completion", body.dump());
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    const json r = json::parse(res->body);
    // what the reference answers for stories260K (its greedy continuation, prompt and counts)
    EXPECT_EQ(r["content"], " a time, there");
    EXPECT_EQ(r["prompt"], "<s> Once upon");
    EXPECT_EQ(r["tokens_evaluated"], 3);
    EXPECT_EQ(r["tokens_predicted"], 4);
    EXPECT_EQ(r["tokens"].size(), 4u);
    EXPECT_EQ(r["stop"], true);
    EXPECT_EQ(r["stop_type"], "limit");
    EXPECT_EQ(r["id_slot"], 0);
    EXPECT_EQ(r["truncated"], false);
    EXPECT_EQ(r["generation_settings"]["n_predict"], 4);
    EXPECT_EQ(r["generation_settings"]["temperature"], 0.0);
    EXPECT_EQ(r["timings"]["predicted_n"], 4);
    ASSERT_EQ(r["completion_probabilities"].size(), 4u);
    EXPECT_EQ(r["completion_probabilities"][0]["token"], " a");
    EXPECT_EQ(r["completion_probabilities"][0]["top_logprobs"].size(), 2u);

    // a stop word, and an array of prompts (strings, token ids, mixed): one answer each, in order
    res = server.post(
        "/completion",
        json{{"prompt", "Once upon"}, {"n_predict", 8}, {"temperature", 0}, {"stop", {"there"}}}.dump());
    ASSERT_TRUE(res);
    const json stopped = json::parse(res->body);
    EXPECT_EQ(stopped["content"], " a time, ");
    EXPECT_EQ(stopped["stop_type"], "word");
    EXPECT_EQ(stopped["stopping_word"], "there");
    res = server.post("/completion", json{{"prompt", json::array({"Once upon", json::array({1, 300}),
                                                                  json::array({"Once", 300, "upon"})})},
                                          {"n_predict", 2},
                                          {"temperature", 0}}
                                         .dump());
    ASSERT_TRUE(res);
    const json many = json::parse(res->body);
    ASSERT_TRUE(many.is_array()) << res->body;
    ASSERT_EQ(many.size(), 3u);
    EXPECT_EQ(many[0]["content"], " a time");
    EXPECT_EQ(many[1]["prompt"], "<s> ha");  // as the reference renders them
    EXPECT_EQ(many[2]["tokens_evaluated"], 4);
    for (size_t k = 0; k < 3; ++k) EXPECT_EQ(many[k]["index"], k);

    // streamed: one chunk per piece with stop false, then the final object; no [DONE]
    res = server.post("/completion", json{{"prompt", "Once upon"},
                                          {"n_predict", 3},
                                          {"temperature", 0},
                                          {"stream", true},
                                          {"return_tokens", true}}
                                         .dump());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->body.find("[DONE]"), std::string::npos);
    const auto events = sse_events(res->body);
    ASSERT_GE(events.size(), 2u) << res->body;
    std::string text;
    for (size_t i = 0; i + 1 < events.size(); ++i) {
        EXPECT_EQ(events[i].second["stop"], false);
        text += events[i].second["content"].get<std::string>();
    }
    EXPECT_EQ(text, " a time,");
    const json &last = events.back().second;
    EXPECT_EQ(last["stop"], true);
    EXPECT_EQ(last["content"], "");
    EXPECT_EQ(last["tokens_predicted"], 3);
    EXPECT_TRUE(last.contains("timings"));
}

TEST(NativeApi, InfillPromptsAreTheReferences) {
    const fs::path dir = fs::path(WEFT_SOURCE_DIR) / "tests" / "server" / "infill";
    const json requests = json::parse(read_text(dir / "requests.json"));
    const json expected = json::parse(read_text(dir / "expected.json"));
    ASSERT_EQ(requests.size(), expected.size()) << "run tests/server/infill/record.sh";
    // the reference's -c 1024 -b 256 -n 64 -np 1
    native_server server(fim_model(), "chatml", 1024, 256, 64);
    for (size_t i = 0; i < requests.size(); ++i) {
        SCOPED_TRACE(requests[i].dump());
        json body = requests[i];
        body["n_predict"] = 1;
        auto res = server.post("/infill", body.dump());
        ASSERT_TRUE(res);
        ASSERT_EQ(res->status, 200) << res->body;
        const json r = json::parse(res->body);
        EXPECT_EQ(r["prompt"], expected[i]["prompt"]);
        EXPECT_EQ(r["tokens_evaluated"], expected[i]["tokens_evaluated"]);
    }
}

TEST(NativeApi, InfillPromptRule) {
    const vocab &v = fim_model().vocab();
    const fim_tokens &fim = v.fim();
    ASSERT_TRUE(fim.can_infill());
    infill_parts parts;
    parts.prefix = {10, 11, 12, 13, 14, 15, 16, 17};
    parts.suffix = {20, 21, 22, 23, 24, 25};
    parts.prompt = {30};
    infill_limits limits;
    limits.n_batch = 8;  // the prefix's last 6 tokens, the suffix's first 2 - 2 - 1 < 0: none
    limits.n_ctx = 8;    // no room for extra context
    limits.n_predict = 0;
    std::vector<token> want = {v.bos(), fim.pre, 12, 13, 14, 15, 16, 17, 30, fim.suf, fim.mid};
    EXPECT_EQ(infill_prompt(v, parts, limits), want);
    limits.spm_order = true;
    want = {v.bos(), fim.suf, fim.pre, 12, 13, 14, 15, 16, 17, 30, fim.mid};
    EXPECT_EQ(infill_prompt(v, parts, limits), want);
    // the extra context's last tokens before everything: [rep]myproject\n ... [sep]filename\n
    limits = {};
    limits.n_batch = 16, limits.n_ctx = 20, limits.n_predict = 1;  // 20 - 16 - 2 = 2 extra tokens
    const std::vector<token> out = infill_prompt(v, parts, limits);
    const std::vector<token> tail_of_extra = v.tokenize("filename\n", false, false);
    ASSERT_GE(tail_of_extra.size(), 2u);
    EXPECT_EQ(std::vector<token>(out.begin(), out.begin() + 2),
              std::vector<token>(tail_of_extra.end() - 2, tail_of_extra.end()));
    EXPECT_EQ(out[2], v.bos());
}

TEST(NativeApi, InfillNeedsFimTokens) {
    native_server server(stories_model(), "chatml");
    auto res = server.post("/infill", R"({"input_prefix": "a", "input_suffix": "b"})");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 501);
    EXPECT_EQ(
        json::parse(res->body)["error"]["message"],
        "Infill is not supported by this model: prefix token is missing. suffix token is missing. middle "
        "token is missing. ");
}

TEST(NativeApi, ApplyTemplateRendersAsTheReference) {
    const fs::path jinja = fs::path(WEFT_SOURCE_DIR) / "tests" / "template" / "jinja";
    const fs::path reference = jinja / "reference";
    const json cases = json::parse(read_text(reference / "cases.json"));
    int compared = 0;
    for (const auto &name : cases["templates"]) {
        const std::string tmpl = read_text(jinja / "templates" / (name.get<std::string>() + ".jinja"));
        if (tmpl.find("strftime_now") != std::string::npos) continue;  // prints the day of the recording
        native_server server(stories_model(), tmpl);
        for (const auto &entry : fs::directory_iterator(reference / "conversations")) {
            const std::string id = name.get<std::string>() + "--" + entry.path().stem().string();
            SCOPED_TRACE(id);
            auto res = server.post("/apply-template", read_text(entry.path()));
            ASSERT_TRUE(res);
            const fs::path expected = reference / "expected" / (id + ".txt");
            if (!fs::exists(expected)) {  // the reference refused it too
                EXPECT_GE(res->status, 400) << res->body;
                continue;
            }
            ASSERT_EQ(res->status, 200) << res->body;
            EXPECT_EQ(json::parse(res->body)["prompt"], read_text(expected));
            ++compared;
        }
    }
    EXPECT_GE(compared, 27);
    // a template family without Jinja formats the messages; a body without messages is a 400
    native_server chatml(stories_model(), "chatml");
    auto res = chatml.post("/apply-template", R"({"messages": [{"role": "user", "content": "hi"}]})");
    ASSERT_TRUE(res);
    EXPECT_EQ(json::parse(res->body)["prompt"], "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    res = chatml.post("/apply-template", R"({"messages": 5})");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
}

}  // namespace
}  // namespace weft::server
