// tests/server/test_anthropic_api.cpp — POST /v1/messages and /v1/messages/count_tokens in process:
// the message whole and streamed (the same text, Anthropic's event order), stop reasons, a forced
// tool call as a tool_use block (and as input_json_delta when streamed), Anthropic's error shape.
#include "server/api_test_server.h"

namespace weft::server::api_test {
namespace {

json anthropic_request(int max_tokens) {
    return {{"model", "stories"},
            {"max_tokens", max_tokens},
            {"temperature", 0},
            {"system", "You tell stories."},
            {"messages", json::array({{{"role", "user"}, {"content", "Tell me a story"}}})}};
}

TEST(AnthropicApi, MessageWholeAndStreamedAgree) {
    api_server s;
    const json whole = s.post_json("/v1/messages", anthropic_request(12), 200);
    EXPECT_EQ(whole["type"], "message");
    EXPECT_EQ(whole["role"], "assistant");
    EXPECT_EQ(whole["stop_reason"], "max_tokens");
    EXPECT_EQ(whole["usage"]["output_tokens"], 12);
    ASSERT_EQ(whole["content"].size(), 1u) << whole.dump();
    const std::string text = whole["content"][0]["text"];
    EXPECT_FALSE(text.empty());
    const json count = s.post_json("/v1/messages/count_tokens", anthropic_request(12), 200);
    EXPECT_EQ(count["input_tokens"], whole["usage"]["input_tokens"]);

    json streamed_request = anthropic_request(12);
    streamed_request["stream"] = true;
    auto res = s.post("/v1/messages", streamed_request);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    const auto events = sse_events(res->body);
    std::vector<std::string> names;
    std::string streamed;
    for (const auto &[name, data] : events) {
        if (name == "ping") continue;
        EXPECT_EQ(data["type"], name);
        if (names.empty() || names.back() != name) names.push_back(name);
        if (name == "content_block_delta") streamed += data["delta"]["text"].get<std::string>();
        if (name == "message_delta") {
            EXPECT_EQ(data["delta"]["stop_reason"], "max_tokens");
        }
    }
    EXPECT_EQ(names, (std::vector<std::string>{"message_start", "content_block_start", "content_block_delta",
                                               "content_block_stop", "message_delta", "message_stop"}));
    EXPECT_EQ(streamed, text);
}

TEST(AnthropicApi, StopSequenceIsNamed) {
    api_server s;
    const std::string text = s.post_json("/v1/messages", anthropic_request(16), 200)["content"][0]["text"];
    ASSERT_GE(text.size(), 4u);
    json request = anthropic_request(16);
    const std::string stop = text.substr(2, 2);
    request["stop_sequences"] = {stop};
    const json out = s.post_json("/v1/messages", request, 200);
    EXPECT_EQ(out["stop_reason"], "stop_sequence") << out.dump();
    EXPECT_EQ(out["stop_sequence"], stop);
    EXPECT_EQ(out["content"][0]["text"], text.substr(0, text.find(stop)));
}

// 128 tokens: the forced call is about 75 characters (stories260K spends a token on most of them), so 64
// cut it short and the unparsed markup came out as text.
TEST(AnthropicApi, ToolUseBlocks) {
    api_server s;
    json request = anthropic_request(128);
    request["tools"] = {{{"name", "get_weather"},
                         {"description", "The weather in a city"},
                         {"input_schema", weather_tool_parameters()}}};
    request["grammar"] = weather_call_grammar();
    const json out = s.post_json("/v1/messages", request, 200);
    EXPECT_EQ(out["stop_reason"], "tool_use") << out.dump();
    ASSERT_EQ(out["content"].size(), 1u) << out.dump();
    EXPECT_EQ(out["content"][0]["type"], "tool_use");
    EXPECT_EQ(out["content"][0]["name"], "get_weather");
    EXPECT_EQ(out["content"][0]["input"], json({{"city", "Paris"}}));

    request["stream"] = true;
    auto res = s.post("/v1/messages", request);
    ASSERT_TRUE(res);
    std::string partial_json, text;
    for (const auto &[name, data] : sse_events(res->body)) {
        if (name == "content_block_start") {
            EXPECT_EQ(data["content_block"]["type"], "tool_use") << data.dump();
        }
        if (name == "content_block_delta" && data["delta"]["type"] == "input_json_delta")
            partial_json += data["delta"]["partial_json"].get<std::string>();
        if (name == "content_block_delta" && data["delta"]["type"] == "text_delta")
            text += data["delta"]["text"].get<std::string>();
        if (name == "message_delta") {
            EXPECT_EQ(data["delta"]["stop_reason"], "tool_use");
        }
    }
    EXPECT_EQ(text, "");  // the call's markup is not shown as text
    EXPECT_EQ(json::parse(partial_json), json({{"city", "Paris"}}));

    // the call and its result sent back: the conversation goes on
    json turn = anthropic_request(4);
    turn["tools"] = request["tools"];
    turn["messages"].push_back({{"role", "assistant"},
                                {"content",
                                 {{{"type", "tool_use"},
                                   {"id", "toolu_1"},
                                   {"name", "get_weather"},
                                   {"input", {{"city", "Paris"}}}}}}});
    const json result = {{"type", "tool_result"}, {"tool_use_id", "toolu_1"}, {"content", "sunny"}};
    turn["messages"].push_back({{"role", "user"}, {"content", json::array({result})}});
    s.post_json("/v1/messages", turn, 200);
}

TEST(AnthropicApi, ErrorsTakeAnthropicsShape) {
    api_server s;
    auto expect_error = [&](const json &body, const std::string &words) {
        const json e = s.post_json("/v1/messages", body, 400);
        EXPECT_EQ(e["type"], "error") << e.dump();
        EXPECT_EQ(e["error"]["type"], "invalid_request_error");
        EXPECT_NE(e["error"]["message"].get<std::string>().find(words), std::string::npos) << e.dump();
    };
    json no_max = anthropic_request(4);
    no_max.erase("max_tokens");
    expect_error(no_max, "max_tokens");
    json bad_role = anthropic_request(4);
    bad_role["messages"][0]["role"] = "system";
    expect_error(bad_role, "role");
    json bad_block = anthropic_request(4);
    bad_block["messages"][0]["content"] = {{{"type", "document"}}};
    expect_error(bad_block, "document");
    json image = anthropic_request(4);  // no --mmproj: refused with the reason
    image["messages"][0]["content"] = {
        {{"type", "image"}, {"source", {{"type", "base64"}, {"media_type", "image/png"}, {"data", "AAAA"}}}}};
    expect_error(image, "mmproj");
    auto res = s.post("/v1/messages", json("not an object"));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400);
    EXPECT_EQ(json::parse(res->body)["type"], "error");
    res = s.get("/v1/messages/nowhere");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 404);
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "not_found_error");
}

TEST(AnthropicApi, ApiKeyAsXApiKey) {
    server_options opt;
    opt.api_key = "sesame";
    api_server s(opt);
    auto res = s.post("/v1/messages", anthropic_request(2));
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
    EXPECT_EQ(json::parse(res->body)["error"]["type"], "authentication_error");
    res = s.post("/v1/messages", anthropic_request(2), {{"x-api-key", "sesame"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
    res = s.post("/v1/messages", anthropic_request(2), {{"x-api-key", "sesamx"}});
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 401);
}

}  // namespace
}  // namespace weft::server::api_test
