// tests/server/test_tool_calls.cpp — the tool calls the server finds in a reply, in each form chat
// templates teach, and none where there are none.
#include <gtest/gtest.h>

#include "server/tool_calls.h"

namespace {

using weft::server::parse_tool_calls;

TEST(ToolCalls, HermesAndQwenBlocks) {
    const auto r = parse_tool_calls(
        "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\"}}\n</tool_call>\n"
        "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>");
    ASSERT_EQ(r.calls.size(), 2u);
    EXPECT_EQ(r.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json({{"city", "Paris"}}));
    EXPECT_EQ(r.calls[1].name, "get_time");
    EXPECT_EQ(r.content, "Let me look.");
}

TEST(ToolCalls, MistralLlamaAndBareJson) {
    auto r = parse_tool_calls("[TOOL_CALLS] [{\"name\": \"f\", \"arguments\": {\"x\": 1}}]");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].name, "f");
    EXPECT_EQ(r.content, "");
    r = parse_tool_calls("<|python_tag|>{\"name\": \"g\", \"parameters\": {\"q\": \"a\"}}");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(nlohmann::json::parse(r.calls[0].arguments), nlohmann::json({{"q", "a"}}));
    r = parse_tool_calls("  {\"name\": \"h\", \"arguments\": \"{\\\"y\\\": 2}\"}  ");
    ASSERT_EQ(r.calls.size(), 1u);
    EXPECT_EQ(r.calls[0].arguments, "{\"y\": 2}");  // a string stays the string the model wrote
}

TEST(ToolCalls, PlainTextAndBrokenCallsAreContent) {
    for (const std::string text :
         {"Just an answer.", "{\"not\": \"a call\"}", "<tool_call>{broken json</tool_call>",
          "[TOOL_CALLS] nothing", "[1, 2, 3]"}) {
        SCOPED_TRACE(text);
        const auto r = parse_tool_calls(text);
        EXPECT_TRUE(r.calls.empty());
        EXPECT_EQ(r.content, text);
    }
}

TEST(ToolCalls, JsonBecomesTemplateValues) {
    const auto v = weft::server::jinja_from_json(
        nlohmann::json::parse(R"({"a": [1, 2.5, "s", null, true], "b": {"c": "d"}})"));
    ASSERT_TRUE(v.is_dict());
    EXPECT_TRUE(v.get("a").is_list());
    EXPECT_EQ(v.get("a").as_list().size(), 5u);
    EXPECT_EQ(v.get("b").get("c").as_string(), "d");
}

}  // namespace
