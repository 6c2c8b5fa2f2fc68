// tests/server/test_api_reasoning.cpp — the thoughts of a reply in each API's own form when the
// server splits them out (--reasoning-format, the default auto): Anthropic's thinking blocks
// (thinking_delta events when streamed), the Responses API's reasoning items
// (response.reasoning_text.delta), Ollama's message.thinking; and each API's switch for the
// template's thinking (Anthropic's thinking.type, the Responses API's reasoning.effort, Ollama's
// think) reaching it as enable_thinking. The reply is forced by a grammar: "<think>I add.</think>It
// is 4.".
#include "server/api_test_server.h"

namespace weft::server::api_test {
namespace {

json user_turn() {
    return json::array({{{"role", "user"}, {"content", "What is 2 + 2?"}}});
}

json anthropic_body() {
    return {{"model", "stories"},
            {"max_tokens", 64},
            {"temperature", 0},
            {"messages", user_turn()},
            {"grammar", thought_grammar()}};
}

TEST(ApiReasoning, AnthropicThinkingBlocks) {
    api_server s({}, thinking_template);
    const json whole = s.post_json("/v1/messages", anthropic_body(), 200);
    ASSERT_EQ(whole["content"].size(), 2u) << whole.dump();
    EXPECT_EQ(whole["content"][0]["type"], "thinking");
    EXPECT_EQ(whole["content"][0]["thinking"], "I add.");
    EXPECT_EQ(whole["content"][1], (json{{"type", "text"}, {"text", "It is 4."}}));

    json streamed = anthropic_body();
    streamed["stream"] = true;
    auto res = s.post("/v1/messages", streamed);
    ASSERT_TRUE(res);
    std::string thinking, text;
    std::vector<std::string> starts;
    for (const auto &[name, data] : sse_events(res->body)) {
        if (name == "content_block_start") {
            EXPECT_EQ(data["index"], starts.size());
            starts.push_back(data["content_block"]["type"]);
        }
        if (name == "content_block_delta" && data["delta"]["type"] == "thinking_delta") {
            EXPECT_EQ(data["index"], 0);
            thinking += data["delta"]["thinking"].get<std::string>();
        }
        if (name == "content_block_delta" && data["delta"]["type"] == "text_delta") {
            EXPECT_EQ(data["index"], 1);
            text += data["delta"]["text"].get<std::string>();
        }
    }
    EXPECT_EQ(starts, (std::vector<std::string>{"thinking", "text"}));
    EXPECT_EQ(thinking, "I add.");
    EXPECT_EQ(text, "It is 4.");

    // thinking disabled: the template closes an empty thought in the prompt (more input tokens)
    json off = anthropic_body();
    off["thinking"] = {{"type", "disabled"}};
    json on = anthropic_body();
    on["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
    const json counted_off = s.post_json("/v1/messages/count_tokens", off, 200);
    const json counted_on = s.post_json("/v1/messages/count_tokens", on, 200);
    EXPECT_GT(counted_off["input_tokens"].get<int>(), counted_on["input_tokens"].get<int>());
    EXPECT_EQ(counted_on["input_tokens"], whole["usage"]["input_tokens"]);
    for (const json &bad : {json{{"type", "sometimes"}}, json{{"type", "enabled"}},
                            json{{"type", "enabled"}, {"budget_tokens", 0}}, json("on")}) {
        json body = anthropic_body();
        body["thinking"] = bad;
        const json error = s.post_json("/v1/messages", body, 400);
        EXPECT_EQ(error["type"], "error") << bad.dump();
    }
}

TEST(ApiReasoning, ResponsesReasoningItems) {
    api_server s({}, thinking_template);
    const json body = {{"model", "stories"},
                       {"input", "What is 2 + 2?"},
                       {"max_output_tokens", 64},
                       {"temperature", 0},
                       {"grammar", thought_grammar()}};
    const json whole = s.post_json("/v1/responses", body, 200);
    ASSERT_EQ(whole["output"].size(), 2u) << whole.dump();
    EXPECT_EQ(whole["output"][0]["type"], "reasoning");
    EXPECT_EQ(whole["output"][0]["content"][0], (json{{"type", "reasoning_text"}, {"text", "I add."}}));
    EXPECT_EQ(whole["output"][1]["type"], "message");
    EXPECT_EQ(whole["output"][1]["content"][0]["text"], "It is 4.");

    json streamed = body;
    streamed["stream"] = true;
    auto res = s.post("/v1/responses", streamed);
    ASSERT_TRUE(res);
    std::string reasoning, text;
    json completed;
    int64_t sequence = 0;
    for (const auto &[name, data] : sse_events(res->body)) {
        EXPECT_EQ(data["sequence_number"], sequence++);
        if (name == "response.reasoning_text.delta") {
            EXPECT_EQ(data["output_index"], 0);
            reasoning += data["delta"].get<std::string>();
        }
        if (name == "response.reasoning_text.done") {
            EXPECT_EQ(data["text"], "I add.");
        }
        if (name == "response.output_text.delta") {
            EXPECT_EQ(data["output_index"], 1);
            text += data["delta"].get<std::string>();
        }
        if (name == "response.completed") completed = data["response"];
    }
    EXPECT_EQ(reasoning, "I add.");
    EXPECT_EQ(text, "It is 4.");
    ASSERT_EQ(completed["output"].size(), 2u) << res->body;
    EXPECT_EQ(completed["output"][0]["content"], whole["output"][0]["content"]);
    EXPECT_EQ(completed["output"][1]["content"][0]["text"], "It is 4.");

    // reasoning.effort "none" turns the template's thinking off
    json off = body;
    off["reasoning"] = {{"effort", "none"}};
    const json answered_off = s.post_json("/v1/responses", off, 200);
    EXPECT_GT(answered_off["usage"]["input_tokens"].get<int>(), whole["usage"]["input_tokens"].get<int>());
}

TEST(ApiReasoning, OllamaMessageThinking) {
    api_server s({}, thinking_template);
    const json body = {{"model", "stories"},
                       {"messages", user_turn()},
                       {"stream", false},
                       {"options", {{"temperature", 0}, {"num_predict", 64}}},
                       {"grammar", thought_grammar()}};
    const json whole = s.post_json("/api/chat", body, 200);
    EXPECT_EQ(whole["message"]["thinking"], "I add.");
    EXPECT_EQ(whole["message"]["content"], "It is 4.");

    json streamed = body;
    streamed["stream"] = true;
    auto res = s.post("/api/chat", streamed);
    ASSERT_TRUE(res);
    std::string thinking, content;
    for (const json &line : ndjson_lines(res->body)) {
        thinking += line["message"].value("thinking", "");
        content += line["message"].value("content", "");
    }
    EXPECT_EQ(thinking, "I add.");
    EXPECT_EQ(content, "It is 4.");

    json off = body;
    off["think"] = false;
    const json answered_off = s.post_json("/api/chat", off, 200);
    EXPECT_GT(answered_off["prompt_eval_count"].get<int>(), whole["prompt_eval_count"].get<int>());
    off["think"] = "deeply";
    EXPECT_TRUE(s.post_json("/api/chat", off, 400).contains("error"));
}

// --reasoning-format none: the thoughts stay in the text, tags and all, in every API
TEST(ApiReasoning, FormatNoneKeepsTheText) {
    server_options opt;
    opt.reasoning = reasoning_format::none;
    api_server s(opt, thinking_template);
    const json whole = s.post_json("/v1/messages", anthropic_body(), 200);
    ASSERT_EQ(whole["content"].size(), 1u) << whole.dump();
    EXPECT_EQ(whole["content"][0]["text"], "<think>I add.</think>It is 4.");
    const json ollama = s.post_json("/api/chat",
                                    {{"model", "stories"},
                                     {"messages", user_turn()},
                                     {"stream", false},
                                     {"options", {{"temperature", 0}, {"num_predict", 64}}},
                                     {"grammar", thought_grammar()}},
                                    200);
    EXPECT_FALSE(ollama["message"].contains("thinking"));
    EXPECT_EQ(ollama["message"]["content"], "<think>I add.</think>It is 4.");
}

}  // namespace
}  // namespace weft::server::api_test
