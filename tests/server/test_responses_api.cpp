// tests/server/test_responses_api.cpp — POST /v1/responses in process: a response whole and streamed
// (the same text, the Responses API's event order and sequence numbers), instructions and input
// items in the prompt, max_output_tokens as "incomplete", a forced call as a function_call item (and
// its events when streamed), OpenAI's error shape.
#include "server/api_test_server.h"

namespace weft::server::api_test {
namespace {

json responses_request(int max_output_tokens) {
    return {{"model", "stories"},
            {"input", "Tell me a story"},
            {"max_output_tokens", max_output_tokens},
            {"temperature", 0}};
}

TEST(ResponsesApi, ResponseWholeAndStreamedAgree) {
    api_server s;
    const json whole = s.post_json("/v1/responses", responses_request(12), 200);
    EXPECT_EQ(whole["object"], "response");
    EXPECT_EQ(whole["status"], "incomplete");
    EXPECT_EQ(whole["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(whole["usage"]["output_tokens"], 12);
    EXPECT_EQ(whole["usage"]["total_tokens"],
              whole["usage"]["input_tokens"].get<int>() + whole["usage"]["output_tokens"].get<int>());
    ASSERT_EQ(whole["output"].size(), 1u) << whole.dump();
    EXPECT_EQ(whole["output"][0]["type"], "message");
    const std::string text = whole["output"][0]["content"][0]["text"];
    EXPECT_FALSE(text.empty());

    json streamed_request = responses_request(12);
    streamed_request["stream"] = true;
    auto res = s.post("/v1/responses", streamed_request);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200);
    std::vector<std::string> names;
    std::string streamed;
    int64_t sequence = -1;
    for (const auto &[name, data] : sse_events(res->body)) {
        EXPECT_EQ(data["type"], name);
        EXPECT_EQ(data["sequence_number"], sequence + 1);
        sequence = data["sequence_number"];
        if (names.empty() || names.back() != name) names.push_back(name);
        if (name == "response.output_text.delta") streamed += data["delta"].get<std::string>();
        if (name == "response.incomplete") {
            EXPECT_EQ(data["response"]["output"][0]["content"][0]["text"], text);
        }
    }
    EXPECT_EQ(names,
              (std::vector<std::string>{
                  "response.created", "response.in_progress", "response.output_item.added",
                  "response.content_part.added", "response.output_text.delta", "response.output_text.done",
                  "response.content_part.done", "response.output_item.done", "response.incomplete"}));
    EXPECT_EQ(streamed, text);
}

TEST(ResponsesApi, InstructionsAndInputItemsReachThePrompt) {
    api_server s;
    const json plain = s.post_json("/v1/responses", responses_request(2), 200);
    json with_instructions = responses_request(2);
    with_instructions["instructions"] = "You tell stories.";
    const json instructed = s.post_json("/v1/responses", with_instructions, 200);
    EXPECT_EQ(instructed["instructions"], "You tell stories.");
    EXPECT_GT(instructed["usage"]["input_tokens"], plain["usage"]["input_tokens"]);
    json items = responses_request(2);
    items["input"] = {
        {{"role", "developer"}, {"content", "You tell stories."}},
        {{"role", "user"}, {"content", {{{"type", "input_text"}, {"text", "Tell me a story"}}}}}};
    // the same prompt: a developer message is the system message the instructions make
    EXPECT_EQ(s.post_json("/v1/responses", items, 200)["usage"]["input_tokens"],
              instructed["usage"]["input_tokens"]);
}

TEST(ResponsesApi, FunctionCallItems) {
    api_server s;
    json request = responses_request(128);
    request["tools"] = {
        {{"type", "function"}, {"name", "get_weather"}, {"parameters", weather_tool_parameters()}}};
    request["grammar"] = weather_call_grammar();
    const json out = s.post_json("/v1/responses", request, 200);
    EXPECT_EQ(out["status"], "completed") << out.dump();
    ASSERT_EQ(out["output"].size(), 1u) << out.dump();
    EXPECT_EQ(out["output"][0]["type"], "function_call");
    EXPECT_EQ(out["output"][0]["name"], "get_weather");
    EXPECT_EQ(json::parse(out["output"][0]["arguments"].get<std::string>()), json({{"city", "Paris"}}));

    request["stream"] = true;
    auto res = s.post("/v1/responses", request);
    ASSERT_TRUE(res);
    std::string arguments, text;
    for (const auto &[name, data] : sse_events(res->body)) {
        if (name == "response.function_call_arguments.done") arguments = data["arguments"];
        if (name == "response.output_text.delta") text += data["delta"].get<std::string>();
    }
    EXPECT_EQ(text, "");  // the call's markup is not shown as text
    EXPECT_EQ(json::parse(arguments), json({{"city", "Paris"}}));

    json turn = responses_request(4);
    turn["tools"] = request["tools"];
    turn["input"] = {
        {{"role", "user"}, {"content", "The weather?"}},
        {{"type", "function_call"}, {"call_id", "c1"}, {"name", "get_weather"}, {"arguments", "{}"}},
        {{"type", "function_call_output"}, {"call_id", "c1"}, {"output", "sunny"}}};
    s.post_json("/v1/responses", turn, 200);
}

TEST(ResponsesApi, ErrorsTakeOpenAIsShape) {
    api_server s;
    for (const json &body :
         {json{{"model", "x"}}, json{{"input", 5}}, json{{"input", json::array()}},
          json{{"input", "x"}, {"max_output_tokens", 0}},
          json{{"input", "x"}, {"previous_response_id", "resp_1"}},
          json{{"input", "x"}, {"tools", {{{"type", "web_search"}}}}}, json{{"input", {{{"type", 5}}}}}}) {
        const json e = s.post_json("/v1/responses", body, 400);
        EXPECT_EQ(e["error"]["type"], "invalid_request_error") << body.dump() << " -> " << e.dump();
        EXPECT_TRUE(e["error"]["message"].is_string());
    }
}

}  // namespace
}  // namespace weft::server::api_test
