// tests/template/test_chat_reference.cpp — the chat templates of the 2026 families (gpt-oss's
// harmony, Qwen3, DeepSeek R1 and V3.1, GLM-4.5, LFM2, Gemma 4, SmolLM3, Granite 4.0-H, Qwen3.5,
// Llama 4) rendered by render_chat_request, the path
// `weft serve` takes, byte for byte as the 2026 reference server renders them (its /apply-template
// answers for the same request bodies, recorded by tests/template/jinja/reference/record.sh).
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "weft/template/chat_request.h"

namespace weft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

const fs::path jinja_dir = fs::path(WEFT_SOURCE_DIR) / "tests" / "template" / "jinja";
const fs::path reference_dir = jinja_dir / "reference";

std::string read_text(const fs::path &p) {
    std::ifstream f(p, std::ios::binary);
    EXPECT_TRUE(f.good()) << p;
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// strftime_now at noon of the recording's day ("YYYY-MM-DD")
jinja_value strftime_on(const std::string &day) {
    return jinja_value(jinja_function([day](jinja_call_args &a) -> jinja_value {
        std::tm tm{};
        tm.tm_year = std::stoi(day.substr(0, 4)) - 1900;
        tm.tm_mon = std::stoi(day.substr(5, 2)) - 1;
        tm.tm_mday = std::stoi(day.substr(8, 2));
        tm.tm_hour = 12;
        std::mktime(&tm);  // the weekday and the day of the year
        char buf[128];
        const std::string fmt = a.positional.empty() ? "" : a.positional[0].as_string();
        return jinja_value(std::string(buf, std::strftime(buf, sizeof buf, fmt.c_str(), &tm)));
    }));
}

TEST(ChatTemplateReference, ReasoningFamiliesRenderAsTheReference) {
    const json cases = json::parse(read_text(reference_dir / "cases.json"));
    chat_template_tokens tokens{cases["bos_token"], cases["eos_token"]};
    int compared = 0;
    for (const auto &name : cases["templates"]) {
        const jinja_template tmpl(read_text(jinja_dir / "templates" / (name.get<std::string>() + ".jinja")));
        for (const auto &entry : fs::directory_iterator(reference_dir / "conversations")) {
            const std::string id = name.get<std::string>() + "--" + entry.path().stem().string();
            SCOPED_TRACE(id);
            // the body read in the order sent, as the server reads it
            const std::optional<jinja_value> body = jinja_parse_json(read_text(entry.path()));
            ASSERT_TRUE(body.has_value());
            chat_request request;
            request.messages = body->get("messages");
            if (body->get("tools").truthy()) request.tools = body->get("tools");
            request.kwargs = body->get("chat_template_kwargs");
            const jinja_value add = body->get("add_generation_prompt");
            request.add_generation_prompt = add.is_undefined() || add.truthy();
            request.strftime_now = strftime_on(cases["date"]);
            const fs::path expected = reference_dir / "expected" / (id + ".txt");
            ASSERT_TRUE(fs::exists(expected)) << "run tests/template/jinja/reference/record.sh";
            try {
                EXPECT_EQ(render_chat_request(tmpl, request, tokens), read_text(expected));
            } catch (const jinja_error &e) {
                ADD_FAILURE() << "the reference renders it; weft: " << e.what();
            }
            ++compared;
        }
    }
    EXPECT_EQ(compared, 11 * 9);
}

TEST(ChatTemplateReference, ToolCallArgumentsBecomeObjects) {
    const auto parsed =
        jinja_parse_json(R"( {"a": [1, -2.5e1, "x\u00e9\ud83d\ude00", true, null], "b": {}} )");
    ASSERT_TRUE(parsed.has_value());
    EXPECT_EQ(jinja_tojson(*parsed), "{\"a\": [1, -25.0, \"xé😀\", true, null], \"b\": {}}");
    EXPECT_EQ(jinja_parse_json(R"("q\"b\\s\/\b\f\n\r\t")")->as_string(), "q\"b\\s/\b\f\n\r\t");
    for (const char *bad : {"", "{", "{\"a\" 1}", "[1,]", "01", "\"\\x\"", "1 2", "{\"a\":1}}", "nul"})
        EXPECT_FALSE(jinja_parse_json(bad).has_value()) << bad;
    EXPECT_FALSE(jinja_parse_json(std::string(300, '[') + std::string(300, ']')).has_value());

    const std::optional<jinja_value> sent = jinja_parse_json(R"([
        {"role": "assistant", "content": null, "reasoning_content": "r", "tool_calls": [
            {"type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}},
            {"type": "function", "function": {"name": "g", "arguments": "not json"}}]}])");
    ASSERT_TRUE(sent.has_value());
    const jinja_value ready = prepare_chat_messages(*sent, true);
    const jinja_value m = ready.as_list()[0];
    EXPECT_EQ(m.get("thinking").as_string(), "r");
    EXPECT_EQ(m.get("content").as_string(), "");
    EXPECT_TRUE(m.get("tool_calls").as_list()[0].get("function").get("arguments").is_dict());
    const jinja_value kept = prepare_chat_messages(*sent, false).as_list()[0].get("tool_calls");
    EXPECT_TRUE(kept.as_list()[0].get("function").get("arguments").is_string());
    EXPECT_EQ(m.get("tool_calls").as_list()[1].get("function").get("arguments").as_string(), "not json");
    // the request itself is unchanged
    EXPECT_TRUE(sent->as_list()[0].get("thinking").is_undefined());
    EXPECT_TRUE(
        sent->as_list()[0].get("tool_calls").as_list()[0].get("function").get("arguments").is_string());
}

}  // namespace
}  // namespace weft
