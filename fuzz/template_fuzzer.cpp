// fuzz/template_fuzzer.cpp — libFuzzer target: any bytes as a chat template (a GGUF's
// tokenizer.chat_template is untrusted text), parsed and rendered with a chat of every role, tool
// calls and tools, under tighter bounds than the defaults so one input takes milliseconds; and the
// same bytes as JSON through jinja_parse_json (request bodies reach it), printed back with tojson.
// Rejections (jinja_error, weft::error) are the expected outcome for most inputs; a crash, a
// sanitizer report or a hang is a bug.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "weft/core/error.h"
#include "weft/template/chat_request.h"
#include "weft/template/chat_template.h"
#include "weft/template/jinja.h"

namespace {

weft::jinja_value message(const char *role, const char *content) {
    weft::jinja_value m = weft::jinja_value::dict();
    m.set("role", role);
    m.set("content", content);
    return m;
}

// A conversation that takes most branches of real templates: system, user, an assistant turn with
// reasoning and a tool call, the tool's answer, a last user turn; one tool offered.
const weft::chat_request &conversation() {
    static const weft::chat_request request = [] {
        weft::chat_request r;
        r.messages.push_back(message("system", "be brief"));
        r.messages.push_back(message("user", "weather in Paris?"));
        weft::jinja_value call = weft::jinja_value::dict();
        call.set("id", "call_1");
        call.set("type", "function");
        weft::jinja_value function = weft::jinja_value::dict();
        function.set("name", "get_weather");
        function.set("arguments", "{\"city\": \"Paris\"}");
        call.set("function", function);
        weft::jinja_value assistant = message("assistant", "");
        assistant.set("reasoning_content", "look it up");
        assistant.set("tool_calls", weft::jinja_value(weft::jinja_list{call}));
        r.messages.push_back(assistant);
        weft::jinja_value tool = message("tool", "18 C");
        tool.set("tool_call_id", "call_1");
        r.messages.push_back(tool);
        r.messages.push_back(message("user", "and tomorrow?"));
        weft::jinja_value tool_schema = weft::jinja_value::dict();
        tool_schema.set("type", "function");
        weft::jinja_value fn = weft::jinja_value::dict();
        fn.set("name", "get_weather");
        fn.set("description", "the weather of a city");
        if (auto params = weft::jinja_parse_json(
                R"({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]})"))
            fn.set("parameters", *params);
        tool_schema.set("function", fn);
        r.tools = weft::jinja_value(weft::jinja_list{tool_schema});
        return r;
    }();
    return request;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string_view text(reinterpret_cast<const char *>(data), size);
    weft::jinja_options options;
    options.max_output = size_t(1) << 16;
    options.max_list = size_t(1) << 12;
    options.max_iterations = 20000;
    options.max_range = 2000;
    options.max_alloc = size_t(8) << 20;
    options.max_seconds = 2;
    try {
        const weft::jinja_template tmpl(text, options);
        volatile size_t sink = weft::render_chat_request(tmpl, conversation(), {"<s>", "</s>"}).size();
        (void)sink;
    } catch (const weft::jinja_error &) {
    } catch (const weft::error &) {
    }
    volatile bool thinks = weft::chat_template_is_jinja(text);
    (void)thinks;
    if (const auto value = weft::jinja_parse_json(text)) {
        try {
            volatile size_t sink = weft::jinja_tojson(*value, 2, size_t(1) << 20).size();
            (void)sink;
        } catch (const weft::jinja_error &) {
        }
    }
    return 0;
}
