// tests/server/test_openai_server.cpp — the HTTP layer driven in process, without the CLI: an
// openai_server over an engine on the stories260K model in models/, spoken to with an HTTP client:
// loading answers, completions (whole and streamed) equal to the engine's own greedy tokens, chat,
// errors as OpenAI error objects, the API key, the chat page, stop().
#include <gtest/gtest.h>
#include <httplib.h>
#include <sys/resource.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "model/model_test_util.h"
#include "weft/model/lora.h"
#include "weft/model/model.h"
#include "weft/model/synth.h"
#include "weft/server/openai_server.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"

namespace weft::server {
namespace {

using json = nlohmann::json;

const model &stories() {
    static const std::unique_ptr<model> m =
        model::load((std::filesystem::path(WEFT_SOURCE_DIR) / "models" / "stories260K.gguf").string());
    return *m;
}

serving::engine_params engine_params_for(const model &m, serving::speculative_params sp = {}) {
    serving::engine_params ep;
    ep.speculative = sp;
    ep.n_slots = 2;
    ep.context = serving::conversation_params(m, 256, 256, 2);
    ep.context.n_ctx = 512;  // two slots of 256
    return ep;
}

// A server on a free port with its engine, ready (or still "loading" when ready is false).
struct running_server {
    std::unique_ptr<serving::engine> eng;
    std::unique_ptr<openai_server> svr;
    int port = 0;

    serving::speculative_params speculative;

    explicit running_server(server_options opt = {}, bool ready = true, serving::speculative_params sp = {})
        : speculative(sp) {
        opt.port = 0;
        opt.http_threads = 4;
        opt.n_slots = 2;
        svr = std::make_unique<openai_server>(opt);
        port = svr->listen();
        svr->start();
        if (ready) make_ready();
    }
    void make_ready() {
        eng = std::make_unique<serving::engine>(stories(), engine_params_for(stories(), speculative));
        eng->start();
        svr->set_ready(stories(), *eng, serving::choose_chat_template(stories(), ""), "test");
    }
    ~running_server() {
        svr->stop();
        svr->wait();
        svr.reset();
        if (eng) eng->stop();
    }
    httplib::Client client() const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60, 0);
        return c;
    }
};

json post_json(const running_server &s, const std::string &path, const json &body, int expect_status,
               const httplib::Headers &headers = {}) {
    auto res = s.client().Post(path, headers, body.dump(), "application/json");
    EXPECT_TRUE(res) << path;
    if (!res) return {};
    EXPECT_EQ(res->status, expect_status) << res->body;
    return json::parse(res->body, nullptr, false);
}

// The engine's own greedy reply to a prompt (no HTTP in between; the engine is running).
std::string engine_greedy(serving::engine &eng, const std::string &prompt, int32_t n) {
    serving::request r;
    r.prompt = stories().vocab().tokenize(prompt, true, true);
    r.max_tokens = n;
    r.sampling.temp = 0.0f;
    auto job = eng.submit(std::move(r));  // the engine's background loop runs it
    for (serving::event e; !job->finished();)
        if (!job->poll_event(e)) job->wait_ready(std::chrono::milliseconds(50));
    return job->result().text;
}

TEST(OpenAIServer, LoadingAnswersHealthAnd503) {
    running_server s({}, /*ready=*/false);
    auto health = s.client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 503);
    EXPECT_EQ(json::parse(health->body)["status"], "loading model");
    auto res = s.client().Post("/v1/completions", R"({"prompt": "x"})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503);
    EXPECT_EQ(res->get_header_value("Retry-After"), "1");
    s.make_ready();
    health = s.client().Get("/health");
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
    EXPECT_EQ(json::parse(health->body)["status"], "ok");
}

TEST(OpenAIServer, CompletionEqualsTheEnginesGreedyReply) {
    running_server s;
    const json out = post_json(s, "/v1/completions",
                               {{"prompt", "Once upon a time"}, {"max_tokens", 12}, {"temperature", 0}}, 200);
    ASSERT_TRUE(out.contains("choices")) << out.dump();
    EXPECT_EQ(out["object"], "text_completion");
    EXPECT_EQ(out["usage"]["completion_tokens"], 12);
    const std::string text = out["choices"][0]["text"];
    EXPECT_FALSE(text.empty());
    EXPECT_EQ(text, engine_greedy(*s.eng, "Once upon a time", 12));
}

TEST(OpenAIServer, StreamedChunksAddUpToTheWholeReply) {
    running_server s;
    const json body = {{"prompt", "Lily went"}, {"max_tokens", 10}, {"temperature", 0}};
    const json whole = post_json(s, "/v1/completions", body, 200);
    json streamed_body = body;
    streamed_body["stream"] = true;
    auto res = s.client().Post("/v1/completions", streamed_body.dump(), "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    EXPECT_NE(res->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
    std::string text;
    bool done = false;
    size_t pos = 0;
    for (size_t at; (at = res->body.find("data: ", pos)) != std::string::npos;) {
        const size_t end = res->body.find("\n\n", at);
        ASSERT_NE(end, std::string::npos);
        const std::string data = res->body.substr(at + 6, end - at - 6);
        pos = end + 2;
        if (data == "[DONE]") {
            done = true;
            break;
        }
        const json chunk = json::parse(data);
        text += chunk["choices"][0]["text"].get<std::string>();
    }
    EXPECT_TRUE(done);
    EXPECT_EQ(text, whole["choices"][0]["text"].get<std::string>());
}

TEST(OpenAIServer, ChatCompletion) {
    running_server s;
    const json out = post_json(
        s, "/v1/chat/completions",
        {{"messages", json::array({{{"role", "user"}, {"content", "Tell me a story"}}})}, {"max_tokens", 8}},
        200);
    ASSERT_TRUE(out.contains("choices")) << out.dump();
    EXPECT_EQ(out["object"], "chat.completion");
    EXPECT_EQ(out["choices"][0]["message"]["role"], "assistant");
    EXPECT_TRUE(out["choices"][0]["message"]["content"].is_string());
}

TEST(OpenAIServer, BadRequestsGetOpenAIErrorObjects) {
    running_server s;
    auto res = s.client().Post("/v1/completions", "{not json", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    json err = json::parse(res->body);
    EXPECT_EQ(err["error"]["type"], "invalid_request_error");
    EXPECT_NE(err["error"]["message"].get<std::string>().find("not valid JSON"), std::string::npos);

    err = post_json(s, "/v1/completions", {{"prompt", "x"}, {"max_tokens", "many"}}, 400);
    EXPECT_NE(err["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos) << err.dump();

    res = s.client().Get("/v1/nowhere");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404);
    EXPECT_NE(json::parse(res->body)["error"]["message"].get<std::string>().find("/v1/nowhere"),
              std::string::npos);
}

TEST(OpenAIServer, ApiKeyIsRequiredWhenSet) {
    server_options opt;
    opt.api_key = "sesame";
    running_server s(opt);
    const json refused = post_json(s, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, 401);
    EXPECT_EQ(refused["error"]["type"], "invalid_request_error");
    post_json(s, "/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}, 200,
              {{"Authorization", "Bearer sesame"}});
    auto health = s.client().Get("/health");  // health needs no key
    ASSERT_TRUE(health);
    EXPECT_EQ(health->status, 200);
}

TEST(OpenAIServer, ServesTheChatPageAndModels) {
    server_options opt;
    opt.model_id = "stories-under-test";
    running_server s(opt);
    auto page = s.client().Get("/");
    ASSERT_TRUE(page);
    EXPECT_EQ(page->status, 200);
    EXPECT_NE(page->body.find("<html"), std::string::npos);
    auto models = s.client().Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "stories-under-test");
}

// Speculative decoding in the server: the same text, the drafts in the response's timings and in
// /metrics.
TEST(OpenAIServer, SpeculativeDecodingReportsItsAcceptance) {
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 48}, {"temperature", 0}};
    std::string plain_text;
    {
        running_server plain;
        plain_text = post_json(plain, "/v1/completions", body, 200)["choices"][0]["text"];
    }
    serving::speculative_params sp;
    sp.lookup_ngram = 1;
    sp.n_max = 8;
    running_server s({}, true, sp);
    const json out = post_json(s, "/v1/completions", body, 200);
    EXPECT_EQ(out["choices"][0]["text"], plain_text);
    ASSERT_TRUE(out["timings"].contains("draft_n")) << out.dump();
    EXPECT_GT(out["timings"]["draft_n"].get<int>(), 0);
    EXPECT_LE(out["timings"]["draft_n_accepted"].get<int>(), out["timings"]["draft_n"].get<int>());
    auto metrics = s.client().Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_NE(
        metrics->body.find("draft_tokens_total " + std::to_string(out["timings"]["draft_n"].get<int>())),
        std::string::npos)
        << metrics->body;
    EXPECT_NE(metrics->body.find("draft_acceptance_rate"), std::string::npos);
    // llama-server's per-request settings: no drafts for this one, the same text
    json no_drafts = body;
    no_drafts["speculative.n_max"] = 0;
    const json plain_again = post_json(s, "/v1/completions", no_drafts, 200);
    EXPECT_EQ(plain_again["choices"][0]["text"], plain_text);
    EXPECT_FALSE(plain_again["timings"].contains("draft_n")) << plain_again.dump();
    json bad = body;
    bad["speculative.p_min"] = 2;
    post_json(s, "/v1/completions", bad, 400);
}

// LoRA in the server: the adapters listed, picked per request by id and scale (scale 0: the base),
// the defaults set by POST /lora-adapters, bad lists refused.
TEST(OpenAIServer, LoraAdaptersPerRequest) {
    test::temp_file adapter_file("server-lora");
    synth_spec spec;  // an adapter needs the model's shapes: stories260K's
    const model &m = stories();
    spec.n_embd = m.hparams().n_embd;
    spec.n_layer = m.hparams().n_layer;
    spec.n_head = m.hparams().n_head();
    spec.n_head_kv = m.hparams().n_head_kv();
    spec.n_ff = m.hparams().n_ff();
    spec.n_vocab = m.hparams().n_vocab;
    synth_lora_write(spec, 4, 8.0f, adapter_file.path());
    const auto adapter = lora_adapter::load(adapter_file.path(), m);
    const json body = {{"prompt", "Once upon a time"}, {"max_tokens", 16}, {"temperature", 0}};
    std::string base_text;
    {
        running_server plain;
        base_text = post_json(plain, "/v1/completions", body, 200)["choices"][0]["text"];
    }
    running_server s({}, false);
    serving::engine_params ep = engine_params_for(stories());
    ep.context.loras = {{adapter.get(), 1.0f}};
    s.eng = std::make_unique<serving::engine>(stories(), ep);
    s.eng->start();
    s.svr->set_ready(stories(), *s.eng, serving::choose_chat_template(stories(), ""), "test");

    auto listed = s.client().Get("/lora-adapters");
    ASSERT_TRUE(listed);
    const json adapters = json::parse(listed->body);
    ASSERT_EQ(adapters.size(), 1u) << listed->body;
    EXPECT_EQ(adapters[0]["id"], 0);
    EXPECT_EQ(adapters[0]["path"], adapter_file.path());
    EXPECT_EQ(adapters[0]["scale"], 1.0);

    const std::string adapted = post_json(s, "/v1/completions", body, 200)["choices"][0]["text"];
    EXPECT_NE(adapted, base_text);
    json off = body;
    off["lora"] = json::array({{{"id", 0}, {"scale", 0.0}}});
    EXPECT_EQ(post_json(s, "/v1/completions", off, 200)["choices"][0]["text"], base_text);
    json none = body;
    none["lora"] = json::array();  // adapters not listed: 0
    EXPECT_EQ(post_json(s, "/v1/completions", none, 200)["choices"][0]["text"], base_text);

    auto set = s.client().Post("/lora-adapters", R"([{"id": 0, "scale": 0}])", "application/json");
    ASSERT_TRUE(set);
    EXPECT_EQ(set->status, 200) << set->body;
    EXPECT_EQ(post_json(s, "/v1/completions", body, 200)["choices"][0]["text"], base_text);

    json bad = body;
    bad["lora"] = json::array({{{"id", 3}, {"scale", 1.0}}});
    const json err = post_json(s, "/v1/completions", bad, 400);
    EXPECT_NE(err["error"]["message"].get<std::string>().find("lora[0].id"), std::string::npos) << err.dump();
    s.svr->stop();
    s.svr->wait();
}

#if defined(__linux__)
// The nice value of every thread of this process (Linux keeps one per thread: field 19 of
// /proc/self/task/<tid>/stat, after the parenthesized command name).
std::vector<int> thread_nice_values() {
    std::vector<int> out;
    for (const auto &task : std::filesystem::directory_iterator("/proc/self/task")) {
        std::ifstream in(task.path() / "stat");
        std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        const size_t close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream fields(stat.substr(close + 2));  // field 3 (state) onwards
        std::string field;
        for (int i = 3; i <= 19 && fields >> field; ++i)
            if (i == 19) out.push_back(std::stoi(field));
    }
    return out;
}

TEST(OpenAIServer, HttpThreadsRunAtTheirNiceValueAndTheDecodeThreadsAtTheProcesss) {
    errno = 0;
    const int base = getpriority(PRIO_PROCESS, 0);
    ASSERT_EQ(errno, 0);
    if (base >= 7) GTEST_SKIP() << "this test runs at nice " << base << " already";
    const std::vector<int> before = thread_nice_values();
    server_options opt;
    opt.http_nice = 7;
    running_server s(opt);  // 4 HTTP workers and the gate; the engine's threads start from this one
    const json out = post_json(s, "/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}, 200);
    EXPECT_EQ(out["usage"]["completion_tokens"], 2);
    const std::vector<int> after = thread_nice_values();
    const auto count = [](const std::vector<int> &v, int nice) {
        return std::count(v.begin(), v.end(), nice);
    };
    EXPECT_EQ(count(after, 7) - count(before, 7), 5);    // the gate and its 4 workers
    EXPECT_GT(count(after, base), count(before, base));  // the engine's loop (at least) keeps the base
    EXPECT_EQ(getpriority(PRIO_PROCESS, 0), base);       // the caller's is unchanged
}
#endif

TEST(OpenAIServer, StopEndsServing) {
    running_server s;
    s.svr->stop();
    s.svr->wait();  // returns: the serving threads have ended
    httplib::Client c("127.0.0.1", s.port);
    c.set_connection_timeout(1, 0);
    EXPECT_FALSE(c.Get("/health"));
}

}  // namespace
}  // namespace weft::server
