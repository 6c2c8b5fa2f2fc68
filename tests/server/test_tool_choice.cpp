// tests/server/test_tool_choice.cpp — tool_choice enforced in each API: "required" (Anthropic's
// "any") makes the reply one call of an offered tool, a named tool (Anthropic's {"type": "tool"})
// a call of that one, "none" offers no tools at all; and the requests that cannot be met are 400s.
// The model is stories260K with random-ish replies: only the grammar makes its calls.
#include "server/api_test_server.h"

namespace weft::server::api_test {
namespace {

// Two tools whose arguments are enums, so that a forced call is short.
json two_tools() {
    const auto tool = [](const char *name, const char *param, json values) {
        const json parameters = {{"type", "object"},
                                 {"properties", {{param, {{"enum", std::move(values)}}}}},
                                 {"required", {param}}};
        return json{{"type", "function"},
                    {"function", {{"name", name}, {"description", "a tool"}, {"parameters", parameters}}}};
    };
    return json::array(
        {tool("get_weather", "city", {"Paris", "Rome"}), tool("get_time", "zone", {"UTC", "CET"})});
}

json chat_body(json tool_choice) {
    json body = {{"model", "stories"},
                 {"max_tokens", 96},
                 {"temperature", 0},
                 {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                 {"tools", two_tools()}};
    if (!tool_choice.is_null()) body["tool_choice"] = std::move(tool_choice);
    return body;
}

// The one call of a chat completion, checked to be well formed.
json the_call(const json &answer) {
    const json &choice = answer["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << answer.dump();
    if (!choice["message"].contains("tool_calls")) return {};
    EXPECT_EQ(choice["message"]["tool_calls"].size(), 1u);
    const json &fn = choice["message"]["tool_calls"][0]["function"];
    return {{"name", fn["name"]}, {"arguments", json::parse(fn["arguments"].get<std::string>())}};
}

TEST(ToolChoice, RequiredAndNamedForceTheCall) {
    api_server s;
    const json required = the_call(s.post_json("/v1/chat/completions", chat_body("required"), 200));
    ASSERT_TRUE(required.is_object());
    const std::string name = required["name"];
    EXPECT_TRUE(name == "get_weather" || name == "get_time") << required.dump();
    EXPECT_EQ(required["arguments"].size(), 1u);

    for (const char *wanted : {"get_weather", "get_time"}) {
        const json named =
            the_call(s.post_json("/v1/chat/completions",
                                 chat_body({{"type", "function"}, {"function", {{"name", wanted}}}}), 200));
        ASSERT_TRUE(named.is_object());
        EXPECT_EQ(named["name"], wanted);
        const json &args = named["arguments"];
        const bool weather = std::string(wanted) == "get_weather";
        const json first = weather ? json({{"city", "Paris"}}) : json({{"zone", "UTC"}});
        const json second = weather ? json({{"city", "Rome"}}) : json({{"zone", "CET"}});
        EXPECT_TRUE(args == first || args == second) << args;
    }

    // streamed: the same call in the last delta
    json streamed = chat_body("required");
    streamed["stream"] = true;
    auto res = s.post("/v1/chat/completions", streamed);
    ASSERT_TRUE(res);
    EXPECT_NE(res->body.find("\"tool_calls\""), std::string::npos) << res->body;
}

TEST(ToolChoice, NoneOffersNoTools) {
    api_server s;
    const json none = s.post_json("/v1/chat/completions", chat_body("none"), 200);
    json without = chat_body(nullptr);
    without.erase("tools");
    const json plain = s.post_json("/v1/chat/completions", without, 200);
    EXPECT_EQ(none["usage"]["prompt_tokens"], plain["usage"]["prompt_tokens"]);  // no tool list
    const json offered = s.post_json("/v1/chat/completions", chat_body("auto"), 200);
    EXPECT_GT(offered["usage"]["prompt_tokens"].get<int>(), plain["usage"]["prompt_tokens"].get<int>());
    EXPECT_FALSE(none["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolChoice, AnthropicAnyAndTool) {
    api_server s;
    const auto body = [](json choice) {
        return json{{"model", "stories"},
                    {"max_tokens", 96},
                    {"temperature", 0},
                    {"messages", json::array({{{"role", "user"}, {"content", "Weather in Paris?"}}})},
                    {"tools", json::array({{{"name", "get_weather"},
                                            {"input_schema",
                                             {{"type", "object"},
                                              {"properties", {{"city", {{"enum", {"Paris", "Rome"}}}}}},
                                              {"required", {"city"}}}}},
                                           {{"name", "get_time"},
                                            {"input_schema",
                                             {{"type", "object"},
                                              {"properties", {{"zone", {{"enum", {"UTC", "CET"}}}}}},
                                              {"required", {"zone"}}}}}})},
                    {"tool_choice", std::move(choice)}};
    };
    const json any = s.post_json("/v1/messages", body({{"type", "any"}}), 200);
    EXPECT_EQ(any["stop_reason"], "tool_use") << any.dump();
    const json named = s.post_json("/v1/messages", body({{"type", "tool"}, {"name", "get_time"}}), 200);
    ASSERT_EQ(named["stop_reason"], "tool_use") << named.dump();
    const json &block = named["content"].back();
    EXPECT_EQ(block["type"], "tool_use");
    EXPECT_EQ(block["name"], "get_time");
    EXPECT_TRUE(block["input"] == json({{"zone", "UTC"}}) || block["input"] == json({{"zone", "CET"}}));
    const json error = s.post_json("/v1/messages", body({{"type", "tool"}, {"name", "get_moon"}}), 400);
    EXPECT_EQ(error["type"], "error");
}

TEST(ToolChoice, ResponsesRequired) {
    api_server s;
    json tools = json::array();
    for (const json &t : two_tools())
        tools.push_back({{"type", "function"},
                         {"name", t["function"]["name"]},
                         {"parameters", t["function"]["parameters"]}});
    const json body = {
        {"model", "stories"},      {"input", "Weather in Paris?"},
        {"max_output_tokens", 96}, {"temperature", 0},
        {"tools", tools},          {"tool_choice", {{"type", "function"}, {"name", "get_weather"}}}};
    const json answer = s.post_json("/v1/responses", body, 200);
    ASSERT_FALSE(answer["output"].empty()) << answer.dump();
    const json &item = answer["output"].back();
    EXPECT_EQ(item["type"], "function_call") << answer.dump();
    EXPECT_EQ(item["name"], "get_weather");
}

TEST(ToolChoice, RequestsThatCannotBeMetAre400) {
    api_server s;
    json no_tools = chat_body("required");
    no_tools.erase("tools");
    for (const json &body : {no_tools, chat_body("always"),
                             chat_body({{"type", "function"}, {"function", {{"name", "get_moon"}}}}),
                             chat_body({{"type", "function"}}), chat_body(json::array())}) {
        const json error = s.post_json("/v1/chat/completions", body, 400);
        EXPECT_TRUE(error.contains("error")) << body.dump();
    }
    json with_grammar = chat_body("required");
    with_grammar["grammar"] = "root ::= \"x\"";
    s.post_json("/v1/chat/completions", with_grammar, 400);
    json bad_schema = chat_body("required");
    bad_schema["tools"][0]["function"]["parameters"] = {{"not", {{"type", "string"}}}};
    s.post_json("/v1/chat/completions", bad_schema, 400);
}

}  // namespace
}  // namespace weft::server::api_test
