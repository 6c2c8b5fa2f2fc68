// tests/server/api_test_server.h — an openai_server over the stories260K model in process, for the
// tests of the Anthropic, Responses and Ollama routes (test_anthropic_api.cpp, ...): a chat template
// that renders tools, a grammar that makes the model call one, SSE and NDJSON readers.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "weft/model/model.h"
#include "weft/server/openai_server.h"
#include "weft/serving/conversation.h"
#include "weft/serving/engine.h"

namespace weft::server::api_test {

using json = nlohmann::json;

inline const model &stories_model() {
    static const std::unique_ptr<model> m =
        model::load((std::filesystem::path(WEFT_SOURCE_DIR) / "models" / "stories260K.gguf").string());
    return *m;
}

// A ChatML-like Jinja template that lists the tools offered.
inline const char *tools_template =
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

// tools_template with a Qwen3-like thinking switch: a thought in the prompt's tail unless
// enable_thinking is false, when the generation prompt closes an empty one.
inline const char *thinking_template =
    "{% if tools %}<|im_start|>system\nTools: {{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and not "
    "enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}";

// The grammar of a reply that thinks "I add." and answers "It is 4.".
inline std::string thought_grammar() {
    return R"(root ::= "<think>I add.</think>It is 4.")";
}

// The grammar of one call of get_weather for Paris in the Hermes form.
inline std::string weather_call_grammar() {
    return R"(root ::= "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>")";
}

struct api_server {
    std::unique_ptr<serving::engine> eng;
    std::unique_ptr<openai_server> svr;
    int port = 0;

    explicit api_server(server_options opt = {}, const char *chat_template = tools_template) {
        opt.port = 0;
        opt.http_threads = 4;
        opt.n_slots = 2;
        svr = std::make_unique<openai_server>(opt);
        port = svr->listen();
        svr->start();
        serving::engine_params ep;
        ep.n_slots = 2;
        ep.context = serving::conversation_params(stories_model(), 512, 512, 2);
        ep.context.n_ctx = 1024;
        eng = std::make_unique<serving::engine>(stories_model(), ep);
        eng->start();
        svr->set_ready(stories_model(), *eng, serving::choose_chat_template(stories_model(), chat_template),
                       "test");
    }
    ~api_server() {
        svr->stop();
        svr->wait();
        svr.reset();
        eng->stop();
    }
    httplib::Result post(const std::string &path, const json &body,
                         const httplib::Headers &headers = {}) const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60, 0);
        return c.Post(path, headers, body.dump(), "application/json");
    }
    httplib::Result get(const std::string &path) const {
        httplib::Client c("127.0.0.1", port);
        c.set_read_timeout(60, 0);
        return c.Get(path);
    }
    // The body of a POST that must answer `status`, as JSON.
    json post_json(const std::string &path, const json &body, int status) const {
        auto res = post(path, body);
        EXPECT_TRUE(res) << path;
        if (!res) return {};
        EXPECT_EQ(res->status, status) << res->body;
        return json::parse(res->body, nullptr, false);
    }
};

// The events of an SSE body: (event name, data) in order.
inline std::vector<std::pair<std::string, json>> sse_events(const std::string &body) {
    std::vector<std::pair<std::string, json>> out;
    size_t pos = 0;
    while (pos < body.size()) {
        size_t end = body.find("\n\n", pos);
        if (end == std::string::npos) end = body.size();
        const std::string block = body.substr(pos, end - pos);
        pos = end + 2;
        std::string name, data;
        size_t line_start = 0;
        while (line_start < block.size()) {
            size_t line_end = block.find('\n', line_start);
            if (line_end == std::string::npos) line_end = block.size();
            const std::string line = block.substr(line_start, line_end - line_start);
            if (line.rfind("event: ", 0) == 0) name = line.substr(7);
            if (line.rfind("data: ", 0) == 0) data = line.substr(6);
            line_start = line_end + 1;
        }
        if (!data.empty()) out.emplace_back(name, json::parse(data, nullptr, false));
    }
    return out;
}

// The lines of an NDJSON body, each parsed.
inline std::vector<json> ndjson_lines(const std::string &body) {
    std::vector<json> out;
    size_t pos = 0;
    for (size_t end; (end = body.find('\n', pos)) != std::string::npos; pos = end + 1)
        if (end > pos) out.push_back(json::parse(body.substr(pos, end - pos), nullptr, false));
    return out;
}

inline json weather_tool_parameters() {
    return {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}, {"required", {"city"}}};
}

}  // namespace weft::server::api_test
