// src/server/tool_calls.h — OpenAI tool calling for the server: JSON to Jinja values (messages with
// tool_calls, tools) for the model's own chat template, and the tool calls found in a reply.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "weft/template/jinja.h"

namespace weft::server {

// JSON as the template sees it (objects keep their key order as nlohmann orders them: sorted, or
// as sent with nlohmann::ordered_json).
template <class Json>
jinja_value jinja_from_json(const Json &j) {
    switch (j.type()) {
        case nlohmann::json::value_t::null:
            return jinja_value::none();
        case nlohmann::json::value_t::boolean:
            return jinja_value(j.template get<bool>());
        case nlohmann::json::value_t::number_integer:
        case nlohmann::json::value_t::number_unsigned:
            return jinja_value(j.template get<int64_t>());
        case nlohmann::json::value_t::number_float:
            return jinja_value(j.template get<double>());
        case nlohmann::json::value_t::string:
            return jinja_value(j.template get<std::string>());
        case nlohmann::json::value_t::array: {
            jinja_value l = jinja_value::list();
            for (const auto &x : j) l.push_back(jinja_from_json(x));
            return l;
        }
        case nlohmann::json::value_t::object: {
            jinja_value d = jinja_value::dict();
            for (const auto &[k, v] : j.items()) d.set(k, jinja_from_json(v));
            return d;
        }
        default:
            return jinja_value();
    }
}

struct tool_call {
    std::string name;
    std::string arguments;  // JSON text, as OpenAI sends it
};

struct parsed_reply {
    std::string content;  // the text around the calls
    std::vector<tool_call> calls;
};

// A JSON object {"name": ..., "arguments" | "parameters": {...}} as a call; the arguments keep the
// model's key order (ordered_json), as the reference's do.
inline std::optional<tool_call> call_of(const nlohmann::ordered_json &j) {
    if (!j.is_object() || !j.contains("name") || !j["name"].is_string()) return std::nullopt;
    const nlohmann::ordered_json *args = j.contains("arguments")    ? &j["arguments"]
                                         : j.contains("parameters") ? &j["parameters"]
                                                                    : nullptr;
    tool_call c{j["name"].get<std::string>(), "{}"};
    if (args) c.arguments = args->is_string() ? args->get<std::string>() : args->dump();
    return c;
}

// The tool calls of a reply in the forms chat templates teach models: <tool_call>{...}</tool_call>
// blocks (Hermes, Qwen), "[TOOL_CALLS] [...]" (Mistral), "<|python_tag|>{...}" (Llama 3.1), or a
// reply that is nothing but such a JSON object or array. Text that is none of these: no calls.
inline parsed_reply parse_tool_calls(const std::string &text) {
    parsed_reply r;
    auto parse = [](const std::string &s) { return nlohmann::ordered_json::parse(s, nullptr, false); };
    auto add_all = [&](const nlohmann::ordered_json &j) {
        const nlohmann::ordered_json items = j.is_array() ? j : nlohmann::ordered_json::array({j});
        for (const auto &item : items)
            if (auto c = call_of(item)) r.calls.push_back(*c);
    };
    const std::string open = "<tool_call>", close = "</tool_call>";
    if (text.find(open) != std::string::npos) {
        size_t pos = 0;
        for (size_t at; (at = text.find(open, pos)) != std::string::npos;) {
            r.content += text.substr(pos, at - pos);
            const size_t end = text.find(close, at);
            const nlohmann::ordered_json j = parse(text.substr(
                at + open.size(), (end == std::string::npos ? text.size() : end) - at - open.size()));
            if (!j.is_discarded()) add_all(j);
            pos = end == std::string::npos ? text.size() : end + close.size();
        }
        r.content += text.substr(pos);
    } else {
        for (const std::string marker : {"[TOOL_CALLS]", "<|python_tag|>"}) {
            const size_t at = text.find(marker);
            if (at == std::string::npos) continue;
            const nlohmann::ordered_json j = parse(text.substr(at + marker.size()));
            if (!j.is_discarded()) {
                add_all(j);
                r.content = text.substr(0, at);
            }
            break;
        }
        if (r.calls.empty()) {
            const nlohmann::ordered_json j = parse(text);
            if (!j.is_discarded() && (j.is_object() || j.is_array())) add_all(j);
            if (r.calls.empty()) r.content = text;
        }
    }
    const size_t first = r.content.find_first_not_of(" \t\r\n");
    r.content = first == std::string::npos
                    ? ""
                    : r.content.substr(first, r.content.find_last_not_of(" \t\r\n") - first + 1);
    if (r.calls.empty()) r.content = text;
    return r;
}

}  // namespace weft::server
