// tests/server/test_ollama_api.cpp — Ollama's routes in process: /api/chat and /api/generate whole
// and as NDJSON (the same text, one final line with the counts), a forced call as tool_calls with
// the model's key order, the descriptive routes (/api/tags, /api/show, /api/ps, /api/version),
// /api/embed refused by a text model, Ollama's error shape.
#include "server/api_test_server.h"

namespace weft::server::api_test {
namespace {

json ollama_chat_request(int num_predict, bool stream) {
    return {{"model", "stories"},
            {"messages", json::array({{{"role", "user"}, {"content", "Tell me a story"}}})},
            {"stream", stream},
            {"options", {{"temperature", 0}, {"num_predict", num_predict}}}};
}

TEST(OllamaApi, ChatAndGenerateWholeAndStreamedAgree) {
    api_server s;
    const json whole = s.post_json("/api/chat", ollama_chat_request(12, false), 200);
    EXPECT_EQ(whole["done"], true);
    EXPECT_EQ(whole["done_reason"], "length");
    EXPECT_EQ(whole["eval_count"], 12);
    EXPECT_GT(whole["prompt_eval_count"], 0);
    EXPECT_EQ(whole["message"]["role"], "assistant");
    const std::string text = whole["message"]["content"];
    EXPECT_FALSE(text.empty());
    auto res = s.post("/api/chat", ollama_chat_request(12, true));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/x-ndjson");
    const std::vector<json> lines = ndjson_lines(res->body);
    ASSERT_GE(lines.size(), 2u) << res->body;
    std::string streamed;
    for (size_t i = 0; i < lines.size(); ++i) {
        EXPECT_EQ(lines[i]["done"], i + 1 == lines.size()) << lines[i].dump();
        streamed += lines[i]["message"]["content"].get<std::string>();
    }
    EXPECT_EQ(streamed, text);
    EXPECT_EQ(lines.back()["eval_count"], 12);

    json generate = {{"model", "stories"},
                     {"prompt", "Tell me a story"},
                     {"stream", false},
                     {"options", {{"temperature", 0}, {"num_predict", 12}}}};
    const json generated = s.post_json("/api/generate", generate, 200);
    EXPECT_EQ(generated["response"], text);  // the same chat prompt
    generate["stream"] = true;
    res = s.post("/api/generate", generate);
    ASSERT_TRUE(res);
    streamed.clear();
    for (const json &line : ndjson_lines(res->body)) streamed += line["response"].get<std::string>();
    EXPECT_EQ(streamed, text);
    // no prompt: the answer to a request that only loads the model
    const json load = s.post_json("/api/generate", {{"model", "stories"}, {"stream", false}}, 200);
    EXPECT_EQ(load["done_reason"], "load");
}

TEST(OllamaApi, ToolCallsKeepTheModelsKeyOrder) {
    api_server s;
    json request = ollama_chat_request(128, false);
    request["tools"] = {{{"type", "function"},
                         {"function", {{"name", "get_weather"}, {"parameters", weather_tool_parameters()}}}}};
    request["grammar"] =
        R"(root ::= "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"C\", \"city\": \"Paris\"}}</tool_call>")";
    auto res = s.post("/api/chat", request);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    // the body as text: nlohmann::json would sort the keys when parsed
    EXPECT_NE(res->body.find(R"("arguments":{"unit":"C","city":"Paris"})"), std::string::npos) << res->body;
    const json out = json::parse(res->body);
    EXPECT_EQ(out["message"]["tool_calls"][0]["function"]["name"], "get_weather");
    EXPECT_EQ(out["message"]["content"], "");
}

TEST(OllamaApi, DescriptiveRoutes) {
    api_server s;
    auto res = s.get("/api/tags");
    ASSERT_TRUE(res);
    const json tags = json::parse(res->body);
    ASSERT_EQ(tags["models"].size(), 1u);
    const std::string name = tags["models"][0]["name"];
    EXPECT_EQ(name, stories_model().name() + ":latest");
    EXPECT_EQ(tags["models"][0]["details"]["format"], "gguf");
    const json show = s.post_json("/api/show", {{"model", name}}, 200);
    EXPECT_EQ(show["details"]["family"], "llama");
    EXPECT_EQ(show["capabilities"], json({"completion", "tools"}));
    EXPECT_EQ(show["model_info"]["general.architecture"], "llama");
    res = s.get("/api/ps");
    ASSERT_TRUE(res);
    EXPECT_EQ(json::parse(res->body)["models"][0]["context_length"], 512);
    res = s.get("/api/version");
    ASSERT_TRUE(res);
    EXPECT_TRUE(json::parse(res->body)["version"].is_string());
}

TEST(OllamaApi, ErrorsTakeOllamasShape) {
    api_server s;
    const json embed = s.post_json("/api/embed", {{"model", "stories"}, {"input", "hello"}}, 400);
    EXPECT_NE(embed["error"].get<std::string>().find("does not produce embeddings"), std::string::npos);
    for (const json &body :
         {json{{"messages", 5}}, json{{"messages", {{{"role", "weird"}, {"content", "x"}}}}},
          json{{"messages", json::array()}, {"format", "xml"}},
          json{{"messages", json::array()}, {"options", {{"num_predict", "x"}}}}}) {
        const json e = s.post_json("/api/chat", body, 400);
        EXPECT_TRUE(e["error"].is_string()) << body.dump() << " -> " << e.dump();
    }
    const json e = s.post_json("/api/generate", {{"prompt", "x"}, {"suffix", "y"}}, 400);
    EXPECT_NE(e["error"].get<std::string>().find("suffix"), std::string::npos);
}

}  // namespace
}  // namespace weft::server::api_test
